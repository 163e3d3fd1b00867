"""Atomic file writes: a file appears under its name whole or not at all (temp file, fsync, rename)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cachetool.digests import CHUNK


@contextlib.contextmanager
def atomic_file(path: Path, *, fsync: bool = True) -> Iterator:
    """A binary file object that becomes ``path`` (mode 0644) only when the block ends without an error: written
    to a temp name in the same folder, fsynced, renamed. On an error the temp file is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write(path: Path, data: bytes | None = None, *, src: Path | None = None, fsync: bool = True) -> None:
    """Write ``data`` (or copy ``src``) to ``path`` through a temp file in the same folder and a rename."""
    with atomic_file(path, fsync=fsync) as f:
        if data is not None:
            f.write(data)
        else:
            with open(src, "rb") as s:  # type: ignore[arg-type]  # baseline (issue 46)
                shutil.copyfileobj(s, f, CHUNK)
