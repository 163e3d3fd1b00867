"""The on-disk layout of the compile cache (docs/ARCHITECTURE.md, "Native cache layout").

``{root}/torch_compile_cache/{hash10}/rank_{rank}_{dp_rank}/{prefix}/`` holding ``cache_key_factors.json``,
``computation_graph.py``, ``transformed_code.py``, ``compile_index.json``, ``artifact_*``, ``inductor_cache/``
and ``triton_cache/``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from compiler import envs

CACHE_SUBDIR = "torch_compile_cache"
DEFAULT_PREFIX = "backbone"
COMPUTATION_GRAPH = "computation_graph.py"
TRANSFORMED_CODE = "transformed_code.py"
INDEX_FILE = "compile_index.json"
INDUCTOR_CACHE = "inductor_cache"
TRITON_CACHE = "triton_cache"


def resolve_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: an explicit ``cache_dir`` (config / ``--cache-root``), else ``CACHETOOL_CACHE_ROOT``."""
    if cache_dir:
        return Path(os.path.expanduser(str(cache_dir))).resolve()
    return envs.cache_root().resolve()


@dataclass(frozen=True)
class CacheLayout:
    root: Path
    hash10: str
    rank: int = 0
    dp_rank: int = 0
    prefix: str = DEFAULT_PREFIX

    @property
    def hash_dir(self) -> Path:
        return self.root / CACHE_SUBDIR / self.hash10

    @property
    def rank_dir(self) -> Path:
        return self.hash_dir / f"rank_{self.rank}_{self.dp_rank}"

    @property
    def dir(self) -> Path:
        return self.rank_dir / self.prefix

    @property
    def index_file(self) -> Path:
        return self.dir / INDEX_FILE

    @property
    def inductor_cache(self) -> Path:
        return self.dir / INDUCTOR_CACHE

    @property
    def triton_cache(self) -> Path:
        return self.dir / TRITON_CACHE

    def ensure(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def redirect_compiler_caches(layout: CacheLayout | None, *, create: bool = True, persist: bool = False) -> Iterator[None]:
    """Point ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` into the rank folder (compile and load),
    so that one tree holds everything a hot start needs (on the CPU, the compiled ``.so`` files).

    ``persist``: leave them set afterwards (vLLM does this process-wide). Used on CUDA, where Triton may still
    compile or autotune at the first launch and Inductor's compile workers inherit the environment at spawn."""
    if layout is None:
        yield
        return
    saved = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    if create:
        layout.inductor_cache.mkdir(parents=True, exist_ok=True)
        layout.triton_cache.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(layout.inductor_cache)
    os.environ["TRITON_CACHE_DIR"] = str(layout.triton_cache)
    try:
        yield
    finally:
        for k, v in saved.items():
            if persist:
                break
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
