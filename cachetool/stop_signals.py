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
import signal
import threading
from collections.abc import Callable, Iterator

from cachetool import bounds, process_tree
from cachetool.errors import StopRequested, StopSignalError, WaitTimeoutError

__all__ = ["STOP_SIGNALS", "stopped_by_signals"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
TIME_LIMIT = "the time limit"  # what stopped a block whose timeout the clock reached (SIGALRM)


@contextlib.contextmanager
def stopped_by_signals(message: Callable[[str], str], timeout: float | None = None) -> Iterator[bounds.Bound]:
    """Run the block under the stop signals and, with ``timeout`` (seconds), a time limit (see the module doc);
    ``message(cause)`` is the one line a stop ends in (``cause``: the signal's name, or ``--timeout N s during
    PHASE``). Yields the block's stop :class:`~cachetool.bounds.Bound`."""
    stop = bounds.Bound.timeout(timeout)
    if threading.current_thread() is not threading.main_thread():
        with bounds.applied(stop):
            yield stop
        return
    since = process_tree.clock_ticks()
    started: set[process_tree.Identity] = set()  # the block's processes as the first signal found them
    armed = True
    during = ""  # the phase the block was in when the stop came (the block's cleanup names its own)

    def handle(signum: int, frame: object) -> None:
        nonlocal during
        first = not stop.requested.is_set()
        name = TIME_LIMIT if signum == signal.SIGALRM else signal.Signals(signum).name
        stop.stop(name)
        if first:
            during = stop.phase
            started.update(process_tree.descendants(since=since))
            if armed:
                raise StopRequested(name)

    previous = {s: signal.signal(s, handle) for s in STOP_SIGNALS + ((signal.SIGALRM,) if timeout else ())}
    if timeout:
        signal.setitimer(signal.ITIMER_REAL, timeout)
    left: set[process_tree.Identity] = set()
    try:
        try:
            with bounds.applied(stop):
                yield stop
        except BaseException:
            if not stop.requested.is_set():
                raise
        finally:
            armed = False  # from here on a signal only asks again: the cleanup below is not cut
        if stop.requested.is_set():
            left = process_tree.end_descendants(since, started)
    finally:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in previous.items():
            signal.signal(s, handler)
    if stop.requested.is_set():
        note = f"; {len(left)} process(es) did not end: {sorted(p for p, _ in left)}" if left else ""
        if stop.stopped_by == TIME_LIMIT:
            phase = f" during {during}" if during else ""
            raise WaitTimeoutError(message(f"--timeout {timeout:g} s{phase}") + note)
        raise StopSignalError(message(stop.stopped_by) + note)
