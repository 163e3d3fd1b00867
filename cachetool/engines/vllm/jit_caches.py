"""The JIT caches a vLLM start fills beside torch.compile's, each sent into the cache root so that it ships.

On a GPU, a start of vLLM compiles far more than its model's graphs: Triton kernels of its own ops and of the fused
MoE layers, FlashInfer's JIT modules (built with nvcc), DeepGEMM's FP8 kernels (JIT, per shape), FlashInfer's
autotuner results, and whatever torch.compile builds before vLLM points Inductor into its AOT folder. Each has a
folder of its own, outside the root unless told otherwise; a fresh pod builds every one of them again (minutes for
an FP8 MoE model). :data:`JIT_CACHES` declares each: the folder under the root, the variable that sends it there
(what ``pull`` prints for the server, and what a warm's or check's vLLM runs with), and where it goes without it.

The root, with every JIT cache in it::

    {root}/triton_cache/                  TRITON_CACHE_DIR: Triton's kernels (a folder per kernel hash)
    {root}/inductor_cache/                TORCHINDUCTOR_CACHE_DIR: Inductor's cache until vLLM redirects it
    {root}/flashinfer/.cache/flashinfer/{version}/{arch}/   FLASHINFER_WORKSPACE_BASE: FlashInfer's JIT workspace
    {root}/deep_gemm/                     DG_JIT_CACHE_DIR: DeepGEMM's kernels (vLLM's own default too)
    {root}/flashinfer_autotune_cache/     FlashInfer's autotune results (vLLM writes them under its cache root)

Outside the GPU (vLLM's CPU build) only the Triton variable is set, as before: the CPU builds none of the others,
and Inductor's C++ kernels already go into vLLM's AOT folder.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
from pathlib import Path

from cachetool.engines.vllm.root_names import TRITON_CACHE
from cachetool.envs import EnvVar


@dataclasses.dataclass(frozen=True)
class JitCache:
    folder: str  # under the cache root
    variable: str | None  # what sends it there (None: vLLM puts it under VLLM_CACHE_ROOT itself)
    outside: str | None  # where it goes without the variable ("~" and "{user}" expanded)
    gpu_only: bool  # set on a GPU machine only
    what: str


JIT_CACHES = (
    JitCache(
        TRITON_CACHE,
        "TRITON_CACHE_DIR",
        "~/.triton/cache",
        False,
        "Triton kernels of vLLM's own ops and its fused MoE layers",
    ),
    JitCache(
        "inductor_cache",
        "TORCHINDUCTOR_CACHE_DIR",
        "/tmp/torchinductor_{user}",
        True,
        "what Inductor builds before vLLM points it into its AOT folder",
    ),
    JitCache("flashinfer", "FLASHINFER_WORKSPACE_BASE", "~/.cache/flashinfer", True, "FlashInfer's JIT modules (nvcc)"),
    JitCache("deep_gemm", "DG_JIT_CACHE_DIR", None, True, "DeepGEMM's FP8 kernels"),
    JitCache("flashinfer_autotune_cache", None, None, True, "FlashInfer's autotune results"),
)
FOLDERS = tuple(c.folder for c in JIT_CACHES)
# The variables beside cachetool's registry (which has TRITON_CACHE_DIR) that a vLLM server on a GPU is started with
# (the engine's ``variables``; README's configuration reference documents each)
VARIABLES = (
    *(
        EnvVar(
            c.variable,
            None,
            f"on a GPU, {c.what}: a vLLM server reads ROOT/{c.folder} only through "
            "it (pull prints it; check names it when it is missing)",
            True,
        )
        for c in JIT_CACHES
        if c.variable is not None and c.variable != "TRITON_CACHE_DIR"
    ),
    EnvVar(
        "CUDA_HOME",
        None,
        "the CUDA toolkit whose nvcc FlashInfer and DeepGEMM build with (its version is "
        "one of their JIT caches' facts); default PATH's nvcc, then /usr/local/cuda",
        True,
    ),
)


def server_environment(root: Path, *, gpu: bool) -> dict[str, str]:
    """The variables that send every JIT cache a server on this machine fills into ``root``."""
    return {
        c.variable: str(Path(root) / c.folder) for c in JIT_CACHES if c.variable is not None and (gpu or not c.gpu_only)
    }


def outside_folders(home: str | None = None) -> list[Path]:
    """Where the JIT caches go when their variables are unset (a file a start writes there does not ship), and the
    CUDA driver's own JIT cache of PTX (``~/.nv/ComputeCache``)."""
    home = home or os.path.expanduser("~")
    found = [c.outside for c in JIT_CACHES if c.outside is not None] + ["~/.nv/ComputeCache"]
    return [Path(p.replace("~", home, 1).replace("{user}", getpass.getuser())) for p in found]


def file_count(folder: Path) -> int:
    n = 0
    for _dirpath, _dirs, files in os.walk(folder):
        n += len(files)
    return n


def outside_snapshot(home: str | None = None) -> dict[str, int]:
    """The files in each outside folder now (compared after a start: :func:`written_outside`)."""
    return {str(p): file_count(p) for p in outside_folders(home)}


def written_outside(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The outside folders a start added files to, and how many: a hot start that writes there is a defect a warm
    reports (those files are built again on every fresh pod)."""
    return {folder: n - before.get(folder, 0) for folder, n in after.items() if n > before.get(folder, 0)}


# FlashInfer builds its JIT modules with ninja at every load, and ninja rebuilds an output whose recorded build time
# (.ninja_log) is older than an input: a pulled workspace, every file dated by the pull, rebuilt every module. The
# warm records each workspace file's modification time; after an install they are set back, so ninja finds the
# workspace as the warm left it. Its build commands hold the workspace's absolute path: a FlashInfer cache hits
# only in a root at the path it was built at (the path rule of docs/vllm.md).
MTIMES_FILE = "cachetool_mtimes.json"
KEEPS_MTIMES = ("flashinfer",)


def record_mtimes(root: Path) -> list[Path]:
    """Write, in each JIT folder of :data:`KEEPS_MTIMES` that ``root`` holds, every file's modification time (ns);
    returns the files written."""
    written = []
    for name in KEEPS_MTIMES:
        folder = Path(root) / name
        if not folder.is_dir() or folder.is_symlink():
            continue
        times = {
            str(p.relative_to(folder)): p.stat().st_mtime_ns
            for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink() and p.name != MTIMES_FILE
        }
        (folder / MTIMES_FILE).write_text(json.dumps({"root": str(root), "mtime_ns": times}, indent=0, sort_keys=True))
        written.append(folder / MTIMES_FILE)
    return written


def restore_mtimes(root: Path) -> int:
    """Set the recorded modification times back on the files of ``root``'s JIT folders (after an install); returns
    how many were set. A file missing or not a plain file is left alone; a record that is not one is ignored."""
    restored = 0
    for name in KEEPS_MTIMES:
        folder = Path(root) / name
        try:
            times = json.loads((folder / MTIMES_FILE).read_text())["mtime_ns"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for rel, ns in times.items():
            path = folder / rel
            if ".." in Path(rel).parts or not isinstance(ns, int) or path.is_symlink() or not path.is_file():
                continue
            os.utime(path, ns=(ns, ns), follow_symlinks=False)
            restored += 1
    return restored
