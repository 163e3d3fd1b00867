"""Logging set-up: the ``compiler`` logger's level comes from ``CACHETOOL_LOGGING_LEVEL``."""

from __future__ import annotations

import logging
import sys

from compiler import envs

_FORMAT = "%(levelname)s %(asctime)s [%(name)s] %(message)s"


class _StderrHandler(logging.StreamHandler):
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


def init_logging(*names: str) -> None:
    """Give the ``compiler`` logger (and ``names``) a stderr handler at ``CACHETOOL_LOGGING_LEVEL``; idempotent."""
    level = getattr(logging, envs.logging_level(), logging.INFO)
    for name in ("compiler", *names):
        log = logging.getLogger(name)
        log.setLevel(level)
        if not any(getattr(h, "_cachetool", False) for h in log.handlers):
            handler = _StderrHandler()
            handler.setFormatter(logging.Formatter(_FORMAT, "%H:%M:%S"))
            handler._cachetool = True  # type: ignore[attr-defined]
            log.addHandler(handler)
            log.propagate = False
