"""Log lines on stderr while a command runs: the ``cachetool`` logger and those the engines name
(:attr:`cachetool.engines.base.EngineBase.loggers`), at ``CACHETOOL_LOGGING_LEVEL``. The CLI sets this up; an
embedder of the library configures its own logging instead."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable

from cachetool import envs

__all__ = ["init_logging"]

FORMAT = "%(levelname)s %(asctime)s [%(name)s] %(message)s"


class StderrHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is at each record, not as it was at set-up (a replaced stderr, such as a
    test's capture, may be closed by then)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # noqa: ANN201
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # noqa: ANN001
        pass


def init_logging(names: Iterable[str] = ()) -> None:
    """Give the ``cachetool`` logger and the loggers ``names`` one stderr handler each at
    ``CACHETOOL_LOGGING_LEVEL`` (a bad value: a one-line usage error); idempotent."""
    level = getattr(logging, envs.logging_level(), logging.INFO)
    for name in ("cachetool", *names):
        log = logging.getLogger(name)
        log.setLevel(level)
        if not any(isinstance(h, StderrHandler) for h in log.handlers):
            handler = StderrHandler()
            handler.setFormatter(logging.Formatter(FORMAT, "%H:%M:%S"))
            log.addHandler(handler)
            log.propagate = False
