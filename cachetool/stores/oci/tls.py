"""TLS trust per registry, the way docker and the containers tools configure it.

- A ``certs.d`` folder per registry: ``<root>/<host[:port]>/*.crt`` are extra CA certificates for that registry
  (added to the default ones), ``*.cert`` + ``*.key`` of the same stem are a client certificate. Roots, first
  existing folder wins: ``$CACHETOOL_CERTS_D`` (``:``-separated; replaces the defaults), else
  ``$XDG_CONFIG_HOME/containers/certs.d``, ``/etc/containers/certs.d``, ``/etc/docker/certs.d``.
- ``REQUESTS_CA_BUNDLE`` (or ``CURL_CA_BUNDLE``): the CA bundle for every registry instead of the system one.
- ``verify=False`` (``--insecure``): TLS without certificate verification.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from cachetool import envs


def certs_d_roots() -> list[Path]:
    env = envs.get("CACHETOOL_CERTS_D")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [envs.config_home() / "containers" / "certs.d", Path("/etc/containers/certs.d"), Path("/etc/docker/certs.d")]


def host_certs_dir(host: str) -> Path | None:
    """The certs.d folder configured for ``host`` (``host:port`` as written in the ref), or None."""
    for root in certs_d_roots():
        d = root / host
        if d.is_dir():
            return d
    return None


def default_ca_bundle() -> str | None:
    return envs.get("REQUESTS_CA_BUNDLE") or envs.get("CURL_CA_BUNDLE") or None


class TLSConfig:
    """What ``requests`` gets as ``verify`` and ``cert`` for one registry. Owns a private temp folder when it
    has to combine CA files (removed by :meth:`close`)."""

    def __init__(self, host: str, verify: bool = True):
        self.host = host
        self.certs_dir = host_certs_dir(host)
        self.cert: tuple[str, str] | None = None
        self._tmp: str | None = None
        self.verify: bool | str = verify
        if not verify:
            return
        base = default_ca_bundle()
        cas = sorted(self.certs_dir.glob("*.crt")) if self.certs_dir else []
        if cas:
            self.verify = self._combined(base, cas)
        elif base:
            self.verify = base
        if self.certs_dir:
            for c in sorted(self.certs_dir.glob("*.cert")):
                key = c.with_suffix(".key")
                if key.is_file():
                    self.cert = (str(c), str(key))
                    break

    @property
    def configured(self) -> bool:
        """Something in certs.d says this registry speaks TLS."""
        return self.certs_dir is not None and (any(self.certs_dir.glob("*.crt")) or self.cert is not None)

    @property
    def where(self) -> str:
        """For messages: where a CA for this registry would go."""
        return f"{certs_d_roots()[0] / self.host}/ca.crt or REQUESTS_CA_BUNDLE"

    def _combined(self, base: str | None, cas: list[Path]) -> str:
        if base is None:
            try:
                import certifi

                base = certifi.where()
            except ImportError:
                base = None
        self._tmp = tempfile.mkdtemp(prefix="cachetool-ca-")  # private (0700): nobody can swap the bundle
        out = Path(self._tmp) / "ca-bundle.pem"
        with open(out, "wb") as f:
            for p in ([Path(base)] if base else []) + cas:
                f.write(p.read_bytes().rstrip(b"\n") + b"\n")
        return str(out)

    def close(self) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def describe_tls_error(exc: BaseException) -> tuple[str, bool]:
    """(one-line reason, whether it is a certificate problem) for an ``requests.exceptions.SSLError``."""
    text = " ".join(str(exc).split())
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        detail = text.split("certificate verify failed:", 1)[-1].split(")")[0].strip(" '\"") if \
            "certificate verify failed:" in text else "certificate verify failed"
        return f"its TLS certificate is not trusted ({detail[:100]})", True
    if "hostname" in text and "match" in text:
        return "its TLS certificate is for another host name", True
    for marker in ("WRONG_VERSION_NUMBER", "wrong version number", "record layer failure", "UNEXPECTED_EOF",
                   "EOF occurred in violation of protocol"):
        if marker in text:
            return "it does not speak TLS on that port", False
    return f"TLS handshake failed ({text[-120:]})", False
