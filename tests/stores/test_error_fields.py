"""Issue 22 item 6: a failure that knows the store, the ref, the object or the server's status carries them as
fields (``store``, ``ref``, ``key``, ``status``), and ``--json`` prints them, so a caller branches on data, not on
the message. The stores' own failures first, then the layers above them that know more (a pull's or a push's
store, ref and manifest; a ref read by inspect, verify or gc; the registry client's credentials). Each case runs
against the real servers (file, Ceph RGW, docker-registry)."""

from __future__ import annotations

import json
import uuid

import pytest

from cachetool.digests import BlobRef
from cachetool.errors import NotFoundError, StoreError
from cachetool.stores import open_store
from cachetool.transfer.push import push

NO_DIGEST = "sha256:" + "0" * 64


def _name(any_store) -> str:
    return any_store.ref("x").rsplit("/", 1)[1].split(":")[0]


def test_a_missing_tag_names_its_store_ref_and_key(any_store, bundle, cli):
    push(bundle, any_store.ref("v1"))
    name = _name(any_store)
    with open_store(any_store.store) as st, pytest.raises(NotFoundError) as err:
        st.get_ref(name, "nope")
    e = err.value
    assert (e.store, e.ref) == (any_store.store, f"{name}:nope"), e
    assert e.key == ("nope" if any_store.kind == "oci" else f"refs/{name}/nope.json"), e
    if any_store.kind == "oci":
        assert e.status == 404
    r = cli("rm", any_store.ref("nope"), "--json")
    doc = json.loads(r.out)
    assert r.rc == 5 and (doc["store"], doc["ref"], doc["key"]) == (e.store, e.ref, e.key), r


def test_a_missing_pin_names_the_pin_and_the_manifest(any_store, bundle):
    push(bundle, any_store.ref("v1"))
    name = _name(any_store)
    with open_store(any_store.store) as st, pytest.raises(NotFoundError) as err:
        st.get_ref(name, "v1", digest=NO_DIGEST)
    e = err.value
    assert (e.store, e.ref) == (any_store.store, f"{name}@{NO_DIGEST}"), e
    assert e.key == (NO_DIGEST if any_store.kind == "oci" else f"manifests/sha256/{'0' * 64}.json"), e


def test_a_blob_the_store_lacks_names_it(any_store, bundle, tmp_path):
    push(bundle, any_store.ref("v1"))
    blob = BlobRef("sha256:" + "1" * 64, 1, "sha256:" + "2" * 64, 1)
    with open_store(any_store.store) as st, pytest.raises(NotFoundError) as err:
        st.get_blob(blob, tmp_path / "dest")
    e = err.value
    assert e.store == any_store.store and e.key and e.key.endswith("2" * 64), e
    if any_store.kind == "oci":  # the registry's 404 for the blob
        assert (e.key, e.status) == (blob.stored_digest, 404), e


