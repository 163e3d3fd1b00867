"""pack → .ctb → install gives a byte-identical tree with modes, for each layout; dedupe; ranks; idempotence."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from cachetool.bundle.ctb import open_ctb, write_ctb
from cachetool.bundle.manifest import platform_key
from cachetool.bundle.packing import pack
from cachetool.install import InstallOptions, install_bundle
from tests.cache_trees import make_native_tree, make_triton_tree, make_vllm_tree, tree_snapshot
from tests.cli_calls import one_error_line

BUILDERS = {"native": make_native_tree, "vllm": make_vllm_tree, "triton": make_triton_tree}


@pytest.mark.parametrize("layout", ["native", "vllm", "triton"])
def test_pack_install_byte_identical(layout, tmp_path, keys, cli):
    src = BUILDERS[layout](tmp_path / "src")
    out = tmp_path / "b.ctb"
    r = cli("pack", src, "-o", out, "--sign-key", keys["priv"])
    assert r.rc == 0, r
    assert f"layout={layout}" in r.out
    extra = ["--no-preflight"] if layout == "triton" else []  # built for sm90; this box is a CPU
    r = cli("install", out, "--cache-root", tmp_path / "dst", "--trust", keys["pub"], *extra)
    assert r.rc == 0, r
    got, want = tree_snapshot(tmp_path / "dst"), tree_snapshot(src)
    groups = sorted(path for path in want if "__grp__" in path)
    assert bool(groups) == (layout == "triton")
    for path in groups:  # Triton's group files name the kernel's files where the install put them
        named = json.loads((tmp_path / "dst" / path).read_text())["child_paths"].values()
        folder = str(tmp_path / "dst" / path.rsplit("/", 1)[0])
        assert named and all(p.startswith(folder + "/") for p in named)
    assert {k: v for k, v in got.items() if k not in groups} == {k: v for k, v in want.items() if k not in groups}
    # modes really vary in the fixtures (0755 .so files) and are kept
    modes = {v[1] for v in tree_snapshot(src).values() if v[0] == "f"}
    assert 0o755 in modes and 0o644 in modes


def test_triton_preflight_names_device(tmp_path, keys, cli):
    src = make_triton_tree(tmp_path / "src")
    cli("pack", src, "-o", tmp_path / "b.ctb", "--sign-key", keys["priv"])
    r = cli("install", tmp_path / "b.ctb", "--cache-root", tmp_path / "dst", "--trust", keys["pub"])
    assert r.rc == 4, r
    assert "fingerprint" in one_error_line(r.err) and "'device'" in r.err
    assert not (tmp_path / "dst").exists()


def test_identical_files_stored_once(tmp_path, keys, cli):
    src = make_native_tree(tmp_path / "src", layers=16)
    cli("pack", src, "-o", tmp_path / "b.ctb", "--sign-key", keys["priv"])
    r = cli("inspect", tmp_path / "b.ctb", "--json")
    assert r.rc == 0, r
    info = json.loads(r.out)
    # 2 ranks x (16 artifacts + index, factors, graph, code, .so, .cpp) = 2 x 22 files
    assert info["files"] == 44
    # the 14 identical middle layers on both ranks are one blob; the rest is shared across ranks except edges
    middle = [f for f in info["file_list"] if f["path"].endswith(tuple(f"artifact_{i}" for i in range(1, 15)))]
    assert len(middle) == 28 and len({f["digest"] for f in middle}) == 1
    assert info["unique_blobs"] < info["files"] / 3
    assert info["bytes"]["unique"] < info["bytes"]["raw"] / 5
    assert info["bytes"]["compressed"] < info["bytes"]["unique"]
    with open_ctb(tmp_path / "b.ctb") as b:
        assert sum(1 for b_ in b.blobs) == info["unique_blobs"]
    text = cli("inspect", tmp_path / "b.ctb")
    assert "dedupe x" in text.out and "unique" in text.out and "compressed" in text.out


def test_pack_hash_folder_and_rank_folder(tmp_path, keys, cli):
    src = make_native_tree(tmp_path / "src", ranks=("rank_0_0", "rank_1_0"))
    tcc = src / "torch_compile_cache"
    h = next(tcc.iterdir())
    for sub, expect_ranks in ((h, {"rank_0_0", "rank_1_0"}), (h / "rank_1_0", {"rank_1_0"})):
        out = tmp_path / f"{sub.name}.ctb"
        assert cli("pack", sub, "-o", out, "--sign-key", keys["priv"]).rc == 0
        dst = tmp_path / f"dst-{sub.name}"
        r = cli("install", out, "--cache-root", dst, "--trust", keys["pub"])
        assert r.rc == 0, r
        assert {p.name for p in (dst / "torch_compile_cache" / h.name).iterdir()} == expect_ranks
        for rank in expect_ranks:
            rel = f"torch_compile_cache/{h.name}/{rank}"
            assert tree_snapshot(dst / rel) == tree_snapshot(src / rel)


def test_ranks_selection(tmp_path, keys, cli):
    src = make_native_tree(tmp_path / "src", ranks=("rank_0_0", "rank_1_0", "rank_1_1"))
    cli("pack", src, "-o", tmp_path / "b.ctb", "--sign-key", keys["priv"])
    r = cli("install", tmp_path / "b.ctb", "--cache-root", tmp_path / "d", "--trust", keys["pub"], "--ranks", "1")
    assert r.rc == 0, r
    h = next((tmp_path / "d" / "torch_compile_cache").iterdir())
    assert {p.name for p in h.iterdir()} == {"rank_1_0", "rank_1_1"}
    r = cli("install", tmp_path / "b.ctb", "--cache-root", tmp_path / "e", "--trust", keys["pub"], "--ranks", "7")
    assert r.rc == 2 and "no rank 7" in one_error_line(r.err)
    assert not (tmp_path / "e").exists()


def test_idempotent_and_a_changed_unit_is_replaced(tmp_path, keys, cli):
    """Before: a unit whose files a process changed (any hot start did) made a re-install exit 2 "already exists
    with different content; remove it or pass --force". Now it is verified and swapped in, one line each."""
    src = make_native_tree(tmp_path / "src")
    b = tmp_path / "b.ctb"
    cli("pack", src, "-o", b, "--sign-key", keys["priv"])
    dst = tmp_path / "d"
    assert cli("install", b, "--cache-root", dst, "--trust", keys["pub"]).rc == 0
    r = cli("install", b, "--cache-root", dst, "--trust", keys["pub"])
    assert r.rc == 0 and "already installed" in r.out
    # a server compiled extra files into a unit: still "present" (superset)
    victim = next(dst.rglob("rank_0_0/backbone/computation_graph.py"))
    (victim.parent / "extra.bin").write_bytes(b"x")
    assert "already installed" in cli("install", b, "--cache-root", dst, "--trust", keys["pub"]).out
    victim.write_bytes(b"changed")
    r = cli("install", b, "--cache-root", dst, "--trust", keys["pub"], "--keep-changed")
    assert r.rc == 4 and "--keep-changed" in one_error_line(r.err), r
    assert victim.read_bytes() == b"changed"
    r = cli("install", b, "--cache-root", dst, "--trust", keys["pub"])
    assert r.rc == 0, r
    replaced = [ln for ln in r.err.splitlines() if ln.startswith("replaced ")]
    assert len(replaced) == 1 and "rank_0_0" in replaced[0], r.err
    assert tree_snapshot(dst) == tree_snapshot(src)  # the extra file went with the old unit
    assert not [p for p in dst.iterdir() if p.name.startswith(".cachetool")]
    victim.write_bytes(b"changed again")
    assert cli("install", b, "--cache-root", dst, "--trust", keys["pub"], "--keep-changed", "--force").rc == 0
    assert tree_snapshot(dst) == tree_snapshot(src)


