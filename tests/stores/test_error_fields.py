"""Issue 22 item 6 (stores): a failure that knows the store, the ref, the object or the server's status carries them
as fields (``store``, ``ref``, ``key``, ``status``), and ``--json`` prints them, so a caller branches on data, not
on the message. Each case runs against the real servers (file, Ceph RGW, docker-registry)."""

from __future__ import annotations

import json
import uuid

import pytest

from cachetool.digests import BlobRef
from cachetool.errors import NotFoundError, StoreError
from cachetool.pushing import push
from cachetool.stores import open_store

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
