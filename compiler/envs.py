"""Environment variables: the one registry, and the one place that reads them (see docs/ARCHITECTURE.md).

:data:`VARIABLES` lists every variable the two packages read, with its default and meaning; README.md's
"Configuration reference" documents each (tests/test_structure.py checks both ways). Code reads a variable
through :func:`get` (an empty value counts as unset) or one of the typed accessors below; an unregistered name
is a ``KeyError``, so a new variable cannot be read without being registered. ``standard`` variables belong to
other tools' conventions (boto3, docker/podman, XDG, torch.distributed) and are honoured, not invented, here.

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


VARIABLES: dict[str, EnvVar] = {v.name: v for v in (
    EnvVar("CACHETOOL_CACHE_ROOT", "~/.cache/cachetool", "cache root; the compile cache is under it"),
    EnvVar("CACHETOOL_DISABLE_COMPILE_CACHE", "0", "1: the pipeline reads and writes nothing (always compiles)"),
    EnvVar("CACHETOOL_COMPILE_CACHE_SAVE_FORMAT", "binary", "binary or unpacked Inductor artifacts"),
    EnvVar("CACHETOOL_LOGGING_LEVEL", "INFO", "level of the compiler and cachetool loggers"),
    EnvVar("CACHETOOL_TRUSTED_KEYS", None, ":-separated public key files/folders trusted on pull/install/verify"),
    EnvVar("CACHETOOL_CONFIG_DIR", None, "configuration folder (trusted_keys/*.pub); default XDG_CONFIG_HOME/cachetool"),
    EnvVar("CACHETOOL_STORE_MAX_ATTEMPTS", "5", "attempts of one S3/OCI request before the store error"),
    EnvVar("CACHETOOL_PARTIAL_MAX_BYTES", str(4 << 30), "bound of a cache root's .cachetool-partial/ folder"),
    EnvVar("CACHETOOL_CERTS_D", None, "os.pathsep-separated certs.d roots for OCI registries' TLS"),
    EnvVar("CACHETOOL_VLLM_PYTHON", None, "the Python interpreter that runs vLLM for --engine vllm; default this one"),
    EnvVar("VLLM_CACHE_ROOT", None, "vLLM's cache root (--engine vllm's default cache root); default ~/.cache/vllm", True),
    EnvVar("AWS_ENDPOINT_URL_S3", None, "S3 endpoint (before AWS_ENDPOINT_URL)", True),
    EnvVar("AWS_ENDPOINT_URL", None, "S3 endpoint", True),
    EnvVar("AWS_ACCESS_KEY_ID", None, "S3 credentials (boto3's chain)", True),
    EnvVar("AWS_SECRET_ACCESS_KEY", None, "S3 credentials (boto3's chain)", True),
    EnvVar("AWS_SESSION_TOKEN", None, "S3 credentials (boto3's chain)", True),
    EnvVar("AWS_PROFILE", None, "S3 profile (boto3's chain)", True),
    EnvVar("AWS_SHARED_CREDENTIALS_FILE", None, "S3 credentials file (boto3's chain)", True),
    EnvVar("AWS_CONFIG_FILE", None, "S3 config file (boto3's chain)", True),
    EnvVar("DOCKER_CONFIG", None, "folder of docker's config.json (OCI credentials); default ~/.docker", True),
    EnvVar("REGISTRY_AUTH_FILE", None, "podman/skopeo credentials file, consulted first", True),
    EnvVar("XDG_RUNTIME_DIR", None, "containers/auth.json under it (OCI credentials)", True),
    EnvVar("XDG_CONFIG_HOME", None, "base of the configuration folders; default ~/.config", True),
    EnvVar("REQUESTS_CA_BUNDLE", None, "CA bundle for OCI registries (then CURL_CA_BUNDLE)", True),
    EnvVar("CURL_CA_BUNDLE", None, "CA bundle for OCI registries", True),
    EnvVar("WORLD_SIZE", "1", "torch.distributed: number of ranks (init_from_env)", True),
    EnvVar("RANK", "0", "torch.distributed: this rank (init_from_env)", True),
    EnvVar("LOCAL_RANK", None, "torch.distributed: this rank on its host; default RANK", True),
    EnvVar("MASTER_PORT", None, "torch.distributed rendezvous port; a free one when unset", True),
    EnvVar("CUDA_VISIBLE_DEVICES", None, "which GPUs a process sees; maps a CUDA index to NVML's (preflight)", True),
)}


def get(name: str) -> str | None:
    """The value of the registered variable ``name``; its default when unset or empty."""
    var = VARIABLES[name]
    value = os.environ.get(name)
    return var.default if value is None or value == "" else value


def raw(name: str) -> str | None:
    """The value exactly as set (None when unset), for a registered variable: e.g. a cache key of the values."""
    VARIABLES[name]
    return os.environ.get(name)


def config_home() -> Path:
    """``XDG_CONFIG_HOME`` or ``~/.config``."""
    return Path(get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"))


def store_max_attempts() -> int:
    """``CACHETOOL_STORE_MAX_ATTEMPTS`` (default 5)."""
    return int(get("CACHETOOL_STORE_MAX_ATTEMPTS"))


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
    """``CACHETOOL_CACHE_ROOT`` (default ``~/.cache/cachetool``)."""
    return Path(os.path.expanduser(get("CACHETOOL_CACHE_ROOT")))


def disable_compile_cache() -> bool:
    """``CACHETOOL_DISABLE_COMPILE_CACHE=1``: read nothing, write nothing (always compile)."""
    return get("CACHETOOL_DISABLE_COMPILE_CACHE").strip().lower() in ("1", "true", "yes", "on")


def compile_cache_save_format() -> str:
    """``CACHETOOL_COMPILE_CACHE_SAVE_FORMAT``: ``binary`` (default) or ``unpacked``."""
    return get("CACHETOOL_COMPILE_CACHE_SAVE_FORMAT").strip().lower()


def logging_level() -> str:
    """``CACHETOOL_LOGGING_LEVEL`` (default ``INFO``)."""
    return get("CACHETOOL_LOGGING_LEVEL").strip().upper()


def trusted_keys() -> list[str]:
    """``CACHETOOL_TRUSTED_KEYS``: ``:``-separated public key files (used by ``cachetool``)."""
    return [p for p in (get("CACHETOOL_TRUSTED_KEYS") or "").split(":") if p]


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
