"""Drives a model's forward through the right CUDA graph: persistent inputs, padding, dispatch, capture.

:class:`GraphExecutor` is owned by :class:`~compiler.runner.ModelRunner`. It

1. resolves the CUDA-graph mode for the device (:func:`~compiler.cudagraph_dispatcher.resolve_cudagraph_mode`)
   and the capture sizes (dropping sizes above ``max_num_batched_tokens``);
2. keeps persistent input buffers (token ids, positions, KV slots, per-token sequence offsets), so that every
   graph reads its inputs from fixed addresses;
3. wraps the compiled pieces in PIECEWISE :class:`~compiler.cuda_graph.CUDAGraphWrapper`\\ s and the whole
   backbone in a FULL one, as the mode asks; captures every key of the
   :class:`~compiler.cudagraph_dispatcher.CudagraphDispatcher` at start-up (largest first), timed and logged;
4. per batch: dispatches (FULL for uniform decode where captured, PIECEWISE for the rest, NONE when larger than
   every captured size), pads the batch up to the captured size (padding tokens write their K/V to a scratch
   slot and read slot 0), runs, and returns the hidden states of the real tokens only.

``emulate=True`` runs the very same dispatch, padding and metadata without capturing anything: it lets the CPU
tests check that attention stays correct under padding in both the eager (piecewise) and the graph-safe (full)
attention paths.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from compiler import progress
from compiler.config import CompilationMode, CUDAGraphMode
from compiler.cuda_graph import (
    CUDAGraphWrapper,
    GraphPool,
    capture_phase,
    install_piecewise_graphs,
    set_cudagraph_dispatch,
    uninstall_piecewise_graphs,
)
from compiler.cudagraph_dispatcher import CudagraphDispatcher, resolve_capture_sizes, resolve_cudagraph_mode
from compiler.forward_context import ForwardContext, set_forward_context
from compiler.ops.static_attention import ATTENTION_CG_SUPPORT, GraphAttentionMetadata, StaticAttentionInputs

logger = logging.getLogger(__name__)


class GraphExecutor:
    def __init__(
        self, runner: Any, *, mode: CUDAGraphMode | None = None, emulate: bool = False, debug_addresses: bool = False
    ) -> None:
        self.runner = runner
        cfg = runner.config
        self.device: torch.device = runner.device
        self.emulate = emulate
        if mode is None:
            mode = resolve_cudagraph_mode(cfg, self.device.type, ATTENTION_CG_SUPPORT)
            if getattr(runner.ctx, "key_only", False):
                mode = CUDAGraphMode.NONE  # learning the cache key runs nothing that graphs would speed up
        elif self.device.type != "cuda" and not emulate:
            raise ValueError("CUDA graphs need a CUDA device (use emulate=True to test the logic on the CPU)")
        self.mode = mode
        self.capture_sizes = (
            resolve_capture_sizes(cfg, runner.max_num_batched_tokens) if mode != CUDAGraphMode.NONE else []
        )
        self.dispatcher = CudagraphDispatcher(mode, self.capture_sizes, runner.max_num_seqs)
        self.window = runner.max_model_len
        self.scratch_slot = runner.max_num_seqs * runner.max_model_len
        self.max_tokens = max([runner.max_num_batched_tokens, *self.capture_sizes])
        # rows: token ids, positions, KV slots, per-token sequence offsets
        self.buf = torch.zeros(4, self.max_tokens, dtype=torch.long, device=self.device)
        self.pool: GraphPool | None = None
        if mode != CUDAGraphMode.NONE and not emulate:
            self.pool = GraphPool(self.device)
        self.backbone = runner.model.model
        self.full: Any = self.backbone
        if mode.has_full():
            self.full = (
                CUDAGraphWrapper(
                    self.backbone, CUDAGraphMode.FULL, self.pool, "backbone", debug_addresses=debug_addresses
                )
                if self.pool
                else self.backbone
            )
        self.debug_addresses = debug_addresses
        self.piecewise: list[CUDAGraphWrapper] = []
        self.captured = False
        self.capture_seconds = 0.0
        self.num_graphs = 0
        self.last_dispatch: tuple[CUDAGraphMode, Any] = (CUDAGraphMode.NONE, None)
        if mode != CUDAGraphMode.NONE:
            logger.info(
                "CUDA graphs: mode %s, %d capture sizes (%s..%s)%s",
                mode.value,
                len(self.capture_sizes),
                self.capture_sizes[0] if self.capture_sizes else "-",
                self.capture_sizes[-1] if self.capture_sizes else "-",
                " (emulated)" if emulate else "",
            )

    @property
    def enabled(self) -> bool:
        return self.mode != CUDAGraphMode.NONE

    # ------------------------------------------------------------------ one forward
    def _fill(self, ids: list[int], positions: list[int], slots: list[int], tok_offsets: list[int], n_pad: int) -> None:
        pad = n_pad - len(ids)
        rows = [ids + [0] * pad, positions + [0] * pad, slots + [self.scratch_slot] * pad, tok_offsets + [0] * pad]
        self.buf[:, :n_pad].copy_(torch.tensor(rows, dtype=torch.long), non_blocking=True)

    def execute(
        self,
        ids: list[int],
        positions: list[int],
        slots: list[int],
        query_start_loc: list[int],
        seq_lens: list[int],
        slot_offsets: list[int],
    ) -> torch.Tensor:
        """Forward of one flattened batch; returns the hidden states of its ``len(ids)`` real tokens."""
        n = len(ids)
        uniform_decode = n == len(seq_lens)
        if self.captured:
            runtime_mode, desc = self.dispatcher.dispatch(n, uniform_decode)
        else:
            runtime_mode, desc = CUDAGraphMode.NONE, None
        n_pad = desc.num_tokens if runtime_mode != CUDAGraphMode.NONE else n  # type: ignore[union-attr]  # baseline (issue 46)
        self.last_dispatch = (runtime_mode, desc if runtime_mode != CUDAGraphMode.NONE else None)
        tok_offsets: list[int] = []
        for i, off in enumerate(slot_offsets):
            tok_offsets += [off] * (query_start_loc[i + 1] - query_start_loc[i])
        if n_pad > self.max_tokens:  # larger than any buffer: plain tensors, no graph
            dev = self.device
            input_ids = torch.tensor(ids, dtype=torch.long, device=dev)
            pos = torch.tensor(positions, dtype=torch.long, device=dev)
            slot_t = torch.tensor(slots, dtype=torch.long, device=dev)
            tok_t = torch.tensor(tok_offsets, dtype=torch.long, device=dev)
        else:
            self._fill(ids, positions, slots, tok_offsets, n_pad)
            input_ids, pos, slot_t, tok_t = (self.buf[i, :n_pad] for i in range(4))
        return self._forward(
            input_ids,
            pos,
            slot_t,
            tok_t,
            query_start_loc,
            seq_lens,
            slot_offsets,
            n,
            runtime_mode,
            self.last_dispatch[1],
        )[:n]

    def _forward(
        self,
        input_ids: torch.Tensor,
        pos: torch.Tensor,
        slot_t: torch.Tensor,
        tok_t: torch.Tensor,
        qsl: list[int],
        seq_lens: list[int],
        slot_offsets: list[int],
        n: int,
        runtime_mode: CUDAGraphMode,
        desc: Any,
    ) -> torch.Tensor:
        static = StaticAttentionInputs(tok_t, pos, self.window) if runtime_mode == CUDAGraphMode.FULL else None
        meta = GraphAttentionMetadata(qsl, seq_lens, slot_offsets, slot_t, num_actual_tokens=n, static=static)
        with (
            set_forward_context(ForwardContext(meta, self.runner.kv_caches)),
            set_cudagraph_dispatch(runtime_mode, desc),
        ):
            return self.full(input_ids, pos)

    # ------------------------------------------------------------------ start-up capture
    def _install_piecewise(self) -> None:
        backend = getattr(self.runner, "backend", None)
        split_gm = getattr(backend, "split_gm", None)
        if not self.mode.has_piecewise() or self.pool is None:
            if split_gm is not None:  # graphs of an earlier executor on this model must not replay
                uninstall_piecewise_graphs(split_gm)
            return
        if split_gm is None or self.runner.config.mode != CompilationMode.PIECEWISE:
            raise RuntimeError("piecewise CUDA graphs need the piecewise backend to have compiled the model")
        names = [it.submod_name for it in backend.items if not it.is_splitting_graph]  # type: ignore[union-attr]  # baseline (issue 46)
        self.piecewise = install_piecewise_graphs(split_gm, names, self.pool, debug_addresses=self.debug_addresses)

    def capture(self) -> float:
        """Capture every graph key (after the model has compiled). Returns seconds."""
        if not self.enabled:
            return 0.0
        self._install_piecewise()
        t0 = time.perf_counter()
        keys = self.dispatcher.all_keys()
        progress.emit(progress.CAPTURE, f"capturing CUDA graphs for {len(keys)} batch keys", keys=len(keys))
        with capture_phase():
            for runtime_mode, desc in keys:
                n = desc.num_tokens
                # Dummy batch: one real token writing the scratch slot and reading slot 0 (the eager attention
                # looks at it only); the rest is padding.
                self._fill([0], [0], [self.scratch_slot], [0], n)
                input_ids, pos, slot_t, tok_t = (self.buf[i, :n] for i in range(4))
                self._forward(input_ids, pos, slot_t, tok_t, [0, 1], [1], [0], 1, runtime_mode, desc)
                if self.pool is not None:
                    self.pool.end_forward()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.capture_seconds = time.perf_counter() - t0
        self.num_graphs = self.pool.stats.graphs if self.pool is not None else 0
        self.captured = True
        logger.info(
            "Captured %d CUDA graphs (%s) for %d batch keys in %.2f s",
            self.num_graphs,
            ", ".join(f"{k}: {v}" for k, v in sorted((self.pool.stats.by_mode if self.pool else {}).items())),
            len(keys),
            self.capture_seconds,
        )
        return self.capture_seconds
