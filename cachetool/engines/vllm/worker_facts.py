"""What one vLLM start did, from what vLLM itself reports: the workers' answers to ``cachetool_report``
(:mod:`cachetool.engines.vllm.child.in_vllm.cachetool_vllm_probe`, through ``collective_rpc``), summed over the ranks.

Facts, not log lines: the AOT key folder and artifact (the compiled model's attributes and vLLM's key function),
whether vLLM loaded or saved it (its flag on the model, its counters ``num_aot_artifacts_loaded`` /
``num_aot_artifacts_saved``), the piecewise graphs its backend compiled or loaded (its counters
``num_inductor_compiles``, ``num_backend_compilations``), the compiled artifacts it loaded and the seconds its
compile monitor added up. The same facts come
from a headless start (``warm``, ``check``) and from the real ``vllm serve`` (the oracle in ``tests/vllm_oracle/server.py``).

What each counter means decides the verdict (:func:`compiled_evidence`), and the names mislead. In every tested
release vLLM's ``num_inductor_compiles`` counts the pieces *handed to* its Inductor adaptor, not pieces compiled:
vLLM 0.26 on CUDA loads its AOT artifact, loads the unique pieces it cached (``num_compiled_artifacts_loaded``),
and hands every other piece to the adaptor, which bumps the counter and then stops at vLLM's own dedupe
(``StopCompiling``, raised from AOTAutograd's cache-key function before Inductor runs): a Llama-3.2-1B hit that
wrote nothing counts 14 of them. What a start *wrote* does not mislead: ``num_compiled_artifacts_saved`` is a
compiled piece saved (0.26's piecewise artifacts; the mega artifact's pieces where a release saves one), and
``num_aot_artifacts_saved`` an AOT artifact saved after a trace, which means a compile where the release loads its
artifact (the GPU) and nothing where it never does (the CPU releases re-trace and save at every start: their
kernels are the cache; :func:`cachetool.engines.vllm.releases.aot_loads`). Inductor's own ``fxgraph_cache_miss``
and ``fxgraph_cache_bypass`` count graphs it lowered through its FX-graph cache (vLLM's sampler and MoE helpers
too); vLLM's AOT path on torch 2.13 bypasses that cache without counting, so their absence proves nothing there,
and new kernel binaries under the root (:mod:`~cachetool.engines.vllm.root_files`) carry the CPU's verdict.

One thing only the log has: vLLM's *reason* for not loading its AOT artifact (it logs it and goes on; no counter or
attribute keeps it). :func:`aot_failure` reads that line, ``Compiling model again due to a load failure from PATH,
reason: ...``, printed by every tested release (docs/vllm.md, "Tested vLLM releases"); a release that words it
otherwise leaves the reason unknown, never the verdict.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

AOT_FAILURE = re.compile(r"Compiling model again due to a load failure from (\S+), reason: (.*)$", re.M)


@dataclasses.dataclass
class StartFacts:
    aot_paths: list[str]  # the AOT files the ranks loaded or saved (``{key}/rank_{r}_{dp}/model``)
    cache_keys: list[str]  # their key folders
    cache_key: str | None  # rank 0's
    aot_loaded: bool  # vLLM loaded its AOT artifact on every compiled rank (no trace)
    aot_saved: bool
    aot_artifacts_loaded: int  # vLLM's counter num_aot_artifacts_loaded
    compiled_artifacts_loaded: int  # vLLM's counter num_compiled_artifacts_loaded (GPU: the graphs of the artifact)
    graphs_compiled: int  # graphs Inductor lowered (its fxgraph_cache_miss + fxgraph_cache_bypass)
    graphs_loaded: int  # graphs Inductor took from its cache (fxgraph_cache_hit)
    vllm_counters: dict[str, int]  # vLLM's CompilationCounter, summed (shown, never read as a verdict)
    dynamo_traces: int
    compilation_seconds: float  # vLLM's compilation_time, the slowest rank's
    mapped_kernels: set[str]  # kernel libraries the workers mapped


def counter(workers: list[dict], name: str) -> int:
    return sum(int((w.get("vllm_counters") or {}).get(name, 0)) for w in workers)


def inductor_counter(workers: list[dict], name: str) -> int:
    return sum(int((w.get("inductor") or {}).get(name, 0)) for w in workers)


def graphs_compiled(workers: list[dict]) -> int:
    """The graphs Inductor compiled in the workers: its FX-graph cache misses and bypasses (module docstring: not
    vLLM's ``num_inductor_compiles``)."""
    return inductor_counter(workers, "fxgraph_cache_miss") + inductor_counter(workers, "fxgraph_cache_bypass")


def summed_counters(workers: list[dict]) -> dict[str, int]:
    names = sorted({name for w in workers for name in (w.get("vllm_counters") or {})})
    return {name: counter(workers, name) for name in names}


def from_workers(workers: list[dict[str, Any]]) -> StartFacts:
    """The start's facts from every worker's report (rank order)."""
    aot = [(w["rank"], a) for w in workers for a in w.get("aot") or []]
    paths = sorted({a["path"] for _, a in aot if a.get("path")})
    keys = sorted({a["key"] for _, a in aot if a.get("key")})
    rank0 = next((a["key"] for r, a in aot if r == 0 and a.get("key")), keys[0] if keys else None)
    return StartFacts(
        aot_paths=paths,
        cache_keys=keys,
        cache_key=rank0,
        aot_loaded=bool(aot) and all(a.get("loaded") for _, a in aot),
        aot_saved=counter(workers, "num_aot_artifacts_saved") > 0,
        aot_artifacts_loaded=counter(workers, "num_aot_artifacts_loaded"),
        compiled_artifacts_loaded=counter(workers, "num_compiled_artifacts_loaded"),
        graphs_compiled=graphs_compiled(workers),
        graphs_loaded=inductor_counter(workers, "fxgraph_cache_hit"),
        vllm_counters=summed_counters(workers),
        dynamo_traces=sum(int(w.get("dynamo_unique_graphs", 0)) for w in workers),
        compilation_seconds=max((float(w.get("compilation_seconds", 0.0)) for w in workers), default=0.0),
        mapped_kernels={p for w in workers for p in mapped(w)},
    )


def mapped(worker: dict[str, Any]) -> list[str]:
    kernels = worker.get("mapped_kernels")
    return kernels if isinstance(kernels, list) else []  # a recorded report keeps only their count


def recorded(worker: dict[str, Any]) -> dict[str, Any]:
    """A worker's report as a result keeps it (``ranks`` of ``--json``): everything :func:`from_workers` reads, the
    mapped kernels counted and the traced files left out; :func:`from_workers` reads it back."""
    keep = ("rank", "aot", "inductor", "vllm_counters", "dynamo_unique_graphs", "compilation_seconds")
    return {**{k: worker[k] for k in keep if k in worker}, "mapped_kernels": len(worker.get("mapped_kernels", []))}


def aot_failure(log: Path | str) -> str | None:
    """vLLM's reason for not loading its AOT artifact, from its log (the last such line), or None."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return None
    found = AOT_FAILURE.findall(text)
    return found[-1][1].strip() if found else None


def compiled_evidence(facts: StartFacts | None, *, new_kernels: int, aot_expected: bool | None) -> list[str]:
    """What a start compiled or wrote, a few words each; empty: nothing (with its key folder there before, a hit).
    The one rule of a headless start's verdict and of the real server's (the oracle in ``tests/vllm_oracle/server.py``):
    kernel binaries written under the root, graphs Inductor compiled, compiled pieces vLLM saved, and an AOT
    artifact saved where this release loads it (``aot_expected``: :func:`~cachetool.engines.vllm.releases.aot_loads`;
    None, an untested release, counts a save too). vLLM's ``num_inductor_compiles`` is not read (module docstring)."""
    found = [f"{new_kernels} kernel binar{'y' if new_kernels == 1 else 'ies'} written"] if new_kernels else []
    if facts is None:
        return found
    if facts.graphs_compiled:
        found.append(f"Inductor compiled {facts.graphs_compiled} graph(s)")
    saved = facts.vllm_counters.get("num_compiled_artifacts_saved", 0)
    if saved:
        found.append(f"vLLM saved {saved} compiled piece(s)")
    if facts.aot_saved and aot_expected is not False:
        found.append("an AOT artifact saved (vLLM traced the model again)")
    return found
