"""Every bad input is refused with a non-zero exit, one error line, and nothing in the cache root.

Hostile manifests are signed with the *trusted* key: path, size and format checks must hold even against a
signer gone bad (or a leaked key), not only against tampering in transit.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from cachetool.bundle.manifest import canonical_json
from tests.cache_trees import (
    blob_entry,
    dir_is_empty_or_absent,
    make_native_tree,
    manifest_obj,
    sign_bytes,
    write_raw_ctb,
)
from tests.cli_calls import one_error_line


@pytest.fixture
def good_ctb(tmp_path, keys, cli):
    src = make_native_tree(tmp_path / "src", layers=4)
    out = tmp_path / "good.ctb"
    assert cli("pack", src, "-o", out, "--sign-key", keys["priv"]).rc == 0
    return out


def _members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tf:
        return {m.name: m for m in tf.getmembers()}


def _install(cli, keys, bundle, root, *extra):
    return cli("install", bundle, "--cache-root", root, "--trust", keys["pub"], *extra)


@pytest.fixture(params=["absent", "empty"])
def root(request, tmp_path):
    r = tmp_path / "cache-root"
    if request.param == "empty":
        r.mkdir()
    return r


@pytest.fixture(params=["memory", "files"])
def blobs_in(request, monkeypatch):
    """A blob refusal holds for a small blob (read, checked and expanded in memory) and a large one (fetched into a
    file and expanded from it): the installer's two ways to a file."""
    if request.param == "files":
        from cachetool.install import blobs

        monkeypatch.setattr(blobs, "IN_MEMORY_MAX", 0)
    return request.param


def _refused(r, root, code, *words):
    assert r.rc == code, r
    line = one_error_line(r.err)
    for w in words:
        assert w in line, line
    assert dir_is_empty_or_absent(root), list(root.rglob("*"))
    return line


# ---------------------------------------------------------------------------------------------- tampering
@pytest.mark.usefixtures("blobs_in")
def test_changed_blob_byte(good_ctb, keys, cli, root):
    m = max((m for n, m in _members(good_ctb).items() if n.startswith("blobs/")), key=lambda m: m.size)
    data = bytearray(good_ctb.read_bytes())
    data[m.offset_data + m.size // 2] ^= 0x01
    good_ctb.write_bytes(bytes(data))
    _refused(_install(cli, keys, good_ctb, root), root, 3, "tampered")
    assert cli("verify", good_ctb, "--trust", keys["pub"]).rc == 3


def test_changed_manifest_byte(good_ctb, keys, cli, root):
    m = _members(good_ctb)["manifest.json"]
    data = bytearray(good_ctb.read_bytes())
    i = data.index(b'"mode":420', m.offset_data)
    data[i + 9] = ord("2")  # 420 -> 422: still valid JSON, still a valid mode
    good_ctb.write_bytes(bytes(data))
    _refused(_install(cli, keys, good_ctb, root), root, 3, "different manifest")


def test_untrusted_signer(tmp_path, keys, cli, root):
    src = make_native_tree(tmp_path / "src", layers=2)
    cli("pack", src, "-o", tmp_path / "b.ctb", "--sign-key", keys["other_priv"])
    _refused(_install(cli, keys, tmp_path / "b.ctb", root), root, 3, "untrusted key")


def test_no_signature(tmp_path, keys, cli, root):
    src = make_native_tree(tmp_path / "src", layers=2)
    cli("pack", src, "-o", tmp_path / "b.ctb")
    _refused(_install(cli, keys, tmp_path / "b.ctb", root), root, 3, "not signed")


def test_signature_with_garbage_sig(good_ctb, tmp_path, keys, cli, root):
    from cachetool.bundle.ctb import open_ctb

    with open_ctb(good_ctb) as b:
        env = json.loads(b.signature_bytes())
        env["signatures"][0]["sig"] = env["signatures"][0]["sig"][:-4] + "AAA="
        mb, blobs = b.manifest_bytes(), {x.digest[7:]: b.blob_path(x).read_bytes() for x in b.blobs}
    bad = write_raw_ctb(tmp_path / "bad.ctb", mb, canonical_json(env), blobs)
    _refused(_install(cli, keys, bad, root), root, 3, "does not verify")


# ---------------------------------------------------------------------------------------------- hostile manifests
def _signed_ctb(tmp_path, keys, obj, stored, name="h.ctb", extra=()):
    mb = canonical_json(obj)
    return write_raw_ctb(tmp_path / name, mb, sign_bytes(mb, keys["key"]), stored, list(extra))


@pytest.mark.parametrize(
    "path",
    [
        "torch_compile_cache/h/rank_0_0/../../../../evil",
        "torch_compile_cache/h/rank_0_0/a/../../../../../evil",
        "/tmp/evil",
        "torch_compile_cache/h/rank_0_0/./x",
        "torch_compile_cache/h/rank_0_0//x",
        "torch_compile_cache\\h\\rank_0_0\\..\\..\\x",
    ],
)
def test_unsafe_file_paths(tmp_path, keys, cli, root, path):
    obj, stored = manifest_obj([(path, b"pwned")])
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3, "manifest")
    assert not (tmp_path / "evil").exists() and not Path("/tmp/evil").exists()


