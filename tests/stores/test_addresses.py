"""Ref and store URL parsing: the three schemes, defaults, and one-line UsageErrors."""

from __future__ import annotations

import pytest

from cachetool.errors import UsageError
from cachetool.stores.addresses import parse_ref, parse_store, parse_store_or_ref


@pytest.mark.parametrize(
    "text,scheme,location,path,name,tag,url",
    [
        ("file:///srv/caches/llama:v1", "file", "/srv/caches", "", "llama", "v1", "file:///srv/caches/llama:v1"),
        ("file:///srv/caches/llama", "file", "/srv/caches", "", "llama", "latest", "file:///srv/caches/llama:latest"),
        (
            "s3://my-bucket/team/prefix/llama-3.2:cuda_sm90",
            "s3",
            "my-bucket",
            "team/prefix",
            "llama-3.2",
            "cuda_sm90",
            "s3://my-bucket/team/prefix/llama-3.2:cuda_sm90",
        ),
        ("s3://my-bucket/llama:v1", "s3", "my-bucket", "", "llama", "v1", "s3://my-bucket/llama:v1"),
        (
            "oci://127.0.0.1:5000/team/llama:v1",
            "oci",
            "127.0.0.1:5000",
            "team/llama",
            "llama",
            "v1",
            "oci://127.0.0.1:5000/team/llama:v1",
        ),
        ("oci://ghcr.io/org/llama", "oci", "ghcr.io", "org/llama", "llama", "latest", "oci://ghcr.io/org/llama:latest"),
        (
            "OCI://Registry.Example:443/x:1.0",
            "oci",
            "registry.example:443",
            "x",
            "x",
            "1.0",
            "oci://registry.example:443/x:1.0",
        ),
    ],
)
def test_parse_ref(text, scheme, location, path, name, tag, url):
    r = parse_ref(text)
    assert (r.store.scheme, r.store.location, r.store.path, r.name, r.tag) == (scheme, location, path, name, tag)
    assert r.url == url
    assert parse_ref(r.url) == r


@pytest.mark.parametrize(
    "text,why",
    [
        ("/srv/caches/llama:v1", "no scheme"),
        ("http://host/llama:v1", "unknown scheme"),
        ("file://relative/llama:v1", "absolute path"),
        ("file:///srv/../etc/llama:v1", "'..'"),
        ("s3://Bad_Bucket/llama:v1", "bucket"),
        ("s3://ab/llama:v1", "bucket"),
        ("s3://bucket/", "no bundle name"),
        ("s3://bucket/Llama:v1", "name"),
        ("s3://bucket/llama:", "tag"),
        ("s3://bucket/llama:-x", "tag"),
        ("s3://bucket/llama:a:b", "more than one"),
        ("oci://host:5000/Repo:v1", "name"),
        ("oci://host:5000/llama@sha256:" + "0" * 63, "is not sha256:<64 lowercase hex>"),
        ("file:///srv/llama@md5:abc", "is not sha256"),
        ("oci://bad host/llama:v1", "whitespace"),
        ("oci://-host/llama:v1", "registry host"),
        ("s3://bucket/llama:v 1", "whitespace"),
    ],
)
def test_bad_refs_are_one_line_usage_errors(text, why):
    with pytest.raises(UsageError) as ei:
        parse_ref(text)
    msg = str(ei.value)
    assert why in msg and "\n" not in msg and text in msg


def test_store_urls():
    assert parse_store("file:///srv/caches/").url == "file:///srv/caches"
    assert parse_store("s3://bucket").url == "s3://bucket"
    assert parse_store("s3://bucket/a/b/").url == "s3://bucket/a/b"
    assert parse_store("oci://localhost:5000/team/llama").path == "team/llama"
    with pytest.raises(UsageError, match="repository"):
        parse_store("oci://localhost:5000")
    with pytest.raises(UsageError, match="no tag"):
        parse_store("oci://localhost:5000/llama:v1")
    su, ref = parse_store_or_ref("s3://bucket/p/llama:v1")
    assert su.url == "s3://bucket/p" and ref.tag == "v1"
    su, ref = parse_store_or_ref("oci://localhost:5000/llama")
    assert su.url == "oci://localhost:5000/llama" and ref is None


H = "ab" * 32


@pytest.mark.parametrize(
    "text,store,name,tag,digest,url",
    [
        (
            f"oci://127.0.0.1:5000/ml/tiny@sha256:{H}",
            "oci://127.0.0.1:5000/ml/tiny",
            "tiny",
            "latest",
            f"sha256:{H}",
            f"oci://127.0.0.1:5000/ml/tiny@sha256:{H}",
        ),
        (
            f"oci://reg.example/ml/tiny:v1@sha256:{H}",
            "oci://reg.example/ml/tiny",
            "tiny",
            "v1",
            f"sha256:{H}",
            f"oci://reg.example/ml/tiny@sha256:{H}",
        ),
        (
            f"file:///srv/caches/tiny@sha256:{H}",
            "file:///srv/caches",
            "tiny",
            "latest",
            f"sha256:{H}",
            f"file:///srv/caches/tiny@sha256:{H}",
        ),
        (
            f"s3://bucket/team/tiny@sha256:{H}",
            "s3://bucket/team",
            "tiny",
            "latest",
            f"sha256:{H}",
            f"s3://bucket/team/tiny@sha256:{H}",
        ),
    ],
)
def test_digest_pins(text, store, name, tag, digest, url):
    r = parse_ref(text)
    assert (r.store.url, r.name, r.tag, r.digest, r.url) == (store, name, tag, digest, url)
    assert parse_ref(r.url).digest == digest


def test_ls_of_a_whole_registry_or_namespace():
    su, ref = parse_store_or_ref("oci://127.0.0.1:5000")
    assert (su.location, su.path, ref) == ("127.0.0.1:5000", "", None)
    su, ref = parse_store_or_ref("oci://127.0.0.1:5000/ml")
    assert (su.path, ref) == ("ml", None)
