"""Commit: each staged unit renamed into place relative to parent folders opened with ``O_NOFOLLOW``; a unit being
replaced is exchanged atomically (readers see the old files or the new, never a mix). The staged tree is durable
before this starts (:func:`cachetool.install.fs.sync_tree`); each parent folder is fsynced after its rename, so a
power cut leaves a unit whole or absent, never named with files that were not yet written."""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

from cachetool.bundle.manifest import Manifest
from cachetool.errors import ConflictError, UnsafeDestinationError
from cachetool.install import fs
from cachetool.install.plan import Plan


def commit(plan: Plan, manifest: Manifest, staging: Path, root_fd: int, root: Path) -> None:
    """Rename each staged unit into place, relative to parent folders opened with O_NOFOLLOW. A unit being replaced
    is swapped with the staged one atomically (readers see the old files or the new, never a mix) and the old one
    is deleted with the staging folder; where the swap is not available it is moved aside first. Then each parent
    folder that a rename changed is fsynced, once however many units it holds."""
    dir_modes = {d.path: d.mode for d in manifest.dirs}
    tree_fd = os.open(staging / "tree", fs.DIR_FLAGS)
    aside = staging / "replaced"
    aside.mkdir()
    aside_fd = os.open(aside, fs.DIR_FLAGS)
    parents: dict[str, tuple[int, int]] = {}  # parent folder -> (staged fd, destination fd)
    try:
        for i, u in enumerate(sorted(plan.units, key=lambda u: u.path)):
            parent, name = posixpath.split(u.path)
            if parent not in parents:
                src_fd = fs.open_dir_chain(tree_fd, parent, False, {})
                try:
                    parents[parent] = src_fd, fs.open_dir_chain(root_fd, parent, True, dir_modes)  # type: ignore[assignment]  # baseline (issue 46)
                except BaseException:
                    os.close(src_fd)  # type: ignore[arg-type]  # baseline (issue 46)
                    raise
            _rename_unit(u.path, name, *parents[parent], aside_fd, f"old-{i}", plan, root)
        for _src_fd, dst_fd in parents.values():
            os.fsync(dst_fd)
    finally:
        for fd in [tree_fd, aside_fd, *(fd for pair in parents.values() for fd in pair)]:
            os.close(fd)


def _rename_unit(
    path: str, name: str, src_fd: int, dst_fd: int, aside_fd: int, aside_name: str, plan: Plan, root: Path
) -> None:
    """Rename the staged unit ``name`` into ``dst_fd``, swapping it with a unit there that it replaces."""
    try:
        st = os.lstat(name, dir_fd=dst_fd)
    except FileNotFoundError:
        st = None
    if st is not None and (stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode)):
        raise UnsafeDestinationError(f"{path!r} in the cache root is a symlink or file", path=path)
    if st is not None and path not in plan.replace:
        raise ConflictError(f"{path} appeared in {root} during the install; rerun", path=path)
    if st is not None and fs.exchange(src_fd, dst_fd, name):
        return
    if st is not None:
        os.rename(name, aside_name, src_dir_fd=dst_fd, dst_dir_fd=aside_fd)
    os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
