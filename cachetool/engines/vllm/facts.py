"""The facts a vLLM cache is only valid under, read without importing vLLM or torch.

A pull's preflight runs in an init-container before the server, often without a GPU context and always in a
hurry: ``import vllm`` costs 5-15 s, ``import torch`` 2 s. Everything here reads files:

- the vLLM version from ``vllm/_version.py`` (what ``vllm.__version__`` is; found on ``sys.path`` without
  importing the package);
- the torch build from ``torch/version.py`` (:func:`cachetool.engines.machine.torch_version`);
- the device: the GPU's name and capability and the driver from NVML, or the CPU's vector ISA from its flags
  (:func:`cachetool.engines.machine.cpu_isa`, every engine's reading).

These land in a vLLM bundle's fingerprint (flat strings; see :data:`FINGERPRINT_FIELDS`) and are compared by
every pull before any blob, with or without ``--model``.
"""

from __future__ import annotations

from cachetool.engines import machine  # the torch-free machine facts, every engine's
from cachetool.engines.machine import cpu_isa

# Fingerprint fields a vLLM bundle adds to the common ones (cachetool.bundle.fingerprint.COMMON_FIELDS).
FINGERPRINT_FIELDS = ("vllm", "cpu_isa", "gpu_driver")

__all__ = ["FINGERPRINT_FIELDS", "cpu_isa", "machine_facts", "vllm_version"]


def vllm_version() -> str | None:
    """``vllm.__version__`` as the installed package would give it, or None when vLLM is not installed."""
    path = machine.module_file("vllm._version")
    if path is None:
        return None
    value = machine.literal_assignments(path).get("__version__")
    return value if isinstance(value, str) else None


def machine_facts(device: str | None) -> dict[str, str | None]:
    """The vLLM fingerprint fields of this machine for ``device`` (``cpu``, ``cuda``/``cuda:N`` or None: probe)."""
    facts: dict[str, str | None] = {"vllm": vllm_version(), "cpu_isa": None, "gpu_driver": None}
    on_gpu = device is None or device.startswith("cuda")
    gpu = machine.cuda_device(int(device.split(":")[1]) if device and ":" in device else 0) if on_gpu else None
    if gpu is not None:
        facts["gpu_driver"] = machine.cuda_driver()
    else:
        facts["cpu_isa"] = cpu_isa()
    return facts
