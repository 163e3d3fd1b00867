"""A warm's record (:func:`record_key_inputs`): ``cache_key_factors.json`` beside every rank folder of the key
folder vLLM used, with the key inputs (:mod:`~cachetool.engines.vllm.key`) that a pull compares before
downloading."""

from __future__ import annotations

import json
from pathlib import Path

from cachetool.engines.vllm import install_facts, key, launch
from cachetool.engines.vllm.child.env import child_env
from cachetool.engines.vllm.result import VllmStartResult
from cachetool.facts import machine  # the torch-free machine facts, every engine's


def record_key_inputs(out: VllmStartResult, result: dict, model: str, flags: list[str]) -> None:
    """Write the key inputs beside every rank folder vLLM used (what a pull compares before downloading)."""
    traced: dict[str, str | None] = {}
    for w in result["workers"]:
        traced.update(w["traced_files"])
    gpu = machine.cuda_device(0)
    here = {
        "device": "cuda" if gpu else "cpu",
        **install_facts.machine_facts("cuda" if gpu else "cpu"),
        "gpu": gpu["device"] if gpu else None,
        "capability": gpu["capability"] if gpu else None,
    }
    here.pop("engine", None)
    server_only = result.get("server_only_options") or {}
    inputs = launch.LaunchInputs.of(
        model,
        flags,
        child_env(None, out.tensor_parallel_size),
        server_only,
        hashed=result["key_inputs"]["env"]["values"],
    )
    factors = key.recorded_factors(
        result["key_inputs"],
        traced,
        here,
        flags,
        out.tensor_parallel_size,
        launch=inputs.to_values(server_only),
        hashing=result.get("hashing"),
    )
    for p in out.aot_paths:
        rank_dir = Path(p).parent
        doc = {"schema": key.SCHEMA, "engine": "vllm", "hash": rank_dir.parent.name, "factors": factors}
        (rank_dir / key.FACTORS_FILE).write_text(json.dumps(doc, indent=1, sort_keys=True, default=str))
