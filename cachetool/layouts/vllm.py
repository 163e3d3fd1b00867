"""A real vLLM cache root.

vLLM (V1 engine) writes ``torch_compile_cache/{hash}/rank_{r}_{dp}/{prefix}/`` holding
``cache_key_factors.json``, ``vllm_compile_cache.py``, ``computation_graph.py``, ``transformed_code.py``,
binary ``artifact_compile_range_{start}_{end}_subgraph_{i}`` files (or folders when unpacked) and, in older
versions, ``inductor_cache/`` and ``triton_cache/``; the AOT path writes
``torch_compile_cache/torch_aot_compile/{hash}/rank_{r}_{dp}/model`` with its own ``inductor_cache/``.
The tree is the same shape as the native one; only detection differs.
"""

from __future__ import annotations

from pathlib import Path

from cachetool.layouts.base import LayoutScan
from cachetool.layouts.compile_cache import AOT, iter_limited, locate, scan_compile_cache

NAME = "vllm"
MARKERS = ("vllm_compile_cache.py",)


def detect(path: Path) -> bool:
    try:
        hash_dirs, _, _ = locate(path)
    except Exception:
        return False
    for _, _, hdir in hash_dirs:
        if hdir.parent.name == AOT:
            return True
        for e in iter_limited(hdir, max_depth=3):
            if e.name in MARKERS or e.name.startswith("artifact_compile_range_"):
                return True
    return False


def scan(path: Path) -> LayoutScan:
    return scan_compile_cache(path, NAME)
