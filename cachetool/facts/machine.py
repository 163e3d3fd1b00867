"""This machine as every engine's caches see it, read without importing torch: the one place the engines and the
core read versions, devices and Inductor's settings from (:mod:`.installed`, :mod:`.devices`), so a fact read two
ways cannot disagree within cachetool."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from cachetool import envs
from cachetool.facts import devices, installed

__all__ = [
    "common_facts",
    "cpu_capability",
    "cpu_flags",
    "cpu_isa",
    "cuda_device",
    "cuda_driver",
    "inductor_env",
    "literal_assignments",
    "module_file",
    "torch_build",
    "torch_version",
    "triton_version",
]

INDUCTOR_ENV_PREFIXES = ("TORCHINDUCTOR_", "TRITON_", "TORCH_COMPILE_", "PYTORCH_")
# Settings that change no generated code (where caches go, logging, threads): not a fact of the build.
NOT_INDUCTOR_SETTINGS = (
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_VEC_ISA_OK",
    "TRITON_HOME",
    "TORCHINDUCTOR_COMPILE_THREADS",
    "TORCH_COMPILE_DEBUG_DIR",
    "PYTORCH_CUDA_ALLOC_CONF",
)


def common_facts(device: str | None = None) -> dict:
    """The fingerprint fields every engine's caches depend on (``cachetool.bundle.fingerprint.COMMON_FIELDS``).
    ``device``: ``"cpu"``, ``"cuda"``/``"cuda:N"`` or None (probe for a GPU). Probing reports what is there:
    ``device="cuda"`` on a machine without a usable GPU gives ``"cpu"``."""
    build = torch_build()
    fp: dict[str, Any] = {
        "os": platform.system().lower(),
        "arch": platform.machine(),
        "device": "cpu",
        "torch": build.get("torch") or installed.dist_version("torch"),
        "cuda": None,
        "triton": triton_version(),
        "gpu": None,
        "capability": None,
    }
    if device is None or device.startswith("cuda"):
        index = int(device.split(":")[1]) if device and ":" in device else 0
        gpu = cuda_device(index) or devices.torch_cuda_device(index)
        if gpu is not None:
            fp.update(
                device="cuda",
                cuda=build.get("cuda"),
                gpu=gpu["device"],
                capability="sm" + gpu["capability"].replace(".", ""),
            )
    return fp


def cpu_isa() -> str:
    """The vector ISA Inductor's CPU code (and vLLM's CPU kernels) are built for on this CPU: ``amx`` (AVX-512 with
    AMX tiles), ``avx512``, ``avx2``, ``default`` on x86; the machine name elsewhere (``aarch64``)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return platform.machine().lower()
    best = cpu_capability().lower()
    if best == "avx512" and {"amx_tile", "amx_bf16"} <= cpu_flags():
        return "amx"
    return best


def inductor_env() -> dict[str, str]:
    """The environment variables Inductor and Triton read their settings from (where caches go left out)."""
    return {k: v for k, v in envs.by_prefix(INDUCTOR_ENV_PREFIXES).items() if k not in NOT_INDUCTOR_SETTINGS}


# The readers, looked up when called, so a test that stands in for one here is seen by common_facts and cpu_isa.
def cuda_device(index: int = 0) -> dict | None:
    """The GPU ``index`` as NVML reports it (``{"device", "capability"}``), or None."""
    return devices.cuda_device(index)


def cuda_driver() -> str | None:
    return devices.cuda_driver()


def cpu_capability() -> str:
    """The vector ISA torch's CPU kernels use here (honours ``ATEN_CPU_CAPABILITY``)."""
    return devices.cpu_capability()


def cpu_flags() -> frozenset[str]:
    return devices.cpu_flags()


def module_file(name: str) -> Path | None:
    """Where module ``name`` would be found on ``sys.path``, without importing it."""
    return installed.module_file(name)


def literal_assignments(path: Path) -> dict:
    """The ``NAME = literal`` assignments of a Python file, read without running it."""
    return installed.literal_assignments(path)


def torch_build() -> dict:
    """The installed torch's ``torch/version.py`` values (``torch``, ``cuda``, ...), without importing torch."""
    return installed.torch_build()


def torch_version() -> str | None:
    """The installed torch's version as ``torch.__version__`` gives it, without importing torch."""
    return torch_build().get("torch")


def triton_version() -> str | None:
    return installed.triton_version()
