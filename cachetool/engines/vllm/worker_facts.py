"""What one vLLM start did, from what vLLM itself reports: the workers' answers to ``cachetool_report``
(:mod:`cachetool.engines.vllm.cachetool_vllm_probe`, through ``collective_rpc``), summed over the ranks.

Facts, not log lines: the AOT key folder and artifact (the compiled model's attributes and vLLM's key function),
whether vLLM loaded or saved it (its flag on the model, its counters ``num_aot_artifacts_loaded`` /
``num_aot_artifacts_saved``), the piecewise graphs its backend compiled or loaded (its counters
``num_inductor_compiles``, ``num_backend_compilations``), the compiled artifacts it loaded and the seconds its
compile monitor added up. The same facts come
from a headless start (``warm``, ``check``) and from the real ``vllm serve`` (:mod:`cachetool.engines.vllm.server`).

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
    aot_paths: list[str]            # the AOT files the ranks loaded or saved (``{key}/rank_{r}_{dp}/model``)
    cache_keys: list[str]           # their key folders
    cache_key: str | None           # rank 0's
    aot_loaded: bool                # vLLM loaded its AOT artifact on every compiled rank (no trace)
    aot_saved: bool
    aot_artifacts_loaded: int       # vLLM's counter num_aot_artifacts_loaded
    compiled_artifacts_loaded: int  # vLLM's counter num_compiled_artifacts_loaded (GPU: the graphs of the artifact)
    piecewise_loaded: int           # graphs vLLM's piecewise backend took from its cache
    piecewise_compiled: int         # graphs it handed to Inductor (its counter num_inductor_compiles)
    dynamo_traces: int
    compilation_seconds: float      # vLLM's compilation_time, the slowest rank's
    mapped_kernels: set[str]        # kernel libraries the workers mapped


def counter(workers: list[dict], name: str) -> int:
    return sum(int((w.get("vllm_counters") or {}).get(name, 0)) for w in workers)


def from_workers(workers: list[dict[str, Any]]) -> StartFacts:
    """The start's facts from every worker's report (rank order)."""
    aot = [(w["rank"], a) for w in workers for a in w.get("aot") or []]
    paths = sorted({a["path"] for _, a in aot if a.get("path")})
    keys = sorted({a["key"] for _, a in aot if a.get("key")})
    rank0 = next((a["key"] for r, a in aot if r == 0 and a.get("key")), keys[0] if keys else None)
    inductor = counter(workers, "num_inductor_compiles")
    backend = counter(workers, "num_backend_compilations")
    return StartFacts(
        aot_paths=paths, cache_keys=keys, cache_key=rank0,
        aot_loaded=bool(aot) and all(a.get("loaded") for _, a in aot),
        aot_saved=counter(workers, "num_aot_artifacts_saved") > 0,
        aot_artifacts_loaded=counter(workers, "num_aot_artifacts_loaded"),
        compiled_artifacts_loaded=counter(workers, "num_compiled_artifacts_loaded"),
        piecewise_loaded=max(0, backend - inductor - counter(workers, "num_eager_compiles")),
        piecewise_compiled=inductor,
        dynamo_traces=sum(int(w.get("dynamo_unique_graphs", 0)) for w in workers),
        compilation_seconds=max((float(w.get("compilation_seconds", 0.0)) for w in workers), default=0.0),
        mapped_kernels={p for w in workers for p in w.get("mapped_kernels", [])})


def aot_failure(log: Path | str) -> str | None:
    """vLLM's reason for not loading its AOT artifact, from its log (the last such line), or None."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return None
    found = AOT_FAILURE.findall(text)
    return found[-1][1].strip() if found else None
