"""What an install reads of the server's key question (its engine's answer, passed in by the caller): which of a
bundle's key folders the server will look up, or that it compiles nothing and reads none."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["KeyCheck"]


class KeyCheck(Protocol):
    """Pull's preflight question for a server: which of a bundle's key folders it will use (or a
    :class:`~cachetool.errors.PreflightError` naming what differs). ``compiles_nothing``: why this server compiles
    no graph, so that it reads no key folder, only the bundle's folders that belong to no key: the install takes
    those alone; None when it compiles."""

    compiles_nothing: str | None

    def expected_for(self, manifest: Any) -> str:
        """The key folder (its hash) of ``manifest`` the server will look up."""

    def describe(self) -> str | None:
        """How the verdict was reached, for the preflight's line (None: nothing to add)."""
