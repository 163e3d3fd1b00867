"""The Store interface, the same on every backend: only what callers use (issue 22), declared counters and
capabilities, one gc default, one bulk question for what a push must upload, gc that spares young objects, says what
it kept and why, and is idempotent, ref removals that leave nothing behind, resumed downloads, and push sessions that
keep their own state (each test runs over file, S3 and OCI)."""

from __future__ import annotations

import abc
import dataclasses
import inspect
import json
import threading
from pathlib import Path

import pytest

from cachetool.digests import sha256_file
from cachetool.errors import NotFoundError, UsageError
from cachetool.refs.admin import gc as library_gc, remove
from cachetool.stores import GcReport, open_store
from cachetool.stores.base import GC_MIN_AGE_S, Capabilities, PushSession, Store, TransferCounters
from cachetool.stores.file import FileStore
from cachetool.stores.oci.store import OCIStore
from cachetool.stores.s3 import S3Store
from cachetool.transfer.push import push


def test_every_store_declares_capabilities_and_one_gc_default():
    from cachetool.cli.store_cmds import gc_cmd

    for cls in (FileStore, S3Store, OCIStore):
        assert isinstance(cls.capabilities, Capabilities) and cls.capabilities.gc_deletes
        assert inspect.signature(cls.gc).parameters["older_than"].default == GC_MIN_AGE_S, cls
    assert inspect.signature(Store.gc).parameters["older_than"].default == GC_MIN_AGE_S
    assert inspect.signature(library_gc).parameters["older_than"].default == GC_MIN_AGE_S
    [opt] = [p for p in gc_cmd.params if p.name == "older_than"]
    assert opt.default == GC_MIN_AGE_S  # before: the CLI said 3600, the library 0
    assert {c.capabilities.ref_update for c in (FileStore, S3Store, OCIStore)} == {"lock", "conditional", "converge"}


def test_the_interface_is_what_push_pull_and_admin_call():
    # Before (issue 22): 12 abstract methods and two hooks (has_blob + prepare_push, put_signature, get_pinned,
    # pinned_digest); a signature is now written with its manifest, a pin read with get_ref.
    # Before (issue 30): missing_blobs, put_blob and put_manifest on the store, and OCI told one push from another
    # by its blob set; a push is now a session of its own.
    assert Store.__abstractmethods__ == {
        "push",
        "get_blob",
        "get_manifest",
        "get_signature",
        "get_ref",
        "update_ref",
        "list_refs",
        "gc",
    }
    assert PushSession.__abstractmethods__ == {"_missing", "_put_blob", "_commit"}
    for gone in (
        "has_blob",
        "prepare_push",
        "put_signature",
        "get_pinned",
        "pinned_digest",
        "missing_blobs",
        "put_blob",
        "put_manifest",
    ):
        assert not any(hasattr(cls, gone) for cls in (Store, FileStore, S3Store, OCIStore)), gone
    assert OCIStore.__mro__ == (OCIStore, Store, abc.ABC, object)  # parts, not mixins


def _unique(bundle) -> list:
    return list({b.stored_digest: b for b in bundle.blobs}.values())


def _upload(session, blobs) -> None:
    for b in blobs:
        session.put_blob(b)


def test_a_push_session_uploads_what_is_missing_then_commits(any_store, bundle):
    blobs = _unique(bundle)
    with open_store(any_store.store) as st:
        with st.push(bundle.blobs, bundle.blob_path) as p:
            assert p.blobs == blobs
            assert p.missing() == blobs  # a new store lacks them all, in push's order
            _upload(p, blobs)
            stored = p.commit(bundle.manifest_bytes(), bundle.signature_bytes())
        assert p.state == "committed"
        assert stored.digest == bundle.manifest_digest and st.get_signature(stored.digest) == bundle.signature_bytes()
        with st.push(bundle.blobs, bundle.blob_path) as again:
            assert again.missing() == []
        assert push(bundle, any_store.ref("v2"), store=st).blobs_uploaded == 0
        pinned = st.get_ref("any", "label", digest=stored.pin)
        assert [e.manifest_digest for e in pinned.entries] == [bundle.manifest_digest]
    _read_back(any_store.store, stored.pin, bundle)


def test_a_session_left_without_commit_writes_no_manifest(any_store, bundle):
    with open_store(any_store.store) as st:
        with pytest.raises(RuntimeError, match="the push fails"):
            with st.push(bundle.blobs, bundle.blob_path) as p:
                _upload(p, p.missing())
                raise RuntimeError("the push fails before its commit")
        assert p.state == "aborted"
        with pytest.raises(NotFoundError):
            st.get_manifest(bundle.manifest_digest)
        with st.push(bundle.blobs, bundle.blob_path) as q:  # its blobs stay (content-addressed): none to send
            assert q.missing() == []


