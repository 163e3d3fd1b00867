"""Fast unit tests of the file store (layout, atomic writes, gc), ref-index merging, timeouts and progress."""

from __future__ import annotations

import json
import os

import pytest

from cachetool.api import pull
from cachetool.digests import hexof
from cachetool.errors import NotFoundError, WaitTimeoutError
from cachetool.refs.admin import remove
from cachetool.stores import open_store
from cachetool.stores.base import RefEntry, RefIndex
from cachetool.transfer.push import merge_index, push


def test_documented_layout_and_no_temp_files(bundle, tmp_path):
    root = tmp_path / "store"
    push(bundle, f"file://{root}/llama:v1")
    assert json.loads((root / "cachetool-store.json").read_text()) == {"format": "cachetool-store", "version": 1}
    for b in bundle.blobs:
        p = root / "blobs" / "sha256" / hexof(b.stored_digest)
        assert p.read_bytes() == bundle.blob_path(b).read_bytes()
    m = hexof(bundle.manifest_digest)
    assert (root / "manifests" / "sha256" / f"{m}.json").read_bytes() == bundle.manifest_bytes()
    assert (root / "signatures" / "sha256" / f"{m}.dsse.json").read_bytes() == bundle.signature_bytes()
    ref = json.loads((root / "refs" / "llama" / "v1.json").read_text())
    assert ref["format"] == "cachetool.ref.v1" and ref["entries"][0]["manifest_digest"] == bundle.manifest_digest
    leftovers = [p for p in root.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_a_failed_write_leaves_no_partial_object(bundle, keys, tmp_path, monkeypatch):
    import cachetool.atomic as atomic

    root = tmp_path / "store"

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(Exception, match="No space left"):
        push(bundle, f"file://{root}/llama:v1")
    monkeypatch.undo()
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files == []  # not a single half-written blob, manifest or ref
    with pytest.raises(NotFoundError):
        pull(f"file://{root}/llama:v1", tmp_path / "root", trust=[keys["pub"]])


def test_missing_store_tag_and_name(tmp_path, bundle, keys):
    with pytest.raises(NotFoundError, match="does not exist"):
        pull(f"file://{tmp_path}/nowhere/llama:v1", tmp_path / "root", trust=[keys["pub"]])
    push(bundle, f"file://{tmp_path}/store/llama:v1")
    with pytest.raises(NotFoundError, match=r"llama:v2 not found \(no such tag; tags: v1\)"):
        pull(f"file://{tmp_path}/store/llama:v2", tmp_path / "root", trust=[keys["pub"]])
    with pytest.raises(NotFoundError, match="no bundle named 'other'"):
        pull(f"file://{tmp_path}/store/other:v1", tmp_path / "root", trust=[keys["pub"]])
    assert not (tmp_path / "root").exists()


def test_gc_keeps_reachable_and_recent_objects(bundle, cuda_bundle, tmp_path):
    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    push(cuda_bundle, f"{store}/llama:gpu")
    with open_store(store) as st:
        assert st.gc(older_than=0).deleted == ()  # everything is reachable
        st.update_ref("llama", "gpu", lambda old: None)
        assert st.gc(older_than=3600).deleted == ()  # unreachable, but too recent: maybe a push in flight
        doomed = st.gc(dry_run=True, older_than=0).deleted
        # the two bundles share every blob (same tree); only the GPU manifest and signature go
        assert sorted(doomed) == sorted(
            [
                f"manifests/sha256/{hexof(cuda_bundle.manifest_digest)}.json",
                f"signatures/sha256/{hexof(cuda_bundle.manifest_digest)}.dsse.json",
            ]
        )
        assert st.gc(older_than=0).deleted == doomed
        assert st.gc(older_than=0).deleted == ()
    pull(f"{store}/llama:v1", tmp_path / "root", insecure_skip_verify=True)


def test_missing_blobs_checks_the_size(bundle, tmp_path):
    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    b = bundle.blobs[0]
    with open_store(store) as st:
        with st.push([b], bundle.blob_path) as session:
            assert session.missing() == []
        p = tmp_path / "store" / "blobs" / "sha256" / hexof(b.stored_digest)
        p.write_bytes(p.read_bytes()[:-1])  # a truncated object is re-uploaded by the next push
        with st.push([b], bundle.blob_path) as session:
            assert session.missing() == [b]
    assert push(bundle, f"{store}/llama:v1").blobs_uploaded == 1


def test_merge_index_replaces_same_platform():
    e = lambda p, d: RefEntry("sha256:" + d * 64, p, {}, 1, "2026-01-01T00:00:00Z")  # noqa: E731
    old = RefIndex("llama", "v1", (e("cpu-x86_64-torch2.13.0+cpu", "a"), e("cuda-sm90-torch2.11.0+cu130", "b")))
    new = merge_index(old, "llama", "v1", e("cpu-x86_64-torch2.13.0+cpu", "c"))
    assert [(x.platform, x.manifest_digest[7]) for x in new.entries] == [
        ("cpu-x86_64-torch2.13.0+cpu", "c"),
        ("cuda-sm90-torch2.11.0+cu130", "b"),
    ]
    assert merge_index(None, "llama", "v1", e("x", "d")).entries[0].platform == "x"


def test_rm_one_platform(bundle, cuda_bundle, tmp_path):
    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    push(cuda_bundle, f"{store}/llama:v1")
    left = remove(f"{store}/llama:v1", platform=cuda_bundle.platform)
    assert [e.platform for e in left.entries] == [bundle.platform]
    with pytest.raises(NotFoundError, match="has no"):
        remove(f"{store}/llama:v1", platform=cuda_bundle.platform)
    assert remove(f"{store}/llama:v1", platform=bundle.platform) is None
    with pytest.raises(NotFoundError):
        remove(f"{store}/llama:v1")


def test_timeout_bounds_the_pull(bundle, keys, tmp_path, cli):
    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    with pytest.raises(WaitTimeoutError):
        pull(f"{store}/llama:v1", tmp_path / "root", trust=[keys["pub"]], timeout=1e-9)
    assert not (tmp_path / "root" / "torch_compile_cache").exists()
    r = cli("pull", f"{store}/llama:v1", "--cache-root", tmp_path / "root", "--trust", keys["pub"], "--timeout", "1e-9")
    assert r.rc == 7, r


def test_progress_bars_and_cli_miss_handling(bundle, cuda_bundle, keys, tmp_path, cli, capsys):
    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1", progress=True)
    pull(f"{store}/llama:v1", tmp_path / "root", trust=[keys["pub"]], progress=True)
    err = capsys.readouterr().err
    assert "push llama:v1" in err and "pull llama:v1" in err
    push(cuda_bundle, f"{store}/llama:gpu")
    r = cli("pull", f"{store}/llama:gpu", "--cache-root", tmp_path / "r2", "--trust", keys["pub"])
    assert r.rc == 4 and "no bundle under" in r.error_line(), r
    r = cli(
        "pull",
        f"{store}/llama:gpu",
        "--cache-root",
        tmp_path / "r2",
        "--trust",
        keys["pub"],
        "--on-miss",
        "continue",
        "--json",
    )
    assert r.rc == 0 and json.loads(r.out)["outcome"] == "miss" and "outcome=miss" in r.err, r
    r = cli("push", bundle.blob_path(bundle.blobs[0]).parent, "bad:ref")
    assert r.rc == 2, r


def test_unsigned_push_warns_and_pull_refuses(tree, keys, tmp_path, cli):
    r = cli("push", tree, f"file://{tmp_path}/store/llama:v1")
    assert r.rc == 0 and "UNSIGNED" in r.err, r
    r = cli("pull", f"file://{tmp_path}/store/llama:v1", "--cache-root", tmp_path / "root", "--trust", keys["pub"])
    assert r.rc == 3, r
    assert not (tmp_path / "root" / "torch_compile_cache").exists()
    assert os.path.isdir(tmp_path / "store" / "blobs")


def test_ref_updates_hold_the_lock_and_leave_no_lock_file(bundle, tmp_path):
    """A ref update holds ``refs/<name>/.<tag>.lock`` while it compares and writes, and deletes it before it lets go:
    a writer waiting on the deleted file locks the new one. Before: lock files were kept for ever (issue 20)."""
    import fcntl
    import threading

    from cachetool.stores.file import FileBackend

    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    lock = tmp_path / "store" / "refs" / "llama" / ".v1.lock"
    assert not lock.exists()
    entered, release = threading.Event(), threading.Event()
    real_put = FileBackend.put

    def slow_put(self, key, what, **kw):
        if key.endswith("/v1.json"):
            entered.set()
            release.wait()
        return real_put(self, key, what, **kw)

    FileBackend.put = slow_put
    try:
        with open_store(store) as st:
            a = threading.Thread(
                target=st.update_ref,
                args=(
                    "llama",
                    "v1",
                    lambda old: (
                        old
                        and RefIndex(
                            "llama", "v1", old.entries + (RefEntry(old.entries[0].manifest_digest, "other", {}, 1, ""),)
                        )
                    ),
                ),
            )
            a.start()
            entered.wait()
            fd = os.open(lock, os.O_RDWR)
            try:
                with pytest.raises(BlockingIOError):  # the update in flight holds the tag's lock
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
            d = threading.Thread(target=lambda: remove(f"{store}/llama:v1"))
            d.start()
            d.join(timeout=0.5)
            assert d.is_alive()  # the removal waits for the lock
    finally:
        release.set()
        a.join()
        d.join()
        FileBackend.put = real_put
    with pytest.raises(NotFoundError):
        open_store(store).get_ref("llama", "v1")
    assert not (tmp_path / "store" / "refs" / "llama").exists()  # neither the lock file nor its folder stays


def test_concurrent_ref_updates_on_one_tag_keep_every_entry(bundle, tmp_path):
    import threading

    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    digest = bundle.manifest_digest

    def add(i: int) -> None:
        with open_store(store) as st:
            for j in range(5):
                entry = RefEntry(digest, f"p{i}-{j}", {}, 1, "")
                st.update_ref("llama", "v1", lambda old: merge_index(old, "llama", "v1", entry))

    ts = [threading.Thread(target=add, args=(i,)) for i in range(6)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    with open_store(store) as st:
        assert len(st.get_ref("llama", "v1").entries) == 1 + 6 * 5
    assert [p.name for p in (tmp_path / "store" / "refs" / "llama").iterdir()] == ["v1.json"]


def test_gc_removes_lock_files_an_older_cachetool_left(bundle, tmp_path):
    """Older cachetool kept ``.<tag>.lock`` files for ever; gc deletes them once older than --older-than, unless an
    update holds one."""
    import fcntl

    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    refs = tmp_path / "store" / "refs"
    stale, held, gone = refs / "llama" / ".v1.lock", refs / "llama" / ".v2.lock", refs / "old" / ".v1.lock"
    for p in (stale, held, gone):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")
        os.utime(p, (1e9, 1e9))
    fd = os.open(held, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with open_store(store) as st:
            report = st.gc()
            assert sorted(report.deleted) == ["refs/llama/.v1.lock", "refs/llama/.v2.lock", "refs/old/.v1.lock"]
    finally:
        os.close(fd)
    assert not stale.exists() and not gone.parent.exists() and held.exists()  # the held one stays
    assert open_store(store).get_ref("llama", "v1").entries


@pytest.mark.parametrize("swap", ["exchange", "two renames"])
def test_repull_over_a_changed_unit_replaces_it(bundle, keys, tree, tmp_path, cli, monkeypatch, swap):
    """Before: exit 2 "already exists with different content", also under --on-miss continue."""
    from tests.cache_trees import tree_snapshot

    if swap == "two renames":  # a kernel or file system without renameat2(RENAME_EXCHANGE)
        from cachetool.install import fs

        monkeypatch.setattr(fs, "exchange", lambda *a: False)
    ref = f"file://{tmp_path}/store/llama:v1"
    push(bundle, ref)
    root = tmp_path / "root"
    pull(ref, root, trust=[keys["pub"]])
    victim = next(root.rglob("rank_1_0/backbone/compile_index.json"))
    victim.write_bytes(b"{}")  # what a hot start that rewrote a file leaves
    r = cli("pull", ref, "--cache-root", root, "--trust", keys["pub"], "--keep-changed", "--on-miss", "continue")
    assert r.rc == 0 and "outcome=miss" in r.err and victim.read_bytes() == b"{}", r
    r = cli("pull", ref, "--cache-root", root, "--trust", keys["pub"], "--keep-changed")
    assert r.rc == 4 and "differ from the bundle" in r.error_line(), r
    r = cli("pull", ref, "--cache-root", root, "--trust", keys["pub"], "--json")
    assert r.rc == 0, r
    assert json.loads(r.out)["install"]["units_replaced"] == [str(victim.parent.parent.relative_to(root))]
    assert tree_snapshot(root) == tree_snapshot(tree)
    assert sorted(p.name for p in root.iterdir()) == ["torch_compile_cache"]
