"""The TP=2 model on two gloo processes, traced by Dynamo in one graph (mode 2: no Inductor, fast), with each
all-reduce implementation: outputs equal TP=1; the collective is in the graph (fullgraph, no break). A full
safetensors checkpoint shards into the same weights as the seeded random init."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from compiler.distributed.launch import RankFailed, launch
from tests.hf_folders import write_hf_folder


def _run_tp(rank: int, device: str, hf_folder: str) -> dict:
    from compiler.config import CompilationConfig
    from compiler.counters import counters
    from compiler.distributed import parallel_state as ps
    from compiler.distributed.communication_op import set_all_reduce_impl
    from compiler.runner import ModelRunner

    assert ps.get_tp_size() == 2 and ps.get_tp_rank() == rank
    out = {}
    for impl in IMPLS:
        set_all_reduce_impl(impl)
        before = counters.dynamo_compiles
        runner = ModelRunner("tiny", device, CompilationConfig(mode=2))
        attn = runner.model.model.layers[0].self_attn
        runner.warmup()
        res = runner.run_workload()
        out[impl] = {
            "sample": res.logits_sample,
            "sum": res.logits_sum,
            "counts": res.token_counts,
            "heads": (attn.num_heads, attn.num_kv_heads),
            "dynamo_compiles": counters.dynamo_compiles - before,
            "embed_rows": runner.model.model.embed_tokens.weight.shape[0],
        }
    # A checkpoint of the full model loads into the same shards as the seeded random init.
    from compiler.models.llama import build_model

    random_init = build_model("tiny", seed=0).state_dict()
    loaded = build_model(hf_folder).state_dict()
    out["safetensors_equal"] = sorted(random_init) == sorted(loaded) and all(
        torch.equal(random_init[k], loaded[k]) for k in random_init
    )
    return out


def _fail_on_rank_1(rank: int, device: str) -> None:
    if rank == 1:
        raise ValueError("rank 1 says no")
    import torch.distributed as dist

    dist.barrier()  # blocked until the launcher terminates it


IMPLS = ("functional", "custom_op")


def test_tp2_traced_once_equals_tp1(tmp_path: Path) -> None:
    from compiler.config import CompilationConfig
    from compiler.runner import ModelRunner

    ref = ModelRunner("tiny", "cpu", CompilationConfig(mode=0))
    ref.warmup()
    want = ref.run_workload()
    write_hf_folder(tmp_path, seed=0)
    per_rank = launch(functools.partial(_run_tp, hf_folder=str(tmp_path)), 2)
    assert all(r["safetensors_equal"] for r in per_rank)
    results = [r[impl] for r in per_rank for impl in IMPLS]
    for r in results:
        assert r["heads"] == (2, 1) and r["embed_rows"] == 256  # 4 heads / 2 KV heads, 512 vocab rows over 2 ranks
        assert r["dynamo_compiles"] == 1  # one graph: the collectives did not break it
        assert r["counts"] == want.token_counts
        torch.testing.assert_close(torch.tensor(r["sample"]), torch.tensor(want.logits_sample), rtol=1e-4, atol=1e-5)
        assert r["sum"] == pytest.approx(want.logits_sum, rel=1e-4)


def test_a_failing_rank_fails_the_launch_with_its_error() -> None:
    with pytest.raises(ValueError, match="rank 1 says no"):
        launch(_fail_on_rank_1, 2)
    assert issubclass(RankFailed, RuntimeError)
