"""What a native start that fails leaves in its cache root (issue 45): nothing it made, as the vLLM and torch engines'.

- A root the start created is removed when the start fails or is stopped (SIGINT, SIGTERM): it holds only what the
  failed start wrote. A root that was there keeps what it held; a stopped start's unfinished cache folder stays
  for ``pack`` to refuse (the native index rule), as the stop's message says.
- A full file system (ENOSPC, EDQUOT), which the compiler reports wrapped in its backend's error, is one line
  naming the cache root (:class:`~cachetool.errors.DiskFullError`, exit 9); the cache folders the start created
  in a root that was there are removed too, since the space is what the disk needs back.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from cachetool.engines.root_names import TCC
from cachetool.errors import disk_full, disk_full_cause


@contextlib.contextmanager
def kept_clean(root: Path, command: str) -> Iterator[None]:
    """Run a start on ``root`` so that a failure leaves nothing it made (see the module doc)."""
    created = _topmost_missing(root)
    before = _key_folders(root)
    try:
        yield
    except BaseException as exc:
        full = disk_full_cause(exc)
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        if full is None:
            raise
        raise disk_full(
            full,
            command,
            f"cache root {root}",
            f"{_removed(root, created, before)}: free space or use another cache root",
            path=str(root),
        ) from None


def _removed(root: Path, created: Path | None, before: set[Path]) -> str:
    """Remove what a start that filled the disk made in a root that was there (its new key folders); says what
    went, or what stays unfinished."""
    if created is not None:
        return "the cache root it created is removed"
    new = sorted(_key_folders(root) - before)
    for folder in new:
        shutil.rmtree(folder, ignore_errors=True)
    if new:
        return f"the cache folder(s) it created are removed ({', '.join(p.name for p in new)})"
    return "what it added to an existing cache folder is unfinished: pack refuses it until a warm completes"


def _topmost_missing(root: Path) -> Path | None:
    """The topmost folder of ``root``'s path that does not exist yet (the start creates it), or None."""
    return next((p for p in reversed((root, *root.parents)) if not p.exists()), None)


def _key_folders(root: Path) -> set[Path]:
    """The key folders under ``root`` now (``torch_compile_cache/{hash10}``)."""
    try:
        return {p for p in (root / TCC).iterdir() if p.is_dir() and not p.is_symlink()}
    except OSError:
        return set()
