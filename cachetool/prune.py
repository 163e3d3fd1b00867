"""``cachetool prune``: keep a local cache root that a server restarts on from growing without bound.

vLLM on torch 2.13 writes a new AOTAutograd entry into its AOT key folder's ``inductor_cache/aotautograd/`` at every
start and no later start reads it (:func:`cachetool.engines.layouts.stale_entries`, by each layout's rule, says why),
so a kept root grows by one entry per rank and restart. ``prune`` removes every entry but the last start's (the
newest one per rank folder of each key folder and those written with it), and only those older than ``older_than``
seconds: a server starting now writes the newest, young entries, which stay. Each entry is first renamed out of the
way (one atomic step; a reader sees it whole or not at all), then deleted. ``pack`` leaves the same entries out of a
bundle.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

from cachetool.cache_root import PARTIAL_DIR, CacheRoot
from cachetool.errors import UsageError

TRASH_PREFIX = ".cachetool-prune-"


@dataclasses.dataclass
class PruneReport:
    root: str
    removed: list[str]  # entries removed (or, with dry_run, that would be)
    kept_young: int  # stale entries younger than older_than
    bytes_freed: int
    dry_run: bool

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def require_cache_root(folder: Path) -> None:
    """Refuse a folder of other things: prune of it would say "removed 0 entries" as if it were a clean root. A cache
    root holds at least one of the top names its layouts declare (:func:`cachetool.engines.layouts.root_names`),
    or a pull's partial downloads, or nothing yet."""
    from cachetool.engines.layouts import root_names

    cache_folders = root_names()  # a folder of these names is inside a root (prune's root one level down)
    names = {e.name for e in os.scandir(folder)}
    if not names or names & (cache_folders | {PARTIAL_DIR}):
        return
    hint = f"; its parent {folder.parent} may be the root" if folder.name in cache_folders else ""
    known = sorted(f"{n}/" for n in cache_folders)
    examples = ", ".join(n for n in known if n in ("torch_compile_cache/", "triton_cache/", "inductor/"))
    raise UsageError(
        f"--cache-root {folder}: not a cache root (it holds none of the {len(known)} folders a server's "
        f"root holds, such as {examples}, and is not empty){hint}"
    )


def prune(root: str | os.PathLike, *, older_than: float, dry_run: bool = False) -> PruneReport:
    """Remove what no later start of the root's servers reads (see the module docstring)."""
    from cachetool.engines.layouts import stale_entries

    top = CacheRoot.given(root).path
    if not top.is_dir() or top.is_symlink():
        raise UsageError(f"--cache-root {root}: not a cache root folder")
    require_cache_root(top)
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
