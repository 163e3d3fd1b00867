"""SIGINT and SIGTERM as a clean stop of a verb: Ctrl-C, or Kubernetes stopping a pod (SIGTERM, then SIGKILL after
its grace period, 30 s by default).

:func:`stopped_by_signals` runs a block (``warm``, ``check``, ``pull``) so that the first stop signal

1. asks the block's worker threads to stop at their next check (a :class:`~cachetool.bounds.Bound` applied to the
   block) and raises :class:`~cachetool.errors.StopRequested` in the main thread, a ``KeyboardInterrupt`` that
   unwinds through every cleanup on the way (an engine ends its child's process group, the install removes its
   staging folder) and that no ``except Exception`` of torch, vLLM or a store client swallows;
2. then, once the block is left, ends what is left of the processes the block started (:mod:`cachetool.
   process_tree`; taken when the signal came, before any cleanup orphaned them): Inductor's compile jobs, the
   ranks of a tensor-parallel start;
3. and raises :class:`~cachetool.errors.StopSignalError` (exit 130, one ``error:`` line, one JSON object) with the
   block's own message.

A later signal only asks again: the cleanup is not cut. A signal that comes as the block finishes still ends it as
stopped. Signals reach the main thread only: elsewhere the block runs as it is.

A time limit (``warm --timeout``, ``check --timeout``) is the same stop, sent by the clock (SIGALRM): the block ends
as it would on SIGTERM, every process it started included, and raises :class:`~cachetool.errors.WaitTimeoutError`
(exit 7) naming the phase it was in (:func:`cachetool.bounds.phase`, or a start's progress setting the bound's
``phase``). One mechanism for both, so a start that runs past its limit leaves nothing running, as a stopped one.
The deadline is the block's :class:`~cachetool.bounds.Bound`'s, the one the block's checks see; the clock only holds
it for the work that cannot look at a bound (a child process compiling). ``pull`` holds its own ``--timeout`` with
:func:`cachetool.bounds.finish_within` instead (see :mod:`cachetool.bounds`).

This is the one ``stopped_by_signals``: a verb that needs its own message wraps it under a name that says so
(``pull_policy.pull_stopped_by_signals``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from cachetool import bounds, process_tree
from cachetool.errors import StopRequested, StopSignalError, UsageError, WaitTimeoutError

__all__ = ["STOP_SIGNALS", "stopped_by_signals"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
TIME_LIMIT = "the time limit"  # what stopped a block whose timeout the clock reached (SIGALRM)


@contextlib.contextmanager
def stopped_by_signals(message: Callable[[str], str], timeout: float | None = None) -> Iterator[bounds.Bound]:
    """Run the block under the stop signals and, with ``timeout`` (seconds), a time limit (see the module doc);
    ``message(cause)`` is the one line a stop ends in (``cause``: the signal's name, or ``--timeout N s during
    PHASE``). Yields the block's stop :class:`~cachetool.bounds.Bound`. The time limit is the clock's signal alone
    (the bound has no deadline of its own, so nothing in the block raises a timeout that the cleanup could race);
    a timer set before the block runs on after it, less the block's time. Signals reach the main thread only: there
    alone can a time limit be kept (elsewhere it is a usage error)."""
    if timeout is not None and timeout < 0:
        raise UsageError(f"--timeout {timeout:g}: give a number of seconds above 0")
    timeout = timeout or None  # 0, as None: no time limit (the bounds' rule)
    stop = bounds.Bound()
    if threading.current_thread() is not threading.main_thread():
        if timeout is not None:
            raise UsageError(
                "a time limit (timeout) is kept by a signal, which only the main thread receives: "
                "run the start in the main thread, or bound it from outside"
            )
        with bounds.applied(stop):
            yield stop
        return
    state = _Stop(stop, process_tree.clock_ticks())
    signals = STOP_SIGNALS + ((signal.SIGALRM,) if timeout else ())
    previous: dict[int, Any] = {}
    outer_timer, began = (0.0, 0.0), time.monotonic()
    try:
        process_tree.adopting_orphans()  # a job started as its parent is ended stays in the tree the stop ends
        previous = {s: signal.signal(s, state.handle) for s in signals}
        if timeout:
            outer_timer = signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            with bounds.applied(stop):
                yield stop
        except BaseException:
            if not stop.requested.is_set():
                raise
        finally:
            state.armed = False  # from here on a signal only asks again: the cleanup below is not cut
        if stop.requested.is_set():
            state.left = process_tree.end_descendants(state.since, state.started)
    finally:
        process_tree.adopting_orphans(False)
        if timeout:
            _restore_timer(outer_timer, time.monotonic() - began)
        for s, handler in previous.items():
            signal.signal(s, handler)
    if stop.requested.is_set():
        raise state.error(message, timeout)


@dataclasses.dataclass
class _Stop:
    """What the first stop of a block found (its processes, its phase) and whether a signal may still raise."""

    stop: bounds.Bound
    since: int
    started: set[process_tree.Identity] = dataclasses.field(default_factory=set)
    left: set[process_tree.Identity] = dataclasses.field(default_factory=set)
    armed: bool = True
    during: str = ""  # the phase the block was in when the stop came (the block's cleanup names its own)

    def handle(self, signum: int, frame: object) -> None:
        first = not self.stop.requested.is_set()
        name = TIME_LIMIT if signum == signal.SIGALRM else signal.Signals(signum).name
        self.stop.stop(name)
        if first:
            self.during = self.stop.phase
            self.started.update(process_tree.descendants(since=self.since))
            if self.armed:
                raise StopRequested(name)

    def error(self, message: Callable[[str], str], timeout: float | None) -> Exception:
        note = f"; {len(self.left)} process(es) did not end: {sorted(p for p, _ in self.left)}" if self.left else ""
        if self.stop.stopped_by == TIME_LIMIT:
            phase = f" during {self.during}" if self.during else ""
            return WaitTimeoutError(message(f"--timeout {timeout:g} s{phase}") + note)
        return StopSignalError(message(self.stop.stopped_by) + note)


def _restore_timer(outer: tuple[float, float], elapsed: float) -> None:
    """Cancel the block's timer and give back one that was running before it, less the block's time (one that
    came due meanwhile fires at once)."""
    delay, interval = outer
    signal.setitimer(signal.ITIMER_REAL, max(delay - elapsed, 1e-6) if delay > 0 else 0.0, interval)
