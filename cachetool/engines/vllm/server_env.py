"""What a server started with this process's environment would miss of a checked cache root
(:func:`environment_notes`): a cache root it would not read, a JIT cache of the root (Triton's, FlashInfer's,
DeepGEMM's, ...) it would not read."""

from __future__ import annotations

from pathlib import Path

from cachetool import envs
from cachetool.cache_root import CacheRoot
from cachetool.engines.vllm import jit_caches
from cachetool.engines.vllm.root_names import TRITON_CACHE
from cachetool.engines.vllm.variables import CACHE_ROOT, VARIABLES


def environment_notes(root: Path, wanted: dict[str, str], reads: CacheRoot) -> list[str]:
    """What a server started with this process's environment would miss of the cache at ``root`` (``wanted``:
    the engine's server environment for it; ``reads``: the root such a server reads, the engine's
    ``CacheRoot.of(None, ...)``): a cache root it would not read, a JIT cache of the root it would not read."""
    notes = []
    if reads.resolved != root:
        have = envs.get(CACHE_ROOT.name, (CACHE_ROOT,)) or f"unset ({reads.path})"
        notes.append(
            f"VLLM_CACHE_ROOT is {have}: a server started so reads another "
            f"cache root and compiles; start it with VLLM_CACHE_ROOT={wanted['VLLM_CACHE_ROOT']}"
        )
    for cache in jit_caches.JIT_CACHES:
        if cache.variable in wanted:
            notes += _missed_jit_cache(cache, Path(wanted[cache.variable]))
    return notes


def _missed_jit_cache(cache: jit_caches.JitCache, folder: Path) -> list[str]:
    """The note for a JIT cache the root holds that a server started with this environment would not read."""
    entries = sum(1 for _ in folder.iterdir()) if folder.is_dir() else 0
    have = envs.raw(cache.variable, VARIABLES) or None  # type: ignore[arg-type]  # baseline (issue 46)
    if not entries or (have is not None and Path(have).expanduser().resolve() == folder):
        return []
    if cache.folder == TRITON_CACHE:
        return [
            f"TRITON_CACHE_DIR is {have or 'unset (~/.triton/cache)'}: a server started so JIT-compiles vLLM's "
            f"{entries} Triton kernel(s) of {folder} again (12-17 s for 26 on the H200); start it with "
            f"TRITON_CACHE_DIR={folder}"
        ]
    return [
        f"{cache.variable} is {have or f'unset ({cache.outside})'}: a server started so builds {cache.what} "
        f"again instead of reading {folder}; start it with {cache.variable}={folder}"
    ]
