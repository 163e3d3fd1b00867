"""What may end an operation before it is done: a deadline (``pull --timeout``) or a stop request (a SIGINT or
SIGTERM that :mod:`cachetool.transfer.pull_policy` turns into one).

A :class:`Bound` holds one of them. An operation applies its bounds (:func:`applied`) for the code it runs; the loops
that take time call :func:`check` (a download's chunks, the expansion of a blob) or wait with :func:`sleep` (a
retry's backoff), which raise :class:`~cachetool.errors.WaitTimeoutError` (exit 7) or
:class:`~cachetool.errors.StopSignalError` (exit 130) once a bound is reached. So a store that streams steadily, or a
worker thread in the middle of a blob, stops at the bound, and the raise unwinds through the install's cleanup like
any failure. The bounds ride in a context variable, so that the stores' interface takes no deadline argument; worker
threads that work for the operation run in its context (``contextvars.copy_context``, see
:mod:`cachetool.install.stage`). Without a bound applied, :func:`check` does nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
import time
from collections.abc import Iterator

from cachetool.errors import StopSignalError, WaitTimeoutError

# How often a wait looks at the stop requests (a deadline ends it exactly).
POLL_SECONDS = 0.05


@dataclasses.dataclass
class Bound:
    """A deadline (``time.monotonic()``; ``seconds``, the timeout it came from, names it), or a stop request: an
    event that :meth:`stop` sets, from a signal handler or another thread."""

    deadline: float | None = None
    seconds: float | None = None
    stopped_by: str = ""  # what asked to stop, e.g. "SIGTERM"
    requested: threading.Event = dataclasses.field(default_factory=threading.Event)

    @classmethod
    def timeout(cls, seconds: float | None) -> Bound:
        """The bound of ``seconds`` from now (None or 0: no deadline)."""
        return cls(time.monotonic() + seconds if seconds else None, seconds or None)

    def stop(self, by: str) -> None:
        self.stopped_by = self.stopped_by or by
        self.requested.set()

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def check(self, what: str, **fields) -> None:
        if self.requested.is_set():
            raise StopSignalError(f"{what}: stopped by {self.stopped_by or 'a stop request'}", **fields)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise WaitTimeoutError(f"{what}: ran past --timeout {self.seconds:g} s", **fields)


_bounds: contextvars.ContextVar[tuple[Bound, ...]] = contextvars.ContextVar("cachetool_bounds", default=())


@contextlib.contextmanager
def applied(bound: Bound) -> Iterator[Bound]:
    """Apply ``bound`` (besides those already applied) to the code in the block and the threads it hands work to."""
    token = _bounds.set((*_bounds.get(), bound))
    try:
        yield bound
    finally:
        _bounds.reset(token)


def check(what: str, **fields) -> None:
    """Raise if a bound applied here is reached: ``what`` (the work cut short) starts the one-line message,
    ``fields`` are the error's (store, key)."""
    for bound in _bounds.get():
        bound.check(what, **fields)


def sleep(seconds: float, what: str) -> None:
    """``time.sleep(seconds)``, cut short by the bounds applied here: it raises (:func:`check`) at a deadline or a
    stop request that comes first."""
    end = time.monotonic() + seconds
    while True:
        check(what)
        left = end - time.monotonic()
        if left <= 0:
            return
        deadlines = [r for r in (b.remaining() for b in _bounds.get()) if r is not None]
        time.sleep(max(0.0, min([left, POLL_SECONDS if _bounds.get() else left, *deadlines])))
