"""Engines: the compilers cachetool warms caches with, checks hits of and predicts server keys for.

The registry (:mod:`cachetool.engines.registry`, its names re-exported here) is how the rest of cachetool reaches
an engine, never by naming it; :mod:`cachetool.engines.base` is what every engine is. Importing this package hands
the registry and the layouts' rules (:mod:`cachetool.engines.layouts`) to the core
(:func:`cachetool.bundle.engine_rules.register`): the core names no engine, and any import of the engines makes
them known to it.
"""

from __future__ import annotations

from cachetool.bundle import engine_rules
from cachetool.engines import layouts, registry
from cachetool.engines.base import Engine, StartRequest, StartResult
from cachetool.engines.registry import (
    CHOICES,
    DEFAULT,
    ENGINES,
    cache_root_help,
    common_facts,
    default,
    fields_ignored_by,
    for_fingerprint,
    for_layout,
    get,
    help_text,
    init_logging,
    machine_fingerprint,
)

__all__ = [
    "CHOICES",
    "DEFAULT",
    "ENGINES",
    "Engine",
    "StartRequest",
    "StartResult",
    "cache_root_help",
    "common_facts",
    "default",
    "fields_ignored_by",
    "for_fingerprint",
    "for_layout",
    "get",
    "help_text",
    "init_logging",
    "machine_fingerprint",
]

engine_rules.register(registry, layouts)  # type: ignore[arg-type]  # baseline (issue 46)
