"""This machine as every engine's caches see it, read without importing torch: the one door through which cachetool
reads :mod:`compiler.build_identity` (versions from files, the GPU from NVML, the CPU's vector ISA, the variables
Inductor reads its settings from). Every engine's caches are torch's, so every engine reads these facts here, and
a fact read two ways cannot disagree."""

from __future__ import annotations

import importlib.metadata
import platform
from pathlib import Path

from compiler import build_identity

__all__ = ["common_facts", "cpu_capability", "cpu_flags", "cpu_isa", "cuda_device", "cuda_driver", "inductor_env",
           "literal_assignments", "module_file", "torch_build", "torch_version", "triton_version"]


def common_facts(device: str | None = None) -> dict:
    """The fingerprint fields every engine's caches depend on (``cachetool.bundle.fingerprint.COMMON_FIELDS``).
    ``device``: ``"cpu"``, ``"cuda"``/``"cuda:N"`` or None (probe for a GPU).

    The torch version from ``torch/version.py`` (the same value as ``torch.__version__``, which a bundle's
    compiler factors record; package metadata may lack the ``+cu130`` suffix), the GPU from NVML. Only where NVML
    cannot answer is torch asked. Probing reports what is there: ``device="cuda"`` on a machine without a usable
    GPU gives ``"cpu"``."""
    build = torch_build()
    fp = {
        "os": platform.system().lower(),
        "arch": platform.machine(),
        "device": "cpu",
        "torch": build.get("torch") or _dist_version("torch"),
        "cuda": None,
        "triton": triton_version(),
        "gpu": None,
        "capability": None,
    }
    if device in (None, "cuda") or (device or "").startswith("cuda"):
        index = int(device.split(":")[1]) if device and ":" in device else 0
        gpu = cuda_device(index) or _torch_cuda_device(index)
        if gpu is not None:
            fp.update(device="cuda", cuda=build.get("cuda"), gpu=gpu["device"],
                      capability="sm" + gpu["capability"].replace(".", ""))
    return fp


# compiler.build_identity's readers, looked up when called (a test that stands in for one there is seen here)
def cuda_device(index: int = 0) -> dict | None:
    """The GPU ``index`` as NVML reports it (``{"device", "capability"}``), or None."""
    return build_identity.cuda_device(index)


def cuda_driver() -> str | None:
    return build_identity.cuda_driver()


def cpu_capability() -> str:
    """The vector ISA torch's CPU kernels use here (honours ``ATEN_CPU_CAPABILITY``)."""
    return build_identity.cpu_capability()


def cpu_flags() -> frozenset[str]:
    return build_identity.cpu_flags()


def cpu_isa() -> str:
    """The vector ISA Inductor's CPU code (and vLLM's CPU kernels) are built for on this CPU: ``amx`` (AVX-512 with
    AMX tiles), ``avx512``, ``avx2``, ``default`` on x86; the machine name elsewhere (``aarch64``)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return platform.machine().lower()
    best = cpu_capability().lower()  # honours ATEN_CPU_CAPABILITY
    if best == "avx512" and {"amx_tile", "amx_bf16"} <= cpu_flags():
        return "amx"
    return best


def module_file(name: str) -> Path | None:
    """Where module ``name`` would be found on ``sys.path``, without importing it."""
    return build_identity.module_file(name)


def literal_assignments(path: Path) -> dict:
    """The ``NAME = literal`` assignments of a Python file, read without running it."""
    return build_identity.literal_assignments(path)


def torch_build() -> dict:
    """The installed torch's ``torch/version.py`` values (``torch``, ``cuda``, ...), without importing torch."""
    return build_identity.torch_build() or {}


def torch_version() -> str | None:
    """The installed torch's version as ``torch.__version__`` gives it, without importing torch."""
    return torch_build().get("torch")


def triton_version() -> str | None:
    return build_identity.triton_version()


def inductor_env() -> dict[str, str]:
    """The environment variables Inductor and Triton read their settings from (where caches go left out)."""
    return build_identity.inductor_env()


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _torch_cuda_device(index: int) -> dict | None:
    """The GPU as torch sees it, where NVML could not tell (imports torch: seconds)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    major, minor = torch.cuda.get_device_capability(index)
    return {"device": torch.cuda.get_device_name(index), "capability": f"{major}.{minor}"}
