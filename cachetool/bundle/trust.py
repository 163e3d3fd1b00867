"""Which public keys a verification trusts ("pinned keys").

The first source that names any key wins, in this order:

1. explicit keys (``--trust PUB`` on the command line, ``trust=[...]`` in the library);
2. ``CACHETOOL_TRUSTED_KEYS``: ``:``-separated public key files or folders (folders: every ``*.pub`` in them);
3. the config folder ``$CACHETOOL_CONFIG_DIR/trusted_keys/`` (default
   ``${XDG_CONFIG_HOME:-~/.config}/cachetool/trusted_keys/``): every ``*.pub`` file in it.

There is no "trust everything" default: with no key configured (nothing set, or only folders without ``*.pub``
files, as an unmounted ConfigMap leaves), :func:`load_trusted_keys` raises a usage error naming these places: a
configuration mistake like a missing key file, which ``pull --on-miss continue`` does not turn into a cold start.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from cachetool import envs
from cachetool.bundle.signing import PublicKey, load_public_key
from cachetool.errors import KeyFileError

ENV_VAR = "CACHETOOL_TRUSTED_KEYS"


def config_dir() -> Path:
    if envs.get("CACHETOOL_CONFIG_DIR"):
        return Path(envs.get("CACHETOOL_CONFIG_DIR"))  # type: ignore[arg-type]  # baseline (issue 46)
    return envs.config_home() / "cachetool"


def trusted_keys_dir() -> Path:
    return config_dir() / "trusted_keys"


def _expand(entry: str | os.PathLike, strict: bool) -> list[Path]:
    p = Path(entry).expanduser()
    if p.is_dir():
        return sorted(q for q in p.iterdir() if q.suffix == ".pub" and q.is_file())
    if not p.exists() and strict:
        raise KeyFileError(f"trusted key {p} does not exist")
    return [p] if p.exists() else []


def _load(paths: Iterable[Path]) -> list[PublicKey]:
    keys: dict[str, PublicKey] = {}
    for p in paths:
        k = load_public_key(p)
        keys.setdefault(k.keyid, k)
    return list(keys.values())


def load_trusted_keys(explicit: Iterable[str | os.PathLike | PublicKey] | None = None) -> list[PublicKey]:
    """The keys to verify against (see the module docstring for the order of sources); never empty: no key
    configured is a :class:`KeyFileError` (exit 2)."""
    explicit = list(explicit or [])
    if explicit:
        out: list[PublicKey] = []
        paths: list[Path] = []
        for e in explicit:
            if isinstance(e, PublicKey):
                out.append(e)
            else:
                paths.extend(_expand(e, strict=True))
        keys = out + _load(paths)
        if not keys:
            named = ", ".join(str(Path(e).expanduser()) for e in explicit)  # type: ignore[arg-type]  # baseline (issue 46)
            raise KeyFileError(f"no trusted keys: --trust {named} holds no *.pub key file")
        return keys
    env = ":".join(envs.trusted_keys())
    if env.strip():
        paths = []
        for part in env.split(":"):
            if part.strip():
                paths.extend(_expand(part.strip(), strict=True))
        if paths:
            return _load(paths)
    d = trusted_keys_dir()
    keys = _load(_expand(d, strict=False)) if d.is_dir() else []
    if not keys:
        also = f" ({ENV_VAR}={env} holds none)" if env.strip() else ""
        raise KeyFileError(
            f"no trusted keys configured: pass --trust PUB, set {ENV_VAR}, or put *.pub files in {d}" + also
        )
    return keys
