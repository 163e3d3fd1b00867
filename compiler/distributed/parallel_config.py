"""The parallel configuration that changes compiled code: the tensor-parallel size and the all-reduce choice.

Both are hashed into the ``config`` factor as :func:`parallel_config_values` writes them. This module imports
neither torch nor the process-group state: :mod:`compiler.distributed.parallel_state` (which knows this
process's TP size) and :mod:`compiler.distributed.communication_op` (which reads the all-reduce choice) both
import it, and so no longer import each other; a key predictor can use it without torch.distributed.
"""

from __future__ import annotations

from typing import Any

ALL_REDUCE_IMPLS = ("functional", "custom_op")
DEFAULT_ALL_REDUCE = ALL_REDUCE_IMPLS[0]
_IMPL = DEFAULT_ALL_REDUCE


def set_all_reduce_impl(name: str) -> None:
    """Choose how tensor_model_parallel_all_reduce enters the graph: ``functional`` (default) or ``custom_op``."""
    global _IMPL
    if name not in ALL_REDUCE_IMPLS:
        raise ValueError(f"all-reduce implementation must be one of {', '.join(ALL_REDUCE_IMPLS)}, got {name!r}")
    _IMPL = name


def all_reduce_impl() -> str:
    return _IMPL


def parallel_config_values(tensor_parallel_size: int, all_reduce: str | None = None) -> dict[str, Any]:
    """What of the parallel setup changes compiled code, for a TP size (``all_reduce``: default this process's
    choice). The data-parallel rank and size are not here (they change no compiled code); the TP rank is not
    either (every rank compiles the same graphs; each has its own folder)."""
    tp = int(tensor_parallel_size)
    return {"tensor_parallel_size": tp, "all_reduce": (all_reduce or _IMPL) if tp > 1 else None}
