"""A cache root that a verb is about to write into, checked before the verb spends anything on it: ``warm`` would
otherwise compile for half a minute and then fail inside the compiler with its backend's repr.

Writability is tested by doing it, creating and removing a probe file: ``os.access`` answers for the user's
permissions, not for a read-only mount, and root passes every permission check."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from cachetool.cache_root import CacheRoot
from cachetool.errors import UnwritableRootError, disk_full
from cachetool.exit_codes import DISK_FULL_ERRNOS

PROBE_PREFIX = ".cachetool-probe-"


def require_writable(given: CacheRoot, verb: str, needed_by: str | None = None) -> Path:
    """``root`` when a file can be written in it (folders that are missing are created for the probe and removed
    again: the check leaves nothing behind); else one line naming it: :class:`UnwritableRootError` (exit 2), or
    :class:`DiskFullError` (exit 9) for a full file system. ``needed_by``: why the start that would run there must
    write (an engine's words), for a root that a server only reads (check): the line then names the fix."""
    root = given.path.absolute()
    created = next((p for p in reversed((root, *root.parents)) if not p.exists()), None)
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=root)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        if exc.errno in DISK_FULL_ERRNOS:
            raise disk_full(exc, verb, f"cache root {root}", "nothing was compiled", path=str(root)) from None
        if needed_by:
            raise UnwritableRootError(
                f"{verb}: cache root {root} is not writable ({_why(exc, root)}), and {needed_by}: mount it read-write, "
                f"or copy it to a writable folder first (cp -a {root} DIR) and give the server DIR as its cache root "
                "(the environment pull prints for DIR); nothing was started"
            ) from None
        raise UnwritableRootError(
            f"{verb}: cache root {root} is not writable ({_why(exc, root)}); nothing was "
            "compiled: pass a writable --cache-root"
        ) from None
    finally:
        if created is not None:
            _remove_created(root, created)
    return root


def _remove_created(root: Path, top: Path) -> None:
    """Remove the empty folders from ``root`` up to ``top``, those the probe created."""
    for p in (root, *root.parents):
        try:
            p.rmdir()
        except OSError:
            return
        if p == top:
            return


def _why(exc: OSError, root: Path) -> str:
    """What stops the write, in words: a file where a folder must be, else the system's reason."""
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        blocker = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            return f"{blocker} is a file"
    return exc.strerror or str(exc)
