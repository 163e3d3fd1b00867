"""Layouts: how a cache folder on disk maps to bundle files, install units, cache keys and ranks.

A layout is a small plug-in with ``detect(path) -> bool`` and ``scan(path) -> LayoutScan``:

- ``native``: the tree ``compiler/`` writes (``torch_compile_cache/{hash10}/rank_{r}_{dp}/{prefix}/`` with
  ``compile_index.json``);
- ``vllm``: a real vLLM cache root (piecewise ``artifact_compile_range_*`` files or folders,
  ``vllm_compile_cache.py``, and the AOT tree ``torch_compile_cache/torch_aot_compile/{hash}/rank_{r}_{dp}/model``);
- ``triton``: a plain Triton cache folder (one folder per kernel hash).

``<path>`` may be the whole root, one hash folder or one rank folder: manifest paths stay relative to the cache
root (``torch_compile_cache/...``) so an install recreates the same place. :func:`scan` picks the layout
(``"auto"`` tries vllm, native, triton in that order).

This is the registry: the names a manifest may carry are :data:`cachetool.bundle.manifest.LAYOUTS` (the schema, the
one list of names), each served by the module :data:`MODULES` names: an engine's own layout lives in its engine
(``cachetool/engines/<engine>/layout.py``), a layout no engine writes (``triton``) here; :data:`CHOICES` is what
the CLI's ``--layout`` accepts. A new layout is a module plus its name in that tuple and in :data:`MODULES`.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from cachetool.bundle import manifest
from cachetool.errors import NotFoundError, UsageError
from cachetool.layouts.base import LayoutScan, ScannedFile

MODULES = {"native": "cachetool.engines.native.layout", "vllm": "cachetool.engines.vllm.layout",
           "triton": "cachetool.layouts.triton"}
LAYOUTS = {name: importlib.import_module(MODULES[name]) for name in manifest.LAYOUTS}
AUTO_ORDER = ("vllm", "native", "triton")  # the most specific first: a vLLM root also looks native
CHOICES = ("auto", *LAYOUTS)  # the CLI's --layout

__all__ = ["CHOICES", "LAYOUTS", "LayoutScan", "ScannedFile", "detect", "incomplete_reason", "scan", "stale_entries"]


def detect(path: str | Path) -> str:
    p = Path(path)
    for name in AUTO_ORDER:
        if LAYOUTS[name].detect(p):
            return name
    *head, last = LAYOUTS
    raise UsageError(f"{p} is not a recognised cache ({', '.join(head)} or {last}); pass --layout")


def scan(path: str | Path, layout: str = "auto") -> LayoutScan:
    p = Path(path)
    if not p.exists():
        raise NotFoundError(f"cache path {p} does not exist")
    if not p.is_dir() or p.is_symlink():
        raise UsageError(f"cache path {p} is not a folder")
    if layout == "auto":
        layout = detect(p)
    if layout not in LAYOUTS:
        raise UsageError(f"unknown layout {layout!r} (auto, {', '.join(LAYOUTS)})")
    return LAYOUTS[layout].scan(p)


def incomplete_reason(layout: str, unit_dir: str | Path, ranked: bool) -> str | None:
    """Why the install unit of ``layout`` in ``unit_dir`` (``ranked``: a rank folder) is not a complete cache, or
    None (complete, or a layout that states no such rule: only ``native`` does). ``pack`` and the install refuse
    such a unit: an interrupted warm's unit installed over a complete one would lose it."""
    rule = getattr(LAYOUTS.get(layout), "incomplete_reason", None)
    return rule(Path(unit_dir), ranked) if rule is not None else None


def stale_entries(root: str | Path) -> list[Path]:
    """What no later start reads under a cache root, by every layout that states such a rule (only ``vllm`` does:
    its per-start AOTAutograd entries); ``cachetool prune`` removes them."""
    out: list[Path] = []
    for module in LAYOUTS.values():
        rule = getattr(module, "stale_entries", None)
        if rule is not None:
            out += rule(Path(root))
    return out
