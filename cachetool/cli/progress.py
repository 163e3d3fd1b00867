"""What ``cachetool warm`` shows while it compiles: the compiler's progress events (:mod:`compiler.progress`:
piece i of n, compile sizes, autotuning, the AOT entry, CUDA-graph capture) and the vLLM engine's message lines.

On a terminal, a rich spinner names the step in progress and each finished step stays as a line; elsewhere (CI
logs, pipes) one plain line per step; with ``--json`` nothing (stdout holds the one JSON object, stderr the log).
All of it goes to stderr.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import click

# Events that open a step (the spinner shows them); the others close one or stand alone.
_OPENING = ("trace", "piece_start", "autotune", "save", "capture", "step")


def _line(prefix: str, event: Any) -> str:
    """``warm: <message>``; messages that name the command already (the vLLM engine's) are left as they are."""
    text = str(event)
    return text if text.startswith(f"{prefix}:") else f"{prefix}: {text}"


class LineProgress:
    """One line per event: ``warm: piece 2/5 compiled in 12.3 s``."""

    def __init__(self, stream: TextIO, prefix: str = "warm") -> None:
        self.stream = stream
        self.prefix = prefix

    def __call__(self, event: Any) -> None:
        click.echo(_line(self.prefix, event), file=self.stream)

    def close(self) -> None:
        pass


class RichProgress:
    """A spinner with the step in progress; finished steps are printed above it."""

    def __init__(self, stream: TextIO, prefix: str = "warm") -> None:
        from rich.console import Console

        self.prefix = prefix
        self.console = Console(file=stream, highlight=False)
        self.status = self.console.status(f"{prefix}: starting")
        self.status.start()

    def __call__(self, event: Any) -> None:
        from rich.markup import escape

        text = escape(_line(self.prefix, event))
        if getattr(event, "kind", None) in _OPENING:
            self.status.update(text)
        else:
            self.console.print(f"[green]✓[/green] {text}")

    def close(self) -> None:
        self.status.stop()


@contextlib.contextmanager
def progress_renderer(
    as_json: bool, stream: TextIO | None = None, prefix: str = "warm"
) -> Iterator[Callable[[Any], None] | None]:
    """The listener for ``warm``'s progress (``None`` with ``--json``), closed when the block ends."""
    if as_json:
        yield None
        return
    out = stream if stream is not None else sys.stderr
    render: LineProgress | RichProgress
    try:
        render = RichProgress(out, prefix) if out.isatty() else LineProgress(out, prefix)
    except Exception:  # rich unusable here: plain lines
        render = LineProgress(out, prefix)
    try:
        yield render
    finally:
        render.close()
