"""Registry conventions (issue 15, item 4): TLS from a private CA per registry (certs.d folder or
REQUESTS_CA_BUNDLE), a certificate error in one line and not retried, --insecure = unverified TLS, and ``ls`` of
a registry or a namespace lists its repositories."""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest
import requests

from cachetool.bundle.ctb import write_ctb


@pytest.fixture
def no_ca(tmp_path, monkeypatch):
    for k in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CACHETOOL_CERTS_D", str(tmp_path / "certs.d"))
    monkeypatch.setenv("CACHETOOL_STORE_MAX_ATTEMPTS", "5")
    return tmp_path


def test_private_ca_registry_works_with_its_ca_and_fails_in_one_line_without(
    oci_registry_tls, bundle, keys, cli, no_ca, monkeypatch
):
    # Before: 127.0.0.1 meant plain HTTP (no TLS at all), a private CA could not be configured per registry, and
    # an SSLError was retried 5 times.
    reg, tmp = oci_registry_tls, no_ca
    ctb = write_ctb(bundle, tmp / "b.ctb")
    ref = f"{reg.url}/team/tls-{uuid.uuid4().hex[:6]}:v1"
    r = cli("push", ctb, ref)
    assert r.rc == 6, r
    line = r.error_line()
    assert "TLS certificate is not trusted" in line and "ca.crt" in line and "attempt" not in line, line

    reg.certs_d(tmp / "certs.d")  # <certs.d>/127.0.0.1:PORT/ca.crt, as docker and podman read it
    assert cli("push", ctb, ref).rc == 0
    r = cli("pull", ref, "--cache-root", tmp / "root", "--trust", keys["pub"])
    assert r.rc == 0, r

    # the same CA through REQUESTS_CA_BUNDLE instead of certs.d
    monkeypatch.setenv("CACHETOOL_CERTS_D", str(tmp / "empty"))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(reg.ca_cert))
    r = cli("ls", ref.rsplit(":", 1)[0], "--json")
    assert r.rc == 0 and [x["ref"].split(":")[1] for x in json.loads(r.out)["refs"]] == ["v1"], r


def test_insecure_is_unverified_tls(oci_registry_tls, bundle, cli, no_ca):
    ref = f"{oci_registry_tls.url}/team/insecure-{uuid.uuid4().hex[:6]}:v1"
    r = cli("push", write_ctb(bundle, no_ca / "b.ctb"), ref, "--insecure")
    assert r.rc == 0, r


def test_plain_http_to_a_tls_registry_is_one_line(oci_registry_tls, bundle, cli, no_ca):
    ref = f"{oci_registry_tls.url}/team/plain-{uuid.uuid4().hex[:6]}:v1"
    r = cli("push", write_ctb(bundle, no_ca / "b.ctb"), ref, "--plain-http")
    assert r.rc == 6, r
    r.error_line()


def test_ls_of_a_registry_or_namespace_lists_repositories(oci_registry, bundle, cli, tmp_path):
    # Before: `ls oci://host/namespace` exited 5 (not a repository) and `ls oci://host` was a usage error.
    ns = f"ns{uuid.uuid4().hex[:6]}"
    ctb = write_ctb(bundle, tmp_path / "b.ctb")
    for repo in ("tiny", "team/llama"):
        assert cli("push", ctb, f"{oci_registry.url}/{ns}/{repo}:v1").rc == 0
    r = cli("ls", f"{oci_registry.url}/{ns}", "--json")
    assert r.rc == 0, r
    assert sorted(x["ref"] for x in json.loads(r.out)["refs"]) == [f"{ns}/team/llama:v1", f"{ns}/tiny:v1"]
    r = cli("ls", oci_registry.url, "--json")
    assert r.rc == 0, r
    assert {f"{ns}/team/llama:v1", f"{ns}/tiny:v1"} <= {x["ref"] for x in json.loads(r.out)["refs"]}
    r = cli("ls", f"{oci_registry.url}/{ns}-none")
    assert r.rc == 5, r


def test_ls_of_a_registry_skips_a_catalogued_repository_without_tags(oci_registry, bundle, cli, tmp_path):
    # Before: a repository the catalog lists but whose tag list is 404 (a push that uploaded blobs and never a
    # manifest, or every tag deleted) made `ls oci://host` exit 5 "repository ... not found".
    ns = f"ns{uuid.uuid4().hex[:6]}"
    blob = b"a blob and never a manifest"
    base = f"http://{oci_registry.host}/v2/{ns}/blobs-only/blobs/uploads/"
    started = requests.post(base, timeout=10)
    assert started.status_code == 202, started.text
    location = requests.compat.urljoin(base, started.headers["Location"])
    done = requests.put(
        location, params={"digest": "sha256:" + hashlib.sha256(blob).hexdigest()}, data=blob, timeout=10
    )
    assert done.status_code == 201, done.text
    assert cli("push", write_ctb(bundle, tmp_path / "b.ctb"), f"{oci_registry.url}/{ns}/tiny:v1").rc == 0
    r = cli("ls", f"{oci_registry.url}/{ns}", "--json")
    assert r.rc == 0, r
    assert [x["ref"] for x in json.loads(r.out)["refs"]] == [f"{ns}/tiny:v1"]
