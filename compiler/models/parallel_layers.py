"""Tensor-parallel layers (vLLM's ``linear.py`` / ``vocab_parallel_embedding.py``, reduced to what Llama needs).

- :class:`ColumnParallelLinear`: the output features are split over the TP ranks; with ``output_sizes``
  (a fused layer such as ``gate_up_proj``) every segment is split on its own, so rank ``r`` holds
  ``[gate_r, up_r]``. No communication: the output stays partitioned.
- :class:`QKVParallelLinear`: column-parallel by heads: rank ``r`` holds its query heads and its KV heads
  (KV heads are replicated when there are fewer of them than ranks).
- :class:`RowParallelLinear`: the input features are split; the partial products are summed with
  :func:`~compiler.distributed.communication_op.tensor_model_parallel_all_reduce` (a collective in the graph);
  the bias is added once, after the sum.
- :class:`VocabParallelEmbedding`: the vocabulary (padded to a multiple of the TP size) is split; each rank looks
  up the ids it owns, zeros the others, and the rows are summed over the ranks (all-reduce in the graph).
- :class:`ParallelLMHead`: the same vocabulary split for the lm head (so it can be tied to the embedding); it runs
  outside the graph and gathers the logits from every rank.

Weights are loaded from the *full* (TP=1) tensors: every parameter carries ``full_shape`` and
``weight_loader(full) -> shard``, so the same seed or checkpoint gives the same model at any TP size
(deterministic sharding) and outputs at TP=2 equal TP=1 within float tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from compiler.distributed import parallel_state as ps
from compiler.distributed.communication_op import (
    tensor_model_parallel_all_gather,
    tensor_model_parallel_all_reduce,
)


def divide(numerator: int, denominator: int, what: str = "size") -> int:
    if numerator % denominator:
        raise ps.ParallelStateError(f"{what} {numerator} is not divisible by tensor_parallel_size {denominator}")
    return numerator // denominator


def set_weight_attrs(
    param: nn.Parameter, full_shape: tuple[int, ...], loader: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    param.full_shape = tuple(full_shape)  # type: ignore[attr-defined]
    param.weight_loader = loader  # type: ignore[attr-defined]


def load_full_weight(param: nn.Parameter, full: torch.Tensor) -> None:
    """Copy this rank's shard of ``full`` (a TP=1 tensor) into ``param`` (a plain copy for unsharded params)."""
    loader = getattr(param, "weight_loader", None)
    shard = loader(full) if loader is not None else full
    if tuple(shard.shape) != tuple(param.shape):
        raise ValueError(f"weight shard of shape {tuple(shard.shape)} does not fit parameter {tuple(param.shape)}")
    with torch.no_grad():
        param.copy_(shard.to(device=param.device, dtype=param.dtype))


def full_shape(param: nn.Parameter) -> tuple[int, ...]:
    return tuple(getattr(param, "full_shape", param.shape))


def _tp(tp_rank: int | None, tp_size: int | None) -> tuple[int, int]:
    return (ps.get_tp_rank() if tp_rank is None else tp_rank), (ps.get_tp_size() if tp_size is None else tp_size)


class ColumnParallelLinear(nn.Module):
    """``y_r = x @ W_r^T``: output segments split over ranks. ``shard_specs[i] = (num_shards, shard_index)`` per
    segment (default ``(tp_size, tp_rank)``)."""

    def __init__(
        self,
        in_features: int,
        output_sizes: list[int],
        *,
        bias: bool = False,
        shard_specs: list[tuple[int, int]] | None = None,
        tp_rank: int | None = None,
        tp_size: int | None = None,
    ) -> None:
        super().__init__()
        rank, size = _tp(tp_rank, tp_size)
        self.tp_rank, self.tp_size = rank, size
        self.in_features = in_features
        self.output_sizes = list(output_sizes)
        self.shard_specs = list(shard_specs) if shard_specs is not None else [(size, rank)] * len(output_sizes)
        self.local_sizes = [divide(o, n, "output size") for o, (n, _) in zip(self.output_sizes, self.shard_specs)]
        self.out_features = sum(self.local_sizes)
        self.weight = nn.Parameter(torch.empty(self.out_features, in_features))
        set_weight_attrs(self.weight, (sum(self.output_sizes), in_features), self._shard_rows)
        if bias:
            self.bias = nn.Parameter(torch.empty(self.out_features))
            set_weight_attrs(self.bias, (sum(self.output_sizes),), self._shard_rows)
        else:
            self.register_parameter("bias", None)

    def _shard_rows(self, full: torch.Tensor) -> torch.Tensor:
        parts = []
        for seg, (n, idx) in zip(full.split(self.output_sizes, dim=0), self.shard_specs):
            parts.append(seg.chunk(n, dim=0)[idx])
        return torch.cat(parts, dim=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features} (full {sum(self.output_sizes)}), tp={self.tp_rank}/{self.tp_size}"


