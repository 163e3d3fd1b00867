"""The pipeline's environment variables: its registry, and the one module of compiler that reads the environment.

:data:`VARIABLES` lists every variable the pipeline reads, with its default and meaning (:data:`COMPILER_VARIABLES`:
cache root, disable switch, save format, logging level, torch.distributed's, ``CUDA_VISIBLE_DEVICES``). cachetool
keeps its own registry (``cachetool/envs.py``) and does not import this one; a variable both read has one default
(tests/structure/). README.md's "Configuration reference" documents each. Code reads a variable
through :func:`get` (an empty value counts as unset) or one of the typed accessors below; an unregistered name
is a ``KeyError``, so a new variable cannot be read without being registered. ``standard`` variables belong to
other tools' conventions (torch.distributed) and are honoured, not invented, here.

Values are read on each access (not at import), so tests and the CLI can change them per call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str | None  # None: unset
    meaning: str
    standard: bool = False  # another tool's convention, honoured here


VARIABLES: dict[str, EnvVar] = {}  # the pipeline's, by name


def register(*variables: EnvVar) -> tuple[EnvVar, ...]:
    """Add a package's variables to the one registry (a name registered twice is a bug: ValueError)."""
    for v in variables:
        if VARIABLES.get(v.name, v) != v:
            raise ValueError(f"environment variable {v.name} is registered twice")
        VARIABLES[v.name] = v
    return variables


# The pipeline's own (cachetool's are in its own registry, cachetool/envs.py).
COMPILER_VARIABLES = register(
    EnvVar("CACHETOOL_CACHE_ROOT", "~/.cache/cachetool", "cache root; the compile cache is under it"),
    EnvVar("CACHETOOL_DISABLE_COMPILE_CACHE", "0", "1: the pipeline reads and writes nothing (always compiles)"),
    EnvVar("CACHETOOL_COMPILE_CACHE_SAVE_FORMAT", "binary", "binary or unpacked Inductor artifacts"),
    EnvVar("CACHETOOL_LOGGING_LEVEL", "INFO", "level of the compiler and cachetool loggers"),
    EnvVar("WORLD_SIZE", "1", "torch.distributed: number of ranks (init_from_env)", True),
    EnvVar("RANK", "0", "torch.distributed: this rank (init_from_env)", True),
    EnvVar("LOCAL_RANK", None, "torch.distributed: this rank on its host; default RANK", True),
    EnvVar("MASTER_PORT", None, "torch.distributed rendezvous port; a free one when unset", True),
    EnvVar("CUDA_VISIBLE_DEVICES", None, "which GPUs a process sees; maps a CUDA index to NVML's (preflight)", True),
)


def get(name: str) -> str | None:
    """The value of the registered variable ``name``; its default when unset or empty."""
    var = VARIABLES[name]
    value = os.environ.get(name)
    return var.default if value is None or value == "" else value


def raw(name: str) -> str | None:
    """The value exactly as set (None when unset), for a registered variable: e.g. a cache key of the values."""
    VARIABLES[name]
    return os.environ.get(name)


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


def cache_root() -> Path:
    """``CACHETOOL_CACHE_ROOT`` (its default is the registry's, above)."""
    return Path(os.path.expanduser(get("CACHETOOL_CACHE_ROOT")))  # type: ignore[arg-type,type-var]  # baseline (issue 46)


def disable_compile_cache() -> bool:
    """``CACHETOOL_DISABLE_COMPILE_CACHE=1``: read nothing, write nothing (always compile)."""
    return get("CACHETOOL_DISABLE_COMPILE_CACHE").strip().lower() in ("1", "true", "yes", "on")  # type: ignore[union-attr]  # baseline (issue 46)


def compile_cache_save_format() -> str:
    """``CACHETOOL_COMPILE_CACHE_SAVE_FORMAT``: ``binary`` (default) or ``unpacked``."""
    return get("CACHETOOL_COMPILE_CACHE_SAVE_FORMAT").strip().lower()  # type: ignore[union-attr]  # baseline (issue 46)


LOGGING_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def logging_level() -> str:
    """``CACHETOOL_LOGGING_LEVEL`` (default ``INFO``; any case), one of :data:`LOGGING_LEVELS`; another value is a
    configuration mistake (a ``CompilerError`` of kind ``config``), not a silent ``INFO``."""
    level = (get("CACHETOOL_LOGGING_LEVEL") or "INFO").strip().upper()
    if level not in LOGGING_LEVELS:
        from compiler.errors import CONFIG, CompilerError

        raise CompilerError(bad_logging_level(get("CACHETOOL_LOGGING_LEVEL")), kind=CONFIG)  # type: ignore[arg-type]  # baseline (issue 46)
    return level


def bad_logging_level(value: str) -> str:
    """The one line that says ``value`` is not a level (the compiler's error and cachetool's usage error)."""
    return f"CACHETOOL_LOGGING_LEVEL={value!r} is not a logging level: use one of {', '.join(LOGGING_LEVELS)}"


def env_factor_values() -> dict[str, str]:
    """The environment variables that change compiled code, as set in this process (unset ones omitted)."""
    return {name: os.environ[name] for name in ENV_FACTOR_VARS if name in os.environ}


def by_prefix(prefixes: tuple[str, ...]) -> dict[str, str]:
    """Every variable set whose name starts with one of ``prefixes`` (another tool's settings, e.g. Inductor's
    ``TORCHINDUCTOR_*``, recorded as evidence rather than read as ours), sorted by name."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


def hashed(name: str) -> str | None:
    """A variable of :data:`ENV_FACTOR_VARS` (hashed into the env factor) as set, or None."""
    if name not in ENV_FACTOR_VARS:
        raise KeyError(name)
    return os.environ.get(name)
