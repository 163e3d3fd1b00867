"""Tensor-parallel collectives that are visible in the Dynamo graph (so they are part of what is cached).

:func:`tensor_model_parallel_all_reduce` is what the parallel layers call. Two implementations:

- ``functional`` (default): ``torch.distributed._functional_collectives.all_reduce``. Dynamo traces it into
  ``torch.ops._c10d_functional.all_reduce(x, "sum", group_name)`` + ``wait_tensor``; Inductor lowers both
  into the compiled code. Verified with gloo on the CPU on torch 2.13 (compile, save binary, load in a new
  process); on CUDA it is the NCCL path that torch's own tensor-parallel code compiles.
- ``custom_op``: ``torch.ops.cachetool.tp_all_reduce``, a registered custom op wrapping
  ``dist.all_reduce`` (opaque to Inductor, no graph break): the fallback should a torch build not lower
  functional collectives for a backend. Chosen with :func:`compiler.distributed.parallel_config.set_all_reduce_impl`; hashed (config factor).

Both carry the group name as a graph constant; it is the same on every rank, so every rank compiles the same
graphs (and the bundle stores their artifacts once).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from compiler import torch_compat
from compiler.distributed import parallel_state as ps
from compiler.distributed.parallel_config import ALL_REDUCE_IMPLS, all_reduce_impl, set_all_reduce_impl  # noqa: F401


@torch.library.custom_op("cachetool::tp_all_reduce", mutates_args=())
def tp_all_reduce(x: torch.Tensor, group_name: str) -> torch.Tensor:
    """Sum ``x`` over the tensor-parallel group (``group_name`` as a graph constant)."""
    out = x.clone()
    dist.all_reduce(out, group=torch_compat.resolve_process_group(group_name))
    return out


@tp_all_reduce.register_fake
def _(x: torch.Tensor, group_name: str) -> torch.Tensor:
    return torch.empty_like(x)


def tensor_model_parallel_all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum over the TP group; the identity at TP size 1 (nothing enters the graph)."""
    if ps.get_tp_size() == 1:
        return x
    group = ps.get_tp_group()
    if all_reduce_impl() == "custom_op":
        return torch.ops.cachetool.tp_all_reduce(x, torch_compat.process_group_name(group))
    return torch_compat.functional_all_reduce(x, group)


def tensor_model_parallel_all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Concatenate ``x`` of every TP rank along ``dim`` (eager: used by the lm head, outside the graph)."""
    if ps.get_tp_size() == 1:
        return x
    group = ps.get_tp_group()
    parts = [torch.empty_like(x) for _ in range(ps.get_tp_size())]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=dim)
