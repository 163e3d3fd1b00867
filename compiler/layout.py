"""The on-disk layout of the compile cache (docs/ARCHITECTURE.md, "Native cache layout").

``{root}/torch_compile_cache/{hash10}/rank_{rank}_{dp_rank}/{prefix}/`` holding ``cache_key_factors.json``,
``computation_graph.py``, ``transformed_code.py``, ``compile_index.json``, ``artifact_*``, ``inductor_cache/``
and ``triton_cache/``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
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
def redirect_compiler_caches(
    layout: CacheLayout | None, *, create: bool = True, persist: bool = False
) -> Iterator[None]:
    """Point ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` into the rank folder (compile and load),
    so that one tree holds everything a hot start needs (on the CPU, the compiled ``.so`` files).

    ``persist``: leave them set afterwards (vLLM does this process-wide). Used on CUDA, where Triton may still
    compile or autotune at the first launch and Inductor's compile workers inherit the environment at spawn."""
    if layout is None:
        yield
        return
    if create:
        layout.inductor_cache.mkdir(parents=True, exist_ok=True)
        layout.triton_cache.mkdir(parents=True, exist_ok=True)
    with _compiler_cache_env(layout.inductor_cache, layout.triton_cache, persist):
        yield


@contextlib.contextmanager
def read_only_compiler_caches(layout: CacheLayout, *, persist: bool = False) -> Iterator[None]:
    """Like :func:`redirect_compiler_caches`, for a load that must write nothing into the cache root.

    Loading a binary artifact re-populates Inductor's cache (new ``fxgraph``/``aotautograd`` entries), so the
    caches are pointed at a private overlay: a temporary copy of the folders whose files are symbolic links to
    the rank folder's (the compiled kernels and ``.so`` files are read from there) while what the load writes
    (a file replaced by write-and-rename, or a new one) lands in the overlay, removed at exit. Where no temporary folder can be made, the rank folder is used as is."""
    try:
        inductor = _overlay(layout.inductor_cache, skip=_REWRITTEN_ON_LOAD)
        triton = _overlay(layout.triton_cache, skip=("locks",))
    except OSError:
        with redirect_compiler_caches(layout, create=False, persist=persist):
            yield
        return
    with _compiler_cache_env(inductor, triton, persist):
        yield


# Inductor cache folders that ``load_cache_artifacts`` writes on every load (never read from the rank folder),
# and lock files, which are opened for writing (and refused through a link).
_REWRITTEN_ON_LOAD = ("fxgraph", "aotautograd", "locks")
_overlays: dict[Path, Path] = {}


def _overlay(source: Path, skip: tuple[str, ...]) -> Path:
    """One overlay per source folder and process (links made once; removed at exit)."""
    top = _overlays.get(source)
    if top is not None:
        return top
    top = Path(tempfile.mkdtemp(prefix="cachetool-overlay-"))
    if not _overlays:
        atexit.register(_remove_overlays)
    _overlays[source] = top
    _mirror(Path(source), top, skip)
    return top


def _mirror(source: Path, dest: Path, skip: tuple[str, ...] = ()) -> None:
    """Real folders, linked files: a load may replace a file (write then rename) without touching the source."""
    try:
        entries = list(os.scandir(source))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name in skip:
            continue
        if entry.is_dir(follow_symlinks=False):
            (dest / entry.name).mkdir()
            _mirror(Path(entry.path), dest / entry.name)
        else:
            os.symlink(entry.path, dest / entry.name)


def _remove_overlays() -> None:
    for top in _overlays.values():
        shutil.rmtree(top, ignore_errors=True)  # removes the links, never what they point to
    _overlays.clear()


def release_overlays() -> None:
    """Remove this process's overlays now instead of at exit (a start that is done loading: its kernels are
    loaded, and a later load makes a fresh overlay)."""
    _remove_overlays()


@contextlib.contextmanager
def _compiler_cache_env(inductor: Path, triton: Path, persist: bool) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor)
    os.environ["TRITON_CACHE_DIR"] = str(triton)
    try:
        yield
    finally:
        if not persist:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
