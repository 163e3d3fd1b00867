"""cachetool's environment variables: its registry, and the one module of cachetool that reads the environment.

:data:`VARIABLES` lists every variable cachetool reads, with its default and meaning: stores, trust, the engines'
cache root, and the other tools' conventions cachetool honours (boto3, docker/podman, XDG, torch's). Each engine
declares its own beside them (``Engine.variables``, :class:`EnvVar` values), read with ``get(name, declared)`` or
``raw(name, declared)``: this module names no engine; a caller that lists every variable (README's sync test)
combines the registry with the engines' declarations.
The pipeline keeps its own registry (:mod:`compiler.envs`; cachetool does not import it); a variable both read (the
native cache root, the logging level) is in both, with the same default (tests/structure/). README.md's
"Configuration reference" documents each. Code reads a variable through :func:`get` (an empty value counts as unset)
or a typed reader below; an unregistered name is a ``KeyError``. Values are read on each access, not at import.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

__all__ = [
    "VARIABLES",
    "EnvVar",
    "by_prefix",
    "config_home",
    "default",
    "get",
    "logging_level",
    "raw",
    "store_max_attempts",
    "trusted_keys",
]


@dataclasses.dataclass(frozen=True)
class EnvVar:
    name: str
    default: str | None  # None: unset
    meaning: str
    standard: bool = False  # another tool's convention, honoured here


VARIABLES: tuple[EnvVar, ...] = (
    EnvVar("CACHETOOL_CACHE_ROOT", "~/.cache/cachetool", "the native engine's cache root (the pipeline's too)"),
    EnvVar("CACHETOOL_LOGGING_LEVEL", "INFO", "level of the compiler and cachetool loggers"),
    EnvVar("CACHETOOL_TRUSTED_KEYS", None, ":-separated public key files/folders trusted on pull/install/verify"),
    EnvVar(
        "CACHETOOL_CONFIG_DIR", None, "configuration folder (trusted_keys/*.pub); default XDG_CONFIG_HOME/cachetool"
    ),
    EnvVar("CACHETOOL_STORE_MAX_ATTEMPTS", "5", "attempts of one S3/OCI request before the store error"),
    EnvVar("CACHETOOL_PARTIAL_MAX_BYTES", str(4 << 30), "bound of a cache root's .cachetool-partial/ folder"),
    EnvVar("CACHETOOL_CERTS_D", None, "os.pathsep-separated certs.d roots for OCI registries' TLS"),
    EnvVar("ATEN_CPU_CAPABILITY", None, "the vector ISA torch's CPU kernels use (a fact of this machine)", True),
    EnvVar("CUDA_VISIBLE_DEVICES", None, "which GPUs a process sees; maps a CUDA index to NVML's", True),
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
    EnvVar(
        "XDG_STATE_HOME",
        None,
        "base of the run logs (cachetool/logs/: each engine's logs, the "
        "newest 20 of each kind); default ~/.local/state",
        True,
    ),
    EnvVar("REQUESTS_CA_BUNDLE", None, "CA bundle for OCI registries (then CURL_CA_BUNDLE)", True),
    EnvVar("CURL_CA_BUNDLE", None, "CA bundle for OCI registries", True),
)
_BY_NAME = {v.name: v for v in VARIABLES}
LOGGING_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def get(name: str, declared: tuple[EnvVar, ...] = ()) -> str | None:
    """The value of the registered variable ``name`` (or one among ``declared``, an engine's own); its default when
    unset or empty."""
    var = registered(name, declared)
    value = os.environ.get(var.name)
    return var.default if value is None or value == "" else value


def default(name: str) -> str | None:
    """The registered default of ``name`` (its one place: the native cache root's default is read from here)."""
    return _BY_NAME[name].default


def raw(name: str, declared: tuple[EnvVar, ...] = ()) -> str | None:
    """The value exactly as set (None when unset), of a registered variable or of one among ``declared`` (an
    engine's own, ``Engine.variables``)."""
    return os.environ.get(registered(name, declared).name)


def registered(name: str, declared: tuple[EnvVar, ...] = ()) -> EnvVar:
    """The registered variable ``name``, or the one among ``declared``; an unregistered name is a ``KeyError``."""
    var = _BY_NAME.get(name) or next((v for v in declared if v.name == name), None)
    if var is None:
        raise KeyError(name)
    return var


def by_prefix(prefixes: tuple[str, ...]) -> dict[str, str]:
    """Every variable set whose name starts with one of ``prefixes`` (another tool's settings, e.g. Inductor's
    ``TORCHINDUCTOR_*``, read as facts of this machine rather than as ours), sorted by name."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


def config_home() -> Path:
    """``XDG_CONFIG_HOME`` or ``~/.config``."""
    return Path(get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"))


def store_max_attempts() -> int:
    """``CACHETOOL_STORE_MAX_ATTEMPTS`` (default 5)."""
    return int(get("CACHETOOL_STORE_MAX_ATTEMPTS"))  # type: ignore[arg-type]  # baseline (issue 46)


def trusted_keys() -> list[str]:
    """``CACHETOOL_TRUSTED_KEYS``: ``:``-separated public key files."""
    return [p for p in (get("CACHETOOL_TRUSTED_KEYS") or "").split(":") if p]


def logging_level() -> str:
    """``CACHETOOL_LOGGING_LEVEL``, checked: a value that is not a level is a :class:`~cachetool.errors.UsageError`
    (exit 2) naming the variable and the levels (the pipeline refuses it too, as a configuration error)."""
    from cachetool.errors import UsageError

    value = get("CACHETOOL_LOGGING_LEVEL") or "INFO"
    if value.strip().upper() not in LOGGING_LEVELS:
        raise UsageError(
            f"CACHETOOL_LOGGING_LEVEL={value!r} is not a logging level: use one of {', '.join(LOGGING_LEVELS)}"
        )
    return value.strip().upper()
