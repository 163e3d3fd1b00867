"""The native engine's own settings, read without importing torch: its model presets (this machine's facts are
every engine's: :mod:`cachetool.facts.machine`)."""

from __future__ import annotations

__all__ = ["model_presets"]


def model_presets() -> tuple[str, ...]:
    """The names ``--model`` takes as the pipeline's presets (``tiny``, ``llama-3.2-1b``, ...)."""
    from compiler.models.llama_config import PRESETS

    return tuple(PRESETS)
