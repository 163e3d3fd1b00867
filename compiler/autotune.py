"""Autotuning of ``compile_sizes`` pieces, and a counter of the autotune runs Inductor/Triton really do.

Each size in ``compile_sizes`` gets an extra static-shape compile of every piece. On CUDA it is compiled with
Inductor's ``max_autotune`` (GEMM templates and pointwise configs benchmarked); Inductor's max-autotune has no
effect worth its time on the CPU build, so on the CPU the per-size compile is plain Inductor with a static shape.
The chosen kernels are inside the saved artifact, so a hot start loads them and benchmarks nothing: count it with
:class:`AutotuneCounter`, which counts the real calls of ``AlgorithmSelectorCache.benchmark`` (one per GEMM/template
autotune: the choices are compiled and timed) and of Triton's ``CachingAutotuner.benchmark_all_configs`` (runtime
benchmarking of a kernel's configs), plus Inductor's coordinate-descent counter. Inductor's own
``counters["inductor"]["select_algorithm_autotune"]`` cannot be used: a cache hit replays the counter deltas
recorded at compile time (``FxGraphCache``'s ``counter_deltas``), so a hot start that benchmarks nothing would
still show the cold start's count.
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
    gemm_autotune: int = 0  # Inductor select_algorithm benchmarks (max-autotune GEMM/template choice)
    triton_benchmark_all: int = 0  # Triton runtime benchmarking of a kernel's configs
    coordesc: int = 0  # coordinate-descent tuning benchmarks

    @property
    def total(self) -> int:
        return self.gemm_autotune + self.triton_benchmark_all + self.coordesc

    def as_dict(self) -> dict[str, int]:
        return {
            "gemm_autotune": self.gemm_autotune,
            "triton_benchmark_all": self.triton_benchmark_all,
            "coordesc": self.coordesc,
            "total": self.total,
        }


@contextlib.contextmanager
def AutotuneCounter() -> Iterator[AutotuneCounts]:  # noqa: N802 (reads as a class at the call site)
    """``with AutotuneCounter() as c: ...`` then ``c.total`` is the number of autotune runs inside."""
    from compiler import torch_compat

    counters = torch_compat.dynamo_counters()
    result = AutotuneCounts()
    before_cd = counters["inductor"]["coordesc_tuning_bench"]
    patches: list[tuple[Any, str, Any]] = []

    def count(owner: Any, name: str, field: str) -> None:
        raw = owner.__dict__.get(name)  # the function, staticmethod or classmethod as defined
        if raw is None:
            return
        func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw

        def counting(*args: Any, **kwargs: Any) -> Any:
            setattr(result, field, getattr(result, field) + 1)
            return func(*args, **kwargs)

        wrapped = type(raw)(counting) if isinstance(raw, (staticmethod, classmethod)) else counting
        setattr(owner, name, wrapped)
        patches.append((owner, name, raw))

    try:
        sa, th = torch_compat.autotune_hooks()
        count(sa.AlgorithmSelectorCache, "benchmark", "gemm_autotune")
        if th is not None:
            count(th.CachingAutotuner, "benchmark_all_configs", "triton_benchmark_all")
    except Exception:  # pragma: no cover
        pass
    try:
        yield result
    finally:
        for owner, name, orig in reversed(patches):
            setattr(owner, name, orig)
        result.coordesc = counters["inductor"]["coordesc_tuning_bench"] - before_cd