def test_packed_bundle_api_for_push(tmp_path, keys):
    """What a store push uses: same manifest from pack() and from a .ctb; blob paths hold the stored bytes."""
    import hashlib

    src = make_native_tree(tmp_path / "src")
    with pack(src, sign_key=keys["priv"]) as p1, pack(src, sign_key=keys["priv"]) as p2:
        assert p1.manifest_digest == p2.manifest_digest  # deterministic: a re-push of the same tree is a no-op
        write_ctb(p1, tmp_path / "b.ctb")
        with open_ctb(tmp_path / "b.ctb") as c:
            assert c.manifest_bytes() == p1.manifest_bytes()
            assert c.signature_bytes() == p1.signature_bytes()
            assert (
                c.platform
                == p1.platform
                == platform_key(p1.manifest.fingerprint)
                == "cpu-{}-torch{}".format(os.uname().machine, p1.manifest.fingerprint["torch"])
            )
            assert c.stored_size == p1.stored_size
            for blob in c.blobs:
                data = c.blob_path(blob).read_bytes()
                assert len(data) == blob.stored_size
                assert "sha256:" + hashlib.sha256(data).hexdigest() == blob.stored_digest
                assert data == p1.blob_path(blob).read_bytes()
        # PackedBundle is a BundleSource: installs directly
        res = install_bundle(p1, tmp_path / "d", InstallOptions(trust=[keys["pub"]]))
        assert len(res.units_installed) == 2 and res.key_id == keys["id"]
        assert tree_snapshot(tmp_path / "d") == tree_snapshot(src)


