"""Registry credentials, found where the container tools keep them.

Files, first one that has an entry for the registry wins (the order of containers/image, then docker):

1. ``$REGISTRY_AUTH_FILE`` (what ``skopeo/podman login --authfile`` and the env variable name),
2. ``$XDG_RUNTIME_DIR/containers/auth.json`` (where ``skopeo login`` / ``podman login`` write by default),
3. ``$XDG_CONFIG_HOME/containers/auth.json`` (``~/.config/containers/auth.json``),
4. ``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json`` (``docker login``).

In each file: ``credHelpers[host]`` (a ``docker-credential-<name>`` program), then ``auths`` — the most specific
key wins: ``host/namespace/repo``, ``host/namespace``, ``host`` (also with ``https://`` or ``/v1/``) — with
``auth`` (base64 ``user:password``), ``username``/``password`` or ``identitytoken``; then ``credsStore``.

A refusal here names the credentials file as its ``key``; :class:`~cachetool.stores.oci.client.RegistryClient`,
which knows the store, adds ``store``.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path

from cachetool import envs
from cachetool.errors import StoreError

TOKEN_USER = "<token>"  # docker's marker for an identity (refresh) token


def docker_config_path() -> Path:
    d = envs.get("DOCKER_CONFIG")
    return Path(d) / "config.json" if d else Path.home() / ".docker" / "config.json"


def auth_files() -> list[Path]:
    """The credential files in the order they are consulted."""
    out = []
    if envs.get("REGISTRY_AUTH_FILE"):
        out.append(Path(envs.get("REGISTRY_AUTH_FILE")))  # type: ignore[arg-type]  # baseline (issue 46)
    if envs.get("XDG_RUNTIME_DIR"):
        out.append(Path(envs.get("XDG_RUNTIME_DIR")) / "containers" / "auth.json")  # type: ignore[arg-type]  # baseline (issue 46)
    out.append(envs.config_home() / "containers" / "auth.json")
    out.append(docker_config_path())
    return out


def where_logins_are() -> str:
    """For messages: the credential files that exist, or where they would be."""
    found = [str(p) for p in auth_files() if p.is_file()]
    return ", ".join(found)[:160] if found else "no REGISTRY_AUTH_FILE, containers auth.json or docker config.json"


def _cred_helper(helper: str, host: str) -> tuple[str, str] | None:
    if not re.match(r"^[A-Za-z0-9._-]+$", helper):
        raise StoreError(f"credential helper name {helper[:40]!r} is not a plain program name")
    try:
        p = subprocess.run([f"docker-credential-{helper}", "get"], input=host.encode(), capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    try:
        d = json.loads(p.stdout)
        return d.get("Username") or "", d.get("Secret") or ""
    except ValueError:
        return None


def _entry_keys(host: str, repo: str) -> list[str]:
    """auths keys for ``host``/``repo``, most specific first."""
    keys = []
    parts = repo.split("/") if repo else []
    for i in range(len(parts), 0, -1):
        keys.append(f"{host}/{'/'.join(parts[:i])}")
    return keys + [host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/"]


def _from_entry(e: dict, path: Path, key: str) -> tuple[str, str] | None:
    if e.get("auth"):
        try:
            user, _, pw = base64.b64decode(e["auth"]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise StoreError(
                f"credentials file {path}: the 'auth' of {key} is not base64 user:password", path=str(path)
            ) from None
        return user, pw
    if e.get("username"):
        return e["username"], e.get("password") or ""
    if e.get("identitytoken"):
        return TOKEN_USER, e["identitytoken"]
    return None


def _from_file(path: Path, host: str, repo: str) -> tuple[bool, tuple[str, str] | None]:
    """(the file names this registry, its credentials)."""
    try:
        cfg = json.loads(path.read_text())
    except FileNotFoundError:
        return False, None
    except (OSError, ValueError) as exc:
        raise StoreError(
            f"cannot read credentials file {path}: {' '.join(str(exc).split())[:120]}", path=str(path)
        ) from None
    if not isinstance(cfg, dict):
        raise StoreError(f"credentials file {path} is not a JSON object", path=str(path))
    helper = (cfg.get("credHelpers") or {}).get(host)
    if helper:
        return True, _cred_helper(helper, host)
    auths = cfg.get("auths") or {}
    for key in _entry_keys(host, repo):
        e = auths.get(key)
        if isinstance(e, dict):
            creds = _from_entry(e, path, key)
            if creds:
                return True, creds
    if cfg.get("credsStore"):
        creds = _cred_helper(cfg["credsStore"], host)
        if creds:
            return True, creds
    return False, None


def registry_credentials(host: str, repo: str = "") -> tuple[str, str] | None:
    """(username, password) for ``host`` (and ``repo``) from the first credential file that has them, or None."""
    for path in auth_files():
        found, creds = _from_file(path, host, repo)
        if found:
            return creds
    return None


def parse_challenge(header: str) -> tuple[str, dict]:
    """``WWW-Authenticate: Bearer realm="...",service="..."`` → ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params
