"""Layouts: how a cache folder on disk maps to bundle files, install units, cache keys and ranks.

The parts every layout shares live here: :mod:`.entries` (what a scan finds and a manifest lists: files, folders,
install units, key folders), :mod:`.factors` (a key folder's recorded hash factors), :mod:`.base` (the typed scan
and the tree walk), :mod:`.triton` (a plain Triton cache, the one layout no engine writes) and
:mod:`.triton_groups` (Triton's group files, rewritten for the path an install lands at, in every layout). An
engine's own layout lives in its engine (``cachetool/engines/<engine>/layout.py``; the ``torch_compile_cache/``
tree the native and vLLM engines share is :mod:`cachetool.engines.compile_cache`), which declares it (``Engine.layout``,
``Engine.layout_rules()``); the layout registry, where the rest of cachetool finds them all (detect, scan, the
``--layout`` choices), is beside the engine registry, :mod:`cachetool.engines.layouts`. This package imports no
engine: the engines' layouts import it.
"""

__all__ = ["base", "entries", "factors", "triton", "triton_groups"]
