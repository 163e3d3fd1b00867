"""A long vLLM start, shown as it goes: a line every :data:`EVERY` seconds naming the phase vLLM's log is in.

An FP8 MoE model's cold start on a Hopper GPU spends minutes in JIT work (FlashInfer's nvcc builds, DeepGEMM's
kernels, FlashInfer's autotuner, Triton) before the engine is ready; a warm or check used to print nothing between
"starting vLLM" and "engine ready". :func:`heartbeat` reads the tail of vLLM's log while the start runs and says which
phase it is in (:func:`current_phase`: the last line of a known phase wins), from the log alone: it never changes
what the start does."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from cachetool import bounds

EVERY = 10.0
TAIL = 64 * 1024
# (a pattern of vLLM's or a library's log line, the phase it starts), matched case-insensitively
PHASES = (
    (r"Starting to load model|Loading weights|Loading safetensors", "loading the model"),
    (r"Model loading took", "model loaded; torch.compile (Dynamo) next"),
    (r"Dynamo bytecode transform time", "torch.compile: Inductor"),
    (r"Compiling a graph for compile range", "torch.compile: Inductor compiling graphs"),
    (r"Directly load (the compiled graph|AOT compilation)", "torch.compile: loading compiled graphs"),
    (r"torch\.compile (takes|took)", "torch.compile done"),
    (r"flashinfer.*(jit|build|ninja|nvcc)|ninja: ", "FlashInfer JIT (nvcc builds)"),
    (r"deep_?gemm", "DeepGEMM JIT warm-up"),
    (r"\[Autotuner\]|autotun", "kernel autotuning"),
    (r"Memory profiling takes|profil", "profiling memory, allocating the KV cache"),
    (r"Capturing CUDA graph|Graph capturing", "capturing CUDA graphs"),
    (r"init engine \(profile, create kv cache, warmup model\) took", "engine ready, first requests"),
)
_COMPILED = [(re.compile(p, re.IGNORECASE), phase) for p, phase in PHASES]


def current_phase(text: str) -> str:
    """The phase of the last line of ``text`` that names one; before any, vLLM's imports."""
    found = "importing vLLM"
    for line in text.splitlines():
        for rx, phase in _COMPILED:  # a line that names two phases is the later one's (FlashInfer's autotuner)
            if rx.search(line):
                found = phase
    return found


def _tail(log: Path) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - TAIL))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


@contextlib.contextmanager
def heartbeat(log: Path, say: Callable[[str], None], label: str, every: float = EVERY) -> Iterator[None]:
    """While the block runs, ``say(f"{label}: vLLM starting, N s: PHASE")`` every ``every`` seconds; the phase is
    also that of the bounds applied here, so that a ``--timeout`` reached names it."""
    done = threading.Event()
    t0 = time.monotonic()
    applied = bounds.current()

    def name_phase() -> str:
        phase = current_phase(_tail(log))
        for bound in applied:
            bound.phase = f"vLLM's start ({phase})"
        return phase

    def beat() -> None:
        while not done.wait(every):
            phase = name_phase()
            say(f"{label}: vLLM starting, {time.monotonic() - t0:.0f} s: {phase}")

    name_phase()
    thread = threading.Thread(target=beat, name="vllm-start-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=2)
