"""A small model runner: builds the model, enables compilation, runs prefill and decode batches.

Used by the warm-up worker (``cachetool warm``) and the hit check (``cachetool check``): both start the model
as a server would: build, compile (or load) on a dummy batch of ``max_num_batched_tokens`` tokens, then serve
mixed prefill/decode batches through one graph. The lm head runs outside the graph, on the last token of each
sequence.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from compiler.compile_context import CompileContext
from compiler.config import CompilationConfig, CompilationMode
from compiler.forward_context import AttentionMetadata, ForwardContext, set_forward_context
from compiler.models.llama import LlamaForCausalLM, build_model, model_config_values

logger = logging.getLogger(__name__)

# How long an interrupted start waits for Inductor's compile worker processes to stop (they are told to at once).
WORKERS_STOP_SECONDS = 2.0

# Token counts of the standard workload: a 1-token batch (0/1 specialisation), 2, an odd 7 and 64.
WORKLOAD_TOKEN_COUNTS = (7, 64, 2, 1)


@contextlib.contextmanager
def compile_jobs_dropped_on_interrupt() -> Iterator[None]:
    """An interrupt in the block (Ctrl-C, or a ``KeyboardInterrupt`` an embedder raises for SIGTERM) cancels the
    compile jobs Inductor has queued and stops its compile worker processes, so that the process can end once the
    jobs already running do, instead of compiling the rest of the queue at exit. The workers are waited for
    :data:`WORKERS_STOP_SECONDS` at most (a worker that does not stop is the embedder's to end)."""
    from compiler import torch_compat

    try:
        yield
    except KeyboardInterrupt:
        stopping = threading.Thread(target=torch_compat.cancel_compile_jobs, name="compile-jobs-cancel", daemon=True)
        stopping.start()
        stopping.join(WORKERS_STOP_SECONDS)
        raise


@dataclass(frozen=True)
class StartReport:
    """A start as :meth:`ModelRunner.start_report` tells it (None where the cache is disabled or unused)."""

    cache_dir: str | None
    rank_dir: str | None
    cache_key: str | None
    hot_path: str | None  # "aot" or "dynamo"
    aot_fallback_reason: str | None  # why the AOT entry was not used
    key_source: str | None  # AOT path: "evidence" or "computed"
    phases: Any  # compiler.capture.StartupPhases of the first call, or None


@dataclass
class Sequence:
    seq_id: int
    slot_offset: int
    tokens: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose KV is in the cache


@dataclass
class StepResult:
    num_tokens: int
    logits: torch.Tensor  # [num_seqs, vocab], float32 on the CPU
    seconds: float


@dataclass
class WorkloadResult:
    steps: list[StepResult]
    token_counts: list[int]
    checksum: str  # sha256 of the rounded logits of every step
    logits_sample: list[float]  # first values of the last step's logits
    logits_sum: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "token_counts": self.token_counts,
            "checksum": self.checksum,
            "logits_sample": self.logits_sample,
            "logits_sum": self.logits_sum,
        }