@pytest.mark.parametrize("unit", ["..", "../outside", "/abs/unit", ".cachetool-staging-x"])
def test_unsafe_unit_paths(tmp_path, keys, cli, root, unit):
    obj, stored = manifest_obj([(f"{unit}/f", b"pwned")], unit=unit)
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3)


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "chardev", "fifo", "dir"])
def test_link_and_device_members(good_ctb, tmp_path, keys, cli, root, kind):
    from cachetool.bundle.ctb import open_ctb

    with open_ctb(good_ctb) as b:
        mb, sig = b.manifest_bytes(), b.signature_bytes()
        blobs = {x.digest[7:]: b.blob_path(x).read_bytes() for x in b.blobs}
    ti = tarfile.TarInfo("blobs/sha256/" + "0" * 64 + ".zst")
    ti.type = {
        "symlink": tarfile.SYMTYPE,
        "hardlink": tarfile.LNKTYPE,
        "chardev": tarfile.CHRTYPE,
        "fifo": tarfile.FIFOTYPE,
        "dir": tarfile.DIRTYPE,
    }[kind]
    ti.linkname = "/etc/passwd" if kind in ("symlink", "hardlink") else ""
    bad = write_raw_ctb(tmp_path / "bad.ctb", mb, sig, blobs, [ti])
    _refused(_install(cli, keys, bad, root), root, 3, "regular files only")


@pytest.mark.parametrize("mode", [0o120777, 0o020644, 0o4755, 0o1777, -1, "0644"])
def test_link_device_or_special_modes_in_manifest(tmp_path, keys, cli, root, mode):
    obj, stored = manifest_obj([("torch_compile_cache/h/rank_0_0/f", b"data")])
    obj["files"][0]["mode"] = mode
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3, "mode")


@pytest.mark.parametrize("field", [("type", "symlink"), ("link", "/etc/passwd"), ("target", "x")])
def test_unknown_entry_fields(tmp_path, keys, cli, root, field):
    obj, stored = manifest_obj([("torch_compile_cache/h/rank_0_0/f", b"data")])
    obj["files"][0][field[0]] = field[1]
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3, "fields")


def test_duplicate_paths(tmp_path, keys, cli, root):
    p = "torch_compile_cache/h/rank_0_0/f"
    obj, stored = manifest_obj([(p, b"one"), (p, b"two")])
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3, "twice")


def test_file_under_file(tmp_path, keys, cli, root):
    obj, stored = manifest_obj(
        [("torch_compile_cache/h/rank_0_0/f", b"one"), ("torch_compile_cache/h/rank_0_0/f/g", b"two")]
    )
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3, "under the file")


