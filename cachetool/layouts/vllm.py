"""A real vLLM cache root (``$VLLM_CACHE_ROOT``).

vLLM (V1 engine) writes::

    torch_compile_cache/{hash10}/rank_{r}_{dp}/{prefix}/        piecewise caches: cache_key_factors.json,
        vllm_compile_cache.py, computation_graph.py, transformed_code.py, artifact_compile_range_* files (or
        folders when unpacked) and, in older versions, inductor_cache/ and triton_cache/
    torch_compile_cache/torch_aot_compile/{sha256}/             the AOT path (torch >= 2.10)
        rank_{r}_{dp}/model                                     the saved compiled function, one per rank
        rank_{r}_{dp}/cache_key_factors.json                    written by `cachetool warm --engine vllm`
        inductor_cache/                                         TORCHINDUCTOR_CACHE_DIR, shared by the ranks
    modelinfos/{module}-{Class}.json                            the model registry's inspection cache

The compile tree is the same shape as the native one; only detection differs. The root's ``modelinfos/`` (one
small JSON per architecture, checked by vLLM against its module's hash) is packed with the root or any folder in
it: a pulled root without it makes vLLM start a subprocess to inspect the model class again.
"""

from __future__ import annotations

from pathlib import Path

from cachetool.layouts.base import LayoutScan, walk_tree
from cachetool.layouts.compile_cache import AOT, iter_limited, locate, scan_compile_cache
from cachetool.manifest import Unit

NAME = "vllm"
MARKERS = ("vllm_compile_cache.py",)
MODELINFOS = "modelinfos"


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
    result = scan_compile_cache(path, NAME)
    _, _, tcc = locate(Path(path))
    infos = tcc.parent / MODELINFOS if tcc is not None else None  # the root's, also for one key folder
    if infos is not None and infos.is_dir() and not infos.is_symlink():
        files, dirs = walk_tree(infos, MODELINFOS)
        result.files.extend(files)
        result.dirs = sorted([*result.dirs, *dirs])
        result.units.append(Unit(MODELINFOS, None, None))
    return result
