"""Tensor parallelism: process-group state, graph-visible collectives, a per-rank launcher.

- :mod:`compiler.distributed.parallel_state`: TP rank/size, DP rank, the TP group; init from the
  ``torch.distributed`` environment variables.
- :mod:`compiler.distributed.parallel_config`: what of the parallel setup is hashed (TP size, all-reduce choice).
- :mod:`compiler.distributed.communication_op`: all-reduce visible in the Dynamo graph (functional
  collectives, or the ``cachetool::tp_all_reduce`` custom op), all-gather for the lm head.
- :mod:`compiler.distributed.launch`: one process per rank (gloo on the CPU, NCCL on CUDA).

The parallel layers live in :mod:`compiler.models.parallel_layers`. See docs/tensor_parallel.md.
"""

from compiler.distributed.communication_op import (  # noqa: F401
    tensor_model_parallel_all_gather,
    tensor_model_parallel_all_reduce,
)
from compiler.distributed.parallel_state import (  # noqa: F401
    ParallelState,
    ParallelStateError,
    destroy_distributed_environment,
    get_dp_rank,
    get_tp_group,
    get_tp_rank,
    get_tp_size,
    init_distributed_environment,
    init_from_env,
    parallel_config_values,
)
from compiler.distributed.parallel_config import all_reduce_impl, set_all_reduce_impl  # noqa: F401