def heads_per_rank(num_heads: int, num_kv_heads: int, tp_size: int) -> tuple[int, int]:
    """(query heads, KV heads) on each rank. KV heads are split when ``tp_size`` divides them, replicated when
    they divide ``tp_size``."""
    q = divide(num_heads, tp_size, "num_attention_heads")
    if num_kv_heads >= tp_size:
        kv = divide(num_kv_heads, tp_size, "num_key_value_heads")
    else:
        if tp_size % num_kv_heads:
            raise ps.ParallelStateError(
                f"tensor_parallel_size {tp_size} is neither a divisor nor a multiple of "
                f"num_key_value_heads {num_kv_heads}"
            )
        kv = 1
    return q, kv


class QKVParallelLinear(ColumnParallelLinear):
    """Fused q/k/v projection split by heads."""

    def __init__(
        self,
        hidden_size: int,
        head_dim: int,
        num_heads: int,
        num_kv_heads: int,
        *,
        bias: bool = False,
        tp_rank: int | None = None,
        tp_size: int | None = None,
    ) -> None:
        rank, size = _tp(tp_rank, tp_size)
        self.num_heads, self.num_kv_heads = heads_per_rank(num_heads, num_kv_heads, size)
        if num_kv_heads >= size:
            kv_spec = (size, rank)
        else:  # replicated: ranks r*nkv//size share KV head r // (size // nkv)
            kv_spec = (num_kv_heads, rank // (size // num_kv_heads))
        super().__init__(
            hidden_size,
            [num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim],
            bias=bias,
            shard_specs=[(size, rank), kv_spec, kv_spec],
            tp_rank=rank,
            tp_size=size,
        )
        self.head_dim = head_dim
        self.q_size = self.num_heads * head_dim
        self.kv_size = self.num_kv_heads * head_dim


class RowParallelLinear(nn.Module):
    """``y = sum_r x_r @ W_r^T (+ b)``: input features split over ranks; all-reduce in the graph."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool = False,
        reduce_results: bool = True,
        tp_rank: int | None = None,
        tp_size: int | None = None,
    ) -> None:
        super().__init__()
        rank, size = _tp(tp_rank, tp_size)
        self.tp_rank, self.tp_size = rank, size
        self.in_features = in_features
        self.in_per_rank = divide(in_features, size, "input size")
        self.out_features = out_features
        self.reduce_results = reduce_results
        self.weight = nn.Parameter(torch.empty(out_features, self.in_per_rank))
        set_weight_attrs(self.weight, (out_features, in_features), lambda full: full.chunk(size, dim=1)[rank])
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features))
            set_weight_attrs(self.bias, (out_features,), lambda full: full)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight)
        if self.reduce_results and self.tp_size > 1:
            y = tensor_model_parallel_all_reduce(y)
        if self.bias is not None:
            y = y + self.bias
        return y

    def extra_repr(self) -> str:
        return f"in={self.in_per_rank} (full {self.in_features}), out={self.out_features}, tp={self.tp_rank}/{self.tp_size}"


class VocabParallelEmbedding(nn.Module):
    """Embedding with the vocabulary (padded to a multiple of the TP size) split over ranks."""

    def __init__(
        self, num_embeddings: int, embedding_dim: int, *, tp_rank: int | None = None, tp_size: int | None = None
    ) -> None:
        super().__init__()
        rank, size = _tp(tp_rank, tp_size)
        self.tp_rank, self.tp_size = rank, size
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padded = -(-num_embeddings // size) * size
        self.per_rank = self.padded // size
        self.vocab_start = rank * self.per_rank
        self.vocab_end = self.vocab_start + self.per_rank
        self.weight = nn.Parameter(torch.empty(self.per_rank, embedding_dim))
        set_weight_attrs(self.weight, (num_embeddings, embedding_dim), self._shard)
        # The rank's vocabulary range is a buffer, not a Python constant: it enters the graph as an input, so
        # every rank traces the same graph (same artifacts, stored once in a bundle).
        self.register_buffer("vocab_range", torch.tensor([self.vocab_start, self.vocab_end]), persistent=False)

    def _shard(self, full: torch.Tensor) -> torch.Tensor:
        if self.padded != self.num_embeddings:
            full = torch.cat([full, full.new_zeros(self.padded - self.num_embeddings, *full.shape[1:])], dim=0)
        return full[self.vocab_start : self.vocab_end]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return F.embedding(input_ids, self.weight)
        start, end = self.vocab_range[0], self.vocab_range[1]  # type: ignore[index]  # baseline (issue 46)
        mask = (input_ids >= start) & (input_ids < end)
        local = torch.where(mask, input_ids - start, torch.zeros_like(input_ids))
        out = F.embedding(local, self.weight) * mask.unsqueeze(-1).to(self.weight.dtype)
        return tensor_model_parallel_all_reduce(out)

    def extra_repr(self) -> str:
        return (
            f"vocab [{self.vocab_start}, {self.vocab_end}) of {self.num_embeddings} (padded {self.padded}), "
            f"dim={self.embedding_dim}, tp={self.tp_rank}/{self.tp_size}"
        )


class ParallelLMHead(VocabParallelEmbedding):
    """The lm head over the vocabulary split of :class:`VocabParallelEmbedding` (tie by sharing ``weight``).
    ``forward(hidden) -> logits [.., vocab]``: local logits, gathered from every rank (eager, outside the graph)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = F.linear(hidden, self.weight)
        if self.tp_size > 1:
            logits = tensor_model_parallel_all_gather(logits, dim=-1)
        return logits[..., : self.num_embeddings]


def tp_linear_factory(cfg: Any, tp_rank: int | None = None, tp_size: int | None = None) -> Callable[..., nn.Module]:
    """A ``LinearFactory`` for :mod:`compiler.models.llama`: ``qkv``/``gate_up`` column-parallel, ``o``/``down``
    row-parallel."""
    rank, size = _tp(tp_rank, tp_size)

    def make(in_features: int, out_features: int, *, bias: bool, role: str) -> nn.Module:
        if role == "qkv":
            return QKVParallelLinear(
                in_features,
                cfg.head_dim,
                cfg.num_attention_heads,
                cfg.num_key_value_heads,
                bias=bias,
                tp_rank=rank,
                tp_size=size,
            )
        if role == "gate_up":
            half = divide(out_features, 2, "gate_up size")
            return ColumnParallelLinear(in_features, [half, half], bias=bias, tp_rank=rank, tp_size=size)
        if role in ("o", "down"):
            return RowParallelLinear(in_features, out_features, bias=bias, tp_rank=rank, tp_size=size)
        raise ValueError(f"unknown linear role {role!r}")

    return make


def local_heads(cfg: Any, tp_size: int | None = None) -> tuple[int, int]:
    """(query heads, KV heads) of this rank for a model config (TP size 1: the config's)."""
    size = ps.get_tp_size() if tp_size is None else tp_size
    if size == 1:
        return cfg.num_attention_heads, cfg.num_key_value_heads
    return heads_per_rank(cfg.num_attention_heads, cfg.num_key_value_heads, size)
