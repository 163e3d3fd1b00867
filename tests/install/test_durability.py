"""An install is durable in the standard order: every staged file on disk (one ``syncfs``) before any unit is
renamed into place, then each parent folder a rename changed fsynced; and a bundle of many small blobs, staged in
batches, is still installed whole or not at all."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from cachetool.bundle.ctb import open_ctb, write_ctb
from cachetool.bundle.packing import pack
from cachetool.install import fs, installer
from cachetool.install.options import InstallOptions
from tests.cache_trees import dir_is_empty_or_absent, make_native_tree, tree_snapshot
from tests.cli_calls import one_error_line

RANKS = ("rank_0_0", "rank_1_0")


@pytest.fixture(scope="module")
def many_small(tmp_path_factory, keys):
    """A two-rank tree with 300 small kernel files per rank (more than one staging batch), packed to a .ctb."""
    d = tmp_path_factory.mktemp("many-small")
    src = make_native_tree(d / "src", ranks=RANKS, layers=2)
    for r in RANKS:
        rank = next((src / "torch_compile_cache").iterdir()) / r / "backbone"
        for i in range(300):
            f = rank / "triton_cache" / f"k{i // 5:03d}" / f"kernel_{i}.json"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps({"rank": r, "kernel": i, "num_warps": 4}))
    with pack(src, sign_key=keys["priv"]) as b:
        write_ctb(b, d / "small.ctb")
    return src, d / "small.ctb"


def _real(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def _install(bundle: Path, root: Path, keys) -> None:
    with open_ctb(bundle) as b:
        installer.install_bundle(b, root, InstallOptions(trust=[keys["pub"]], preflight=False))


def test_staged_files_are_on_disk_before_any_rename_and_parents_after(many_small, tmp_path, keys, monkeypatch):
    src, bundle = many_small
    root = tmp_path / "root"
    events: list[tuple] = []
    real_syncfs, real_sync_tree, real_rename, real_fsync = fs.syncfs(), installer.sync_tree, os.rename, os.fsync

    def spy_syncfs(fd):
        events.append(("syncfs", _real(fd)))
        return real_syncfs(fd)

    def sync_tree(top):
        staged = tree_snapshot(top)  # what is on disk when it is made durable: every file, whole
        events.append(("staged", {k: v for k, v in staged.items() if v[0] == "f"}))
        real_sync_tree(top)

    def rename(a, b, **kw):
        events.append(("rename", a, _real(kw["dst_dir_fd"]) if "dst_dir_fd" in kw else b))
        return real_rename(a, b, **kw)

    def fsync(fd):
        events.append(("fsync", _real(fd)))
        return real_fsync(fd)

    if real_syncfs is None:
        pytest.skip("no syncfs on this system (the fallback is tested below)")
    monkeypatch.setattr(fs, "syncfs", lambda: spy_syncfs)
    monkeypatch.setattr(installer, "sync_tree", sync_tree)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "fsync", fsync)
    _install(bundle, root, keys)

    kinds = [e[0] for e in events]
    assert kinds.count("syncfs") == 1
    first_rename = kinds.index("rename")
    assert kinds.index("staged") < kinds.index("syncfs") < first_rename
    staged = events[kinds.index("staged")][1]
    wanted = {f"{u}/{k}": v for u in _units(src) for k, v in tree_snapshot(src / u).items() if v[0] == "f"}
    assert staged == wanted  # all of them, with their content and mode, when the file system was synced
    units_in = {e[2] for e in events if e[0] == "rename" and e[1] in RANKS}
    assert units_in == {str(root / Path(_units(src)[0]).parent)}  # both ranks under one hash folder
    last_rename = max(i for i, e in enumerate(events) if e[0] == "rename")
    assert ("fsync", next(iter(units_in))) in events[last_rename:]  # the renames themselves made durable
    assert tree_snapshot(root) == tree_snapshot(src)


def test_without_syncfs_every_staged_file_is_fsynced_before_any_rename(many_small, tmp_path, keys, monkeypatch):
    src, bundle = many_small
    root = tmp_path / "root"
    events: list[tuple] = []
    real_rename, real_fsync = os.rename, os.fsync
    monkeypatch.setattr(fs, "syncfs", lambda: None)  # a system without syncfs(2)
    monkeypatch.setattr(os, "rename", lambda *a, **kw: (events.append(("rename",)), real_rename(*a, **kw))[1])
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", _real(fd))), real_fsync(fd))[1])
    _install(bundle, root, keys)
    first_rename = next(i for i, e in enumerate(events) if e[0] == "rename")
    synced = {e[1].split("/tree/", 1)[1] for e in events[:first_rename] if e[0] == "fsync" and "/tree/" in e[1]}
    files = {f"{u}/{k}" for u in _units(src) for k, v in tree_snapshot(src / u).items() if v[0] == "f"}
    assert files <= synced
    assert tree_snapshot(root) == tree_snapshot(src)


def test_one_bad_small_blob_among_many_installs_nothing(many_small, tmp_path, keys, cli):
    """The small blobs are staged in batches of 256 over worker threads (here 3 batches); one that fails its check
    stops the install before any unit is renamed: nothing in the root, no staging folder left."""
    src, bundle = many_small
    bad = tmp_path / "bad.ctb"
    data = bytearray(bundle.read_bytes())
    with tarfile.open(bundle) as tf:
        blobs = sorted((m for m in tf.getmembers() if m.name.startswith("blobs/")), key=lambda m: m.offset_data)
    m = blobs[-2]
    data[m.offset_data + m.size - 1] ^= 0xFF
    bad.write_bytes(bytes(data))
    root = tmp_path / "root"
    r = cli("install", bad, "--cache-root", root, "--trust", keys["pub"], "--no-preflight")
    assert r.rc == 3, r
    assert "blob" in one_error_line(r.err)
    assert dir_is_empty_or_absent(root), list(root.rglob("*"))


def _units(src: Path) -> list[str]:
    return sorted(str(p.relative_to(src)) for p in src.glob("torch_compile_cache/*/rank_*"))
