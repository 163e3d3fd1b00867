"""Plan, under the root's lock: which units to install (absent), skip (present with the bundle's files) or replace
(present with other files; ``keep_changed``: refused as a miss), and the refusal of paths the root's file system
cannot hold, all before any blob is fetched."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from cachetool.bundle.manifest import FileEntry, Manifest, Unit
from cachetool.bundle.paths import short_path
from cachetool.errors import PathTooLongError, UnitChangedError
from cachetool.install.fs import STAGED_PREFIX_LEN, open_dir_chain, unit_matches


@dataclasses.dataclass
class Plan:
    units: list[Unit]  # to install: absent, or present with other files (then in ``replace``)
    replace: set[str]
    present: list[str]  # present with the bundle's files: skipped
    files: dict[str, list[FileEntry]]  # unit path -> the bundle's files in it


def plan_install(manifest: Manifest, units: list[Unit], root_fd: int, root: Path, keep_changed: bool) -> Plan:
    """Which units to install. A unit whose files all match is skipped (extra files a server added are fine); one
    whose files differ is replaced (``keep_changed``: refused with :class:`UnitChangedError`)."""
    files: dict[str, list[FileEntry]] = {u.path: [] for u in units}
    for f in manifest.files:
        u = manifest.unit_of(f.path)
        if u is not None and u.path in files:
            files[u.path].append(f)
    plan = Plan([], set(), [], files)
    for u in units:
        ufd = open_dir_chain(root_fd, u.path, False, {})
        if ufd is None:
            plan.units.append(u)
            continue
        os.close(ufd)
        if unit_matches(root_fd, u, files[u.path]):
            plan.present.append(u.path)
        elif keep_changed:
            raise UnitChangedError(
                f"{u.path} in {root} has files that differ from the bundle; kept as it is "
                "(--keep-changed): nothing installed",
                path=u.path,
            )
        else:
            plan.units.append(u)
            plan.replace.add(u.path)
    _check_lengths(plan, manifest, root, root_fd)
    return plan


def _check_lengths(plan: Plan, manifest: Manifest, root: Path, root_fd: int) -> None:
    """Refuse, before anything is fetched, a path the cache root's file system cannot hold (one name over its
    NAME_MAX, or the staged path over its PATH_MAX)."""
    try:
        name_max, path_max = os.fpathconf(root_fd, "PC_NAME_MAX"), os.fpathconf(root_fd, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    base = len(os.fsencode(str(root))) + 1 + STAGED_PREFIX_LEN
    for u in plan.units:
        for rel in [u.path, *(f.path for f in plan.files[u.path])]:
            b = rel.encode("utf-8")
            longest = max(len(part) for part in b.split(b"/"))
            if longest > name_max:
                raise PathTooLongError(
                    f"manifest path {short_path(rel)} has a name of {longest} bytes; the file "
                    f"system of {root} allows {name_max}",
                    path=rel,
                )
            if base + len(b) >= path_max:
                raise PathTooLongError(
                    f"manifest path {short_path(rel)} is too long to install under {root} "
                    f"({base + len(b)} bytes staged; the file system allows {path_max - 1})",
                    path=rel,
                )
