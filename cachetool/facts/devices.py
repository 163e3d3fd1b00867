"""This machine's devices, read without a CUDA context: the GPUs from NVML (``nvidia-ml-py``), the CPU's flags
from ``/proc/cpuinfo`` and the vector ISA ATen dispatches to; torch only where NVML cannot answer."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from cachetool import envs

__all__ = ["cpu_capability", "cpu_flags", "cuda_device", "cuda_driver", "torch_cuda_device"]

ISA_ORDER = ("DEFAULT", "AVX2", "AVX512")  # ATen's capabilities, weakest first
AVX512_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"})
AVX2_FLAGS = frozenset({"avx2", "fma"})


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


def cpu_capability() -> str:
    """The vector ISA ATen dispatches to (``torch.backends.cpu.get_cpu_capability()``): the CPU's best, lowered by
    ``ATEN_CPU_CAPABILITY`` (which can only lower it, as in ATen)."""
    flags = cpu_flags()
    best = "AVX512" if AVX512_FLAGS <= flags else "AVX2" if AVX2_FLAGS <= flags else "DEFAULT"
    forced = (envs.raw("ATEN_CPU_CAPABILITY") or "").strip().upper()
    if forced in ISA_ORDER and ISA_ORDER.index(forced) <= ISA_ORDER.index(best):
        return forced
    return best


def visible_index(index: int) -> int | str:
    """The NVML index (or UUID) of CUDA device ``index`` as ``CUDA_VISIBLE_DEVICES`` maps it."""
    visible = envs.raw("CUDA_VISIBLE_DEVICES")
    if visible is None or visible.strip() == "":
        return index
    item = [v.strip() for v in visible.split(",") if v.strip()][index]
    return int(item) if item.isdigit() else item


def ask_nvml(ask: Callable[[Any], Any]) -> Any:
    """``ask(pynvml)`` between NVML's init and shutdown; None when NVML cannot tell (no driver, no
    ``nvidia-ml-py``, no GPU) or the question fails."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - any failure means "NVML cannot tell"
        return None
    try:
        return ask(pynvml)
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_device(index: int = 0) -> dict[str, str] | None:
    """``{"device", "capability"}`` of CUDA device ``index`` as torch names them, from NVML; None when NVML cannot
    tell."""

    def ask(pynvml: Any) -> dict[str, str]:
        which = visible_index(index)
        handle = (
            pynvml.nvmlDeviceGetHandleByUUID(which)
            if isinstance(which, str)
            else pynvml.nvmlDeviceGetHandleByIndex(which)
        )
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        return {"device": as_text(pynvml.nvmlDeviceGetName(handle)), "capability": f"{major}.{minor}"}

    return ask_nvml(ask)


def cuda_driver() -> str | None:
    """The NVIDIA driver version from NVML, or None."""
    return ask_nvml(lambda pynvml: as_text(pynvml.nvmlSystemGetDriverVersion()))


def torch_cuda_device(index: int) -> dict[str, str] | None:
    """The GPU as torch sees it, where NVML could not tell (imports torch: seconds)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    major, minor = torch.cuda.get_device_capability(index)
    return {"device": torch.cuda.get_device_name(index), "capability": f"{major}.{minor}"}
