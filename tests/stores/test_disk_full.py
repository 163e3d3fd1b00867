"""A full disk, for every verb that writes (issue 45, items 1-3): exit 9, one ``error:`` line naming the folder or file
whose file system is full, and nothing left that the verb made (no root, no orphan blob, no partial file).

The full disk is a real one: a small tmpfs mounted for the test (skipped where mounting is not allowed; it runs as
root here). Before: ``push`` to a full folder store exited 6 and left its blobs; ``pack -o`` said ``pack:: No space
left on device`` without a path; a ``warm`` exited 1 with the compiler backend's repr and left the root it made."""

from __future__ import annotations

import os

import pytest

from cachetool.bundle.packing import pack
from cachetool.transfer.push import push
from tests.cache_trees import make_native_tree


def _big_tree(tmp_path):
    """A native cache of about 3 MiB that does not compress (random bytes): more than the small disk holds."""
    src = make_native_tree(tmp_path / "src", ranks=("rank_0_0",), layers=2)
    rank = next(src.glob("torch_compile_cache/*/rank_0_0/backbone"))
    for i in range(3):
        (rank / f"random_{i}").write_bytes(os.urandom(1 << 20))
    return src


def _files(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_pack_to_a_full_disk_names_the_file_and_leaves_nothing(tmp_path, small_disk, cli):
    """Before: exit 9 with ``error: pack:: No space left on device``: no path."""
    out = small_disk / "b.ctb"
    r = cli("pack", _big_tree(tmp_path), "-o", out)
    assert r.rc == 9, r
    line = r.error_line()
    assert f"write {out}: the file system of {small_disk} is full" in line and "nothing was written" in line, line
    assert list(small_disk.iterdir()) == []


def test_pack_with_a_full_temporary_folder_names_it_and_leaves_nothing(tmp_path, small_disk, cli, monkeypatch):
    """The blobs are compressed into a temporary folder first: TMPDIR on the full disk is named, and emptied."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(small_disk))
    r = cli("pack", _big_tree(tmp_path), "-o", tmp_path / "b.ctb")
    assert r.rc == 9, r
    line = r.error_line()
    assert f"pack: the file system of {small_disk} is full" in line and "TMPDIR" in line, line
    assert list(small_disk.iterdir()) == [] and not (tmp_path / "b.ctb").exists()


def test_push_to_a_full_folder_store_is_exit_9_and_leaves_no_orphan_blob(tmp_path, small_disk, cli, keys):
    """Before: exit 6 (a store error) and the blobs written before the disk filled stayed (3 orphans). The store
    holds a bundle already: afterwards it holds exactly what it held."""
    store = small_disk / "store"
    with pack(make_native_tree(tmp_path / "first", ranks=("rank_0_0",), layers=2), sign_key=keys["key"]) as b:
        push(b, f"file://{store}/llama:v0")
    before = _files(store)
    r = cli("push", _big_tree(tmp_path), f"file://{store}/llama:v1", "--sign-key", keys["priv"])
    assert r.rc == 9, r
    line = r.error_line()
    assert f"the file system of {store} is full" in line and "blobs/sha256/" in line, line
    assert _files(store) == before


def test_pull_into_a_full_disk_is_exit_9_and_leaves_nothing(tmp_path, small_disk, cli, keys):
    store = f"file://{tmp_path}/store"
    with pack(_big_tree(tmp_path), sign_key=keys["key"]) as b:
        push(b, f"{store}/llama:v1")
    root = small_disk / "root"
    r = cli("pull", f"{store}/llama:v1", "--cache-root", root, "--trust", keys["pub"])
    assert r.rc == 9, r
    assert f"the file system of {root} is full" in r.error_line(), r
    assert list(small_disk.iterdir()) == []


def test_install_into_a_full_disk_is_exit_9_and_keeps_what_was_there(tmp_path, small_disk, cli, keys):
    """A root that existed keeps what it held (here a file of the user's) and nothing of the install."""
    with pack(_big_tree(tmp_path), sign_key=keys["key"]) as b:
        from cachetool.bundle.ctb import write_ctb

        bundle = write_ctb(b, tmp_path / "b.ctb")
    root = small_disk / "root"
    root.mkdir()
    (root / "mine.txt").write_text("kept")
    r = cli("install", bundle, "--cache-root", root, "--trust", keys["pub"])
    assert r.rc == 9, r
    assert f"the file system of {root} is full" in r.error_line(), r
    assert _files(small_disk) == ["root/mine.txt"] and [p.name for p in root.iterdir()] == ["mine.txt"]


@pytest.mark.slow
@pytest.mark.parametrize("there", [False, True], ids=["root-it-creates", "root-that-was-there"])
def test_warm_on_a_full_disk_is_exit_9_naming_the_root_and_leaves_nothing(small_disk, there):
    """Before: exit 1, ``unexpected BackendCompilerFailed: backend='<compiler.piecewise_backend.PiecewiseBackend
    object at 0x…>'`` (the OSError only under DEBUG), and the root it made left on the full disk."""
    from tests.cli_calls import one_error_line, run_cli

    root = small_disk / "root"
    if there:
        root.mkdir()
        (root / "mine.txt").write_text("kept")
    r = run_cli("warm", "--model", "tiny", "--device", "cpu", "--cache-root", str(root))
    assert r.returncode == 9, r.stderr[-3000:]
    line = one_error_line(r.stderr)
    assert f"warm: the file system of cache root {root} is full" in line and "removed" in line, line
    assert _files(small_disk) == (["root/mine.txt"] if there else []), _files(small_disk)
