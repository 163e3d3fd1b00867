"""Torch-engine roots built from the documented layout, for the tests that need one without running a program:
a probe's report of this machine's torch (any field overridden) and a root as a warm leaves it."""

from __future__ import annotations

from pathlib import Path

from cachetool.bundle.fingerprint import local_fingerprint
from cachetool.engines.torch import key


def report(**over) -> dict:
    """A probe's report of a CPU process, as this machine's torch would give it."""
    return {
        "pid": 1,
        "python": "3.11",
        "torch": local_fingerprint("cpu")["torch"],
        "cuda": None,
        "triton": None,
        "device": "cpu",
        "gpu": None,
        "capability": None,
        "compiles": 1,
        "counters": {"inductor": {"fxgraph_cache_miss": 1}},
        "inductor": {"max_autotune": False},
        **over,
    }


def make_torch_root(root: Path, **over) -> tuple[Path, str]:
    """A root as a warm leaves it: Inductor's code folders and FX-graph entries, a Triton kernel, the facts."""
    for rel, data in (
        ("inductor/ab/cabc.py", b"code"),
        ("inductor/ab/cabc.so", b"\x7fELF"),
        ("inductor/fxgraph/ud/fud1/entry", b"graph"),
        ("inductor/aotautograd/a1/e1", b"aot"),
        ("inductor/locks/cabc.lock", b""),
        ("triton/K1/k.json", b"{}"),
        ("triton/K1/k.cubin", b"c"),
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    factors = key.recorded_factors(report(**over), {"command": ["python", "serve.py"]})
    return root, key.write_facts(root, factors)[0]
