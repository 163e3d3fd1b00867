"""A hostile user's inputs, found by review: each is refused with one ``error:`` line, a non-zero exit and nothing
written. Hostile manifests are signed with the trusted key (a signer gone bad), as in test_refusals.py."""

from __future__ import annotations

import base64
import json

import pytest

from cachetool.bundle.manifest import canonical_json
from cachetool.errors import CachetoolError
from tests.cache_trees import complete_unit_files, dir_is_empty_or_absent, manifest_obj, sign_bytes, write_raw_ctb
from tests.cli_calls import one_error_line

FILE = ("torch_compile_cache/h/rank_0_0/f", b"content")


def _install(cli, keys, bundle, root, *extra):
    return cli("install", bundle, "--cache-root", root, "--trust", keys["pub"], *extra)


def _refused(r, root, code, *words):
    assert r.rc == code, r
    assert len(r.err.strip().splitlines()) == 1, r  # one line, no traceback
    line = one_error_line(r.err)
    for w in words:
        assert w in line, line
    assert dir_is_empty_or_absent(root), list(root.rglob("*"))
    return line


def _ctb(tmp_path, manifest_bytes, envelope, stored, name="h.ctb"):
    if isinstance(envelope, (dict, list)):
        envelope = json.dumps(envelope).encode()
    return write_raw_ctb(tmp_path / name, manifest_bytes, envelope, stored)


# ---------------------------------------------------------------------------------------------- manifest
@pytest.mark.parametrize(
    "fingerprint", [{"device": ["cuda"]}, {"device": 5}, {"torch": {"v": 1}}, {"device": "cpu\nerror: forged line"}]
)
def test_fingerprint_values_must_be_strings(tmp_path, keys, cli, fingerprint):
    # A list as the device crashed preflight with an AttributeError traceback.
    obj, stored = manifest_obj([FILE], fingerprint=fingerprint)
    mb = canonical_json(obj)
    root = tmp_path / "root"
    _refused(_install(cli, keys, _ctb(tmp_path, mb, sign_bytes(mb, keys["key"]), stored), root), root, 3, "fingerprint")
    r = cli("inspect", tmp_path / "h.ctb")
    assert r.rc == 3 and len(r.err.strip().splitlines()) == 1, r


def test_deeply_nested_manifest_json(tmp_path, keys, cli):
    # json.loads raised RecursionError: a traceback from install and inspect.
    mb = b"[" * 100_000
    root = tmp_path / "root"
    bundle = _ctb(tmp_path, mb, sign_bytes(mb, keys["key"]), {})
    _refused(_install(cli, keys, bundle, root), root, 3, "nested too deeply")
    _refused(_install(cli, keys, bundle, root, "--insecure-skip-verify"), root, 3, "nested too deeply")


# ---------------------------------------------------------------------------------------------- signature envelope
@pytest.fixture
def signed(tmp_path, keys):
    obj, stored = manifest_obj([FILE])
    mb = canonical_json(obj)
    return mb, json.loads(sign_bytes(mb, keys["key"])), stored


def test_deeply_nested_envelope(tmp_path, keys, cli, signed):
    mb, _, stored = signed
    root = tmp_path / "root"
    _refused(_install(cli, keys, _ctb(tmp_path, mb, b"[" * 100_000, stored), root), root, 3, "nested too deeply")


def test_envelope_with_unknown_fields(tmp_path, keys, cli, signed):
    mb, env, stored = signed
    root = tmp_path / "root"
    top = dict(env, extra="x")
    _refused(_install(cli, keys, _ctb(tmp_path, mb, top, stored), root), root, 3, "unknown field", "extra")
    per_sig = dict(env, signatures=[dict(env["signatures"][0], cert="x")])
    _refused(_install(cli, keys, _ctb(tmp_path, mb, per_sig, stored), root), root, 3, "malformed")


def test_keyid_with_a_newline_cannot_forge_output_lines(tmp_path, keys, cli, signed):
    mb, env, stored = signed
    root = tmp_path / "root"
    forged = dict(env, signatures=[{"keyid": "abc\nerror: all good", "sig": env["signatures"][0]["sig"]}])
    _refused(_install(cli, keys, _ctb(tmp_path, mb, forged, stored), root), root, 3, "malformed")


