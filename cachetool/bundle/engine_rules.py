"""What the core (``bundle/``, ``stores/``, ``refs/``, ``install/``, ``transfer/``) needs of the engines, stated as
protocols, and the one place the engines hand themselves over.

The core names no engine and imports nothing of ``cachetool.engines``: the engines hand their registry and the
layouts' rules over once, as ``cachetool.engines`` is imported (:func:`register`; the API and the CLI import it),
and the core reads them through :func:`catalog` and :func:`layouts`. A program that uses the core without
importing the engines gets a one-line error naming the missing import (a programming error, exit 1), never a
silent engine-less answer.

- :class:`EngineRules`: what the core reads of one engine (its fingerprint fields, its part of a platform key, this
  machine's facts as its servers see them, its checks of a bundle's recorded factors).
- :class:`EngineCatalog`: the registry: which engine a fingerprint or a layout belongs to, the default engine.
- :class:`LayoutRules`: the layouts' rules: a cache folder scanned, and the layout's own rules for an install unit
  (incomplete, not valid on this machine, settled once installed).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from cachetool.errors import CachetoolError
from cachetool.layouts.base import LayoutScan

__all__ = ["EngineCatalog", "EngineRules", "LayoutRules", "catalog", "layouts", "register"]


class EngineRules(Protocol):
    """What the core reads of one engine (``cachetool.engines.base.Engine`` has these members)."""

    name: str
    layout: str  # the layout its caches have (a manifest's ``layout``)
    fingerprint_fields: tuple[str, ...]  # its own fingerprint fields, compared by preflight
    recorded_fields: tuple[str, ...]  # its own fields, recorded only
    platform_fields: tuple[str, ...]  # its fields a platform key names after the device

    def recognizes(self, fingerprint: dict) -> bool:
        """Whether a bundle with this fingerprint holds this engine's caches."""

    def platform_prefix(self, fingerprint: dict) -> str | None:
        """What leads a platform key of this engine's bundle (None: nothing)."""

    def machine_facts(self, device: str) -> dict:
        """This engine's fingerprint fields as this machine has them for ``device``."""

    def check_factors(self, manifest: Any, device: str) -> list[str]:
        """Compare a bundle's recorded factors with this machine's; raise a PreflightError naming the first
        difference; return what was checked."""


class EngineCatalog(Protocol):
    """The engine registry as the core reads it (the ``cachetool.engines`` module has these members)."""

    ENGINES: Mapping[str, Any]  # every engine (EngineRules), the most specific first

    def default(self) -> Any:
        """The engine a verb that names none is for."""

    def for_fingerprint(self, fingerprint: dict | None) -> Any:
        """The engine whose server reads a bundle with this fingerprint."""

    def for_layout(self, layout: str | None) -> Any:
        """The engine whose caches a bundle of ``layout`` holds."""

    def fields_ignored_by(self, engine: Any) -> tuple[str, ...]:
        """Fingerprint fields only other engines' caches depend on."""

    def machine_fingerprint(self, engine: Any, device: str | None = None) -> dict:
        """This machine's fingerprint as a server of ``engine`` has it."""


class LayoutRules(Protocol):
    """The layouts' rules as the core reads them (the ``cachetool.engines.layouts`` module has these members)."""

    def scan(self, path: str | Path, layout: str = "auto") -> LayoutScan:
        """The cache at ``path`` scanned with ``layout`` (``auto``: the first layout that recognises it)."""

    def incomplete_reason(self, layout: str, unit_dir: str | Path, ranked: bool) -> str | None:
        """Why an install unit of ``layout`` is not a complete cache, or None."""

    def invalid_units(self, layout: str, manifest: Any, root: str | Path) -> dict[str, str]:
        """The install units that cannot be valid in ``root`` on this machine, each with why."""

    def settle_installed(self, layout: str, root: str | Path) -> None:
        """What the files of ``layout`` need once installed under ``root``."""


class Registered:
    """The engines handed over (one slot: the registry is one per process)."""

    catalog: EngineCatalog | None = None
    layouts: LayoutRules | None = None


def register(engines: EngineCatalog, layout_rules: LayoutRules) -> None:
    """Hand the engine registry and the layouts' rules to the core (``cachetool.engines`` does, as it is imported)."""
    Registered.catalog, Registered.layouts = engines, layout_rules


def catalog() -> EngineCatalog:
    """The registered engine registry."""
    if Registered.catalog is None:
        raise CachetoolError(NOT_REGISTERED)
    return Registered.catalog


def layouts() -> LayoutRules:
    """The registered layouts' rules."""
    if Registered.layouts is None:
        raise CachetoolError(NOT_REGISTERED)
    return Registered.layouts


NOT_REGISTERED = (
    "no engines are registered with the core: import cachetool.engines (or cachetool.api) first: "
    "the engines register themselves as they are imported"
)
