"""CUDA-graph planning: capture sizes, padding, mode resolution and per-batch dispatch (vLLM's dispatcher).

Everything here is plain Python (no GPU needed), so CI tests it on the CPU:

- :func:`resolve_capture_sizes`: ``cudagraph_capture_sizes`` when given, else the capture-size rule
  ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` with ``max_cudagraph_capture_size`` (default 512;
  the rule is :func:`compiler.config.default_capture_sizes`), without sizes a batch can never reach.
- :func:`padded_size`: a batch is padded up to the nearest captured size; larger batches get ``None`` (no graph).
- :func:`resolve_cudagraph_mode`: the mode that will really run. On the CPU every mode resolves to ``NONE``
  with one log line; unset means ``FULL_AND_PIECEWISE`` on the GPU; full graphs only where the attention
  implementation allows (:class:`AttentionCGSupport`); piecewise graphs only with a split graph in mode 3.
- :class:`BatchDescriptor` and :class:`CudagraphDispatcher`: which graph (FULL, PIECEWISE or none) serves a
  batch of ``num_tokens`` tokens, ``uniform_decode`` when every sequence brings exactly one new token.
"""

from __future__ import annotations

import bisect
import enum
import logging
from dataclasses import dataclass

from compiler.config import CompilationConfig, CompilationMode, CUDAGraphMode

logger = logging.getLogger(__name__)


class AttentionCGSupport(enum.IntEnum):
    """How much of a forward the attention implementation lets a full CUDA graph hold (vLLM's enum)."""

    NEVER = 0
    """Attention must run eagerly: no full graphs at all (piecewise only)."""
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    """Full graphs only for batches where every sequence decodes one token."""
    ALWAYS = 2
    """Full graphs for any batch: prefill, decode and mixed."""


# ---------------------------------------------------------------------- capture sizes


def resolve_capture_sizes(config: CompilationConfig, max_num_tokens: int | None = None) -> list[int]:
    """The sizes to capture, ascending: :attr:`CompilationConfig.resolved_capture_sizes` (the rule of
    :func:`compiler.config.default_capture_sizes`), without the sizes above ``max_num_tokens`` (the largest batch
    the server will run), as vLLM drops sizes above ``max_num_batched_tokens``."""
    sizes = config.resolved_capture_sizes
    if max_num_tokens is not None:
        kept = [s for s in sizes if s <= max_num_tokens]
        if len(kept) != len(sizes):
            logger.debug(
                "CUDA graph capture sizes above max_num_tokens=%d dropped: %s",
                max_num_tokens,
                [s for s in sizes if s > max_num_tokens],
            )
        sizes = kept
    return sizes


def padded_size(num_tokens: int, sizes: list[int]) -> int | None:
    """The smallest captured size >= ``num_tokens`` (``sizes`` ascending), or ``None`` when the batch is larger
    than every captured size (it then runs without a graph)."""
    if num_tokens <= 0:
        raise ValueError(f"num_tokens must be positive, got {num_tokens}")
    i = bisect.bisect_left(sizes, num_tokens)
    return sizes[i] if i < len(sizes) else None


# ---------------------------------------------------------------------- mode resolution


def resolve_cudagraph_mode(
    config: CompilationConfig, device_type: str, attention_support: AttentionCGSupport = AttentionCGSupport.ALWAYS
) -> CUDAGraphMode:
    """The CUDA-graph mode that will run for ``config`` on ``device_type``.

    - ``cudagraph_mode`` unset (``None``): ``FULL_AND_PIECEWISE`` on the GPU, ``NONE`` elsewhere;
    - not CUDA: ``NONE``, with one INFO line when a graph mode was asked for;
    - mode 0 (no compilation) keeps only full graphs; piecewise graphs need mode 3 with ``splitting_ops``;
    - full graphs are narrowed to what the attention implementation allows (vLLM's rule):
      ``NEVER`` → piecewise only (or NONE); ``UNIFORM_SINGLE_TOKEN_DECODE`` → ``FULL`` becomes
      ``FULL_AND_PIECEWISE`` (``FULL_DECODE_ONLY`` without a split graph).
    """
    requested = config.cudagraph_mode
    if device_type != "cuda":
        if requested is not None and requested != CUDAGraphMode.NONE:
            logger.info(
                "CUDA graphs need a CUDA device: cudagraph_mode=%s resolves to NONE on %s", requested.value, device_type
            )
        return CUDAGraphMode.NONE
    mode = CUDAGraphMode.FULL_AND_PIECEWISE if requested is None else requested
    if mode == CUDAGraphMode.NONE:
        return mode
    can_piecewise = config.mode == CompilationMode.PIECEWISE and bool(config.resolved_splitting_ops)
    resolved = mode
    if mode.has_piecewise() and not can_piecewise:
        resolved = CUDAGraphMode.FULL_DECODE_ONLY if mode == CUDAGraphMode.FULL_AND_PIECEWISE else CUDAGraphMode.NONE  # type: ignore[assignment]  # baseline (issue 46)
    if resolved.has_full():
        if attention_support == AttentionCGSupport.NEVER:
            resolved = CUDAGraphMode.PIECEWISE if can_piecewise else CUDAGraphMode.NONE  # type: ignore[assignment]  # baseline (issue 46)
        elif attention_support == AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE and resolved == CUDAGraphMode.FULL:
            resolved = CUDAGraphMode.FULL_AND_PIECEWISE if can_piecewise else CUDAGraphMode.FULL_DECODE_ONLY
    if resolved != mode:
        logger.warning(
            "cudagraph_mode=%s resolves to %s (attention supports full graphs: %s; piecewise graphs possible: %s)",
            mode.value,
            resolved.value,
            attention_support.name,
            can_piecewise,
        )
    return resolved


