"""Environment variables: the one place that reads them (see docs/ARCHITECTURE.md).

Values are read on each access (not at import), so tests and the CLI can change them per call.
"""

from __future__ import annotations

import os
from pathlib import Path

# Variables that change what the compiled code is (hashed into the ``env`` factor). Settings of the
# tool itself (cache root, logging level, the disable switch) are deliberately not here: a moved cache
# root must give the same hash.
ENV_FACTOR_VARS: tuple[str, ...] = (
    "ATEN_CPU_CAPABILITY",
    "TORCHINDUCTOR_MAX_AUTOTUNE",
    "TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE",
    "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM",
    "TORCHINDUCTOR_FREEZING",
    "TORCHINDUCTOR_CPP_WRAPPER",
    "TORCHINDUCTOR_FALLBACK_RANDOM",
    "TORCHINDUCTOR_SIZE_ASSERTS",
    "TORCHINDUCTOR_NAN_ASSERTS",
    "TORCH_COMPILE_DEBUG",
    "TRITON_PTXAS_PATH",
)


def _get(name: str, default: str) -> str:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def cache_root() -> Path:
    """``CACHETOOL_CACHE_ROOT`` (default ``~/.cache/cachetool``)."""
    return Path(os.path.expanduser(_get("CACHETOOL_CACHE_ROOT", "~/.cache/cachetool")))


def disable_compile_cache() -> bool:
    """``CACHETOOL_DISABLE_COMPILE_CACHE=1``: read nothing, write nothing (always compile)."""
    return _get("CACHETOOL_DISABLE_COMPILE_CACHE", "0").strip().lower() in ("1", "true", "yes", "on")


def compile_cache_save_format() -> str:
    """``CACHETOOL_COMPILE_CACHE_SAVE_FORMAT``: ``binary`` (default) or ``unpacked``."""
    return _get("CACHETOOL_COMPILE_CACHE_SAVE_FORMAT", "binary").strip().lower()


def logging_level() -> str:
    """``CACHETOOL_LOGGING_LEVEL`` (default ``INFO``)."""
    return _get("CACHETOOL_LOGGING_LEVEL", "INFO").strip().upper()


def trusted_keys() -> list[str]:
    """``CACHETOOL_TRUSTED_KEYS``: ``:``-separated public key files (used by ``cachetool``)."""
    raw = os.environ.get("CACHETOOL_TRUSTED_KEYS", "")
    return [p for p in raw.split(":") if p]


def env_factor_values() -> dict[str, str]:
    """The environment variables that change compiled code, as set in this process (unset ones omitted)."""
    return {name: os.environ[name] for name in ENV_FACTOR_VARS if name in os.environ}
