"""What this machine's compiler stack is, read without importing torch.

Importing torch (and Inductor, and computing its ``torch_key``) costs seconds; an init-container's preflight needs
answers in milliseconds. Everything here reads files:

- the torch build: ``torch/version.py`` (``__version__``, ``git_version``, ``cuda``: the same values as
  ``torch.__version__`` and ``torch.version``), found on ``sys.path`` without importing the package;
- the installed files of torch and Triton: a digest of each distribution's ``RECORD`` (every installed file with
  its sha256, written by the installer), restricted to files inside the site folder and with their hashes, so
  that the same wheel installed at two paths gives one digest;
- the GPUs: NVML (``nvidia-ml-py``), which answers without a CUDA context; the CPU's vector ISA as ATen picks it
  (``ATEN_CPU_CAPABILITY``, else the CPU flags);
- the environment variables Inductor reads its config from (``TORCHINDUCTOR_*``, ``TRITON_*``).

:func:`evidence` bundles the first and last: written beside the compiler factor by a warm, it lets a preflight
take ``torch_key``, ``triton_key`` and the Inductor config hash from a bundle whose evidence equals this
machine's (same installed files, same settings: same values), instead of importing torch to compute them.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compiler import envs

INDUCTOR_ENV_PREFIXES = ("TORCHINDUCTOR_", "TRITON_", "TORCH_COMPILE_", "PYTORCH_")
# Settings that change no generated code (where caches go, logging): not evidence.
_NOT_EVIDENCE = (
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_VEC_ISA_OK",
    "TRITON_HOME",
    "TORCHINDUCTOR_COMPILE_THREADS",
    "TORCH_COMPILE_DEBUG_DIR",
    "PYTORCH_CUDA_ALLOC_CONF",
)


# ---------------------------------------------------------------------- files on sys.path, no import


def module_file(name: str) -> Path | None:
    """The source file of module ``name`` (``a.b.c`` → ``a/b/c.py`` or ``a/b/c/__init__.py``), found without
    importing anything: the top-level package is located by its finder (``sys.path``, or an editable install's
    finder), the rest by path. ``None`` if no plain file is found."""
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: its finder is asked, nothing is imported
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin and os.path.isfile(spec.origin) else None
    for location in spec.submodule_search_locations or ():
        base = Path(location).joinpath(*rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def literal_assignments(path: Path) -> dict[str, Any]:
    """The module-level ``NAME = <literal>`` assignments of a Python file, read without running it."""
    values: dict[str, Any] = {}
    for node in ast.parse(path.read_text()).body:
        targets, value = [], None
        if isinstance(node, ast.Assign):  # also ``a = b = 1`` (vllm/_version.py writes its version so)
            targets, value = [t.id for t in node.targets if isinstance(t, ast.Name)], node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            targets, value = [node.target.id], node.value
        if targets:
            try:
                literal = ast.literal_eval(value)  # type: ignore[arg-type]  # baseline (issue 46)
            except ValueError:
                continue
            values.update(dict.fromkeys(targets, literal))
    return values


@functools.lru_cache(maxsize=1)
def torch_build() -> dict[str, Any] | None:
    """``{"torch", "torch_git", "cuda"}`` as ``torch.__version__``, ``torch.version.git_version`` and
    ``torch.version.cuda`` would give them, read from ``torch/version.py``; ``None`` without torch."""
    path = module_file("torch.version")
    if path is None:
        return None
    values = literal_assignments(path)
    if "__version__" not in values:
        return None
    return {"torch": values["__version__"], "torch_git": values.get("git_version"), "cuda": values.get("cuda")}


@functools.cache
def record_digest(distribution: str) -> str | None:
    """sha256 over the sorted ``path,hash`` lines of the distribution's ``RECORD`` that have a hash and lie in the
    site folder (scripts in ``../bin`` carry the interpreter's path; ``.pyc`` files are not hashed): the same
    wheel gives the same digest wherever it is installed. ``None`` if it is not installed or has no RECORD."""
    try:
        text = importlib.metadata.distribution(distribution).read_text("RECORD")
    except importlib.metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    lines = []
    for line in text.splitlines():
        path, _, rest = line.partition(",")
        digest = rest.split(",", 1)[0]
        if digest and not path.startswith("..") and "__pycache__" not in path:
            lines.append(f"{path},{digest}")
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()


def triton_distribution() -> str | None:
    for name in ("triton", "pytorch-triton"):
        try:
            importlib.metadata.distribution(name)
            return name
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def triton_version() -> str | None:
    name = triton_distribution()
    return importlib.metadata.version(name) if name else None


# ---------------------------------------------------------------------- devices


def cpu_capability() -> str:
    """The vector ISA ATen dispatches to (``torch.backends.cpu.get_cpu_capability()``), from
    ``ATEN_CPU_CAPABILITY`` or the CPU flags in ``/proc/cpuinfo``."""
    forced = (envs.hashed("ATEN_CPU_CAPABILITY") or "").strip().upper()
    flags = cpu_flags()
    has512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"} <= flags
    has2 = {"avx2", "fma"} <= flags
    best = "AVX512" if has512 else "AVX2" if has2 else "DEFAULT"
    if forced in ("DEFAULT", "AVX2", "AVX512"):
        order = ("DEFAULT", "AVX2", "AVX512")
        return forced if order.index(forced) <= order.index(best) else best
    return best


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _visible_index(index: int) -> int | str:
    """The NVML index (or UUID) of CUDA device ``index`` as ``CUDA_VISIBLE_DEVICES`` maps it."""
    visible = envs.raw("CUDA_VISIBLE_DEVICES")
    if visible is None or visible.strip() == "":
        return index
    items = [v.strip() for v in visible.split(",") if v.strip()]
    item = items[index]
    return int(item) if item.isdigit() else item


def _nvml(ask: Callable[[Any], Any]) -> Any:
    """``ask(pynvml)`` between NVML's init and shutdown; ``None`` when NVML cannot tell (no driver, no
    ``nvidia-ml-py``, no GPU) or the question fails."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        return ask(pynvml)
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_device(index: int = 0) -> dict[str, str] | None:
    """``{"device", "capability"}`` of CUDA device ``index`` as torch names them (``torch.cuda.get_device_name``,
    ``"major.minor"``), from NVML; ``None`` when NVML cannot tell (no driver, no ``nvidia-ml-py``, no GPU)."""

    def ask(pynvml):
        which = _visible_index(index)
        handle = (
            pynvml.nvmlDeviceGetHandleByUUID(which)
            if isinstance(which, str)
            else pynvml.nvmlDeviceGetHandleByIndex(which)
        )
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        return {"device": _text(pynvml.nvmlDeviceGetName(handle)), "capability": f"{major}.{minor}"}

    return _nvml(ask)


def cuda_driver() -> str | None:
    """The NVIDIA driver version from NVML, or ``None``."""
    return _nvml(lambda pynvml: _text(pynvml.nvmlSystemGetDriverVersion()))


def cpu_device() -> dict[str, str]:
    return {"device": f"cpu-{platform.machine()}", "capability": cpu_capability()}


# ---------------------------------------------------------------------- evidence


def inductor_env() -> dict[str, str]:
    """The environment variables Inductor and Triton read settings from (where caches go excluded)."""
    return {k: v for k, v in envs.by_prefix(INDUCTOR_ENV_PREFIXES).items() if k not in _NOT_EVIDENCE}


def evidence() -> dict[str, Any]:
    """The inputs that determine ``torch_key``, ``triton_key`` and the Inductor config hash on a machine."""
    triton = triton_distribution()
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "torch_record": record_digest("torch"),
        "triton_record": record_digest(triton) if triton else None,
        "inductor_env": inductor_env(),
    }
