"""The parallel configuration that changes compiled code: the tensor-parallel size and the all-reduce choice.

Both are hashed into the ``config`` factor (:func:`parallel_config_values`). The TP size comes from
:mod:`compiler.distributed.parallel_state` (the process-group state); the all-reduce implementation is chosen
here and read by :mod:`compiler.distributed.communication_op`. Keeping the choice in its own module is what lets
``parallel_state`` and ``communication_op`` not import each other.
"""

from __future__ import annotations

from typing import Any

from compiler.distributed import parallel_state as ps

ALL_REDUCE_IMPLS = ("functional", "custom_op")
_IMPL = "functional"


def set_all_reduce_impl(name: str) -> None:
    """Choose how tensor_model_parallel_all_reduce enters the graph: ``functional`` (default) or ``custom_op``."""
    global _IMPL
    if name not in ALL_REDUCE_IMPLS:
        raise ValueError(f"all-reduce implementation must be one of {', '.join(ALL_REDUCE_IMPLS)}, got {name!r}")
    _IMPL = name


def all_reduce_impl() -> str:
    return _IMPL


def parallel_config_values() -> dict[str, Any]:
    """What of the parallel setup changes compiled code: hashed into the ``config`` factor. The data-parallel
    rank and size are not here (they change no compiled code); the TP rank is not either (every rank compiles
    the same graphs; each has its own folder)."""
    tp = ps.get_tp_size()
    return {"tensor_parallel_size": tp, "all_reduce": all_reduce_impl() if tp > 1 else None}
