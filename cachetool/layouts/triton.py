"""A plain Triton cache folder (``TRITON_CACHE_DIR``, default ``~/.triton/cache``).

Triton writes one folder per kernel hash, each holding the kernel's files (``*.json`` metadata, ``*.ttir``,
``*.ttgir``, ``*.llir``, ``*.ptx``, ``*.cubin``/``*.hsaco``, ``*.so`` launchers) and ``__grp__*.json`` group
files. Manifest paths are relative to the Triton cache folder itself, so install with
``--cache-root $TRITON_CACHE_DIR``; each kernel folder is an install unit.
"""

from __future__ import annotations

import json
from pathlib import Path

from cachetool.errors import UsageError
from cachetool.layouts.base import LayoutScan, walk_tree
from cachetool.layouts.entries import Unit
from cachetool.layouts.triton_groups import GROUP_PREFIX

NAME = "triton"
KERNEL_SUFFIXES = {".json", ".ttir", ".ttgir", ".llir", ".ptx", ".cubin", ".hsaco", ".amdgcn", ".so", ".source"}


def detect(path: Path) -> bool:
    try:
        children = [c for c in path.iterdir()]
    except OSError:
        return False
    kernel_dirs = [c for c in children if c.is_dir() and not c.is_symlink()]
    if not kernel_dirs or len(kernel_dirs) != len(children):
        return False
    for d in kernel_dirs[:50]:
        try:
            if not any(f.suffix in KERNEL_SUFFIXES for f in d.iterdir()):
                return False
        except OSError:
            return False
    return True


def _hints(files) -> dict:
    """Device facts from the first kernel metadata file: {"target": {"backend": "cuda", "arch": 90, ...}}."""
    for f in files:
        if f.rel.endswith(".json") and GROUP_PREFIX not in f.rel and f.size < (1 << 20):
            try:
                meta = json.loads(f.abspath.read_text())
            except (OSError, ValueError):
                continue
            target = meta.get("target") if isinstance(meta, dict) else None
            if isinstance(target, dict) and target.get("backend"):
                backend = str(target["backend"])
                hints = {"device": "cuda" if backend in ("cuda", "hip") else backend}
                if backend == "cuda" and target.get("arch") is not None:
                    hints["capability"] = f"sm{target['arch']}"
                return hints
    return {}


def scan(path: Path) -> LayoutScan:
    files, dirs, units = [], [], []
    for c in sorted(path.iterdir(), key=lambda c: c.name):
        if c.is_symlink() or not c.is_dir():
            raise UsageError(f"{c} is not a kernel folder (a Triton cache holds only folders)")
        f, d = walk_tree(c, c.name)
        files.extend(f)
        dirs.extend(d)
        units.append(Unit(c.name, None, None))
    if not units:
        raise UsageError(f"{path} holds no Triton kernel folders")
    return LayoutScan(
        kind=NAME,
        files=files,
        dirs=dirs,
        units=units,
        keys=[],
        ranks=[],
        save_format=None,
        fingerprint_hints=_hints(files),
    )