def test_s3_refused_credentials_carry_the_s3_error_code(rgw, s3_env, shared_bucket, bundle, cli, monkeypatch):
    store = f"s3://{shared_bucket}/fields-{uuid.uuid4().hex[:6]}"
    push(bundle, f"{store}/llama:v1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    with open_store(store) as st, pytest.raises(StoreError) as err:
        st.get_ref("llama", "v1")
    e = err.value
    assert (e.store, e.ref, e.status) == (store, "llama:v1", "SignatureDoesNotMatch"), e
    assert e.key.endswith("refs/llama/v1.json"), e
    r = cli("ls", store, "--json")
    doc = json.loads(r.out)
    assert r.rc == 6 and (doc["store"], doc["status"]) == (store, "SignatureDoesNotMatch"), r


def test_oci_refused_login_carries_the_http_status(oci_registry_auth, bundle, cli, tmp_path, monkeypatch):
    ref = f"{oci_registry_auth.url}/team/fields:v1"
    monkeypatch.setenv("DOCKER_CONFIG", str(oci_registry_auth.docker_config(tmp_path / "bad", password="wrong")))
    r = cli("pull", ref, "--cache-root", tmp_path / "root", "--insecure-skip-verify", "--json")
    doc = json.loads(r.out)
    assert r.rc == 6 and doc["store"] == ref.rsplit(":", 1)[0] and doc["status"] in (401, 403), r


# ---------------------------------------------------------------- issue 22 item 6: the layers above the stores
def test_a_pull_whose_install_refuses_names_the_store_ref_and_manifest(any_store, bundle, keys, cli, tmp_path):
    """Install refusals (here an untrusted signature) were raised without the pull's store, ref or manifest."""
    from cachetool.api import pull
    from cachetool.errors import UntrustedKeyError

    ref = any_store.ref("v1")
    push(bundle, ref)
    with pytest.raises(UntrustedKeyError) as err:
        pull(ref, tmp_path / "root", trust=[keys["other_pub"]])
    e = err.value
    assert (e.store, e.ref, e.key) == (any_store.store, ref, bundle.manifest_digest), e
    r = cli("pull", ref, "--cache-root", tmp_path / "root", "--trust", keys["other_pub"], "--json")
    doc = json.loads(r.out)
    assert r.rc == 3 and (doc["store"], doc["ref"], doc["key"]) == (e.store, e.ref, e.key), r


def _tamper_file_store_blob(store_dir, bundle):
    blob = max(bundle.blobs, key=lambda b: b.stored_size)
    p = store_dir / "blobs" / "sha256" / blob.stored_digest.split(":", 1)[1]
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))
    return blob


def test_a_tampered_blob_keeps_its_digest_as_key_and_gets_the_pulls_store_and_ref(bundle, keys, cli, tmp_path):
    from cachetool.api import pull
    from cachetool.errors import BlobVerificationError

    store = f"file://{tmp_path}/store"
    ref = f"{store}/llama:v1"
    push(bundle, ref)
    blob = _tamper_file_store_blob(tmp_path / "store", bundle)
    with pytest.raises(BlobVerificationError) as err:
        pull(ref, tmp_path / "root", trust=[keys["pub"]])
    e = err.value
    assert (e.store, e.ref, e.key) == (store, ref, blob.digest), e  # the blob, more precise than the manifest
    r = cli("verify", ref, "--trust", keys["pub"], "--json")
    doc = json.loads(r.out)
    assert r.rc == 3 and (doc["store"], doc["ref"], doc["key"]) == (store, ref, blob.digest), r


def test_verify_of_a_ref_that_a_trust_key_refuses_names_the_ref(any_store, bundle, keys, cli):
    ref = any_store.ref("v1")
    push(bundle, ref)
    r = cli("verify", ref, "--trust", keys["other_pub"], "--json")
    doc = json.loads(r.out)
    assert r.rc == 3 and (doc["store"], doc["ref"], doc["key"]) == (any_store.store, ref, bundle.manifest_digest), r


@pytest.fixture
def not_a_manifest(tmp_path):
    """A file store whose tag (and pin) names a stored object that is JSON under its digest but no bundle manifest."""
    from cachetool.stores.base import RefEntry, RefIndex

    store = f"file://{tmp_path}/store"
    with open_store(store) as st:
        with st.push([], lambda b: None) as p:
            digest = p.commit(b'{"schema": 1}').digest
        st.update_ref("llama", "v1", lambda old: RefIndex("llama", "v1", (RefEntry(digest, "cpu-x", {}, 1, ""),)))
    return store, digest


def test_inspect_of_a_ref_whose_manifest_is_bad_names_the_ref(not_a_manifest, cli):
    store, digest = not_a_manifest
    ref = f"{store}/llama:v1"
    r = cli("inspect", ref, "--json")
    doc = json.loads(r.out)
    assert r.rc == 3 and (doc["store"], doc["ref"], doc["key"]) == (store, ref, digest), r