@pytest.mark.parametrize("order", ["valid-first", "spoofed-first"])
def test_a_spoofed_trusted_keyid_fails_wherever_it_stands(tmp_path, keys, cli, signed, order):
    # docs/bundles.md: "a signature claiming a trusted key id that does not verify fails the bundle". A spoofed
    # entry placed after a valid one was never looked at.
    mb, env, stored = signed
    good = env["signatures"][0]
    spoofed = {"keyid": good["keyid"], "sig": base64.b64encode(b"\0" * 64).decode()}
    sigs = [good, spoofed] if order == "valid-first" else [spoofed, good]
    root = tmp_path / "root"
    _refused(
        _install(cli, keys, _ctb(tmp_path, mb, dict(env, signatures=sigs), stored), root), root, 3, "does not verify"
    )


def test_other_signers_next_to_a_valid_one_are_fine(tmp_path, keys, cli):
    obj, stored = manifest_obj([FILE, *complete_unit_files()])  # a unit that installs
    mb = canonical_json(obj)
    env = json.loads(sign_bytes(mb, keys["key"]))
    other = json.loads(sign_bytes(mb, keys["other_key"]))["signatures"][0]
    root = tmp_path / "root"
    r = _install(cli, keys, _ctb(tmp_path, mb, dict(env, signatures=[other, env["signatures"][0]]), stored), root)
    assert r.rc == 0, r


# ---------------------------------------------------------------------------------------------- flags and roots
@pytest.mark.parametrize(
    "args",
    [
        ("install", "{ctb}", "--cache-root", "{file}"),
        ("install", "{ctb}", "--bogus"),
        ("install",),
        ("pack", "{file}", "-o", "x.ctb"),
        ("verify", "{ctb}", "--trust"),
        ("push",),
        ("gc", "file:///tmp/x", "--older-than", "-1"),
    ],
)
def test_bad_flags_are_one_line_usage_errors(tmp_path, cli, args):
    # click printed three lines (Usage:, Try ..., Error: ...) with a capital "Error:".
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = cli(*[a.format(ctb=tmp_path / "b.ctb", file=afile) for a in args])
    assert r.rc == 2, r
    assert len(r.err.strip().splitlines()) == 1 and r.err.startswith("error: "), r
    assert afile.read_text() == "x"


@pytest.mark.parametrize("where", ["under-a-file", "dangling-symlink"])
def test_unusable_cache_root_is_a_cachetool_error(tmp_path, keys, signed, where):
    # The library raised a bare NotADirectoryError / FileExistsError (the CLI turned it into "install: ...").
    from cachetool.bundle.ctb import open_ctb
    from cachetool.install import InstallOptions, install_bundle

    mb, env, stored = signed
    bundle = _ctb(tmp_path, mb, env, stored)
    (tmp_path / "afile").write_text("x")
    root = tmp_path / "afile" / "root" if where == "under-a-file" else tmp_path / "link"
    if where == "dangling-symlink":
        root.symlink_to(tmp_path / "missing" / "x")
    with open_ctb(bundle) as b, pytest.raises(CachetoolError) as ei:
        install_bundle(b, root, InstallOptions(trust=[keys["pub"]]))
    assert "cache root" in str(ei.value) and "\n" not in str(ei.value)
    assert (tmp_path / "afile").read_text() == "x" and not (tmp_path / "missing").exists()


def test_ranks_that_name_no_rank(tmp_path, keys, cli, signed):
    # "--ranks ,,," selected nothing and reported "already installed: 0 unit(s)" with exit 0.
    mb, env, stored = signed
    root = tmp_path / "root"
    _refused(_install(cli, keys, _ctb(tmp_path, mb, env, stored), root, "--ranks", ",,,"), root, 2, "names no rank")


@pytest.mark.parametrize("device", ["weird", "cuda:x", "cuda"])
def test_device_flag(tmp_path, keys, cli, device):
    # A bundle whose compiler factors preflight compares: torch raised "Invalid device string" (and, for cuda on a
    # machine without CUDA, "Torch not compiled with CUDA enabled") as tracebacks.
    import torch

    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is here")
    obj, stored = manifest_obj(
        [FILE], keys=[{"hash": "h", "kind": "piecewise", "factors": {"compiler": {"values": {"torch": "0.0"}}}}]
    )
    mb = canonical_json(obj)
    root = tmp_path / "root"
    r = _install(cli, keys, _ctb(tmp_path, mb, sign_bytes(mb, keys["key"]), stored), root, "--device", device)
    # cuda on a machine without CUDA: a device this machine lacks, a usage error as for pull (issue 28 item 3)
    _refused(r, root, 2, "--device" if device != "cuda" else "cuda")