def test_unpacked_save_format(tmp_path, keys, cli):
    src = make_native_tree(tmp_path / "src", save_format="unpacked")
    cli("pack", src, "-o", tmp_path / "b.ctb", "--sign-key", keys["priv"])
    info = json.loads(cli("inspect", tmp_path / "b.ctb", "--json").out)
    assert info["save_format"] == "unpacked"
    assert cli("install", tmp_path / "b.ctb", "--cache-root", tmp_path / "d", "--trust", keys["pub"]).rc == 0
    assert tree_snapshot(tmp_path / "d") == tree_snapshot(src)


def test_keygen_sign_verify(tmp_path, cli, keys):
    r = cli("keygen", "-o", tmp_path / "k")
    assert r.rc == 0, r
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o600
    assert (tmp_path / "k.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    r = cli("keygen", "-o", tmp_path / "k")
    assert r.rc == 2 and "already exists" in one_error_line(r.err)
    src = make_native_tree(tmp_path / "src", layers=3)
    b = tmp_path / "b.ctb"
    assert cli("pack", src, "-o", b).rc == 0  # unsigned
    r = cli("verify", b, "--trust", tmp_path / "k.pub")
    assert r.rc == 3 and "not signed" in one_error_line(r.err)
    assert cli("sign", b, "--sign-key", tmp_path / "k").rc == 0
    r = cli("verify", b, "--trust", tmp_path / "k.pub")
    assert r.rc == 0 and "OK" in r.out, r
    # a second signature: either key verifies
    assert cli("sign", b, "--sign-key", keys["priv"]).rc == 0
    assert cli("verify", b, "--trust", keys["pub"]).rc == 0
    assert cli("verify", b, "--trust", tmp_path / "k.pub").rc == 0


def test_trusted_keys_from_env_and_config_dir(tmp_path, keys, cli, monkeypatch):
    src = make_native_tree(tmp_path / "src", layers=3)
    b = tmp_path / "b.ctb"
    cli("pack", src, "-o", b, "--sign-key", keys["priv"])
    r = cli("verify", b)
    assert r.rc == 2 and "no trusted keys" in one_error_line(r.err)  # a configuration mistake, not a refusal
    monkeypatch.setenv("CACHETOOL_TRUSTED_KEYS", f"{keys['other_pub']}:{keys['pub']}")
    assert cli("verify", b).rc == 0
    monkeypatch.delenv("CACHETOOL_TRUSTED_KEYS")
    d = tmp_path / "config" / "trusted_keys"
    d.mkdir(parents=True)
    shutil.copy(keys["pub"], d / "ci.pub")
    assert cli("verify", b).rc == 0
    assert cli("install", b, "--cache-root", tmp_path / "d").rc == 0
    # an explicit --trust overrides the pinned set
    r = cli("verify", b, "--trust", keys["other_pub"])
    assert r.rc == 3 and "untrusted key" in one_error_line(r.err)


@pytest.mark.parametrize("on_miss", ["fail", "continue"])
@pytest.mark.parametrize("trust", ["empty-folder", "none-configured"])
def test_a_missing_trust_configuration_is_a_usage_error_that_continue_does_not_cover(
    tmp_path, keys, cli, trust, on_miss
):
    """`pull --trust EMPTY_FOLDER` (or no key configured anywhere) was a refusal, exit 3, and exit 0 under
    --on-miss continue: the server started cold and nobody noticed an unmounted key. It is a configuration mistake
    like a missing key file: exit 2 whatever --on-miss says, nothing written. Keys configured but not the signer's
    stay a refusal (exit 3)."""
    b = tmp_path / "b.ctb"
    assert cli("pack", make_native_tree(tmp_path / "src", layers=3), "-o", b, "--sign-key", keys["priv"]).rc == 0
    ref = f"file://{tmp_path}/store/t:v1"
    assert cli("push", b, ref).rc == 0
    (tmp_path / "keys").mkdir()
    flags = ["--trust", tmp_path / "keys"] if trust == "empty-folder" else []
    root = tmp_path / "root"
    for verb, source in (("pull", ref), ("install", b)):
        extra = ["--on-miss", on_miss] if verb == "pull" else []
        r = cli(verb, source, "--cache-root", root, *flags, *extra)
        assert r.rc == 2, (verb, r)
        line = one_error_line(r.err)
        assert "no trusted keys" in line and (trust != "empty-folder" or str(tmp_path / "keys") in line), line
        assert not root.exists(), verb
        assert verb != "pull" or "pull: outcome=usage-error " in r.err, r
    r = cli("pull", ref, "--cache-root", root, "--trust", keys["other_pub"], "--on-miss", on_miss)
    assert r.rc == (3 if on_miss == "fail" else 0), r


def test_insecure_skip_verify_warns_loudly(tmp_path, cli):
    src = make_native_tree(tmp_path / "src", layers=3)
    b = tmp_path / "b.ctb"
    cli("pack", src, "-o", b)
    r = cli("install", b, "--cache-root", tmp_path / "d", "--insecure-skip-verify")
    assert r.rc == 0, r
    assert "WARNING" in r.err and "NOT checked" in r.err
    assert "SIGNATURE NOT VERIFIED" in r.out


def test_python_m_entrypoint_exit_code(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "cachetool", "install", str(tmp_path / "none.ctb"), "--cache-root", str(tmp_path / "d")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 5 and r.stderr.strip().startswith("error: bundle file") and r.stderr.count("\n") == 1


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_pack_refuses_links_and_special_files(tmp_path, cli, kind):
    src = make_native_tree(tmp_path / "src", layers=2)
    d = next(src.rglob("backbone"))
    if kind == "symlink":
        os.symlink("/etc/passwd", d / "link")
    else:
        os.mkfifo(d / "fifo")
    r = cli("pack", src, "-o", tmp_path / "b.ctb")
    assert r.rc == 2 and ("symlink" in one_error_line(r.err) or "regular file" in r.err), r
    assert not (tmp_path / "b.ctb").exists()


def test_pack_missing_path_and_unknown_tree(tmp_path, cli):
    r = cli("pack", tmp_path / "nope", "-o", tmp_path / "b.ctb")
    assert r.rc == 5 and "does not exist" in one_error_line(r.err)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "file.txt").write_text("x")
    r = cli("pack", tmp_path / "empty", "-o", tmp_path / "b.ctb")
    assert r.rc == 2 and "not a recognised cache" in one_error_line(r.err)