def test_a_closed_session_refuses_more(any_store, bundle):
    with open_store(any_store.store) as st:
        p = st.push(bundle.blobs, bundle.blob_path)
        p.missing()
        p.abort()
        p.abort()  # idempotent
        with pytest.raises(UsageError, match="aborted"):
            p.commit(bundle.manifest_bytes(), bundle.signature_bytes())
        with pytest.raises(UsageError, match="aborted"):
            p.put_blob(bundle.blobs[0])
        with pytest.raises(NotFoundError):
            st.get_manifest(bundle.manifest_digest)
        with st.push(bundle.blobs, bundle.blob_path) as q:
            _upload(q, q.missing())
            q.commit(bundle.manifest_bytes())
        with pytest.raises(UsageError, match="committed"):
            q.commit(bundle.manifest_bytes(), bundle.signature_bytes())
        with pytest.raises(UsageError, match="committed"):
            q.missing()
        assert st.get_signature(bundle.manifest_digest) is None  # the refused commit wrote nothing


def test_two_sessions_of_one_blob_set_through_one_store_each_commit_their_own(any_store, bundle):
    """Both plan, one aborts, the other commits, from threads: each session's state is its own (OCI kept open
    plans in a dict keyed by the blob set, so a push's manifest took whichever plan was there)."""
    blobs = _unique(bundle)
    with open_store(any_store.store) as st:
        both_planned = threading.Barrier(2, timeout=60)
        out: dict[str, object] = {}

        def run(name: str) -> None:
            try:
                with st.push(bundle.blobs, bundle.blob_path) as p:
                    missing = p.missing()
                    both_planned.wait()
                    if name == "aborted":
                        return
                    _upload(p, missing)
                    out[name] = p.commit(bundle.manifest_bytes(), bundle.signature_bytes())
            except Exception as exc:  # reported below
                out[name] = exc

        ts = [threading.Thread(target=run, args=(n,)) for n in ("aborted", "committed")]
        [t.start() for t in ts]
        [t.join() for t in ts]
        stored = out["committed"]
        assert set(out) == {"committed"} and stored.digest == bundle.manifest_digest, out
        with st.push(bundle.blobs, bundle.blob_path) as p:  # interleaved on one thread: plan, plan, commit, commit
            with st.push(bundle.blobs, bundle.blob_path) as q:
                assert p.missing() == q.missing() == []
                assert q.commit(bundle.manifest_bytes()).pin == p.commit(bundle.manifest_bytes()).pin == stored.pin
        assert len(blobs) > 1
    _read_back(any_store.store, stored.pin, bundle)


def _read_back(store_url: str, pin: str, bundle) -> None:
    """A fresh store object reads the pinned bundle back: its manifest, signature and every blob."""
    import tempfile

    with open_store(store_url) as st, tempfile.TemporaryDirectory() as d:
        [entry] = st.get_ref("any", "label", digest=pin).entries
        assert st.get_manifest(entry.manifest_digest) == bundle.manifest_bytes()
        for b in _unique(bundle):
            dest = Path(d) / b.stored_digest[7:]  # a new file each: a partial dest would be resumed
            st.get_blob(b, dest)
            assert sha256_file(dest) == (b.stored_digest, b.stored_size)


def test_a_misspelled_store_option_is_a_usage_error(tmp_path):
    # Before: open_store(**_ignored) swallowed it, so `endpoint=` silently talked to AWS.
    with pytest.raises(UsageError, match="unknown store option 'endpoint'") as err:
        open_store(f"file://{tmp_path}/store", endpoint="http://127.0.0.1:1")
    assert err.value.store == f"file://{tmp_path}/store"
    with open_store(f"file://{tmp_path}/store", endpoint_url=None, insecure=False) as st:  # other kinds', unset
        assert isinstance(st, FileStore)


def test_counters_count_what_a_push_sends(any_store, bundle):
    with open_store(any_store.store) as st:
        assert isinstance(st.counters, TransferCounters)
        r = push(bundle, any_store.ref("counted"), store=st)
        assert r.bytes_uploaded == st.counters.bytes_up > 0


def test_gc_spares_young_objects_then_collects_its_kinds_once(any_store, bundle):
    with open_store(any_store.store) as st:
        push(bundle, any_store.ref("gone"), store=st)
        st.update_ref(_name(any_store), "gone", lambda old: None)
        first = st.gc()
        assert isinstance(first, GcReport) and first.deleted == ()  # everything is younger than GC_MIN_AGE_S
        doomed = st.gc(older_than=0, dry_run=True)
        assert doomed.deleted and doomed.dry_run and st.gc(older_than=0).deleted == doomed.deleted
        assert st.gc(older_than=0).deleted == ()
        kinds = st.capabilities.gc_deletes
        if "blobs" in kinds:
            assert any(d.startswith("blobs/") for d in doomed.deleted)
        assert "signatures" in kinds  # every backend collects the orphaned signature


