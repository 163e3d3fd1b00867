"""What a vLLM start compiled, read from its workers' counters by what each counter means in each release
(cachetool/engines/vllm/worker_facts.py), pinned on recorded starts: ``recorded_starts.json`` holds the workers'
reports of real starts (vLLM 0.32 on this CPU box; vLLM 0.26 CUDA on the H200 by the GPU acceptance command,
benchmarks/gpu_acceptance.sh), each with what the start or the real server did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachetool.engines.vllm import releases, worker_facts
from cachetool.engines.vllm.result import VllmStartResult

RECORDED = json.loads((Path(__file__).parent / "recorded_starts.json").read_text())


def evidence(start: dict) -> list[str]:
    done = worker_facts.from_workers(start["workers"])
    return worker_facts.compiled_evidence(
        done, new_kernels=start["new_kernels"], aot_expected=releases.aot_loads(start["vllm"], start["device"])
    )


@pytest.mark.parametrize("start", RECORDED, ids=[s["name"] for s in RECORDED])
def test_a_recorded_start_is_judged_as_it_went(start):
    """Each recorded start's verdict is what the start (or the real server on that root) did: a hit compiled and
    wrote nothing, a cold or perturbed start did."""
    found = evidence(start)
    hit = start["key_existed"] and not found
    assert hit == (start["verdict"] in ("hit", "compiled nothing")), (start["name"], found)


def recorded(vllm: str, verdict: str) -> list[dict]:
    return [s for s in RECORDED if s["vllm"] == vllm and s["verdict"] == verdict]


def test_vllm_0_26_counts_loaded_pieces_as_inductor_compiles_and_cachetool_does_not():
    """The pin of the false miss: on the H200 a pulled root that vLLM 0.26 served from its AOT artifact, writing
    nothing, reports a non-zero num_inductor_compiles (pieces handed to its adaptor and stopped by its dedupe). The
    verdict must not read it."""
    hits = recorded("0.26.0", "compiled nothing")
    assert hits, "the recorded vLLM 0.26 CUDA hit (benchmarks/gpu_acceptance.sh records it)"
    for start in hits:
        done = worker_facts.from_workers(start["workers"])
        assert done.vllm_counters.get("num_inductor_compiles", 0) > 0, start["name"]
        assert done.aot_loaded and evidence(start) == [], start["name"]


def test_a_perturbed_0_26_start_is_told_from_a_hit_by_the_pieces_it_saved_not_by_inductor_compiles():
    """The third recorded GPU set: a pulled root without vLLM's piecewise folder (check's workers and the real
    server's, both on the H100). The AOT artifact loads and Inductor's FX cache hits, so no kernel is written; what
    tells it from the hit is that vLLM saved its 3 pieces again instead of loading them. num_inductor_compiles
    (17 here, 14 on the hit) says nothing either way."""
    perturbed = [s for s in RECORDED if s["vllm"] == "0.26.0" and "without its piecewise folder" in s["name"]]
    assert len(perturbed) == 2, "check's and the server's counter sets (benchmarks/gpu_acceptance.sh vllm)"
    for start in perturbed:
        done = worker_facts.from_workers(start["workers"])
        counters = done.vllm_counters
        assert done.aot_loaded and start["new_kernels"] == 0, start["name"]
        assert counters["num_compiled_artifacts_saved"] == 3 and counters["num_compiled_artifacts_loaded"] == 0
        assert start["verdict"] == "compiled" and evidence(start) == ["vLLM saved 3 compiled piece(s)"], start["name"]


def test_a_cpu_hit_saves_its_aot_artifact_again_and_is_still_a_hit():
    """vLLM 0.32 on the CPU never loads its AOT artifact: every start traces and saves it again (its kernels are the
    cache), so a save is a compile only where the release loads it."""
    start = recorded("0.32.0", "hit")[0]
    done = worker_facts.from_workers(start["workers"])
    assert done.aot_saved and not done.aot_loaded and evidence(start) == []
    as_if_gpu = worker_facts.compiled_evidence(done, new_kernels=0, aot_expected=True)
    assert as_if_gpu == ["an AOT artifact saved (vLLM traced the model again)"]


def test_a_start_that_saved_a_compiled_piece_is_not_a_hit():
    """On the GPU a root without vLLM's piecewise folder loads the AOT artifact and writes no kernel into the root,
    yet compiles a piece and saves it ("Compiling a graph for compile range ..."): a miss, named."""
    fields = dict(
        command="check",
        model="/m",
        cache_root="/r",
        flags=[],
        vllm_version="0.26.0",
        cache_key="ab" * 32,
        cache_keys=["ab" * 32],
        key_existed=True,
        inductor_compiled=0,
        inductor_loaded=0,
        dynamo_traces=0,
        aot_loaded=True,
        aot_saved=False,
        aot_error=None,
        aot_artifacts_loaded=1,
        compiled_artifacts_loaded=3,
        inductor_graphs_compiled=0,
        inductor_graphs_loaded=0,
        startup_seconds=1.0,
        seconds=2.0,
        phases={},
        tensor_parallel_size=1,
        ranks=[],
        log="/l",
    )
    assert VllmStartResult(**fields).hit and VllmStartResult(**fields).graphs_loaded == 3
    facts = worker_facts.from_workers(
        [
            {
                "rank": 0,
                "aot": [{"key": "ab" * 32, "loaded": True}],
                "inductor": {},
                "vllm_counters": {"num_compiled_artifacts_saved": 1},
            }
        ]
    )
    compiled = worker_facts.compiled_evidence(facts, new_kernels=0, aot_expected=True)
    missed = VllmStartResult(**{**fields, "compiled": compiled})
    assert not missed.hit and "vLLM saved 1 compiled piece(s)" in missed.miss_reason()
