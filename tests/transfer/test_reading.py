"""`inspect`, `verify` and `diff` take a ref as well as a bundle file, on every real store: `inspect
file:///…/store/tiny:main` said "bundle file … does not exist" (exit 5). A tag of several platforms reads this
machine's, or the one `--platform` names."""

from __future__ import annotations

import json

import pytest

from cachetool.transfer.push import push


@pytest.fixture
def pushed(any_store, bundle, cuda_bundle):
    ref = any_store.ref("v1")
    push(bundle, ref)
    push(cuda_bundle, ref)
    return any_store, ref


def test_inspect_a_ref_reads_this_machines_bundle_or_the_named_platform(
    pushed, bundle, cuda_bundle, cli, local_platform
):
    _, ref = pushed
    r = cli("inspect", ref, "--json")
    assert r.rc == 0, r
    doc = json.loads(r.out)
    assert doc["manifest_digest"] == bundle.manifest_digest and doc["platform"] == local_platform
    assert doc["files"] == len(bundle.manifest.files) and doc["signed_by"]
    other = json.loads(cli("inspect", ref, "--platform", cuda_bundle.platform, "--json").out)
    assert other["manifest_digest"] == cuda_bundle.manifest_digest
    missing = cli("inspect", ref, "--platform", "rocm-nowhere", "--json")
    assert missing.rc == 5 and "rocm-nowhere" in missing.err and cuda_bundle.platform in missing.err, missing


def test_verify_a_ref_checks_the_signature_and_every_blob(pushed, keys, cli, tmp_path):
    _, ref = pushed
    r = cli("verify", ref, "--trust", keys["pub"])
    assert r.rc == 0 and r.out.startswith(f"OK {ref}: signed by trusted key {keys['id']}"), r
    r = cli("verify", ref, "--trust", keys["other_pub"])
    assert r.rc == 3 and "untrusted" in r.err, r


def test_diff_of_a_ref_and_its_bundle_file_finds_nothing(pushed, bundle, cli, tmp_path):
    from cachetool.bundle.ctb import write_ctb

    _, ref = pushed
    ctb = write_ctb(bundle, tmp_path / "b.ctb")
    r = cli("diff", ref, ctb, "--exit-code")
    assert r.rc == 0 and "no differences" in r.out, r


def test_verify_a_ref_whose_blob_was_changed_in_the_store_is_refused(tmp_path, bundle, keys, cli, monkeypatch):
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    store = tmp_path / "store"
    ref = f"file://{store}/llama:v1"
    push(bundle, ref)
    blob = max((p for p in (store / "blobs").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    r = cli("verify", ref, "--trust", keys["pub"])
    assert r.rc == 3, r
    assert list(scratch.iterdir()) == []  # the downloaded blobs went with the refusal


def test_diff_platform_picks_the_refs_bundle_beside_a_file(pushed, bundle, cuda_bundle, cli, tmp_path):
    """--platform is the ref's: with a bundle file on the other side it was refused ("--platform is for a ref")."""
    from cachetool.bundle.ctb import write_ctb

    _, ref = pushed
    ctb = write_ctb(bundle, tmp_path / "b.ctb")
    r = cli("diff", ref, ctb, "--platform", cuda_bundle.platform, "--json")
    assert r.rc == 0, r
    assert any(d["category"] == "fingerprint" for d in json.loads(r.out)["differences"]), r.out
