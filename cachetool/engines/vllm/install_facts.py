"""The facts a vLLM cache is only valid under, read without importing vLLM or torch.

A pull's preflight runs in an init-container before the server, often without a GPU context and always in a
hurry: ``import vllm`` costs 5-15 s, ``import torch`` 2 s. Everything here reads files:

- the vLLM version from ``vllm/_version.py`` (what ``vllm.__version__`` is) and the torch build from
  ``torch/version.py``, both of the interpreter that runs vLLM (:func:`vllm_python`: ``CACHETOOL_VLLM_PYTHON``,
  whose ``sys.path`` is asked once, tens of milliseconds; else this one's), found without importing either;
- the device: the GPU's name and capability and the driver from NVML, or the CPU's vector ISA from its flags
  (:func:`cachetool.facts.machine.cpu_isa`, every engine's reading).

These land in a vLLM bundle's fingerprint (flat strings; see :data:`FINGERPRINT_FIELDS`) and are compared by
every pull before any blob, with or without ``--model``.
"""

from __future__ import annotations

import functools
import importlib.machinery
import json
import subprocess
import sys
from pathlib import Path

from cachetool import envs
from cachetool.engines.vllm.variables import PYTHON
from cachetool.facts import machine  # the torch-free machine facts, every engine's
from cachetool.facts.machine import cpu_isa

# Fingerprint fields a vLLM bundle adds to the common ones (cachetool.bundle.fingerprint.COMMON_FIELDS).
FINGERPRINT_FIELDS = ("vllm", "cpu_isa", "gpu_driver")

__all__ = [
    "FINGERPRINT_FIELDS",
    "cpu_isa",
    "interpreter_path",
    "machine_facts",
    "torch_version",
    "vllm_python",
    "vllm_version",
]


def vllm_python() -> str:
    """The interpreter that runs vLLM: ``CACHETOOL_VLLM_PYTHON``, else this one. Its vLLM and torch are the ones
    a cache is made and checked with, whatever cachetool's own venv holds."""
    return envs.get(PYTHON.name, (PYTHON,)) or sys.executable


@functools.lru_cache(maxsize=8)
def interpreter_path(python: str) -> tuple[str, ...]:
    """``sys.path`` of ``python`` (this one's own, or asked of it: tens of milliseconds; empty if it does not run)."""
    if python == sys.executable:
        return tuple(sys.path)
    try:
        out = subprocess.run(
            [python, "-c", "import json, sys; print(json.dumps(sys.path))"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        return tuple(json.loads(out.stdout)) if out.returncode == 0 else ()
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return ()


def installed_file(module: str) -> Path | None:
    """The source file of ``module`` (``pkg.mod``) in the vLLM interpreter's installation, without importing it."""
    python = vllm_python()
    if python == sys.executable:
        return machine.module_file(module)
    top, *rest = module.split(".")
    spec = importlib.machinery.PathFinder.find_spec(top, [p or "." for p in interpreter_path(python)])
    for location in (spec.submodule_search_locations or ()) if spec else ():
        base = Path(location).joinpath(*rest)
        found = next((c for c in (base.with_suffix(".py"), base / "__init__.py") if c.is_file()), None)
        if found:
            return found
    return None


def _version_in(module: str) -> str | None:
    path = installed_file(module)
    value = machine.literal_assignments(path).get("__version__") if path else None
    return value if isinstance(value, str) else None


def vllm_version() -> str | None:
    """``vllm.__version__`` as the vLLM interpreter's installed package would give it; None without vLLM."""
    return _version_in("vllm._version")


def torch_version() -> str | None:
    """``torch.__version__`` of the vLLM interpreter's torch (the build vLLM's caches are made with)."""
    return _version_in("torch.version")


def machine_facts(device: str | None) -> dict[str, str | None]:
    """The vLLM fingerprint fields of this machine for ``device`` (``cpu``, ``cuda``/``cuda:N`` or None: probe)."""
    facts: dict[str, str | None] = {"vllm": vllm_version(), "cpu_isa": None, "gpu_driver": None}
    if vllm_python() != sys.executable:  # vLLM's own torch, not cachetool's (CACHETOOL_VLLM_PYTHON)
        facts["torch"] = torch_version()
    on_gpu = device is None or device.startswith("cuda")
    gpu = machine.cuda_device(int(device.split(":")[1]) if device and ":" in device else 0) if on_gpu else None
    if gpu is not None:
        facts["gpu_driver"] = machine.cuda_driver()
    else:
        facts["cpu_isa"] = cpu_isa()
    return facts
