"""Process-group state for tensor parallelism: TP rank/size, DP rank, the TP group (vLLM's ``parallel_state``).

One process per tensor-parallel rank. The state is initialised once per process, either explicitly
(:func:`init_distributed_environment`) or from the ``torch.distributed`` environment variables that ``torchrun``
and :mod:`compiler.distributed.launch` set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``; :func:`init_from_env`). Without it every query answers the single-process values (TP size 1),
so the model code can ask unconditionally.

With ``WORLD_SIZE == tensor_parallel_size`` the TP group is the default (WORLD) group. With a larger world
(``torchrun`` over several data-parallel replicas), consecutive ranks form TP groups and
``dp_rank = rank // tp_size``. The data-parallel rank only names the cache folder (``rank_{tp}_{dp}``); it
changes no compiled code and is not hashed.

Backends: ``gloo`` on the CPU, ``nccl`` on CUDA (device ``cuda:{local_rank}``).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from compiler import envs
from compiler.distributed import parallel_config
from compiler.errors import DISTRIBUTED, CompilerError

DEFAULT_TIMEOUT_S = 600.0
"""Collective timeout: a rank that fails (strict mode, a bad cache) must not leave the others waiting for
gloo's default 30 minutes."""


class ParallelStateError(CompilerError):
    """Bad tensor-parallel settings (sizes that do not divide, re-initialisation with other values)."""

    kind = DISTRIBUTED


@dataclass(frozen=True)
class ParallelState:
    tp_rank: int = 0
    tp_size: int = 1
    dp_rank: int = 0
    dp_size: int = 1
    backend: str | None = None
    local_rank: int = 0
    group: Any = None  # the TP ProcessGroup (None: single process)

    @property
    def is_parallel(self) -> bool:
        return self.tp_size > 1


_STATE = ParallelState()
_DP_RANK_OVERRIDE: int | None = None


def get_state() -> ParallelState:
    return _STATE


def get_tp_size() -> int:
    return _STATE.tp_size


def get_tp_rank() -> int:
    return _STATE.tp_rank


def get_dp_rank() -> int:
    return _STATE.dp_rank if _DP_RANK_OVERRIDE is None else _DP_RANK_OVERRIDE


def get_tp_group() -> Any:
    if _STATE.group is None:
        raise ParallelStateError("tensor parallelism is not initialised (tp_size == 1)")
    return _STATE.group


def default_backend(device: str | torch.device) -> str:
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def rank_device(device: str | torch.device, local_rank: int) -> torch.device:
    """``cuda`` → ``cuda:{local_rank}``; anything else unchanged."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.device("cuda", local_rank)
    return dev


def init_distributed_environment(
    rank: int,
    world_size: int,
    *,
    tensor_parallel_size: int | None = None,
    backend: str | None = None,
    device: str | torch.device = "cpu",
    local_rank: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    dp_rank: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ParallelState:
    """Initialise ``torch.distributed`` (if not yet) and the TP group; returns the new state.

    ``tensor_parallel_size`` defaults to ``world_size``. ``dp_rank`` overrides the derived data-parallel rank
    (a single TP replica launched with ``--data-parallel-rank``: it only names the cache folder).
    """
    global _STATE, _DP_RANK_OVERRIDE
    tp = world_size if tensor_parallel_size is None else int(tensor_parallel_size)
    if tp < 1 or world_size < 1 or world_size % tp:
        raise ParallelStateError(f"world size {world_size} is not a multiple of tensor_parallel_size {tp}")
    if not 0 <= rank < world_size:
        raise ParallelStateError(f"rank {rank} outside world size {world_size}")
    local_rank = rank if local_rank is None else local_rank
    backend = backend or default_backend(device)
    if _STATE.tp_size > 1 or (dist.is_available() and dist.is_initialized() and _STATE.backend is not None):
        if (_STATE.tp_size, _STATE.tp_rank) != (tp, rank % tp):
            raise ParallelStateError(f"parallel state already initialised as tp {_STATE.tp_rank}/{_STATE.tp_size}")
        return _STATE
    if world_size > 1:
        if master_addr is not None:
            os.environ["MASTER_ADDR"] = master_addr
        if master_port is not None:
            os.environ["MASTER_PORT"] = str(master_port)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if envs.raw("MASTER_PORT") is None:
            raise ParallelStateError("MASTER_PORT is not set (use compiler.distributed.launch or torchrun)")
        if backend == "nccl":
            os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
            torch.cuda.set_device(local_rank)
        if not dist.is_initialized():
            kwargs: dict[str, Any] = {}
            if backend == "nccl":
                kwargs["device_id"] = torch.device("cuda", local_rank)
            dist.init_process_group(
                backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s), **kwargs
            )
    group: Any = None
    if tp > 1:
        if tp == world_size:
            group = dist.group.WORLD
        else:
            # Every rank creates every TP group, in the same order (new_group is collective).
            for start in range(0, world_size, tp):
                g = dist.new_group(list(range(start, start + tp)), backend=backend)
                if start <= rank < start + tp:
                    group = g
    _STATE = ParallelState(
        tp_rank=rank % tp,
        tp_size=tp,
        dp_rank=rank // tp,
        dp_size=world_size // tp,
        backend=backend if world_size > 1 else None,
        local_rank=local_rank,
        group=group,
    )
    _DP_RANK_OVERRIDE = dp_rank
    return _STATE


def init_from_env(
    *,
    tensor_parallel_size: int | None = None,
    device: str | torch.device = "cpu",
    backend: str | None = None,
    dp_rank: int | None = None,
) -> ParallelState:
    """Initialise from ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (+ ``MASTER_ADDR``/``MASTER_PORT``), as torchrun sets
    them. Without ``WORLD_SIZE`` this is a single process (TP size 1)."""
    world = int(envs.get("WORLD_SIZE"))  # type: ignore[arg-type]  # baseline (issue 46)
    rank = int(envs.get("RANK"))  # type: ignore[arg-type]  # baseline (issue 46)
    local = int(envs.get("LOCAL_RANK") or rank)
    return init_distributed_environment(
        rank,
        world,
        tensor_parallel_size=tensor_parallel_size,
        backend=backend,
        device=device,
        local_rank=local,
        dp_rank=dp_rank,
    )


def set_data_parallel_rank(dp_rank: int | None) -> None:
    """Name the cache folder ``rank_{tp}_{dp_rank}`` (a TP replica launched on its own)."""
    global _DP_RANK_OVERRIDE
    _DP_RANK_OVERRIDE = dp_rank


def destroy_distributed_environment() -> None:
    global _STATE, _DP_RANK_OVERRIDE
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _STATE = ParallelState()
    _DP_RANK_OVERRIDE = None


def parallel_config_values() -> dict[str, Any]:
    """This process's :func:`compiler.distributed.parallel_config.parallel_config_values` (hashed into the
    ``config`` factor)."""
    return parallel_config.parallel_config_values(get_tp_size())
