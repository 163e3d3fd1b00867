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
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cachetool import envs
from cachetool.errors import clip


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


# What a failed TLS connection was, from the exception types and fields ``ssl`` exposes (never from message text).
UNTRUSTED = "untrusted"  # the certificate chain does not verify against the trusted CAs
WRONG_HOST = "wrong-host"  # the certificate verifies but names another host (or IP address)
NOT_TLS = "not-tls"  # the server's answer is not TLS (plain HTTP on that port) or it hung up mid-handshake
HANDSHAKE = "handshake"  # any other TLS failure

# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH, _EMAIL_MISMATCH, _IP_ADDRESS_MISMATCH: ``SSLCertVerificationError``'s
# ``verify_code`` when the chain verifies but the certificate names another host
_NAME_MISMATCH_CODES = frozenset({62, 63, 64})
# ``ssl.SSLError.reason`` (OpenSSL's reason mnemonic) when the peer answered something that is not TLS: a plain-HTTP
# reply read as a record header (OpenSSL < 3.2: WRONG_VERSION_NUMBER; 3.2 and later: RECORD_LAYER_FAILURE) or a
# close before the handshake ended (UNEXPECTED_EOF_WHILE_READING; ``ssl.SSLEOFError`` too).
_NOT_TLS_REASONS = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "UNEXPECTED_EOF_WHILE_READING"})
# The peer closed the connection before the handshake ended: ``ssl`` says so as ``SSLEOFError`` (Python 3.11.7) or,
# on some builds (Debian's 3.11.2), as ``SSLZeroReturnError`` with no ``reason``; both mean the same hang-up.
_HANG_UPS = (ssl.SSLEOFError, ssl.SSLZeroReturnError)


@dataclass(frozen=True)
class TLSFailure:
    """What :func:`classify_tls_error` found: the case (one of the names above) and a short detail for the message
    (OpenSSL's verify message, or the failing error's own text for an unclassified handshake failure)."""

    case: str
    detail: str = ""

    @property
    def certificate(self) -> bool:
        """A certificate problem: a CA or ``--insecure`` helps, ``--plain-http`` does not."""
        return self.case in (UNTRUSTED, WRONG_HOST)


def _chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and every exception it carries: ``__cause__``, ``__context__``, exceptions among its ``args``
    (requests' ``SSLError`` holds urllib3's ``MaxRetryError``, which holds its ``SSLError`` as ``reason``, which
    holds the ``ssl`` module's error in ``args``), breadth first, each once."""
    out: list[BaseException] = []
    todo: list[object] = [exc]
    while todo:
        e = todo.pop(0)
        if not isinstance(e, BaseException) or any(e is seen for seen in out):
            continue
        out.append(e)
        todo += [e.__cause__, e.__context__, *e.args, getattr(e, "reason", None)]
    return out


def classify_tls_error(exc: BaseException) -> TLSFailure:
    """The case of a failed TLS connection (``requests.exceptions.SSLError`` or anything wrapping an ``ssl``
    error), chosen by the types and fields of the exceptions it carries."""
    from urllib3.util.ssl_match_hostname import CertificateError as Urllib3CertificateError

    chain = _chain(exc)
    for e in chain:
        if isinstance(e, ssl.SSLCertVerificationError):
            detail = getattr(e, "verify_message", None) or "certificate verify failed"
            if getattr(e, "verify_code", None) in _NAME_MISMATCH_CODES:
                return TLSFailure(WRONG_HOST, detail)
            return TLSFailure(UNTRUSTED, detail)
        if isinstance(e, Urllib3CertificateError):  # urllib3's own host name check (where ssl does not check it)
            return TLSFailure(WRONG_HOST, "certificate is not valid for this host name")
    for e in chain:
        if isinstance(e, _HANG_UPS) or (isinstance(e, ssl.SSLError) and getattr(e, "reason", None) in _NOT_TLS_REASONS):
            return TLSFailure(NOT_TLS, getattr(e, "reason", None) or type(e).__name__)
    inner = next((e for e in reversed(chain) if isinstance(e, ssl.SSLError)), exc)
    return TLSFailure(HANDSHAKE, clip(inner, 120))


def describe_tls_error(exc: BaseException) -> tuple[str, bool]:
    """(one-line reason, whether it is a certificate problem) for an ``requests.exceptions.SSLError``."""
    failure = classify_tls_error(exc)
    if failure.case == UNTRUSTED:
        return f"its TLS certificate is not trusted ({failure.detail[:100]})", True
    if failure.case == WRONG_HOST:
        return "its TLS certificate is for another host name", True
    if failure.case == NOT_TLS:
        return "it does not speak TLS on that port", False
    return f"TLS handshake failed ({failure.detail})", False
