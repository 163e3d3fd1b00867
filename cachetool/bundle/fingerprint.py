"""The environment fingerprint: the coarse facts a cache is only valid under.

A fingerprint is a flat dict::

    {"os": "linux", "arch": "x86_64", "device": "cpu" | "cuda", "torch": "2.13.0+cpu", "cuda": "13.0" | None,
     "triton": "3.6.0" | None, "gpu": "NVIDIA H200" | None, "capability": "sm90" | None, ...}

the common fields (:data:`COMMON_FIELDS`, every engine's caches depend on them), then the fields of the engine whose
caches the bundle holds (``fingerprint_fields`` and ``recorded_fields`` of
:class:`~cachetool.bundle.engine_rules.EngineRules`, read from the registered engines).

It is what a store shows per platform (``manifest.platform_key``) and what preflight compares before any download;
the finer truth is the compiler hash factors (``cache_key_factors.json``), which preflight compares too.
Collecting it imports no torch (versions from files, the GPU from NVML; torch only where NVML cannot answer).
"""

from __future__ import annotations

import re

from cachetool.bundle import engine_rules
from cachetool.errors import UsageError
from cachetool.facts import machine

COMMON_FIELDS = ("os", "arch", "device", "torch", "cuda", "triton", "gpu", "capability")
# Common fields preflight compares (a difference means the cache cannot hit). "gpu" is covered by "capability".
# An engine adds its own (Engine.fingerprint_fields: compared; Engine.recorded_fields: recorded only, such as the
# GPU driver: a newer driver runs the same kernels), read from the registry (checked_fields, engine_fields).
COMMON_CHECKED = ("device", "os", "arch", "torch", "cuda", "triton", "capability")
# Checked fields that can change what is loaded only on a GPU: a CPU cache's kernels are Inductor's C++, which no
# Triton reads (its compiler factor records no Triton), so a CPU bundle hits whatever Triton is here or not.
GPU_ONLY = ("cuda", "triton", "capability")


def engine_fields() -> tuple[str, ...]:
    """The fields engines add to the common ones (compared or recorded), in the registry's order: a bundle takes
    them from its compiler factor values as they are (:func:`fingerprint_from_factors`)."""
    engines = engine_rules.catalog().ENGINES.values()
    return tuple(dict.fromkeys(f for e in engines for f in (*e.fingerprint_fields, *e.recorded_fields)))


def checked_fields() -> tuple[str, ...]:
    """Every field preflight compares: the common ones, then each engine's own (``fingerprint_fields``)."""
    engines = engine_rules.catalog().ENGINES.values()
    return tuple(dict.fromkeys((*COMMON_CHECKED, *(f for e in engines for f in e.fingerprint_fields))))


def check_device(device: str | None) -> str | None:
    """A device the user names (``--device``): ``cpu``, ``cuda`` or ``cuda:N``; anything else is a UsageError."""
    if device is None or device == "cpu" or re.fullmatch(r"cuda(:[0-9]{1,3})?", device):
        return device
    raise UsageError(f"--device {device!r} is not a device: use cpu, cuda or cuda:N")


def require_device(device: str | None) -> str | None:
    """``check_device``, and a CUDA device that this machine has: ``--device cuda`` where NVML and torch see no
    GPU is a usage error in one line (a pull must not quietly take the CPU platform instead)."""
    device = check_device(device)
    if device is not None and device.startswith("cuda") and local_fingerprint(device)["device"] != "cuda":
        raise UsageError(f"--device {device}: this machine has no CUDA device (NVML and torch see none)")
    return device


def local_fingerprint(device: str | None = None) -> dict:
    """This machine's fingerprint. ``device``: ``"cpu"``, ``"cuda"``/``"cuda:N"`` or None (probe for a GPU).
    Read without importing torch (:func:`cachetool.facts.machine.common_facts`); probing reports what is there:
    ``device="cuda"`` on a machine without a usable GPU gives ``"cpu"``."""
    return machine.common_facts(device)


def fingerprint_from_factors(compiler_values: dict | None, fallback: dict) -> dict:
    """The fingerprint a cache was built under, from its compiler factor values where they say it.

    ``compiler/`` writes torch/triton versions and the device into the ``compiler`` factor; those win over the
    packing machine's own facts (``fallback``), so packing a GPU cache on a CPU box still describes the GPU.
    """
    fp = dict(fallback)
    v = compiler_values or {}

    def pick(*names):
        for n in names:
            if isinstance(v.get(n), (str, int, float)) and v.get(n) not in ("", None):
                return str(v[n])
        return None

    torch_v = pick("torch", "torch_version")
    if torch_v:
        fp["torch"] = torch_v
    triton_v = pick("triton", "triton_version")
    if triton_v:
        fp["triton"] = triton_v if triton_v.lower() not in ("none", "null") else None
    cuda_v = pick("cuda", "cuda_version", "torch_cuda")
    dev = pick("device_type", "device")
    cap = pick("capability", "device_capability", "compute_capability")
    gpu = pick("device_name", "gpu")
    if dev:
        d = dev.lower()
        if d.startswith("cuda") or "nvidia" in d or d.startswith("sm"):
            fp["device"] = "cuda"
        elif d.startswith("cpu"):
            fp["device"] = "cpu"
    if fp.get("device") == "cuda":
        if cuda_v and cuda_v.lower() not in ("none", "null"):
            fp["cuda"] = cuda_v
        if cap:
            c = cap.replace(".", "").replace(",", "").replace("(", "").replace(")", "").replace(" ", "")
            fp["capability"] = c if c.startswith("sm") else f"sm{c}"
        gpu = gpu or pick("device")
        if gpu and gpu.lower() != "cuda" and not gpu.lower().startswith("cuda:"):
            fp["gpu"] = gpu
    else:
        fp["device"] = "cpu"
        fp["cuda"] = fp["gpu"] = fp["capability"] = None
    for name in engine_fields():
        if pick(name):
            fp[name] = pick(name)
    return fp


def fields_that_matter(bundle_fp: dict, ignored: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The checked fields that can change what a cache built under ``bundle_fp`` loads: the GPU's only for a CUDA
    cache; ``ignored``: those only other engines' caches depend on (``EngineCatalog.fields_ignored_by``)."""
    on_gpu = bundle_fp.get("device") == "cuda"
    return tuple(f for f in checked_fields() if (on_gpu or f not in GPU_ONLY) and f not in ignored)


def compare(bundle_fp: dict, local_fp: dict, ignored: tuple[str, ...] = ()) -> list[tuple[str, object, object]]:
    """The one fingerprint comparison (install preflight, ``diff``, pull's reasons): the fields that matter
    (:func:`fields_that_matter`) that differ, ``[(field, bundle value, local value)]``. A field the bundle leaves
    None is skipped (it recorded nothing to require); a local None is a fact (this machine has no Triton)."""
    out = []
    for k in fields_that_matter(bundle_fp, ignored):
        b = bundle_fp.get(k)
        if b is not None and b != local_fp.get(k):
            out.append((k, b, local_fp.get(k)))
    return out
