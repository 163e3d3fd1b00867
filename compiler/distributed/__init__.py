"""Tensor parallelism: process-group state, graph-visible collectives, a per-rank launcher.

- :mod:`compiler.distributed.parallel_state`: TP rank/size, DP rank, the TP group; init from the
  ``torch.distributed`` environment variables.
- :mod:`compiler.distributed.parallel_config`: what of the parallel setup is hashed (TP size, all-reduce choice).
- :mod:`compiler.distributed.communication_op`: all-reduce visible in the Dynamo graph (functional
  collectives, or the ``cachetool::tp_all_reduce`` custom op), all-gather for the lm head.
- :mod:`compiler.distributed.launch`: one process per rank (gloo on the CPU, NCCL on CUDA).

The parallel layers live in :mod:`compiler.models.parallel_layers`. See docs/tensor_parallel.md.
"""

import importlib
from typing import Any

# Names re-exported lazily (PEP 562): importing the package (to reach parallel_config, say) must not import
# torch.distributed, so that a preflight predicting a key stays torch-free.
_EXPORTS = {
    "communication_op": ("tensor_model_parallel_all_gather", "tensor_model_parallel_all_reduce"),
    "parallel_state": (
        "ParallelState",
        "ParallelStateError",
        "destroy_distributed_environment",
        "get_dp_rank",
        "get_tp_group",
        "get_tp_rank",
        "get_tp_size",
        "init_distributed_environment",
        "init_from_env",
        "parallel_config_values",
    ),
    "parallel_config": ("all_reduce_impl", "set_all_reduce_impl"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
