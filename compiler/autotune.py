"""Autotuning of ``compile_sizes`` pieces, and a counter of the autotune runs Inductor/Triton really do.

Each size in ``compile_sizes`` gets an extra static-shape compile of every piece. On CUDA it is compiled with
Inductor's ``max_autotune`` (GEMM templates and pointwise configs benchmarked); Inductor's max-autotune has no
effect worth its time on the CPU build, so on the CPU the per-size compile is plain Inductor with a static shape.
The chosen kernels are inside the saved artifact, so a hot start loads them and benchmarks nothing: count it with
:class:`AutotuneCounter`, which reads Inductor's ``select_algorithm_autotune`` counter (one per GEMM/template
autotune) and counts calls of Triton's ``CachingAutotuner.benchmark_all_configs`` (runtime config benchmarking
of a kernel with several configs) and coordinate-descent benchmarks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch


def size_config_patches(example_inputs: list[Any]) -> dict[str, Any]:
    """Inductor config patches for a per-size (static shape) compile of a piece with these inputs."""
    on_cuda = any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in example_inputs)
    if not on_cuda:
        return {}
    # max-autotune without Inductor's own CUDA graphs (this pipeline captures graphs itself).
    return {"max_autotune": True, "triton.cudagraphs": False}


@dataclass
class AutotuneCounts:
    gemm_autotune: int = 0          # Inductor select_algorithm benchmarks (max-autotune GEMM/template choice)
    triton_benchmark_all: int = 0   # Triton runtime benchmarking of a kernel's configs
    coordesc: int = 0               # coordinate-descent tuning benchmarks

    @property
    def total(self) -> int:
        return self.gemm_autotune + self.triton_benchmark_all + self.coordesc

    def as_dict(self) -> dict[str, int]:
        return {"gemm_autotune": self.gemm_autotune, "triton_benchmark_all": self.triton_benchmark_all,
                "coordesc": self.coordesc, "total": self.total}


@contextlib.contextmanager
def AutotuneCounter() -> Iterator[AutotuneCounts]:  # noqa: N802 (reads as a class at the call site)
    """``with AutotuneCounter() as c: ...`` then ``c.total`` is the number of autotune runs inside."""
    from torch._dynamo.utils import counters

    result = AutotuneCounts()
    before_gemm = counters["inductor"]["select_algorithm_autotune"]
    before_cd = counters["inductor"]["coordesc_tuning_bench"]
    patched = None
    try:
        from torch._inductor.runtime import triton_heuristics as th

        orig = th.CachingAutotuner.benchmark_all_configs

        def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
            result.triton_benchmark_all += 1
            return orig(self, *args, **kwargs)

        th.CachingAutotuner.benchmark_all_configs = counting  # type: ignore[method-assign]
        patched = (th, orig)
    except Exception:  # pragma: no cover - Triton not installed
        patched = None
    try:
        yield result
    finally:
        if patched is not None:
            patched[0].CachingAutotuner.benchmark_all_configs = patched[1]  # type: ignore[method-assign]
        result.gemm_autotune = counters["inductor"]["select_algorithm_autotune"] - before_gemm
        result.coordesc = counters["inductor"]["coordesc_tuning_bench"] - before_cd
