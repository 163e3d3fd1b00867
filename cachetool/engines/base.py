"""What cachetool needs from a compiler, declared once.

An engine warms a cache root headless, reports one start (hit or miss and why, what compiled and loaded,
seconds), says which facts of this machine its caches depend on, predicts (before any download) whether a
bundle's key is the one a server will look up, and names the variable its servers read their cache root from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class StartResult(Protocol):
    """One start of an engine on a cache root (``warm`` or ``check``)."""

    command: str
    cache_root: str
    cache_key: str | None
    startup_seconds: float

    @property
    def hit(self) -> bool: ...

    @property
    def graphs_compiled(self) -> int: ...

    @property
    def graphs_loaded(self) -> int: ...

    def to_json(self) -> dict[str, Any]: ...


class KeyCheck(Protocol):
    """Pull's preflight question for a server: which of a bundle's key folders it will use (or a
    :class:`~cachetool.errors.PreflightError` naming what differs)."""

    def expected_for(self, manifest: Any) -> str: ...


class Engine(Protocol):
    name: str                       # --engine
    layout: str                     # the bundle layout its cache trees pack as
    cache_root_variable: str        # where its servers read the cache root from

    def default_cache_root(self) -> Path: ...

    def warm(self, model: str, *, cache_root: str | Path | None, **options: Any) -> StartResult: ...

    def check(self, model: str, *, cache_root: str | Path | None, require_hit: bool = False,
              **options: Any) -> StartResult: ...

    def machine_facts(self, device: str | None) -> dict[str, str | None]:
        """Fingerprint fields beyond the common ones (``cachetool.fingerprint``) that its caches depend on."""
        ...

    def key_check(self, model: str, *, cache_root: str | Path, **options: Any) -> KeyCheck | None: ...
