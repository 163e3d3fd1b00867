"""A store option is its kind of store's: one that the URL's store does not take is a usage error naming it and the
kind (``open_store("file://...", region=...)`` passed silently, and so did ``cachetool ls file://... --endpoint-url``:
a user who meant another store learnt nothing). An option left at its default (None, False) is not given."""

from __future__ import annotations

import json

import pytest

from cachetool import exit_codes
from cachetool.errors import UsageError
from cachetool.stores import OPTIONS, open_store
from cachetool.stores.file import FileStore


@pytest.mark.parametrize(
    ("url", "options", "line"),
    [
        (
            "file://{tmp}/store",
            {"region": "us-east-1"},
            "option 'region' does not apply to file:// stores (they take no options)",
        ),
        (
            "file://{tmp}/store",
            {"endpoint_url": "http://127.0.0.1:1", "insecure": True},
            "options 'endpoint_url', 'insecure' do not apply to file:// stores (they take no options)",
        ),
        (
            "s3://bucket/prefix",
            {"plain_http": True},
            "option 'plain_http' does not apply to s3:// stores (they take: endpoint_url, profile, region)",
        ),
        (
            "oci://127.0.0.1:1/repo",
            {"profile": "ceph"},
            "option 'profile' does not apply to oci:// stores (they take: insecure, plain_http)",
        ),
    ],
)
def test_an_option_of_another_kind_of_store_is_a_usage_error(tmp_path, url, options, line):
    url = url.format(tmp=tmp_path)
    with pytest.raises(UsageError) as err:
        open_store(url, **options)  # refused before any store is built: nothing is reached or written
    assert str(err.value) == line and err.value.exit_code == exit_codes.USAGE.code
    assert err.value.store == url
    assert not (tmp_path / "store").exists()


def test_options_left_at_their_defaults_are_not_given(tmp_path):
    """What a caller that passes every option passes (None and False): every store opens."""
    every = {name: (False if name in OPTIONS["oci"] else None) for names in OPTIONS.values() for name in names}
    with open_store(f"file://{tmp_path}/store", **every) as st:
        assert isinstance(st, FileStore)


def test_the_cli_refuses_a_store_flag_of_another_store(cli, tmp_path):
    store = f"file://{tmp_path}/store"
    r = cli("ls", store, "--endpoint-url", "http://127.0.0.1:1")
    assert r.rc == exit_codes.USAGE.code and r.out == ""
    assert r.err.strip().splitlines() == [
        "error: option 'endpoint_url' does not apply to file:// stores (they take no options)"
    ]
    r = cli("ls", store, "--plain-http", "--json")
    doc = json.loads(r.out)
    assert r.rc == 2 and doc["error"] == "usage-error" and doc["store"] == store and "'plain_http'" in doc["message"]
    # without the flag the store is asked (and has nothing: not found), so a flag not given never reaches it
    assert cli("ls", store).rc == exit_codes.NOT_FOUND.code
    assert not (tmp_path / "store").exists()


def test_a_pull_with_a_store_flag_of_another_store_is_a_usage_outcome(cli, tmp_path, keys):
    r = cli(
        "pull",
        f"file://{tmp_path}/store/llama:v1",
        "--cache-root",
        tmp_path / "root",
        "--profile",
        "ceph",
        "--trust",
        keys["pub"],
    )
    assert r.rc == exit_codes.USAGE.code
    out, err = r.err.strip().splitlines()
    assert out.startswith("pull: outcome=usage-error ") and "exit=2" in out
    assert err == "error: option 'profile' does not apply to file:// stores (they take no options)"
    assert not (tmp_path / "root").exists()


def test_diff_of_refs_in_two_kinds_of_store_gives_each_side_its_own_options(
    rgw, s3_env, shared_bucket, bundle, cli, tmp_path, monkeypatch
):
    """One set of flags, two stores: the S3 side takes --endpoint-url, the file side nothing (diff opened both
    with every flag, so the file side refused --endpoint-url, exit 2). A flag that neither side takes is still
    refused."""
    import uuid

    from cachetool.bundle.ctb import write_ctb

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)  # the flag is the only way to the S3 server
    ctb = write_ctb(bundle, tmp_path / "b.ctb")
    s3_ref = f"s3://{shared_bucket}/diff-{uuid.uuid4().hex[:6]}/llama:v1"
    file_ref = f"file://{tmp_path}/store/llama:v1"
    assert cli("push", ctb, s3_ref, "--endpoint-url", rgw.endpoint).rc == 0
    assert cli("push", ctb, file_ref).rc == 0
    for a, b in ((s3_ref, file_ref), (file_ref, s3_ref)):
        r = cli("diff", a, b, "--endpoint-url", rgw.endpoint, "--exit-code")
        assert r.rc == 0 and "no differences" in r.out, r
    r = cli("diff", file_ref, file_ref, "--endpoint-url", rgw.endpoint)
    assert r.rc == exit_codes.USAGE.code and "'endpoint_url' does not apply to file:// stores" in r.error_line()
    r = cli("diff", s3_ref, file_ref, "--plain-http")
    assert r.rc == exit_codes.USAGE.code and "'plain_http' does not apply to s3:// stores" in r.error_line()


def test_warm_push_refuses_a_store_flag_of_another_store_before_compiling(cli, tmp_path, keys):
    """warm checks --push and its flags before minutes of compiling (the flag was refused only at the push,
    after the compile)."""
    root = tmp_path / "root"
    r = cli(
        "warm",
        "--model",
        "tiny",
        "--cache-root",
        root,
        "--push",
        f"file://{tmp_path}/store/tiny:v1",
        "--sign-key",
        keys["priv"],
        "--endpoint-url",
        "http://127.0.0.1:1",
    )
    assert r.rc == exit_codes.USAGE.code and "'endpoint_url' does not apply to file:// stores" in r.error_line()
    assert not root.exists() and not (tmp_path / "store").exists()
