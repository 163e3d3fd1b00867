"""The native engine's own settings, read without importing torch: the compiler's log handler and its model
presets (this machine's facts are every engine's: :mod:`cachetool.facts.machine`)."""

from __future__ import annotations

__all__ = ["init_logging", "model_presets"]


def init_logging(*names: str) -> None:
    """The compiler's log lines (and those of the loggers ``names``) on stderr at ``CACHETOOL_LOGGING_LEVEL``."""
    from compiler.logger import init_logging as to_stderr

    to_stderr(*names)


def model_presets() -> tuple[str, ...]:
    """The names ``--model`` takes as the pipeline's presets (``tiny``, ``llama-3.2-1b``, ...)."""
    from compiler.models.llama_config import PRESETS

    return tuple(PRESETS)
