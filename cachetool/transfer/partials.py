"""The partial-download policy of pull: blobs are downloaded into ``{cache_root}/.cachetool-partial/`` (the install
staging's file system, so a finished blob is hard-linked, not copied). An interrupted pull leaves finished and partial
blobs there; the rerun keeps finished ones and resumes partial ones with a ``Range`` request. They are kept only where
a rerun can use them (:data:`RETRYABLE`: the store failed, exit 6, ``--timeout`` ran out, exit 7, or a stop signal
came, exit 130); after a success
or a failure no rerun can mend (a blob missing from the store, bytes that fail a check, a full disk) the pull's own
files are deleted. Either way the folder is then cut to ``CACHETOOL_PARTIAL_MAX_BYTES`` (default 4 GiB), oldest files
first, under the cache root's lock (:meth:`cachetool.transfer.store_source.StoreSource.settle`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cachetool import envs
from cachetool.errors import StopSignalError, StoreError, UsageError, WaitTimeoutError, clip

PARTIAL_MAX_BYTES = 4 << 30  # default bound of a cache root's partial folder (CACHETOOL_PARTIAL_MAX_BYTES)
# failures after which a rerun uses the partial files
RETRYABLE = (StoreError, WaitTimeoutError, StopSignalError, KeyboardInterrupt)


def partial_cap() -> int:
    text = envs.get("CACHETOOL_PARTIAL_MAX_BYTES")
    try:
        return max(0, int(text)) if text.strip() else PARTIAL_MAX_BYTES  # type: ignore[arg-type,union-attr]  # baseline (issue 46)
    except ValueError:
        raise UsageError(f"CACHETOOL_PARTIAL_MAX_BYTES={clip(text, 40)!r} is not a number of bytes") from None


def trim_partials(folder: Path, cap: int) -> None:
    """Delete the oldest files of the partial folder until it holds at most ``cap`` bytes. Callers hold the cache
    root's lock, so no pull is writing there. A folder planted as a link is not walked: nothing it points to is
    deleted."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return
        entries = [
            (e.stat(follow_symlinks=False), e) for e in os.scandir(folder) if not e.is_dir(follow_symlinks=False)
        ]
    except (FileNotFoundError, NotADirectoryError):
        return
    total = sum(st.st_size for st, _ in entries)
    for st, e in sorted(entries, key=lambda x: x[0].st_mtime):
        if total <= cap:
            break
        try:
            os.unlink(e.path)
        except FileNotFoundError:
            pass
        total -= st.st_size
