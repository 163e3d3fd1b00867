"""What a server started with this process's environment would miss of a checked cache root
(:func:`environment_notes`): a cache root it would not read, a Triton cache it would not read."""

from __future__ import annotations

from pathlib import Path

from cachetool import envs
from cachetool.cache_root import CacheRoot


def environment_notes(root: Path, wanted: dict[str, str], reads: CacheRoot) -> list[str]:
    """What a server started with this process's environment would miss of the cache at ``root`` (``wanted``:
    the engine's server environment for it; ``reads``: the root such a server reads, the engine's
    ``CacheRoot.of(None, ...)``): a cache root it would not read, a Triton cache it would not read."""
    notes = []
    if reads.resolved != root:
        have = envs.get("VLLM_CACHE_ROOT") or f"unset ({reads.path})"
        notes.append(f"VLLM_CACHE_ROOT is {have}: a server started so reads another "
                     f"cache root and compiles; start it with VLLM_CACHE_ROOT={wanted['VLLM_CACHE_ROOT']}")
    triton = Path(wanted["TRITON_CACHE_DIR"])
    kernels = sum(1 for p in triton.iterdir() if p.is_dir()) if triton.is_dir() else 0
    have = envs.get("TRITON_CACHE_DIR")
    if kernels and (have is None or Path(have).expanduser().resolve() != triton):
        notes.append(f"TRITON_CACHE_DIR is {have or 'unset (~/.triton/cache)'}: a server started so JIT-compiles "
                     f"vLLM's {kernels} Triton kernel(s) of {triton} again (12-17 s for 26 on the H200); start it "
                     f"with TRITON_CACHE_DIR={triton}")
    return notes
