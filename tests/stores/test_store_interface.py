"""The Store interface, the same on every backend: declared counters and capabilities, one gc default, gc that
spares young objects and is idempotent, and resumed downloads (each test runs over file, S3 and OCI)."""

from __future__ import annotations

import inspect

from cachetool.digests import sha256_file
from cachetool.stores import open_store
from cachetool.stores.base import GC_MIN_AGE_S, Capabilities, Store, TransferCounters
from cachetool.stores.file import FileStore
from cachetool.stores.oci.store import OCIStore
from cachetool.stores.s3 import S3Store
from cachetool.transfer import gc as library_gc
from cachetool.transfer import push


def test_every_store_declares_capabilities_and_one_gc_default():
    from cachetool.cli.store_cmds import gc_cmd

    for cls in (FileStore, S3Store, OCIStore):
        assert isinstance(cls.capabilities, Capabilities) and cls.capabilities.gc_deletes
        assert inspect.signature(cls.gc).parameters["older_than"].default == GC_MIN_AGE_S, cls
    assert inspect.signature(Store.gc).parameters["older_than"].default == GC_MIN_AGE_S
    assert inspect.signature(library_gc).parameters["older_than"].default == GC_MIN_AGE_S
    [opt] = [p for p in gc_cmd.params if p.name == "older_than"]
    assert opt.default == GC_MIN_AGE_S  # before: the CLI said 3600, the library 0


def test_counters_count_what_a_push_sends(any_store, bundle):
    with open_store(any_store.store) as st:
        assert isinstance(st.counters, TransferCounters)
        r = push(bundle, any_store.ref("counted"), store=st)
        assert r.bytes_uploaded == st.counters.bytes_up > 0


def test_gc_spares_young_objects_then_collects_its_kinds_once(any_store, bundle):
    with open_store(any_store.store) as st:
        push(bundle, any_store.ref("gone"), store=st)
        st.delete_ref("llama", "gone")
        assert st.gc() == []  # the default: everything is younger than GC_MIN_AGE_S (a push may be in flight)
        doomed = st.gc(older_than=0, dry_run=True)
        assert doomed and st.gc(older_than=0) == doomed
        assert st.gc(older_than=0) == []
        kinds = st.capabilities.gc_deletes
        if "blobs" in kinds:
            assert any(d.startswith("blobs/") for d in doomed)
        assert "signatures" in kinds  # every backend collects the orphaned signature


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
