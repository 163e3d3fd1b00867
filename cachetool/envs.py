"""cachetool's environment variables, registered on the one registry (:mod:`compiler.envs`, the only module that
reads the environment): stores, trust, the vLLM engine, and the other tools' conventions cachetool honours (boto3,
docker/podman, XDG). cachetool's modules read every variable through this module, which re-exports the registry's
readers, so that importing it is what registers these names."""

from __future__ import annotations

import os
from pathlib import Path

from compiler.envs import EnvVar, cache_root, get, raw, register

__all__ = ["VARIABLES", "cache_root", "config_home", "get", "raw", "store_max_attempts", "trusted_keys"]

VARIABLES = register(
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
)


def config_home() -> Path:
    """``XDG_CONFIG_HOME`` or ``~/.config``."""
    return Path(get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"))


def store_max_attempts() -> int:
    """``CACHETOOL_STORE_MAX_ATTEMPTS`` (default 5)."""
    return int(get("CACHETOOL_STORE_MAX_ATTEMPTS"))


def trusted_keys() -> list[str]:
    """``CACHETOOL_TRUSTED_KEYS``: ``:``-separated public key files."""
    return [p for p in (get("CACHETOOL_TRUSTED_KEYS") or "").split(":") if p]


def logging_level() -> str:
    """``CACHETOOL_LOGGING_LEVEL``, checked (:func:`compiler.envs.logging_level`'s rule): a value that is not a
    level is a :class:`~cachetool.errors.UsageError` (exit 2) naming the variable and the levels."""
    from compiler.envs import LOGGING_LEVELS, bad_logging_level

    from cachetool.errors import UsageError

    value = get("CACHETOOL_LOGGING_LEVEL") or "INFO"
    if value.strip().upper() not in LOGGING_LEVELS:
        raise UsageError(bad_logging_level(value))
    return value.strip().upper()
