"""Progress events of a compiling start: what the pipeline is doing while a person waits (piece i of n, compile
sizes, autotuning, the AOT entry, CUDA-graph capture).

The compiler only emits; whoever embeds it listens (``cachetool warm`` renders them, rich on a terminal, one line
per step otherwise; see :mod:`cachetool.cli.progress`). No listener, no cost beyond a function call::

    with progress.listening(print_event):
        runner.warmup()

An event is also its message: ``str(event)`` is one human line, so a listener written for plain strings (the
vLLM engine's ``engine_progress`` callback takes ``Callable[[str], None]``) can take these too.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

# Event kinds, in the order a warm emits them.
TRACE = "trace"  # Dynamo starts capturing the forward
KEY = "key"  # the cache key is known (fields: key, pieces, unique)
PIECE = "piece"  # one piece done (fields: index, total, action: compiled|loaded|reused|aot_entry, shape,
# seconds; aot_entry: a compiled piece taken into the AOT entry being saved)
PIECE_START = "piece_start"  # a compile of one piece begins (fields: index, total, shape)
AUTOTUNE = "autotune"  # Inductor benchmarks choices for a compile size (fields: shape, choices)
SAVE = "save"  # the AOT entry is being written
CAPTURE = "capture"  # CUDA graphs are being captured (fields: sizes)
STEP = "step"  # anything else worth a line (the embedding tool's own steps)


@dataclass(frozen=True)
class ProgressEvent:
    kind: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message


Listener = Callable[[ProgressEvent], None]
_listeners: list[Listener] = []


def emit(kind: str, message: str, **fields: Any) -> None:
    """Tell every listener; a listener that raises is logged and dropped from this event only."""
    if not _listeners:
        return
    event = ProgressEvent(kind, message, fields)
    for listener in list(_listeners):
        try:
            listener(event)
        except Exception:  # a display must never fail a compile
            logger.debug("progress listener failed", exc_info=True)


_steps: list[str] = []  # the opening steps the pipeline is inside (``during``), innermost last


@contextlib.contextmanager
def during(kind: str) -> Iterator[None]:
    """The pipeline is inside step ``kind`` (``SAVE``): an event emitted within can say what it is part of."""
    _steps.append(kind)
    try:
        yield
    finally:
        _steps.pop()


def current_step() -> str | None:
    """The innermost :func:`during` step, or None."""
    return _steps[-1] if _steps else None


@contextlib.contextmanager
def listening(listener: Listener | None) -> Iterator[None]:
    """``listener`` receives every event emitted inside (``None``: nothing changes)."""
    if listener is None:
        yield
        return
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
