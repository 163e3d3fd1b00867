"""Commit: each staged unit renamed into place relative to parent folders opened with ``O_NOFOLLOW``; a unit being
replaced is exchanged atomically (readers see the old files or the new, never a mix)."""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

from cachetool.errors import ConflictError, UnsafeDestinationError
from cachetool.install import fs
from cachetool.install.plan import Plan
from cachetool.bundle.manifest import Manifest


def commit(plan: Plan, manifest: Manifest, staging: Path, root_fd: int, root: Path) -> None:
    """Rename each staged unit into place, relative to parent folders opened with O_NOFOLLOW. A unit being replaced
    is swapped with the staged one atomically (readers see the old files or the new, never a mix) and the old one
    is deleted with the staging folder; where the swap is not available it is moved aside first."""
    dir_modes = {d.path: d.mode for d in manifest.dirs}
    tree_fd = os.open(staging / "tree", fs.DIR_FLAGS)
    aside = staging / "replaced"
    aside.mkdir()
    aside_fd = os.open(aside, fs.DIR_FLAGS)
    try:
        for i, u in enumerate(sorted(plan.units, key=lambda u: u.path)):
            parent, name = posixpath.split(u.path)
            src_fd = fs.open_dir_chain(tree_fd, parent, False, {})
            dst_fd = fs.open_dir_chain(root_fd, parent, True, dir_modes)
            try:
                try:
                    st = os.lstat(name, dir_fd=dst_fd)
                except FileNotFoundError:
                    st = None
                if st is not None and (stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode)):
                    raise UnsafeDestinationError(f"{u.path!r} in the cache root is a symlink or file", path=u.path)
                if st is not None and u.path not in plan.replace:
                    raise ConflictError(f"{u.path} appeared in {root} during the install; rerun", path=u.path)
                if st is not None and fs.exchange(src_fd, dst_fd, name):
                    continue
                if st is not None:
                    os.rename(name, f"old-{i}", src_dir_fd=dst_fd, dst_dir_fd=aside_fd)
                os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            finally:
                os.close(src_fd)
                os.close(dst_fd)
    finally:
        os.close(tree_fd)
        os.close(aside_fd)
