"""Launch one process per tensor-parallel rank and collect what each returns.

:func:`launch` starts ``tensor_parallel_size`` processes (``torch.multiprocessing``, ``spawn``), sets the
``torch.distributed`` environment in each (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR=127.0.0.1``,
a free ``MASTER_PORT``; ``NCCL_NVLS_ENABLE=0`` for NCCL), initialises the process group (gloo on the CPU, NCCL on
CUDA with device ``cuda:{rank}``) and calls ``fn(rank=r, device=d)``; ``fn`` must be picklable (a module-level
function or a ``functools.partial`` of one). Results come back in rank order. When a rank raises, the other ranks
are terminated (they may be blocked in a collective) and the first rank's exception is re-raised here, with its
class (so an exit code chosen by the class survives), or :class:`RankFailed` when it cannot be pickled.
"""

from __future__ import annotations

import os
import pickle
import socket
import time
from collections.abc import Callable
from typing import Any

from compiler.distributed import parallel_state as ps
from compiler.errors import DISTRIBUTED, CompilerError


class RankFailed(CompilerError):
    """A rank process failed without a transferable exception (crash, kill, unpicklable error)."""

    kind = DISTRIBUTED


def find_free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _worker(
    index: int,
    fn: Callable[..., Any],
    world: int,
    port: int,
    device: str,
    backend: str | None,
    dp_rank: int | None,
    queue: Any,
    log_names: tuple[str, ...],
    env: dict[str, str],
    all_reduce: str,
) -> None:
    os.environ.update(env)
    from compiler.distributed.parallel_config import set_all_reduce_impl

    set_all_reduce_impl(all_reduce)
    os.environ.update(
        {
            "RANK": str(index),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(index),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    if ps.default_backend(device) == "nccl" or backend == "nccl":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    from compiler.logger import init_logging

    init_logging(*log_names)
    try:
        ps.init_distributed_environment(
            index, world, tensor_parallel_size=world, backend=backend, device=device, local_rank=index, dp_rank=dp_rank
        )
        result = fn(rank=index, device=str(ps.rank_device(device, index)))
        queue.put((index, "ok", pickle.dumps(result)))
    except BaseException as exc:  # noqa: BLE001 - report, then let spawn see the failure
        try:
            payload = pickle.dumps(exc)
            pickle.loads(payload)
        except Exception:
            payload = pickle.dumps(RankFailed(f"rank {index}: {type(exc).__name__}: {exc}"))
        queue.put((index, "error", payload))
        raise
    finally:
        try:
            ps.destroy_distributed_environment()
        except Exception:  # pragma: no cover
            pass


# An interrupted launch ends its ranks: SIGTERM, this long, then SIGKILL.
RANKS_STOP_SECONDS = 3.0


def end_ranks(processes: list[Any]) -> None:
    """End the rank processes still running (SIGTERM, up to :data:`RANKS_STOP_SECONDS`, then SIGKILL)."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + RANKS_STOP_SECONDS
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.kill()
            p.join(1.0)


def launch(
    fn: Callable[..., Any],
    tensor_parallel_size: int,
    *,
    device: str = "cpu",
    backend: str | None = None,
    dp_rank: int | None = None,
    log_names: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> list[Any]:
    """Run ``fn(rank=r, device=d)`` in ``tensor_parallel_size`` processes; returns their results in rank order."""
    import torch.multiprocessing as mp

    from compiler.distributed.parallel_config import all_reduce_impl

    n = int(tensor_parallel_size)
    if n < 1:
        raise ps.ParallelStateError(f"tensor_parallel_size must be >= 1, got {n}")
    port = find_free_port()
    queue = mp.get_context("spawn").SimpleQueue()
    messages: list[tuple[int, str, bytes]] = []

    def drain() -> None:
        while not queue.empty():
            messages.append(queue.get())

    ctx = mp.start_processes(
        _worker,
        args=(fn, n, port, device, backend, dp_rank, queue, tuple(log_names), dict(env or {}), all_reduce_impl()),
        nprocs=n,
        join=False,
        start_method="spawn",
    )
    failure: BaseException | None = None
    try:
        while True:
            drain()
            if ctx.join(timeout=0.2):
                break
    except Exception as exc:  # ProcessRaisedException / ProcessExitedException: the others were terminated
        failure = exc
    except BaseException:  # interrupted (Ctrl-C, or a stop signal an embedder raises): the ranks end with us
        end_ranks(ctx.processes)
        raise
    time.sleep(0.05)
    drain()
    errors = [(i, payload) for i, kind, payload in messages if kind == "error"]
    if errors:
        raise pickle.loads(errors[0][1])
    if failure is not None:
        raise RankFailed(str(failure).strip().splitlines()[-1] if str(failure).strip() else repr(failure))
    results = {i: pickle.loads(payload) for i, kind, payload in messages if kind == "ok"}
    missing = [i for i in range(n) if i not in results]
    if missing:
        raise RankFailed(f"rank(s) {missing} returned no result")
    return [results[i] for i in range(n)]
