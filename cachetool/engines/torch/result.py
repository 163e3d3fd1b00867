"""What one ``--engine torch`` start did: :class:`TorchStartResult`, made from the probes' reports (Dynamo's
counters of every process) and what the root gained (the kernels built)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cachetool.engines.torch.layout import FACTS

__all__ = ["TorchStartResult", "counted"]

# (field, counter group, counter): summed over the program's processes
COUNTERS = (
    ("fx_graph_hits", "inductor", "fxgraph_cache_hit"),
    ("fx_graph_misses", "inductor", "fxgraph_cache_miss"),
    ("fx_graph_bypasses", "inductor", "fxgraph_cache_bypass"),
    ("aot_autograd_hits", "aot_autograd", "autograd_cache_hit"),
    ("aot_autograd_misses", "aot_autograd", "autograd_cache_miss"),
    ("autotune_benchmarks", "inductor", "select_algorithm_autotune"),
    ("dynamo_traces", "stats", "unique_graphs"),
)


def _count(report: dict, group: str, name: str) -> int:
    return int(((report.get("counters") or {}).get(group) or {}).get(name, 0))


def _lowered(report: dict) -> bool:
    """Whether the process lowered a graph (an FX-graph miss or bypass): only then can ``select_algorithm`` have
    benchmarked anything. On a hit Inductor adds the counter deltas recorded with the cached graph (its
    ``counter_deltas``), so a start that lowered nothing still shows the warm's autotuning count (14 on the H100 for
    a max-autotune GPT that benchmarked nothing)."""
    return _count(report, "inductor", "fxgraph_cache_miss") + _count(report, "inductor", "fxgraph_cache_bypass") > 0


def counted(reports: list[dict]) -> dict[str, int]:
    """The counters of :data:`COUNTERS`, summed over the processes' reports; autotuning only where a process
    lowered a graph (:func:`_lowered`)."""
    return {
        field: sum(_count(r, group, name) for r in reports if field != "autotune_benchmarks" or _lowered(r))
        for field, group, name in COUNTERS
    }


@dataclasses.dataclass
class TorchStartResult:
    """One run of a torch.compile program on a cache root (``warm`` or ``check --engine torch``)."""

    command: str  # "warm" or "check"
    model: str  # the program's command line (what ran)
    argv: list[str]
    program_exit: int | None  # the program's exit status (None: a server cachetool stopped)
    cache_root: str
    cache_key: str | None  # the facts' key folder (facts/{key}); None: nothing compiled
    key_existed: bool  # that folder was in the root before the start
    fx_graph_hits: int  # Inductor's FX-graph cache: graphs loaded
    fx_graph_misses: int  # ... graphs compiled
    fx_graph_bypasses: int  # ... graphs compiled without the cache (Inductor could not cache them)
    aot_autograd_hits: int
    aot_autograd_misses: int
    dynamo_traces: int  # graphs Dynamo traced (every start traces; a hit loads what it compiles)
    autotune_benchmarks: int  # max-autotune's choices benchmarked (select_algorithm)
    autotune_results_written: int  # Triton autotuning results written (*.best_config)
    cpp_kernels_built: int  # C++ kernel libraries written (CPU)
    triton_kernels_built: int  # Triton kernels written (GPU)
    kernels_loaded: int  # kernel libraries the processes mapped that were there before
    compile_seconds: float  # in Dynamo's compiles, summed over the processes
    startup_seconds: float  # exec to exit (a command), exec to ready (a server)
    seconds: float  # the whole run
    phases: dict[str, float]
    processes: list[dict[str, Any]]  # per process: pid, argv, device, compiles, counters
    requests: list[dict[str, Any]]
    log: str
    differences: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # vs the root's closest facts
    engine: str = "torch"

    @property
    def compiled(self) -> int:
        """Everything this start compiled that a warm cache would have had."""
        return (
            self.fx_graph_misses
            + self.fx_graph_bypasses
            + self.cpp_kernels_built
            + self.triton_kernels_built
            + self.autotune_benchmarks
            + self.autotune_results_written
        )

    @property
    def hit(self) -> bool:  # graphs were loaded and nothing compiled
        return self.compiled == 0 and self.fx_graph_hits > 0

    @property
    def graphs_compiled(self) -> int:
        return self.fx_graph_misses + self.fx_graph_bypasses

    @property
    def graphs_loaded(self) -> int:
        return self.fx_graph_hits

    @property
    def cache_dir(self) -> str | None:
        return str(Path(self.cache_root, FACTS, self.cache_key)) if self.cache_key else None

    def miss_reason(self) -> str | None:
        if self.hit:
            return None
        if self.compiled == 0:
            return "the program compiled nothing and loaded nothing with torch.compile (no FX graph was looked up)"
        what = [
            f"{n} {name}"
            for n, name in (
                (self.graphs_compiled, "graph(s)"),
                (self.cpp_kernels_built, "C++ kernel(s)"),
                (self.triton_kernels_built, "Triton kernel(s)"),
                (self.autotune_benchmarks + self.autotune_results_written, "autotuning result(s)"),
            )
            if n
        ]
        why = ""
        if self.differences:
            d = self.differences[0]
            why = f"; the root was warmed with another {d['category']} fact: {d['name']} {d['a']!r} vs {d['b']!r} here"
        elif not self.key_existed:
            why = "; the root records no warm with these facts"
        return f"compiled {', '.join(what)}{why}"

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(
            hit=self.hit,
            miss_reason=self.miss_reason(),
            graphs_compiled=self.graphs_compiled,
            graphs_loaded=self.graphs_loaded,
            cache_dir=self.cache_dir,
            compiled=self.compiled,
        )
        return d

    def pack_folder(self) -> Path:
        """What a warm's push packs: the whole root (Inductor's and Triton's caches, the recorded facts)."""
        return Path(self.cache_root)

    def lines(self) -> list[str]:
        if self.command == "warm":
            verdict = (
                f"warmed: compiled {self.graphs_compiled} graph(s)"
                if self.compiled
                else "already warm: compiled nothing"
            )
        else:
            verdict = "HIT: nothing compiled" if self.hit else f"MISS: {self.miss_reason()}"
        return [
            f"{self.command}: {self.model} ({len(self.processes)} process(es) with torch)",
            f"  cache root     {self.cache_root}",
            f"  cache key      {self.cache_key or '-'}" + ("" if self.key_existed else " (new)"),
            f"  FX graphs      loaded {self.fx_graph_hits}, compiled {self.graphs_compiled}; Dynamo traces "
            f"{self.dynamo_traces}; AOTAutograd hits {self.aot_autograd_hits}, misses {self.aot_autograd_misses}",
            f"  kernels        C++ built {self.cpp_kernels_built}, Triton built {self.triton_kernels_built}, "
            f"loaded {self.kernels_loaded}; autotuning {self.autotune_benchmarks + self.autotune_results_written}",
            f"  time           {self.startup_seconds:.2f} s to "
            f"{'ready' if 'ready' in self.phases else 'exit'}, {self.compile_seconds:.2f} s compiling; "
            + ", ".join(f"{k} {v:.2f} s" for k, v in self.phases.items()),
            f"  program log    {self.log}",
            f"  result         {verdict}",
        ]
