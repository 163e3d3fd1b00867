"""CUDA graph capture and replay around a runnable (vLLM's ``CUDAGraphWrapper``).

A :class:`CUDAGraphWrapper` has one runtime mode: ``FULL`` (it wraps the whole compiled forward, attention
included) or ``PIECEWISE`` (it wraps one compiled piece; attention runs eagerly between pieces). Per call it reads
the current dispatch (:func:`set_cudagraph_dispatch`, set by the runner from
:class:`~compiler.cudagraph_dispatcher.CudagraphDispatcher`): when the runtime mode is not its own, it just calls
the runnable; when it is, it replays the graph captured for the batch descriptor, or, during the start-up capture
phase (:func:`capture_phase`), runs the runnable once to warm up and then captures it.

All graphs of one model share one memory pool. A captured graph's outputs are kept (strong references) until the
capture of the whole forward at that size ends (:meth:`GraphPool.end_forward`); then they become weak references,
so that graphs of other sizes may reuse that memory (batches of different sizes never interleave), while graphs of
the same forward never overwrite each other's live outputs. Inputs must sit at the same addresses at replay as at
capture: the runner passes slices of persistent buffers; ``debug_addresses`` checks it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from compiler import torch_compat
from compiler.config import CUDAGraphMode
from compiler.cudagraph_dispatcher import BatchDescriptor
from compiler.errors import INTERNAL, CompilerError

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------- dispatch state


@dataclass
class _DispatchState:
    runtime_mode: CUDAGraphMode = CUDAGraphMode.NONE
    descriptor: BatchDescriptor | None = None
    capturing: bool = False


_STATE = _DispatchState()


@contextlib.contextmanager
def set_cudagraph_dispatch(runtime_mode: CUDAGraphMode, descriptor: BatchDescriptor | None) -> Iterator[None]:
    """Within, wrappers of ``runtime_mode`` replay (or, in the capture phase, capture) the graph of ``descriptor``."""
    prev = (_STATE.runtime_mode, _STATE.descriptor)
    _STATE.runtime_mode, _STATE.descriptor = runtime_mode, descriptor
    try:
        yield
    finally:
        _STATE.runtime_mode, _STATE.descriptor = prev


@contextlib.contextmanager
def capture_phase() -> Iterator[None]:
    """Graphs may be captured only inside; outside, a missing graph is an error (all capture is at start-up)."""
    prev = _STATE.capturing
    _STATE.capturing = True
    try:
        yield
    finally:
        _STATE.capturing = prev


class MissingGraphError(CompilerError):
    """A batch was dispatched to a graph that was not captured at start-up."""

    kind = INTERNAL


# ---------------------------------------------------------------------- weak references


def weak_ref_tensor(t: Any) -> Any:
    """A tensor that views ``t``'s memory without owning it (pure-PyTorch version of vLLM's ``weak_ref_tensor``);
    anything else is returned as is."""
    if not isinstance(t, torch.Tensor):
        return t
    nbytes = t.untyped_storage().nbytes()
    storage = torch_compat.storage_from_data_pointer(t.untyped_storage().data_ptr(), t.device, nbytes)
    out = torch.empty(0, dtype=t.dtype, device=t.device)
    out.set_(storage, t.storage_offset(), t.size(), t.stride())
    return out


def weak_ref_tensors(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return weak_ref_tensor(x)
    if isinstance(x, (list, tuple)):
        return type(x)(weak_ref_tensors(v) for v in x)
    return x


def _tensor_addresses(args: tuple[Any, ...]) -> list[int | None]:
    return [a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args]


# ---------------------------------------------------------------------- pool and stats


@dataclass
class CaptureStats:
    graphs: int = 0
    seconds: float = 0.0
    by_mode: dict[str, int] = field(default_factory=dict)


class GraphPool:
    """The memory pool and capture stream shared by all graphs of one model, and the capture bookkeeping."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.handle = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(device=device)
        self.stats = CaptureStats()
        self._pending: list[_Entry] = []

    def captured(self, entry: _Entry) -> None:
        """Record a graph captured in the current forward; :meth:`end_forward` weakens its output."""
        self._pending.append(entry)

    def end_forward(self) -> None:
        """The forward being captured is complete: its graphs' outputs may now be reused by other sizes."""
        for entry in self._pending:
            entry.output = weak_ref_tensors(entry.output)
        self._pending.clear()