U = "torch_compile_cache/h/rank_0_0"


@pytest.mark.parametrize(
    "files,dirs,words",
    [
        ([(f"{U}/f", b"1")], [f"{U}/f/d"], "under the file"),
        (
            [("torch_compile_cache/h/rank_9_0/f", b"1")],
            [],
            "file 'torch_compile_cache/h/rank_9_0/f' lies in no install",
        ),
        ([(f"{U}/f", b"1")], ["elsewhere/d"], "folder 'elsewhere/d' lies in no install unit"),
        ([(U, b"1")], [], "install unit is a file"),
    ],
    ids=["folder-under-file", "file-outside-units", "folder-outside-units", "unit-is-a-file"],
)
def test_the_tree_invariant(files, dirs, words):
    from cachetool.bundle.manifest import Manifest
    from cachetool.errors import ManifestError

    obj, _ = manifest_obj(files, dirs=[{"path": d, "mode": 0o755} for d in dirs])
    with pytest.raises(ManifestError, match=words):
        Manifest.from_bytes(canonical_json(obj))


def test_the_tree_invariant_holds_for_deep_paths_and_folders_above_units():
    from cachetool.bundle.manifest import Manifest

    deep = f"{U}/" + "d/" * 1500 + "f"  # 3,000 components under the unit: checked without recursion
    obj, _ = manifest_obj([(deep, b"1"), (f"{U}/g", b"2")], dirs=[{"path": "torch_compile_cache", "mode": 0o755}])
    assert {f.path for f in Manifest.from_bytes(canonical_json(obj)).files} == {deep, f"{U}/g"}


def test_duplicate_json_keys(tmp_path, keys, cli, root):
    obj, stored = manifest_obj([("torch_compile_cache/h/rank_0_0/f", b"data")])
    mb = canonical_json(obj).replace(b'{"blobs"', b'{"schema":1,"blobs"', 1)
    bad = write_raw_ctb(tmp_path / "d.ctb", mb, sign_bytes(mb, keys["key"]), stored)
    _refused(_install(cli, keys, bad, root), root, 3, "twice")


def test_non_canonical_manifest(tmp_path, keys, cli, root):
    obj, stored = manifest_obj([("torch_compile_cache/h/rank_0_0/f", b"data")])
    mb = json.dumps(obj, indent=1).encode()
    bad = write_raw_ctb(tmp_path / "n.ctb", mb, sign_bytes(mb, keys["key"]), stored)
    _refused(_install(cli, keys, bad, root), root, 3, "canonical")


@pytest.mark.parametrize("schema", [2, 0, "1", None])
def test_unknown_schema_version(tmp_path, keys, cli, root, schema):
    obj, stored = manifest_obj([("torch_compile_cache/h/rank_0_0/f", b"data")])
    obj["schema"] = schema
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3, "schema")


# ---------------------------------------------------------------------------------------------- sizes
@pytest.mark.usefixtures("blobs_in")
def test_size_lie_smaller(tmp_path, keys, cli, root):
    """Manifest (file and blob) claim 10 bytes; the content is 5000."""
    content = b"A" * 5000
    obj, stored = manifest_obj([("torch_compile_cache/h/rank_0_0/f", content)])
    obj["files"][0]["size"] = obj["blobs"][0]["size"] = 10
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3, "size")


@pytest.mark.usefixtures("blobs_in")
def test_size_lie_larger(tmp_path, keys, cli, root):
    from tests.cache_trees import zst

    content = b"B" * 5000
    obj, stored = manifest_obj([("torch_compile_cache/h/rank_0_0/f", content)])
    obj["files"][0]["size"] = obj["blobs"][0]["size"] = 6000
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3, "size")
    # the same lie without a content size in the zstd frame: caught after decompression
    b, s = blob_entry(content, stored=zst(content, content_size=False), size=6000)
    obj["blobs"] = [b]
    obj["files"][0]["digest"] = b["digest"]
    _refused(
        _install(cli, keys, _signed_ctb(tmp_path, keys, obj, {b["digest"][7:]: s}, "b2.ctb"), root), root, 3, "6000"
    )


