"""Counters of what the pipeline did (pieces compiled vs loaded) and the strict (hit-only) mode."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from compiler.errors import STRICT_MODE, CompilerError


class CompileInStrictMode(CompilerError):
    """Something had to compile while strict mode required a pure cache hit."""

    kind = STRICT_MODE


@dataclass
class CompileCounters:
    dynamo_compiles: int = 0  # times our backend was entered (one per Dynamo graph)
    dynamo_traces: int = 0  # Dynamo captures of a frame (torch.compile's and the AOT capture of a warm)
    pieces: int = 0  # compiled pieces in the split graph (attention pieces excluded)
    unique_pieces: int = 0  # structurally distinct pieces
    graphs_compiled: int = 0  # Inductor compilations actually run
    graphs_loaded: int = 0  # artifacts loaded from the cache directory
    graphs_reused: int = 0  # pieces served by an identical piece compiled/loaded in this process
    compile_seconds: float = 0.0  # time in our backend (split, compile or load)
    inductor_compile_seconds: float = 0.0  # Inductor compiling pieces (the ``compile`` phase)
    artifact_load_seconds: float = 0.0  # loading saved artifacts (part of the ``load`` phase)

    def snapshot(self) -> CompileCounters:
        return dataclasses.replace(self)

    def delta(self, before: CompileCounters) -> CompileCounters:
        return CompileCounters(
            **{f.name: getattr(self, f.name) - getattr(before, f.name) for f in dataclasses.fields(self)}
        )

    def as_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


counters = CompileCounters()

_strict = threading.local()


def is_strict() -> bool:
    return bool(getattr(_strict, "on", False))


@contextlib.contextmanager
def strict_mode(enabled: bool = True) -> Iterator[None]:
    """Inside, any Inductor compilation (or Dynamo recompilation) raises :class:`CompileInStrictMode`."""
    prev = is_strict()
    _strict.on = enabled
    try:
        yield
    finally:
        _strict.on = prev


def check_not_strict(what: str) -> None:
    if is_strict():
        raise CompileInStrictMode(f"strict mode: {what} would compile (cache miss)")
