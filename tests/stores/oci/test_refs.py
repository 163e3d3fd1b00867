"""Issue 13 items 1 and 2 on the OCI store: gc never strips a live signature; ref changes go through one
read-check-write-verify update (registries have no compare-and-swap), ``rm --platform`` included."""

from __future__ import annotations

import uuid

import pytest

from cachetool.api import pull
from cachetool.errors import StoreError
from cachetool.refs.admin import remove
from cachetool.stores import open_store
from cachetool.stores.base import RefEntry
from cachetool.stores.oci import OCIStore
from cachetool.stores.oci.repository import Repository
from cachetool.transfer.push import merge_index, push


def _repo(reg) -> str:
    return f"{reg.url}/team/refs-{uuid.uuid4().hex[:6]}"


def _stage(st, bundle) -> RefEntry:
    """What a push writes before its ref: blobs, manifest, signature (a push in flight)."""
    with st.push(bundle.blobs, bundle.blob_path) as p:
        for b in p.missing():
            p.put_blob(b)
        digest = p.commit(bundle.manifest_bytes(), bundle.signature_bytes()).digest
    return RefEntry(
        digest, bundle.platform, dict(bundle.manifest.fingerprint), bundle.stored_size, "2026-12-01T00:00:00Z"
    )


def test_gc_keeps_the_signature_of_a_push_in_flight(oci_registry, bundle, keys, tmp_path):
    # Before: gc ignored older_than and the signature (written before the ref) was deleted under the push.
    repo = _repo(oci_registry)
    with open_store(repo) as st:
        entry = _stage(st, bundle)
        assert st.gc(older_than=3600).deleted == ()  # the CLI's default: a fresh signature stays
        st.update_ref("x", "v1", lambda old: merge_index(old, "x", "v1", entry))  # the push finishes
    r = pull(f"{repo}:v1", tmp_path / "root", trust=[keys["pub"]])
    assert r.install.verified


def test_gc_collects_an_orphaned_signature_once_old_enough(oci_registry, bundle):
    repo = _repo(oci_registry)
    with open_store(repo) as st:
        _stage(st, bundle)
        assert len(st.gc(older_than=0, dry_run=True).deleted) == 1
        assert len(st.gc(older_than=0).deleted) == 1
        assert st.gc(older_than=0).deleted == ()


def test_gc_stops_on_a_read_error_and_deletes_nothing(oci_registry, bundle, keys, tmp_path, monkeypatch):
    # Before: `except StoreError: continue` took a live signature for an orphan when one tag read failed.
    repo = _repo(oci_registry)
    push(bundle, f"{repo}:v1")
    real = Repository.get_manifest

    def flaky(self, ref, what, *a, **kw):
        if ref == "v1":
            raise StoreError(f"{what}: registry answered 503")
        return real(self, ref, what, *a, **kw)

    monkeypatch.setattr(Repository, "get_manifest", flaky)
    with open_store(repo) as st:
        with pytest.raises(StoreError, match="nothing deleted"):
            st.gc(older_than=0)
    monkeypatch.setattr(Repository, "get_manifest", real)
    assert pull(f"{repo}:v1", tmp_path / "root", trust=[keys["pub"]]).install.verified


def test_a_write_between_read_and_write_is_not_lost(oci_registry, bundle, cuda_bundle):
    """Writer A reads the tag; writer B adds its platform; A's write must keep B's entry."""
    repo = _repo(oci_registry)
    with open_store(repo) as a, open_store(repo) as b:
        a.tags.settle_s = b.tags.settle_s = 0.05
        ea = _stage(a, bundle)
        eb = _stage(b, cuda_bundle)
        fired = []

        def update_a(old):
            if not fired:  # B gets in after A's read
                fired.append(1)
                b.update_ref("x", "v1", lambda o: merge_index(o, "x", "v1", eb))
            return merge_index(old, "x", "v1", ea)

        a.update_ref("x", "v1", update_a)
        assert {e.platform for e in a.get_ref("x", "v1").entries} == {bundle.platform, cuda_bundle.platform}


def test_rm_platform_keeps_a_platform_pushed_meanwhile(oci_registry, bundle, cuda_bundle, monkeypatch):
    # Before: rm --platform did get_ref then put_ref (or delete): a platform pushed in between was lost.
    repo = _repo(oci_registry)
    push(cuda_bundle, f"{repo}:v1")
    real = OCIStore.get_ref
    fired = []

    def get_ref_then_someone_pushes(self, name, tag):
        out = real(self, name, tag)
        if not fired:
            fired.append(1)
            push(bundle, f"{repo}:v1")
        return out

    monkeypatch.setattr(OCIStore, "get_ref", get_ref_then_someone_pushes)
    left = remove(f"{repo}:v1", platform=cuda_bundle.platform)
    monkeypatch.setattr(OCIStore, "get_ref", real)
    assert left is not None and [e.platform for e in left.entries] == [bundle.platform]
    with open_store(repo) as st:
        assert [e.platform for e in st.get_ref("x", "v1").entries] == [bundle.platform]


def test_rm_of_the_last_platform_deletes_the_tag(oci_registry, bundle):
    repo = _repo(oci_registry)
    push(bundle, f"{repo}:v1")
    assert remove(f"{repo}:v1", platform=bundle.platform) is None
    with open_store(repo) as st:
        assert "v1" not in st.repository.tags()