def test_file_size_differs_from_blob(tmp_path, keys, cli, root):
    obj, stored = manifest_obj([("torch_compile_cache/h/rank_0_0/f", b"C" * 100)])
    obj["files"][0]["size"] = 99
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3, "declares")


@pytest.mark.usefixtures("blobs_in")
def test_stored_size_lie(tmp_path, keys, cli, root):
    obj, stored = manifest_obj([("torch_compile_cache/h/rank_0_0/f", b"D" * 100)])
    obj["blobs"][0]["stored_size"] += 7
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3, "stored")


@pytest.mark.parametrize("content_size_in_frame", [True, False])
@pytest.mark.usefixtures("blobs_in")
def test_decompression_bomb(tmp_path, keys, cli, root, content_size_in_frame):
    import zstandard

    # 256 MiB of zeros in ~8 KiB; the manifest declares 4 KiB (digest of a real 4 KiB content)
    cctx = zstandard.ZstdCompressor(level=19, write_content_size=content_size_in_frame)
    if content_size_in_frame:
        bomb = cctx.compress(b"\0" * (256 << 20))
    else:
        chunks = io.BytesIO()
        with cctx.stream_writer(chunks, closefd=False) as w:
            for _ in range(256):
                w.write(b"\0" * (1 << 20))
        bomb = chunks.getvalue()
    assert len(bomb) < 64 << 10
    obj, _ = manifest_obj([("torch_compile_cache/h/rank_0_0/f", b"\0" * 4096)])
    b, s = blob_entry(b"\0" * 4096, stored=bomb)
    obj["blobs"] = [b]
    r = _install(cli, keys, _signed_ctb(tmp_path, keys, obj, {b["digest"][7:]: s}), root)
    _refused(r, root, 3, "size" if content_size_in_frame else "bomb")


@pytest.mark.parametrize("cut", ["half", "in-last-member", "after-last-member", "last-byte"])
def test_truncated_file(good_ctb, keys, cli, root, cut):
    data = good_ctb.read_bytes()
    last = max(_members(good_ctb).values(), key=lambda m: m.offset_data)
    n = {
        "half": len(data) // 2,
        "in-last-member": last.offset_data + last.size // 2,
        "after-last-member": last.offset_data + last.size,
        "last-byte": len(data) - 1,
    }[cut]
    good_ctb.write_bytes(data[:n])
    _refused(_install(cli, keys, good_ctb, root), root, 3, "truncated")


def test_not_a_bundle(tmp_path, keys, cli, root):
    (tmp_path / "x.ctb").write_bytes(b"hello, not a tar" * 100)
    _refused(_install(cli, keys, tmp_path / "x.ctb", root), root, 3)


@pytest.mark.usefixtures("blobs_in")
def test_missing_blob_member(tmp_path, keys, cli, root):
    obj, stored = manifest_obj([("torch_compile_cache/h/rank_0_0/f", b"E" * 10)])
    _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, {}), root), root, 3, "missing")


def test_unexpected_member(good_ctb, tmp_path, keys, cli, root):
    ti = tarfile.TarInfo("../../evil")
    ti.size = 1
    with tarfile.open(good_ctb) as tf:
        names = tf.getnames()
    from cachetool.bundle.ctb import open_ctb

    with open_ctb(good_ctb) as b:
        mb, sig = b.manifest_bytes(), b.signature_bytes()
        blobs = {x.digest[7:]: b.blob_path(x).read_bytes() for x in b.blobs}
    assert len(names) == len(blobs) + 2
    bad = write_raw_ctb(tmp_path / "bad.ctb", mb, sig, blobs, [ti])
    _refused(_install(cli, keys, bad, root), root, 3, "unexpected member")