@dataclass
class _Entry:
    descriptor: BatchDescriptor
    graph: Any = None
    output: Any = None
    input_addresses: list[int | None] | None = None


class CUDAGraphWrapper:
    """Capture/replay ``runnable`` for the batch descriptors dispatched to ``runtime_mode`` (FULL or PIECEWISE)."""

    def __init__(
        self,
        runnable: Callable[..., Any],
        runtime_mode: CUDAGraphMode,
        pool: GraphPool,
        name: str = "",
        *,
        debug_addresses: bool = False,
    ) -> None:
        if runtime_mode not in (CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE):
            raise ValueError(f"a CUDAGraphWrapper's runtime mode is FULL or PIECEWISE, not {runtime_mode.value}")
        self.runnable = runnable
        self.runtime_mode = runtime_mode
        self.pool = pool
        self.name = name or getattr(runnable, "__name__", type(runnable).__name__)
        self.debug_addresses = debug_addresses
        self.entries: dict[BatchDescriptor, _Entry] = {}
        self.replays = 0

    def __getattr__(self, name: str) -> Any:  # expose the runnable's attributes (e.g. PiecewiseRunnable.index)
        if name in ("runnable",):
            raise AttributeError(name)
        return getattr(self.runnable, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state = _STATE
        desc = state.descriptor
        if state.runtime_mode != self.runtime_mode or desc is None:
            return self.runnable(*args, **kwargs)
        entry = self.entries.get(desc)
        if entry is None:
            if not state.capturing:
                raise MissingGraphError(
                    f"no {self.runtime_mode.value} CUDA graph captured for {desc} ({self.name}); "
                    "graphs are captured at start-up only"
                )
            return self._capture(desc, args, kwargs)
        if self.debug_addresses:
            addrs = _tensor_addresses(args)
            if addrs != entry.input_addresses:
                raise RuntimeError(f"{self.name}: input addresses of {desc} differ from capture time")
        entry.graph.replay()
        self.replays += 1
        return entry.output

    def _capture(self, desc: BatchDescriptor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # Warm up once outside the graph: lazy per-size compiles, autotuning and cuBLAS workspaces happen here.
        self.runnable(*args, **kwargs)
        t0 = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool.handle, stream=self.pool.stream):
            output = self.runnable(*args, **kwargs)
        entry = _Entry(desc, graph, output, _tensor_addresses(args))
        self.entries[desc] = entry
        self.pool.captured(entry)
        stats = self.pool.stats
        stats.graphs += 1
        stats.seconds += time.perf_counter() - t0
        stats.by_mode[self.runtime_mode.value] = stats.by_mode.get(self.runtime_mode.value, 0) + 1
        logger.debug("captured %s CUDA graph of %s for %s", self.runtime_mode.value, self.name, desc)
        return output


def install_piecewise_graphs(
    split_gm: torch.fx.GraphModule, compiled_names: list[str], pool: GraphPool, *, debug_addresses: bool = False
) -> list[CUDAGraphWrapper]:
    """Wrap each compiled piece of ``split_gm`` (the split graph returned by the piecewise backend, whose pieces
    are ``PiecewiseRunnable`` instances in its ``__dict__``) in a PIECEWISE :class:`CUDAGraphWrapper`."""
    wrappers = []
    for name in compiled_names:
        runnable = split_gm.__dict__.get(name)
        if runnable is None:
            continue
        if isinstance(runnable, CUDAGraphWrapper):  # re-installing (a new pool): drop the old graphs
            runnable = runnable.runnable
        w = CUDAGraphWrapper(runnable, CUDAGraphMode.PIECEWISE, pool, name, debug_addresses=debug_addresses)
        split_gm.__dict__[name] = w
        wrappers.append(w)
    return wrappers


def uninstall_piecewise_graphs(split_gm: torch.fx.GraphModule) -> int:
    """Put the plain pieces back (drops their graphs); returns how many wrappers were removed."""
    n = 0
    for name, value in list(split_gm.__dict__.items()):
        if isinstance(value, CUDAGraphWrapper) and value.runtime_mode == CUDAGraphMode.PIECEWISE:
            split_gm.__dict__[name] = value.runnable
            n += 1
    return n
