"""What may end an operation before it is done: a time limit (``pull --timeout``, ``warm --timeout``, ``check
--timeout``) or a stop request (a SIGINT or SIGTERM that :mod:`cachetool.stop_signals` turns into one).

A :class:`Bound` holds them, and it is the one way they reach the code an operation runs. An operation applies its
bounds (:func:`applied`) for the code it runs; the loops that take time call :func:`check` (a download's chunks, the
expansion of a blob) or wait with :func:`sleep` (a retry's backoff, the wait for the cache root's lock), which raise
:class:`~cachetool.errors.WaitTimeoutError` (exit 7) or :class:`~cachetool.errors.StopSignalError` (exit 130) once a
bound is reached. So a store that streams steadily, or a worker thread in the middle of a blob, stops at the bound,
and the raise unwinds through the install's cleanup like any failure. The bounds ride in a context variable, so that
no store, source or install function takes a deadline argument (tests/transfer/test_one_bound.py keeps it so);
worker threads that work for the operation run in its context (``contextvars.copy_context``, see
:mod:`cachetool.install.stage`). Without a bound applied, :func:`check` does nothing.

Some work cannot look at a bound: an import of torch, a store request that never answers, a child process that
compiles. For that work alone the operation also holds its deadline from outside, with the same bound, in one of two
ways:

- :func:`finish_within` (``pull``): the work runs in a worker thread and the wait for it ends at the deadline itself,
  whatever the work is doing; a timeout is then one outcome, reached on time, and its message names the phase that
  was running (:func:`phase`). A worker still blocked is left behind, which only in-process work allows.
- the clock as a stop signal (``warm``, ``check``: :func:`cachetool.stop_signals.stopped_by_signals` with a
  ``timeout``): SIGALRM at the deadline stops the block as SIGTERM does, so the main thread unwinds through the
  engine's cleanup and every process the start made is ended, which no abandoned thread would do.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from cachetool.errors import StopSignalError, UsageError, WaitTimeoutError

T = TypeVar("T")

# How often a wait looks at the stop requests (a deadline ends it exactly).
POLL_SECONDS = 0.05

# How long :func:`finish_within` waits, past the deadline or a stop request, for a worker to unwind through its own
# cleanup (its checks end it at the same deadline) before it leaves the worker behind.
UNWIND_SECONDS = 0.3


@dataclasses.dataclass
class Bound:
    """A deadline (``time.monotonic()``; ``seconds``, the timeout it came from, names it), or a stop request: an
    event that :meth:`stop` sets, from a signal handler or another thread."""

    deadline: float | None = None
    seconds: float | None = None
    stopped_by: str = ""  # what asked to stop, e.g. "SIGTERM"
    requested: threading.Event = dataclasses.field(default_factory=threading.Event)
    phase: str = ""  # what the operation is doing now (:func:`phase`): a timeout names it

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
        if self.passed():
            raise WaitTimeoutError(f"{what}: ran past --timeout {self.seconds:g} s", **fields)

    def passed(self, at: float | None = None) -> bool:
        """Whether the deadline is reached (now, or at ``at``, a ``time.monotonic()``)."""
        return self.deadline is not None and (time.monotonic() if at is None else at) >= self.deadline

    def timed_out(self, what: str, phase: str) -> WaitTimeoutError:
        """The timeout of ``what`` (``"pull"``) reached during ``phase``."""
        return WaitTimeoutError(f"{what} ran past --timeout {self.seconds:g} s" + (f" during {phase}" if phase else ""))


_bounds: contextvars.ContextVar[tuple[Bound, ...]] = contextvars.ContextVar("cachetool_bounds", default=())


@contextlib.contextmanager
def applied(bound: Bound) -> Iterator[Bound]:
    """Apply ``bound`` (besides those already applied) to the code in the block and the threads it hands work to."""
    token = _bounds.set((*_bounds.get(), bound))
    try:
        yield bound
    finally:
        _bounds.reset(token)


def current() -> tuple[Bound, ...]:
    """The bounds applied here: a helper thread that follows the operation (a start's progress) names their phase."""
    return _bounds.get()


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Name what the block does (``"the preflight"``) for the bounds applied here, so that a timeout reached in it
    says where the time went; the phase before it is named again when the block ends. For the thread that runs the
    operation's steps in order, not its workers."""
    saved = [(b, b.phase) for b in _bounds.get()]
    for b, _ in saved:
        b.phase = name
    try:
        yield
    finally:
        for b, before in saved:
            b.phase = before


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


def finish_within(bound: Bound, work: Callable[[], T], what: str, abandoned: threading.Event | None = None) -> T:
    """``work()``, run in a worker thread of this context, waited for until ``bound``'s deadline (or a stop signal
    raised in this thread), then for :data:`UNWIND_SECONDS` while the worker ends at its own checks and cleans up.
    Only around work that cannot look at a bound (see the module doc); what can, checks it. A worker still running then
    is left behind (a daemon thread; ``abandoned`` is set) and the timeout, naming the phase that was running, is
    raised: so the deadline holds whatever the work is doing (an import of torch, a request that never answers).
    A failure of the work that came past the deadline is the timeout too (``from`` the failure): past the bound a
    pull has one outcome. Without a deadline ``work()`` runs here."""
    if bound.deadline is None:
        return work()
    done, box = threading.Event(), {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the waiting thread, which raises it
            box["error"], box["at"] = exc, time.monotonic()  # type: ignore[assignment]  # baseline (issue 46)
        finally:
            done.set()

    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(run,), name=f"cachetool-{what}", daemon=True).start()
    try:
        finished = done.wait(max(0.0, bound.remaining() or 0.0))
        running = bound.phase
        finished = finished or done.wait(UNWIND_SECONDS)
    except BaseException:  # a stop signal in this thread: the worker sees the stop request at its next check
        if not done.wait(UNWIND_SECONDS) and abandoned is not None:
            abandoned.set()
        raise
    if not finished:
        if abandoned is not None:
            abandoned.set()
        raise bound.timed_out(what, running)
    return _outcome(bound, box, what, running)


def _outcome(bound: Bound, box: dict, what: str, running: str):
    """The finished work's value, or its failure: the timeout where it came past the deadline (a usage mistake, a
    timeout or a stop stays what it is)."""
    if "error" not in box:
        return box["value"]
    exc = box["error"]
    if bound.passed(box["at"]) and not isinstance(
        exc, (WaitTimeoutError, StopSignalError, UsageError, KeyboardInterrupt)
    ):
        raise bound.timed_out(what, running) from exc
    raise exc
