"""push/pull through every store kind (file, Ceph RGW, docker-registry): round trip, dedupe on re-push,
multi-platform tags, ls/rm/gc, and the order contract (signature and preflight before any blob)."""

from __future__ import annotations

import json
import re

import pytest

from cachetool.api import pull
from cachetool.cache_root import PARTIAL_DIR
from cachetool.errors import CacheMissError, NotFoundError, PreflightError, VerificationError
from cachetool.stores import open_store
from cachetool.transfer.push import push
from tests.cache_trees import tree_snapshot


def test_round_trip_and_unchanged_repush_uploads_nothing(any_store, bundle, keys, tree, tmp_path):
    ref = any_store.ref("v1")
    r1 = push(bundle, ref)
    n = len({b.stored_digest for b in bundle.blobs})
    assert (r1.blobs_total, r1.blobs_uploaded, r1.blobs_skipped) == (n, n, 0)
    assert r1.signed and r1.manifest_digest == bundle.manifest_digest
    assert r1.bytes_uploaded >= sum(b.stored_size for b in bundle.blobs)

    r2 = push(bundle, ref)
    assert (r2.blobs_uploaded, r2.blobs_skipped) == (0, n)
    assert r2.bytes_skipped == sum(b.stored_size for b in bundle.blobs)
    assert r2.bytes_uploaded < 64 << 10  # manifest/signature/ref only
    assert r2.platforms == [bundle.platform]

    p = pull(ref, tmp_path / "root", trust=[keys["pub"]])
    assert p.manifest_digest == bundle.manifest_digest and p.blobs_downloaded == n
    assert tree_snapshot(tmp_path / "root") == tree_snapshot(tree)
    assert not (tmp_path / "root" / PARTIAL_DIR).exists()
    assert p.install.verified and p.install.key_id == keys["id"]
    again = pull(ref, tmp_path / "root", trust=[keys["pub"]])
    assert again.install.already_installed and again.blobs_downloaded == 0


def test_multi_platform_tag_pulls_this_machines_bundle(any_store, bundle, cuda_bundle, keys, local_platform, tmp_path):
    ref = any_store.ref("multi")
    push(cuda_bundle, ref)
    r = push(bundle, ref)
    assert sorted(r.platforms) == sorted([local_platform, "cuda-sm90-torch2.11.0+cu130"])
    with open_store(any_store.store) as st:
        idx = st.get_ref("llama" if any_store.kind != "oci" else any_store.store.rsplit("/", 1)[1], "multi")
    assert {e.platform: e.manifest_digest for e in idx.entries} == {
        local_platform: bundle.manifest_digest,
        "cuda-sm90-torch2.11.0+cu130": cuda_bundle.manifest_digest,
    }
    assert {e.fingerprint.get("gpu") for e in idx.entries} == {None, "NVIDIA H200"}
    p = pull(ref, tmp_path / "root", trust=[keys["pub"]])
    assert p.platform == local_platform and p.manifest_digest == bundle.manifest_digest

    # A re-push of the same platform replaces its entry and keeps the other one.
    r = push(bundle, ref)
    assert len(r.platforms) == 2 and r.blobs_uploaded == 0

    # A tag with only a GPU bundle: a one-line miss that names the platform and the field that differs.
    only_gpu = any_store.ref("gpu-only")
    push(cuda_bundle, only_gpu)
    with pytest.raises(CacheMissError) as ei:
        pull(only_gpu, tmp_path / "root2", trust=[keys["pub"]])
    msg = str(ei.value)
    assert "cuda-sm90-torch2.11.0+cu130" in msg and local_platform in msg and "device 'cuda'" in msg
    assert "\n" not in msg
    assert not (tmp_path / "root2").exists()