def test_a_pin_whose_manifest_is_bad_names_the_store_pin_and_object(not_a_manifest, cli):
    """A pin is read by the store itself: it parses the pinned manifest for the entry's platform."""
    from cachetool.errors import ManifestError

    store, digest = not_a_manifest
    with open_store(store) as st, pytest.raises(ManifestError) as err:
        st.get_ref("llama", "", digest=digest)
    e = err.value
    assert (e.store, e.ref, e.key) == (store, f"llama@{digest}", f"manifests/sha256/{digest[7:]}.json"), e
    r = cli("inspect", f"{store}/llama@{digest}", "--json")
    assert r.rc == 3 and (json.loads(r.out)["store"], json.loads(r.out)["key"]) == (store, e.key), r


def test_gc_over_a_bad_stored_manifest_names_the_store_and_the_manifest(not_a_manifest, cli):
    store, digest = not_a_manifest
    r = cli("gc", store, "--dry-run", "--json")
    doc = json.loads(r.out)
    assert r.rc == 3 and (doc["store"], doc["key"]) == (store, digest), r


def test_a_push_that_refuses_a_tampered_blob_names_the_store_and_ref(tree, keys, tmp_path):
    from cachetool.bundle.packing import pack
    from cachetool.errors import VerificationError

    packed = pack(tree, sign_key=keys["key"], workdir=tmp_path / "work")
    try:
        blob = max(packed.blobs, key=lambda b: b.stored_size)
        p = packed.blob_path(blob)
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0xFF
        p.write_bytes(bytes(data))
        store = f"file://{tmp_path}/store"
        ref = f"{store}/llama:v1"
        with pytest.raises(VerificationError) as err:
            push(packed, ref)
    finally:
        packed.close()
    e = err.value
    assert (e.store, e.ref, e.key) == (store, ref, blob.stored_digest), e


def test_an_unreadable_registry_credentials_file_names_the_store_and_the_file(
    oci_registry_auth, cli, tmp_path, monkeypatch
):
    bad = tmp_path / "auth.json"
    bad.write_text("{not json")
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(bad))
    store = f"{oci_registry_auth.url}/team/fields"
    with open_store(store) as st, pytest.raises(StoreError) as err:
        list(st.list_refs())
    e = err.value
    assert (e.store, e.path, e.key) == (store, str(bad), None), e
    r = cli("ls", store, "--json")
    doc = json.loads(r.out)
    assert r.rc == 6 and (doc["store"], doc["path"]) == (store, str(bad)) and "key" not in doc, r


def test_key_is_a_store_object_and_a_path_in_the_cache_root_is_path(bundle, keys, tmp_path, cli):
    """`key` was a manifest digest in one failure (an untrusted pull) and a unit's path in the cache root in
    another (a changed unit under --keep-changed): now `key` is always the store's object (here the bundle's
    manifest) and a local path has its own field, `path`."""
    from cachetool.api import pull
    from cachetool.bundle.ctb import write_ctb

    ref = f"file://{tmp_path}/store/llama:v1"
    push(bundle, ref)
    root = tmp_path / "root"
    pull(ref, root, trust=[keys["pub"]])
    victim = next(root.rglob("rank_1_0/backbone/compile_index.json"))
    victim.write_bytes(b"{}")
    unit = str(victim.parent.parent.relative_to(root))
    r = cli("pull", ref, "--cache-root", root, "--trust", keys["pub"], "--keep-changed", "--json")
    doc = json.loads(r.out)
    assert r.rc == 4 and doc["path"] == unit and doc["key"] == bundle.manifest_digest, doc
    ctb = write_ctb(bundle, tmp_path / "b.ctb")
    r = cli("install", ctb, "--cache-root", root, "--trust", keys["pub"], "--keep-changed", "--json")
    doc = json.loads(r.out)
    assert r.rc == 4 and doc["path"] == unit and doc.get("key") != unit, doc