def decode_mode(mode: CUDAGraphMode) -> CUDAGraphMode:
    """Runtime mode for uniform single-token decode batches."""
    if mode in (CUDAGraphMode.FULL, CUDAGraphMode.FULL_DECODE_ONLY, CUDAGraphMode.FULL_AND_PIECEWISE):
        return CUDAGraphMode.FULL
    return mode


def mixed_mode(mode: CUDAGraphMode) -> CUDAGraphMode:
    """Runtime mode for prefill and mixed batches."""
    if mode == CUDAGraphMode.FULL_DECODE_ONLY:
        return CUDAGraphMode.NONE
    if mode == CUDAGraphMode.FULL_AND_PIECEWISE:
        return CUDAGraphMode.PIECEWISE
    return mode


# ---------------------------------------------------------------------- dispatch


@dataclass(frozen=True)
class BatchDescriptor:
    """The key of one captured graph: the (padded) token count and whether the batch is a uniform decode."""

    num_tokens: int
    uniform_decode: bool = False


class CudagraphDispatcher:
    """Holds the graph keys of each runtime mode and picks one per batch (vLLM's ``CudagraphDispatcher``).

    ``mode`` is the resolved mode. Mixed keys (``uniform_decode=False``) exist for every capture size when the
    mixed runtime mode is not NONE; uniform-decode keys exist for capture sizes up to ``max_num_seqs`` when the
    decode runtime mode is FULL and differs from the mixed one (FULL_DECODE_ONLY, FULL_AND_PIECEWISE).
    """

    def __init__(self, mode: CUDAGraphMode, capture_sizes: list[int], max_num_seqs: int) -> None:
        self.mode = mode
        self.capture_sizes = sorted(set(capture_sizes))
        self.max_num_seqs = max_num_seqs
        self.keys: dict[CUDAGraphMode, set[BatchDescriptor]] = {
            CUDAGraphMode.FULL: set(),
            CUDAGraphMode.PIECEWISE: set(),
        }
        if mode == CUDAGraphMode.NONE:
            self.decode_sizes: list[int] = []
            return
        mixed, dec = mixed_mode(mode), decode_mode(mode)
        if mixed != CUDAGraphMode.NONE:
            for s in self.capture_sizes:
                self.keys[mixed].add(BatchDescriptor(s, False))
        self.decode_sizes = []
        if dec == CUDAGraphMode.FULL and mixed != CUDAGraphMode.FULL:
            self.decode_sizes = [s for s in self.capture_sizes if s <= max_num_seqs]
            for s in self.decode_sizes:
                self.keys[CUDAGraphMode.FULL].add(BatchDescriptor(s, True))

    def all_keys(self) -> list[tuple[CUDAGraphMode, BatchDescriptor]]:
        """Every key to capture, largest first within each mode (smaller graphs reuse the pool's memory)."""
        out: list[tuple[CUDAGraphMode, BatchDescriptor]] = []
        for m in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL):
            out += [(m, d) for d in sorted(self.keys[m], key=lambda d: (-d.num_tokens, d.uniform_decode))]
        return out

    def dispatch(self, num_tokens: int, uniform_decode: bool) -> tuple[CUDAGraphMode, BatchDescriptor]:
        """``(runtime mode, descriptor)`` for a batch. The descriptor's ``num_tokens`` is the padded size under a
        graph mode, the batch's own size under ``NONE`` (no graph: too large, or no graphs at all)."""
        none = (CUDAGraphMode.NONE, BatchDescriptor(num_tokens, uniform_decode))
        if self.mode == CUDAGraphMode.NONE:
            return none
        if uniform_decode and self.decode_sizes:
            size = padded_size(num_tokens, self.decode_sizes)
            if size is not None:
                return CUDAGraphMode.FULL, BatchDescriptor(size, True)
        size = padded_size(num_tokens, self.capture_sizes)
        if size is None:
            return none
        key = BatchDescriptor(size, False)
        for m in (CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE):
            if key in self.keys[m]:
                return m, key
        return none