class CountingStore:
    """Wraps a store and records the order of calls, to check that no blob is fetched before the checks."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.url, self.counters = inner.url, inner.counters

    def __getattr__(self, name):
        fn = getattr(self.inner, name)

        def wrapped(*a, **kw):
            self.calls.append(name)
            return fn(*a, **kw)

        return wrapped


def test_signature_and_preflight_come_before_any_blob(bundle, cuda_bundle, keys, tmp_path):
    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    with open_store(store) as inner:
        st = CountingStore(inner)
        with pytest.raises(VerificationError):
            pull(f"{store}/llama:v1", tmp_path / "r1", trust=[keys["other_pub"]], store=st)
        assert "get_blob" not in st.calls and st.calls[:3] == ["get_ref", "get_manifest", "get_signature"]
        assert not (tmp_path / "r1").exists()

        # preflight: the GPU bundle pulled with --device cuda on this CPU machine, forced past selection
        push(cuda_bundle, f"{store}/llama:gpu")
        st.calls.clear()
        with pytest.raises(CacheMissError):
            pull(f"{store}/llama:gpu", tmp_path / "r2", trust=[keys["pub"]], store=st, device="cpu")
        assert "get_blob" not in st.calls


@pytest.mark.parametrize("refusal", ["untrusted", "preflight-miss", "no-platform"])
def test_a_refused_pull_keeps_a_cache_root_it_did_not_create(bundle, cuda_bundle, keys, tmp_path, refusal):
    """`mkdir R; pull REF --cache-root R --trust other.pub` (or an exit-4 miss) removed R: pull removed an empty
    root whatever made it. Only a root the pull itself created goes again."""
    from cachetool.bundle.packing import pack
    from tests.cache_trees import local_factors, make_native_tree

    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:cpu")
    push(cuda_bundle, f"{store}/llama:gpu")
    other = make_native_tree(tmp_path / "other", factors=local_factors(**{"compiler.torch_key": "0" * 64}))
    with pack(other, sign_key=keys["key"]) as b:  # this machine's platform key, another torch build's factors
        push(b, f"{store}/llama:other-torch")
    ref, trust, error = {
        "untrusted": (f"{store}/llama:cpu", keys["other_pub"], VerificationError),
        "preflight-miss": (f"{store}/llama:other-torch", keys["pub"], PreflightError),
        "no-platform": (f"{store}/llama:gpu", keys["pub"], CacheMissError),
    }[refusal]
    for existed in (True, False):
        root = tmp_path / f"root-{existed}"
        if existed:
            root.mkdir()
        with pytest.raises(error):
            pull(ref, root, trust=[trust])
        assert root.is_dir() == existed and (not existed or not any(root.iterdir())), (refusal, existed)


def test_preflight_runs_before_blobs_even_when_platform_matches(bundle, keys, tmp_path, monkeypatch):
    """A bundle whose platform key matches but whose compiler factors differ is refused before any download."""
    from cachetool.bundle.packing import pack
    from tests.cache_trees import local_factors, make_native_tree

    other = make_native_tree(tmp_path / "other", factors=local_factors(**{"compiler.torch_key": "0" * 64}))
    store = f"file://{tmp_path}/store"
    with pack(other, sign_key=keys["key"]) as b:
        push(b, f"{store}/llama:v1")
    with open_store(store) as inner:
        st = CountingStore(inner)
        with pytest.raises(PreflightError):
            pull(f"{store}/llama:v1", tmp_path / "root", trust=[keys["pub"]], store=st)
        assert "get_blob" not in st.calls


def test_unknown_tag_and_missing_store_are_not_found(any_store, bundle, keys, tmp_path):
    push(bundle, any_store.ref("v1"))
    with pytest.raises(NotFoundError) as ei:
        pull(any_store.ref("nope"), tmp_path / "root", trust=[keys["pub"]])
    assert "\n" not in str(ei.value) and "nope" in str(ei.value) or "no such tag" in str(ei.value)
    assert not (tmp_path / "root").exists()


def test_cli_push_pull_ls_rm_gc(any_store, bundle, keys, tree, tmp_path, cli, local_platform):
    from cachetool.bundle.ctb import write_ctb

    ctb = write_ctb(bundle, tmp_path / "b.ctb")
    ref = any_store.ref("cli")
    r = cli("push", ctb, ref, "--json")
    assert r.rc == 0, r
    doc = json.loads(r.out)
    assert doc["blobs_uploaded"] == doc["blobs_total"] > 0 and doc["signed"]
    r = cli("push", ctb, ref, "--json")
    assert r.rc == 0 and json.loads(r.out)["blobs_uploaded"] == 0, r

    # a cache folder is packed and signed on the way
    r = cli("push", tree, any_store.ref("folder"), "--sign-key", keys["priv"], "--json")
    assert r.rc == 0, r
    assert json.loads(r.out)["signed"] and json.loads(r.out)["blobs_uploaded"] == 0

    r = cli("pull", ref, "--cache-root", tmp_path / "root", "--trust", keys["pub"], "--json")
    assert r.rc == 0, r
    doc = json.loads(r.out)
    assert doc["outcome"] == "installed" and doc["platform"] == local_platform
    assert "pull: outcome=installed" in r.err
    assert tree_snapshot(tmp_path / "root") == tree_snapshot(tree)

    r = cli("ls", any_store.store, "--json")
    assert r.rc == 0, r
    rows = json.loads(r.out)["refs"]
    assert {row["ref"].split(":")[1] for row in rows} == {"cli", "folder"}
    assert all(row["platform"] == local_platform and row["size"] > 0 and row["created"] for row in rows)
    r = cli("ls", any_store.store)
    assert r.rc == 0 and "cli" in r.out and local_platform in r.out, r

    assert cli("rm", any_store.ref("cli")).rc == 0
    assert cli("rm", any_store.ref("folder")).rc == 0
    r = cli("pull", ref, "--cache-root", tmp_path / "root3", "--trust", keys["pub"])
    assert r.rc == 5, r
    r.error_line()
    r = cli("pull", ref, "--cache-root", tmp_path / "root3", "--trust", keys["pub"], "--on-miss", "continue")
    assert r.rc == 0 and "outcome=not-found" in r.err, r
    r = cli("gc", any_store.store, "--older-than", "0", "--json")
    assert r.rc == 0, r
    deleted = json.loads(r.out)["deleted"]
    if any_store.kind == "oci":
        # the bundle's referrers tag (its signature) is orphaned by the rm; blobs are the registry's own gc
        assert len(deleted) == 1 and re.match(r"^tag sha256-[0-9a-f]{64}$", deleted[0]), deleted
    else:
        assert len([d for d in deleted if d.startswith("blobs/")]) == len({b.stored_digest for b in bundle.blobs})
        assert any(d.startswith("manifests/") for d in deleted) and any(d.startswith("signatures/") for d in deleted)


@pytest.mark.parametrize("kind", ["file", "s3", "oci"])
def test_concurrent_pushes_of_two_platforms_keep_both(kind, request, tmp_path, bundle, cuda_bundle):
    """A CI matrix (GPU job, CPU job) pushing one tag at once: the ref update is atomic (file lock / S3 If-Match /
    OCI read-check-write-verify)."""
    import threading

    from tests.store_kinds import make_store

    s = make_store(kind, request, tmp_path)
    for round_ in range(4):
        ref = s.ref(f"race{round_}")
        errors = []
        barrier = threading.Barrier(2)

        def go(b):
            try:
                barrier.wait()
                push(b, ref)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        ts = [threading.Thread(target=go, args=(b,)) for b in (bundle, cuda_bundle)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert not errors, errors
        with open_store(s.store) as st:
            assert {e.platform for e in st.get_ref("llama", f"race{round_}").entries} == {
                bundle.platform,
                cuda_bundle.platform,
            }