class ModelRunner:
    def __init__(
        self,
        model: str,
        device: str = "cpu",
        compilation_config: CompilationConfig | None = None,
        *,
        max_num_seqs: int = 4,
        max_model_len: int = 256,
        max_num_batched_tokens: int = 64,
        seed: int = 0,
        rank: int = 0,
        dp_rank: int = 0,
        dtype: torch.dtype | None = None,
        key_only: bool = False,
        save_aot_entry: bool | None = None,
    ) -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.config = compilation_config or CompilationConfig()
        if self.config.mode == CompilationMode.PIECEWISE and not key_only:
            from compiler import torch_compat

            torch_compat.prefetch_artifact_loader()  # Dynamo's and the loader's imports overlap the build
        self.model: LlamaForCausalLM = build_model(model, self.device, dtype, seed)
        self.model_cfg = self.model.config
        self.dtype = next(self.model.parameters()).dtype
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.max_num_batched_tokens = max_num_batched_tokens
        self.ctx = CompileContext(
            self.config,
            model_config_values(self.model),
            device=self.device.type,
            rank=rank,
            dp_rank=dp_rank,
            key_only=key_only,
            save_aot_entry=save_aot_entry,
        )
        self.model.model.enable_compile(self.ctx)  # type: ignore[operator]  # baseline (issue 46)
        cfg = self.model_cfg
        slots = max_num_seqs * max_model_len + 1  # +1: a scratch slot that CUDA-graph padding tokens write
        self.kv_caches = {
            name: torch.zeros(
                2,
                slots,
                self.model.model.layers[0].self_attn.num_kv_heads,  # type: ignore[arg-type,union-attr]  # baseline (issue 46)
                cfg.head_dim,
                dtype=self.dtype,
                device=self.device,
            )  # this rank's KV heads
            for name in self.model.model.layer_names
        }
        self.sequences: dict[int, Sequence] = {}
        self._next_id = 0
        self.seed = seed
        from compiler.cudagraph_runner import GraphExecutor

        # Dispatch, padding and capture of CUDA graphs (mode resolved per device: NONE on the CPU).
        self.graphs = GraphExecutor(self)

    # ------------------------------------------------------------------ compile state
    @property
    def compile_state(self) -> Any:
        return self.model.model.compile_state

    def start_report(self) -> StartReport:
        """How this runner's start went, typed, for an embedder (cachetool's native engine): where the cache is,
        its key, the hot path taken and why not the AOT one, and the first call's start-up phases."""
        backend, state = self.backend, self.compile_state
        layout = getattr(backend, "layout", None)
        key = getattr(backend, "key", None)
        return StartReport(
            cache_dir=str(layout.dir) if layout is not None else None,
            rank_dir=str(layout.rank_dir) if layout is not None else None,
            cache_key=key.hash if key is not None else None,
            hot_path=getattr(state, "hot_path", None),
            aot_fallback_reason=getattr(state, "aot_fallback_reason", None),
            key_source=getattr(state, "key_source", None),
            phases=getattr(state, "phases", None),
        )

    @property
    def backend(self) -> Any:
        state = self.compile_state
        return getattr(state, "backend", None) if state is not None else None

    # ------------------------------------------------------------------ sequences
    def add_sequence(self, prompt: list[int]) -> Sequence:
        used = {s.slot_offset for s in self.sequences.values()}
        free = [i * self.max_model_len for i in range(self.max_num_seqs) if i * self.max_model_len not in used]
        if not free:
            raise RuntimeError("no free sequence slot")
        seq = Sequence(self._next_id, free[0], list(prompt))
        self._next_id += 1
        self.sequences[seq.seq_id] = seq
        return seq

    def free(self, seq: Sequence) -> None:
        self.sequences.pop(seq.seq_id, None)

    # ------------------------------------------------------------------ one step
    @torch.inference_mode()
    def step(self, seqs: list[Sequence]) -> StepResult:
        """Run every not-yet-computed token of ``seqs`` in one flattened batch; returns last-token logits."""
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        qsl = [0]
        seq_lens = []
        for s in seqs:
            new = s.tokens[s.num_computed :]
            if not new:
                raise ValueError(f"sequence {s.seq_id} has no new tokens")
            if len(s.tokens) > self.max_model_len:
                raise ValueError(f"sequence {s.seq_id} longer than max_model_len={self.max_model_len}")
            ids.extend(new)
            positions.extend(range(s.num_computed, len(s.tokens)))
            slots.extend(s.slot_offset + p for p in range(s.num_computed, len(s.tokens)))
            qsl.append(len(ids))
            seq_lens.append(len(s.tokens))
        dev = self.device
        t0 = time.perf_counter()
        if self.graphs.enabled:
            hidden = self.graphs.execute(ids, positions, slots, qsl, seq_lens, [s.slot_offset for s in seqs])
        else:
            input_ids = torch.tensor(ids, dtype=torch.long, device=dev)
            pos = torch.tensor(positions, dtype=torch.long, device=dev)
            meta = AttentionMetadata(
                qsl, seq_lens, [s.slot_offset for s in seqs], torch.tensor(slots, dtype=torch.long, device=dev)
            )
            with set_forward_context(ForwardContext(meta, self.kv_caches)):
                hidden = self.model(input_ids, pos)
        last = torch.tensor([q - 1 for q in qsl[1:]], device=dev)
        logits = self.model.compute_logits(hidden[last]).float()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        for s in seqs:
            s.num_computed = len(s.tokens)
        return StepResult(len(ids), logits.cpu(), time.perf_counter() - t0)

    # ------------------------------------------------------------------ start-up and workload
    def warmup(self) -> float:
        """Compile (or load) with a dummy batch of ``max_num_batched_tokens`` tokens, as a server's profile
        run does, run each compile size once, then capture the CUDA graphs (if any). Returns seconds."""
        t0 = time.perf_counter()
        sizes = [self.max_num_batched_tokens]
        sizes += [s for s in self.config.resolved_compile_sizes if s not in sizes]
        if not self.graphs.enabled:  # capture runs every capture size itself
            sizes += [s for s in (self.config.cudagraph_capture_sizes or []) if s not in sizes]
        for n in sizes:
            n = min(n, self.max_model_len)
            seq = self.add_sequence([0] * n)
            try:
                self.step([seq])
            finally:
                self.free(seq)
        self.graphs.capture()
        return time.perf_counter() - t0

    def close(self) -> None:
        """Release what the process would otherwise tear down at exit: Inductor's compile workers, the load
        overlays, pending device work. The model stays usable for calls that load nothing new."""
        from compiler import torch_compat
        from compiler.layout import release_overlays

        torch_compat.shutdown_compile_workers()
        release_overlays()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _prompt(self, gen: torch.Generator, n: int) -> list[int]:
        return torch.randint(1, self.model_cfg.vocab_size, (n,), generator=gen).tolist()

    def run_workload(
        self, token_counts: tuple[int, ...] = WORKLOAD_TOKEN_COUNTS, decode_steps: int = 3
    ) -> WorkloadResult:
        """Prefill and decode batches whose token counts include ``token_counts`` (default 7, 64, 2, 1);
        greedy decoding; deterministic for a given seed."""
        gen = torch.Generator().manual_seed(self.seed + 1)
        steps: list[StepResult] = []
        last_logits: dict[int, torch.Tensor] = {}

        def run(group: list[Sequence]) -> None:
            res = self.step(group)
            steps.append(res)
            for s, row in zip(group, res.logits):
                last_logits[s.seq_id] = row

        # Prefill: one prompt per requested count (a large count is split over two sequences: batching).
        live: list[Sequence] = []
        for n in token_counts:
            if n >= 16 and len(self.sequences) + 2 <= self.max_num_seqs:
                group = [self.add_sequence(self._prompt(gen, n // 2)), self.add_sequence(self._prompt(gen, n - n // 2))]
            elif len(self.sequences) < self.max_num_seqs:
                group = [self.add_sequence(self._prompt(gen, n))]
            else:
                continue
            run(group)
            live += group
        # Decode (greedy): all live sequences together, then two of them (2 tokens), then one (1 token).
        for group in [live] * decode_steps + [live[:2], live[:1]]:
            for s in group:
                s.tokens.append(int(last_logits[s.seq_id].argmax()))
            run(group)
        for s in live:
            self.free(s)
        h = hashlib.sha256()
        for st in steps:
            h.update(st.logits.to(torch.float32).mul(1e3).round().to(torch.int64).numpy().tobytes())
        last = steps[-1].logits
        return WorkloadResult(
            steps,
            [st.num_tokens for st in steps],
            h.hexdigest(),
            [round(float(v), 6) for v in last.flatten()[:8]],
            float(sum(float(st.logits.sum()) for st in steps)),
        )


def compute_cache_key(
    model: str,
    device: str = "cpu",
    compilation_config: CompilationConfig | None = None,
    *,
    rank: int = 0,
    dp_rank: int = 0,
) -> Any:
    """The :class:`~compiler.cache_key.CacheKey` and :class:`~compiler.layout.CacheLayout` that ``warm`` would use
    for ``model``: Dynamo traces a dummy batch (no Inductor, nothing written). Returns ``(key, layout)``."""
    runner = ModelRunner(
        model, device, compilation_config, rank=rank, dp_rank=dp_rank, key_only=True, max_num_batched_tokens=8
    )
    runner.warmup()
    backend = runner.backend
    if backend is None or backend.key is None:
        raise ValueError("the cache key exists only in mode 3 (piecewise backend)")
    return backend.key, backend.layout
