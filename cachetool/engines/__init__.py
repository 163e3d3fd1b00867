"""Engines: the compilers cachetool warms caches with, checks hits of and predicts server keys for.

``native`` is this project's pipeline (:mod:`compiler`), ``vllm`` is real vLLM run headless in a child process
(:mod:`cachetool.engines.vllm`). Each is an :class:`~cachetool.engines.base.Engine`; ``warm``, ``check``, the pull
preflight and ``diff`` reach a compiler only through :func:`get` (by ``--engine``) or :func:`for_layout` (by a
bundle's layout).
"""

from __future__ import annotations

from cachetool.engines.base import Engine
from cachetool.engines.native import NativeEngine
from cachetool.engines.vllm import VllmEngine
from cachetool.errors import UsageError

ENGINES: dict[str, Engine] = {e.name: e for e in (NativeEngine(), VllmEngine())}
CHOICES = tuple(ENGINES)

__all__ = ["CHOICES", "ENGINES", "Engine", "for_layout", "get"]


def get(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise UsageError(f"unknown engine {name!r} ({', '.join(ENGINES)})") from None


def for_layout(layout: str) -> Engine:
    """The engine whose caches a bundle of ``layout`` holds (a Triton-only bundle: the native engine's rules)."""
    return next((e for e in ENGINES.values() if e.layout == layout), ENGINES["native"])