def test_gc_after_rm_says_how_many_it_kept_and_why(any_store, bundle, cli):
    # Before (issue 20): `gc` right after `rm` printed "deleted 0 object(s)" and nothing about the objects it kept
    # because they were younger than --older-than; the library returned a bare list.
    push(bundle, any_store.ref("kept"))
    push(bundle, any_store.ref("gone"))
    remove(any_store.ref("gone"))
    removed_tag = 1 if any_store.kind == "s3" else 0  # S3 keeps a removed tag as an empty index until gc
    report = library_gc(any_store.store)
    assert report.deleted == () and report.kept_reachable > 0 and report.kept_young == removed_tag  # "kept" holds all
    remove(any_store.ref("kept"))
    report = library_gc(any_store.store)
    assert report.deleted == () and report.kept_reachable == 0 and report.kept_young > 2 * removed_tag
    assert report.kept == report.kept_young
    r = cli("gc", any_store.store)
    assert r.rc == 0, r
    assert (
        f"deleted 0 object(s) from {any_store.store}; kept {report.kept_young}: 0 reachable from a ref, "
        f"{report.kept_young} younger than 3600 s" in r.out
    ), r
    r = cli("gc", any_store.store, "--json", "--dry-run", "--older-than", "0")
    doc = json.loads(r.out)
    assert r.rc == 0 and doc["kept_young"] == 0 and doc["kept_reachable"] == 0 and doc["dry_run"], r
    assert len(doc["deleted"]) == report.kept_young and doc["kept"] == 0 and doc["older_than"] == 0


def test_rm_leaves_nothing_that_gc_cannot_collect(any_store, bundle, cuda_bundle):
    # Before (issue 20): the file store left refs/<name>/.<tag>.lock behind every rm, and no gc removed them.
    ref = any_store.ref("v1")
    push(bundle, ref)
    push(cuda_bundle, ref)
    remove(ref, platform=cuda_bundle.platform)
    remove(ref)
    store_dir = Path(any_store.store[len("file://") :])
    if any_store.kind == "file":
        assert [p.name for p in (store_dir / "refs").rglob("*")] == []  # before: .v1.lock
    with open_store(any_store.store) as st:
        assert list(st.list_refs()) == []
        st.gc(older_than=0)
        report = st.gc(older_than=0)
        assert report.deleted == () and report.kept == 0  # nothing at all is left over
    if any_store.kind == "file":
        left = sorted(str(p.relative_to(store_dir)) for p in store_dir.rglob("*") if p.is_file())
        assert left == ["cachetool-store.json"], left


def test_get_blob_resumes_a_partial_download(any_store, bundle, tmp_path):
    blob = max(bundle.blobs, key=lambda b: b.stored_size)
    whole = bundle.blob_path(blob).read_bytes()
    with open_store(any_store.store) as st:
        push(bundle, any_store.ref("resume"), store=st)
        assert st.capabilities.resumable_downloads
        dest = tmp_path / "partial"
        dest.write_bytes(whole[: len(whole) // 2])
        before = st.counters.bytes_down
        st.get_blob(blob, dest)
        assert sha256_file(dest) == (blob.stored_digest, blob.stored_size)
        assert st.counters.blobs_resumed == 1
        assert st.counters.bytes_down - before == len(whole) - len(whole) // 2


def test_read_blob_gives_the_stored_bytes_and_writes_nothing_it_keeps(any_store, bundle, tmp_path):
    """A small blob read whole (what a pull asks for each small blob): the file store reads it in place, the others
    through a file in the scratch folder, which is gone afterwards; a missing blob is NotFoundError on every store."""
    blob = max(bundle.blobs, key=lambda b: b.stored_size)
    with open_store(any_store.store) as st:
        push(bundle, any_store.ref("read"), store=st)
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        before = st.counters.bytes_down
        assert st.read_blob(blob, scratch) == bundle.blob_path(blob).read_bytes()
        assert not any(scratch.iterdir()) and st.counters.bytes_down - before == blob.stored_size
        assert st.capabilities.local_reads == (any_store.kind == "file")
        missing = dataclasses.replace(blob, stored_digest="sha256:" + "0" * 64)
        with pytest.raises(NotFoundError, match="missing"):
            st.read_blob(missing, scratch)
        assert not any(scratch.iterdir())


def _name(any_store) -> str:
    return any_store.ref("x").rsplit("/", 1)[1].split(":")[0]
