"""The layouts' rules, read from the layout table (:data:`cachetool.engines.registry.LAYOUTS`): every layout a
bundle may name, found from the engines that declare them.

A layout is a small plug-in (a module) with ``detect(path) -> bool`` and ``scan(path) -> LayoutScan``, and where it
states them ``incomplete_reason(unit_dir, ranked)`` and ``stale_entries(root)``. Each engine declares its own
(``Engine.layout`` names it, ``Engine.layout_rules()`` returns it: ``native``, the tree ``compiler/`` writes;
``vllm``, a real vLLM cache root; ...); :data:`CHOICES` is what the CLI's ``--layout`` accepts.
A new engine's layout needs nothing here.

``<path>`` may be the whole root, one hash folder or one rank folder: manifest paths stay relative to the cache
root (``torch_compile_cache/...``) so an install recreates the same place. :func:`scan` picks the layout
(``"auto"``: the first whose ``detect`` says yes).
"""

from __future__ import annotations

from pathlib import Path

from cachetool.engines.registry import LAYOUTS
from cachetool.errors import NotFoundError, UsageError
from cachetool.layouts.base import LayoutScan, ScannedFile

CHOICES = ("auto", *LAYOUTS)  # the CLI's --layout

__all__ = [
    "CHOICES",
    "LAYOUTS",
    "LayoutScan",
    "ScannedFile",
    "detect",
    "incomplete_reason",
    "root_names",
    "scan",
    "stale_entries",
]


def detect(path: str | Path) -> str:
    p = Path(path)
    for name, layout in LAYOUTS.items():  # the most specific first: a vLLM root also looks native
        if layout.detect(p):
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


def root_names() -> set[str]:
    """What a cache root holds at its top, by every layout that says so (``ROOT_NAMES``: the native engine's
    ``torch_compile_cache/``, vLLM's ``modelinfos/`` and ``triton_cache/`` beside it, ...)."""
    return {name for module in LAYOUTS.values() for name in getattr(module, "ROOT_NAMES", ())}


def incomplete_reason(layout: str, unit_dir: str | Path, ranked: bool) -> str | None:
    """Why the install unit of ``layout`` in ``unit_dir`` (``ranked``: a rank folder) is not a complete cache, or
    None (complete, or a layout that states no such rule). ``pack`` and the install refuse such a unit: an
    interrupted warm's unit installed over a complete one would lose it."""
    rule = getattr(LAYOUTS.get(layout), "incomplete_reason", None)
    return rule(Path(unit_dir), ranked) if rule is not None else None


def invalid_units(layout: str, manifest, root: str | Path) -> dict[str, str]:
    """The install units of a ``layout`` bundle that cannot be valid in a root at ``root`` on this machine, each with
    why, where the layout states such a rule (vLLM's JIT caches: FlashInfer's version, nvcc, the root's path)."""
    rule = getattr(LAYOUTS.get(layout), "invalid_units", None)
    return rule(manifest, Path(root)) if rule is not None else {}


def settle_installed(layout: str, root: str | Path) -> None:
    """What the files of ``layout`` need once installed under ``root``, where the layout states it
    (``settle_installed(root)``: vLLM's FlashInfer workspace gets its recorded modification times back)."""
    rule = getattr(LAYOUTS.get(layout), "settle_installed", None)
    if rule is not None:
        rule(Path(root))


def stale_entries(root: str | Path) -> list[Path]:
    """What no later start reads under a cache root, by every layout that states such a rule (vLLM's per-start
    AOTAutograd entries, ...); ``cachetool prune`` removes them."""
    out: list[Path] = []
    for module in LAYOUTS.values():
        rule = getattr(module, "stale_entries", None)
        if rule is not None:
            out += rule(Path(root))
    return out
