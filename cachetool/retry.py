"""Backoff between attempts of a store request, logged: every retry says what failed and when it tries again.

The stores retry connection errors, 429/5xx answers, cut downloads and lost ref races; each waits here, so the
schedule (0.5 s doubling up to 8 s unless a caller passes its own) and the log line are the same everywhere.
The records go to the ``cachetool.retry`` logger at INFO (shown with ``CACHETOOL_LOGGING_LEVEL=INFO`` where the
CLI sets up logging, silent for library users who configure nothing).
"""

from __future__ import annotations

import logging

from cachetool import bounds

log = logging.getLogger("cachetool.retry")


def backoff_seconds(attempt: int, base: float = 0.5, cap: float = 8.0) -> float:
    """The wait after the failed attempt number ``attempt`` (0-based): ``base`` doubling, at most ``cap``."""
    return min(cap, base * 2**attempt)


def pause(what: str, attempt: int, reason: str, seconds: float | None = None) -> None:
    """Log that ``what`` failed (``reason``) on attempt ``attempt`` (0-based) and wait before the next one; a bound
    the caller applied (:mod:`cachetool.bounds`) cuts the wait short and raises."""
    wait = backoff_seconds(attempt) if seconds is None else seconds
    log.info("%s: %s; attempt %d failed, retrying in %.2f s", what, reason, attempt + 1, wait)
    bounds.sleep(wait, what)
