"""The environment fingerprint: the coarse facts a cache is only valid under.

A fingerprint is a flat dict::

    {"os": "linux", "arch": "x86_64", "device": "cpu" | "cuda", "torch": "2.13.0+cpu", "cuda": "13.0" | None,
     "triton": "3.6.0" | None, "gpu": "NVIDIA H200" | None, "capability": "sm90" | None}

It is what a store shows per platform (``manifest.platform_key``) and what preflight compares before any download;
the finer truth is the compiler hash factors (``cache_key_factors.json``), which preflight compares too.
Collecting it imports torch only when the device must be probed (``device=None`` or ``"cuda"``).
"""

from __future__ import annotations

import importlib.metadata
import platform
import re

from cachetool.errors import UsageError

FIELDS = ("os", "arch", "device", "torch", "cuda", "triton", "gpu", "capability")
# Fields preflight compares (a difference means the cache cannot hit). "gpu" is covered by "capability".
CHECKED = ("device", "os", "arch", "torch", "cuda", "triton", "capability")


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_device(device: str | None) -> str | None:
    """A device the user names (``--device``): ``cpu``, ``cuda`` or ``cuda:N``; anything else is a UsageError."""
    if device is None or device == "cpu" or re.fullmatch(r"cuda(:[0-9]{1,3})?", device):
        return device
    raise UsageError(f"--device {device!r} is not a device: use cpu, cuda or cuda:N")


def local_fingerprint(device: str | None = None) -> dict:
    """This machine's fingerprint. ``device``: ``"cpu"`` (no probe, no torch import), ``"cuda"`` or None (probe).

    Probing reports what is there: ``device="cuda"`` on a machine without a usable GPU gives ``"cpu"``.
    """
    fp = {
        "os": platform.system().lower(),
        "arch": platform.machine(),
        "device": device,
        "torch": _dist_version("torch"),
        "cuda": None,
        "triton": _dist_version("triton") or _dist_version("pytorch-triton"),
        "gpu": None,
        "capability": None,
    }
    if device in (None, "cuda") or (device or "").startswith("cuda"):
        try:
            import torch

            fp["torch"] = torch.__version__
            fp["cuda"] = torch.version.cuda
            if torch.cuda.is_available():
                fp["device"] = "cuda"
                fp["gpu"] = torch.cuda.get_device_name(0)
                major, minor = torch.cuda.get_device_capability(0)
                fp["capability"] = f"sm{major}{minor}"
            else:
                fp["device"] = "cpu"  # asked about CUDA on a machine without a usable GPU: report the truth
        except ImportError:
            fp["device"] = "cpu"
    if fp["device"] != "cuda":
        fp["device"] = "cpu"
        fp["cuda"] = None
    return fp


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
    return fp


def compare(bundle_fp: dict, local_fp: dict) -> list[tuple[str, object, object]]:
    """Checked fields that differ: ``[(field, bundle value, local value)]``. A field the bundle leaves None is skipped."""
    out = []
    for k in CHECKED:
        b = bundle_fp.get(k)
        if b is None:
            continue
        if b != local_fp.get(k):
            out.append((k, b, local_fp.get(k)))
    return out