# ---------------------------------------------------------------------------------------------- destination
@pytest.mark.parametrize("where", ["torch_compile_cache", "hash"])
def test_symlink_in_destination_not_followed(good_ctb, tmp_path, keys, cli, where):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    root.mkdir()
    if where == "torch_compile_cache":
        os.symlink(outside, root / "torch_compile_cache")
    else:
        from cachetool.bundle.ctb import open_ctb

        with open_ctb(good_ctb) as b:
            h = b.manifest.keys[0].hash
        (root / "torch_compile_cache").mkdir()
        os.symlink(outside, root / "torch_compile_cache" / h)
    r = _install(cli, keys, good_ctb, root)
    assert r.rc == 3, r
    assert "symlink" in one_error_line(r.err)
    assert not any(outside.iterdir())
    assert not [p for p in root.iterdir() if p.name.startswith(".cachetool")]


# ---------------------------------------------------------------------------------------------- names
@pytest.mark.parametrize("char", ["\x7f", "\x85", "\x9b", "\x1b", "\u202e", "\u2066", "\u2028", "\udc80"])
def test_control_characters_in_paths(tmp_path, keys, cli, root, char):
    """Before: DEL, NEL and the 8-bit CSI (and the bidi overrides) passed the check, so a signed bundle with such
    a file name installed with exit 0 and put a terminal escape into ``inspect`` and ``diff`` output."""
    obj, stored = manifest_obj([(f"torch_compile_cache/h/rank_0_0/a{char}[31mb", b"data")])
    bundle = _signed_ctb(tmp_path, keys, obj, stored)
    line = _refused(_install(cli, keys, bundle, root), root, 3, "control character", f"U+{ord(char):04X}")
    assert char not in line
    r = cli("inspect", bundle)
    assert r.rc == 3 and char not in r.out + r.err, r


@pytest.mark.parametrize("char", ["\x7f", "\x85", "\x9b", "\u202e"])
def test_pack_refuses_control_characters_in_names(tmp_path, keys, cli, char):
    src = make_native_tree(tmp_path / "src", layers=2)
    rank = next(src.glob("torch_compile_cache/*/rank_0_0/backbone"))
    (rank / f"evil{char}name").write_bytes(b"x")
    r = cli("pack", src, "-o", tmp_path / "b.ctb", "--sign-key", keys["priv"])
    assert r.rc == 3 and "cannot pack" in one_error_line(r.err) and f"U+{ord(char):04X}" in r.err, r
    assert char not in r.err and not (tmp_path / "b.ctb").exists()


def test_names_longer_than_the_file_system_allows(tmp_path, keys, cli, root):
    """Before: a 4,000-character name reached the file system: exit 1 "unexpected" with the whole path in the
    message. Now it is a verification refusal (exit 3) with the path cut short, before anything is fetched."""
    long = "torch_compile_cache/h/rank_0_0/" + "n" * 3900
    obj, stored = manifest_obj([(long, b"data")])
    line = _refused(_install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root), root, 3, "255")
    assert len(line) < 300 and "n" * 100 not in line


def test_path_too_long_for_the_cache_roots_file_system(tmp_path, keys, cli):
    """Every name fits, but the staged path passes PATH_MAX under a deep cache root: refused before any fetch
    (exit 3, short message) instead of exit 1 with the whole path."""
    deep = "/".join(["d" * 250] * 15)
    obj, stored = manifest_obj([(f"torch_compile_cache/h/rank_0_0/{deep}/f", b"data")])
    root = tmp_path / ("r" * 200) / ("r" * 200)
    r = _install(cli, keys, _signed_ctb(tmp_path, keys, obj, stored), root)
    assert r.rc == 3, r
    line = one_error_line(r.err)
    assert "too long to install" in line and "d" * 100 not in line, line
    assert not (tmp_path / ("r" * 200)).exists()
