"""What a vLLM cache root holds, read before and after a start: its kernel binaries (a new one is a kernel
Inductor compiled; one a worker mapped that was there before, one it loaded) and its AOT key folders (the one a
start used was there before, or not). A headless start (:mod:`~cachetool.engines.vllm.start`) and ``vllm serve``
(the oracle in ``tests/vllm_oracle/server.py``) count them alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cachetool.engines.root_names import AOT, TCC
from cachetool.engines.vllm import jit_caches
from cachetool.engines.vllm.jit_caches import FOLDERS as JIT_FOLDERS

AOT_DIR = (TCC, AOT)
KERNEL_SUFFIXES = (".so", ".cubin", ".hsaco")


def kernel_files(cache_root: Path) -> set[str]:
    """Kernel binaries under the root's compile cache and its JIT caches (a new one is a kernel compiled)."""
    out: set[str] = set()
    for top in (cache_root.joinpath(*AOT_DIR[:1]), *(cache_root / f for f in JIT_FOLDERS)):
        if top.is_dir():
            out.update(str(p) for p in top.rglob("*") if p.suffix in KERNEL_SUFFIXES and p.is_file())
    return out


def key_folders(cache_root: Path) -> set[str]:
    top = cache_root.joinpath(*AOT_DIR)
    return {p.name for p in top.iterdir() if p.is_dir()} if top.is_dir() else set()


@dataclasses.dataclass(frozen=True)
class RootWatch:
    """A cache root as a start found it, to tell afterwards what the start added: kernel binaries and key folders
    under the root, and files in the JIT caches' default folders outside it (a headless start and ``vllm serve``
    are watched alike)."""

    root: Path
    kernels: frozenset[str]
    keys: frozenset[str]
    outside: dict[str, int]

    @classmethod
    def of(cls, root: Path) -> RootWatch:
        return cls(root, frozenset(kernel_files(root)), frozenset(key_folders(root)), jit_caches.outside_snapshot())

    def new_kernels(self) -> set[str]:
        return kernel_files(self.root) - self.kernels

    def new_key_folders(self) -> set[str]:
        return key_folders(self.root) - self.keys

    def written_outside(self) -> dict[str, int]:
        return jit_caches.written_outside(self.outside, jit_caches.outside_snapshot())
