"""``cachetool prune``: keep a local cache root that a server restarts on from growing without bound.

vLLM writes a new AOTAutograd entry into its AOT key folder's ``inductor_cache/aotautograd/`` at every start and no
later start reads it (:func:`cachetool.layouts.stale_entries`, by each layout's rule, says why), so a kept root grows by one entry
per rank and restart. ``prune`` removes every such entry but the last start's (the newest one per rank folder of
each key folder), and only those older than ``older_than`` seconds: a server starting now writes the newest, young
entries, which stay. Each entry is first
renamed out of the way (one atomic step; a reader sees it whole or not at all), then deleted. ``pack`` leaves the
same entries out of a bundle.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

from cachetool.errors import UsageError

TRASH_PREFIX = ".cachetool-prune-"


@dataclasses.dataclass
class PruneReport:
    root: str
    removed: list[str]           # entries removed (or, with dry_run, that would be)
    kept_young: int              # stale entries younger than older_than
    bytes_freed: int
    dry_run: bool

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def prune(root: str | os.PathLike, *, older_than: float, dry_run: bool = False) -> PruneReport:
    """Remove what no later start of the root's servers reads (see the module docstring)."""
    from cachetool.layouts import stale_entries

    top = Path(root).expanduser()
    if not top.is_dir() or top.is_symlink():
        raise UsageError(f"--cache-root {root}: not a cache root folder")
    stale = stale_entries(top)
    now = time.time()
    removed, young, freed = [], 0, 0
    for entry in stale:
        if now - entry.stat().st_mtime < older_than:
            young += 1
            continue
        size = _size(entry)
        if not dry_run:
            trash = entry.with_name(f"{TRASH_PREFIX}{entry.name}")
            try:
                entry.rename(trash)
            except FileNotFoundError:  # another prune took it
                continue
            shutil.rmtree(trash, ignore_errors=True)
        removed.append(str(entry.relative_to(top)))
        freed += size
    return PruneReport(str(top), removed, young, freed, dry_run)
