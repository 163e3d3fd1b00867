"""The native layout: the tree ``compiler/`` writes (see docs/ARCHITECTURE.md, "Native cache layout")."""

from __future__ import annotations

from pathlib import Path

from cachetool.layouts.base import LayoutScan
from cachetool.layouts.compile_cache import locate, scan_compile_cache

NAME = "native"


def detect(path: Path) -> bool:
    try:
        hash_dirs, _, _ = locate(path)
    except (OSError, Exception):
        return False
    return bool(hash_dirs)


def scan(path: Path) -> LayoutScan:
    return scan_compile_cache(path, NAME)
