"""What a layout's scan returns, and the tree walk every layout shares (regular files and folders only)."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

from cachetool.errors import UsageError
from cachetool.layouts.entries import KeyFolder, Unit


@dataclasses.dataclass(frozen=True)
class ScannedFile:
    rel: str  # manifest path (relative to the cache root, POSIX)
    abspath: Path
    mode: int
    size: int


@dataclasses.dataclass
class LayoutScan:
    kind: str
    files: list[ScannedFile]
    dirs: list[tuple[str, int]]  # (manifest path, mode)
    units: list[Unit]
    keys: list[KeyFolder]
    ranks: list[str]
    save_format: str | None = None
    fingerprint_hints: dict = dataclasses.field(default_factory=dict)  # e.g. from Triton kernel metadata
    unit_dirs: dict[str, Path] = dataclasses.field(default_factory=dict)  # unit's manifest path -> its folder


def walk_tree(top: Path, rel_prefix: str) -> tuple[list[ScannedFile], list[tuple[str, int]]]:
    """All regular files and folders under ``top`` (inclusive), with manifest paths ``rel_prefix/...``.

    Refuses symlinks, sockets, fifos and devices: a bundle holds regular files only.
    """
    files: list[ScannedFile] = []
    dirs: list[tuple[str, int]] = []
    st = os.lstat(top)
    dirs.append((rel_prefix, (stat.S_IMODE(st.st_mode) & 0o777) | 0o700))
    stack = [(top, rel_prefix)]
    while stack:
        d, rel = stack.pop()
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            r = f"{rel}/{e.name}" if rel else e.name
            st = e.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise UsageError(f"{e.path} is a symlink; bundles hold regular files only")
            if stat.S_ISDIR(st.st_mode):
                dirs.append((r, (stat.S_IMODE(st.st_mode) & 0o777) | 0o700))
                stack.append((Path(e.path), r))
            elif stat.S_ISREG(st.st_mode):
                files.append(ScannedFile(r, Path(e.path), stat.S_IMODE(st.st_mode) & 0o777, st.st_size))
            else:
                raise UsageError(f"{e.path} is not a regular file or folder (device, socket or fifo)")
    return files, dirs
