"""The native layout: the tree ``compiler/`` writes (see docs/ARCHITECTURE.md, "Native cache layout")."""

from __future__ import annotations

from pathlib import Path

from cachetool.engines.compile_cache import locate, scan_compile_cache
from cachetool.engines.root_names import FACTORS_FILE, TCC
from cachetool.layouts.base import LayoutScan
from compiler.artifacts import INDEX_FILE, incomplete_reason as prefix_incomplete

NAME = "native"
ROOT_NAMES = (TCC,)  # what a native cache root holds at its top


def detect(path: Path) -> bool:
    try:
        hash_dirs, _, _ = locate(path)
    except (OSError, Exception):
        return False
    return bool(hash_dirs)


def scan(path: Path) -> LayoutScan:
    return scan_compile_cache(path, NAME)


def incomplete_reason(unit_dir: Path, ranked: bool) -> str | None:
    """Why the install unit in ``unit_dir`` is not a complete cache, or None: each of its prefix folders (a folder
    with a cache key or an index, the unit itself or up to two levels down) must be complete
    (:func:`compiler.artifacts.incomplete_reason`), and a rank folder must hold one."""
    prefixes = _prefix_folders(Path(unit_dir))
    if not prefixes:
        return f"no {FACTORS_FILE}" if ranked else None
    for prefix in prefixes:
        reason = prefix_incomplete(prefix)
        if reason is not None:
            where = prefix.relative_to(unit_dir).as_posix()
            return reason if where == "." else f"{where}: {reason}"
    return None


def has_key_folder(root: Path, rank: int, dp_rank: int) -> bool:
    """Whether ``root`` holds a key folder for this rank with its recorded factors: what a start looks for first
    (without one it compiles everything), read without building or tracing anything."""
    from compiler.key_prediction import candidates_on_disk
    from compiler.layout import DEFAULT_PREFIX

    return bool(candidates_on_disk(root, rank, dp_rank, DEFAULT_PREFIX))


def _prefix_folders(unit_dir: Path, depth: int = 2) -> list[Path]:
    found: list[Path] = []
    level = [unit_dir]
    for n in range(depth + 1):
        found += [d for d in level if (d / FACTORS_FILE).is_file() or (d / INDEX_FILE).is_file()]
        if n < depth:
            level = [c for d in level for c in sorted(d.iterdir()) if c.is_dir() and not c.is_symlink()]
    return found
