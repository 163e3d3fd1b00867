"""What a pull reads of the server's engine (the caller passes it in: :class:`~cachetool.transfer.pull.
PullRequest`'s ``engine``): the engine rules every core layer reads, its notice, its key question and the
environment its servers need."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from cachetool.bundle.engine_rules import EngineRules
from cachetool.install.key_check import KeyCheck

__all__ = ["PullEngine"]


class PullEngine(EngineRules, Protocol):
    """The server's engine, as a pull reads it (``cachetool.engines.base.Engine`` has these members)."""

    def notice(self) -> str | None:
        """A warning to say first (an untested release of the engine), or None."""

    def key_check(self, request: Any) -> KeyCheck | None:
        """The server's key question (``request``: the engine's own key-check request, passed through)."""

    def server_environment(self, root: Path) -> dict[str, str]:
        """The variables a server of this engine needs to read ``root``."""
