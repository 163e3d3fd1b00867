"""Sharding math of the tensor-parallel layers, in one process (no process group: the all-reduce and
all-gather are identities at TP size 1, so the sums over ranks are done here by hand)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from compiler.distributed import parallel_state as ps
from compiler.models.parallel_layers import (
    ColumnParallelLinear,
    ParallelLMHead,
    QKVParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    full_shape,
    heads_per_rank,
    load_full_weight,
)


def _load(mod: nn.Module, fulls: dict[str, torch.Tensor]) -> nn.Module:
    for name, p in mod.named_parameters():
        assert full_shape(p) == tuple(fulls[name].shape)
        load_full_weight(p, fulls[name])
    return mod


@pytest.mark.parametrize("tp", [2, 4])
def test_column_and_row_parallel_equal_full(tp: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 16)
    w_up = torch.randn(2 * 24, 16)  # gate/up fused, 24 each
    w_down = torch.randn(16, 24)
    b_down = torch.randn(16)
    gate, up = (x @ w_up.T).split([24, 24], dim=-1)
    ref = (torch.nn.functional.silu(gate) * up) @ w_down.T + b_down
    total = torch.zeros_like(ref)
    for r in range(tp):
        col = _load(ColumnParallelLinear(16, [24, 24], tp_rank=r, tp_size=tp), {"weight": w_up})
        row = _load(RowParallelLinear(24, 16, bias=True, tp_rank=r, tp_size=tp), {"weight": w_down, "bias": b_down})
        g, u = col(x).split([24 // tp, 24 // tp], dim=-1)
        part = torch.nn.functional.silu(g) * u
        # bias added on every rank after the (here: missing) all-reduce: subtract it from all but one
        total += row(part) - (b_down if r else 0)
    torch.testing.assert_close(total, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("heads,kv,tp", [(4, 2, 2), (8, 2, 4), (4, 1, 2), (4, 2, 4)])
def test_qkv_shards_heads(heads: int, kv: int, tp: int) -> None:
    d, hidden = 4, 8
    w = torch.arange((heads + 2 * kv) * d * hidden, dtype=torch.float32).view(-1, hidden)
    q_full, k_full, v_full = w.split([heads * d, kv * d, kv * d])
    nq, nkv = heads_per_rank(heads, kv, tp)
    group = heads // kv
    for r in range(tp):
        m = _load(QKVParallelLinear(hidden, d, heads, kv, tp_rank=r, tp_size=tp), {"weight": w})
        q, k, v = m.weight.split([m.q_size, m.kv_size, m.kv_size])
        assert (m.num_heads, m.num_kv_heads) == (nq, nkv)
        torch.testing.assert_close(q, q_full[r * nq * d : (r + 1) * nq * d])
        # the KV heads of this rank are the ones its query heads use in the full model
        first_kv = (r * nq) // group
        torch.testing.assert_close(k, k_full[first_kv * d : (first_kv + nkv) * d])
        torch.testing.assert_close(v, v_full[first_kv * d : (first_kv + nkv) * d])


def test_heads_that_do_not_divide_are_refused() -> None:
    with pytest.raises(ps.ParallelStateError, match="num_attention_heads 6 is not divisible"):
        heads_per_rank(6, 2, 4)
    with pytest.raises(ps.ParallelStateError, match="neither a divisor nor a multiple"):
        heads_per_rank(6, 4, 6)


@pytest.mark.parametrize("tp", [2, 3])
def test_vocab_parallel_embedding_and_lm_head(tp: int) -> None:
    vocab, dim = 11, 4  # 11 is not a multiple of 2 or 3: padding
    w = torch.randn(vocab, dim)
    ids = torch.tensor([0, 3, 10, 5, 7])
    h = torch.randn(3, dim)
    emb = torch.zeros(len(ids), dim)
    logits = []
    for r in range(tp):
        e = _load(VocabParallelEmbedding(vocab, dim, tp_rank=r, tp_size=tp), {"weight": w})
        emb += e(ids)
        head = ParallelLMHead(vocab, dim, tp_rank=r, tp_size=tp)
        head.weight = e.weight  # tied
        logits.append(torch.nn.functional.linear(h, head.weight))
    torch.testing.assert_close(emb, w[ids])
    torch.testing.assert_close(torch.cat(logits, dim=-1)[:, :vocab], h @ w.T)


def test_single_process_state_is_tp1() -> None:
    assert ps.get_tp_size() == 1 and ps.get_tp_rank() == 0 and ps.get_dp_rank() == 0
    assert ps.parallel_config_values() == {"tensor_parallel_size": 1, "all_reduce": None}


def test_parallel_config_is_one_module_that_imports_no_process_state() -> None:
    """parallel_state and communication_op both read the hashed parallel configuration from parallel_config, which
    imports neither of them (the import cycle they had is gone) nor torch."""
    import ast
    from pathlib import Path

    from compiler.distributed import parallel_config

    tree = ast.parse(Path(parallel_config.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert imported <= {"__future__", "typing"}
    assert ps.parallel_config_values() == parallel_config.parallel_config_values(1)
    assert parallel_config.parallel_config_values(2) == {"tensor_parallel_size": 2, "all_reduce": "functional"}
