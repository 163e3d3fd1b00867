"""An OCI distribution API client for one registry: scheme and TLS, auth, retries, one-line errors.

Scheme: ``plain_http=True`` (``--plain-http``) speaks HTTP; otherwise HTTPS, verified against the registry's CA
(:mod:`.tls`) unless ``verify=False`` (``--insecure``: unverified TLS). A registry on localhost / 127.0.0.0/8 /
::1 is tried over HTTPS first and falls back to HTTP when it does not speak TLS, as docker does for local
registries; a local registry whose TLS certificate is not trusted is an error, not a fallback.

Retries: connection errors, 429 and 5xx, backoff 0.5 s doubling, ``CACHETOOL_STORE_MAX_ATTEMPTS`` (5) attempts.
A TLS failure is never retried: it does not go away by itself, and the message says where a CA goes.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import threading
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

from cachetool import envs
from cachetool.digests import CHUNK
from cachetool.errors import NotFoundError, StoreError, VerificationError, clip, filled
from cachetool.retry import pause
from cachetool.stores.oci.auth import TOKEN_USER, parse_challenge, registry_credentials, where_logins_are
from cachetool.stores.oci.tls import TLSConfig, describe_tls_error

_SCHEME_CACHE: dict[tuple[str, bool], str] = {}  # (host, verify) -> "https" | "http" for local registries
_PROBE_TIMEOUT = (2.0, 2.0)


def is_local(host: str) -> bool:
    name = host[1:].split("]")[0] if host.startswith("[") else host.rsplit(":", 1)[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class RegistryClient:
    def __init__(
        self,
        host: str,
        repo: str,
        *,
        plain_http: bool = False,
        verify: bool = True,
        max_attempts: int | None = None,
        timeout: tuple[float, float] = (10.0, 120.0),
        store_url: str | None = None,
    ):
        import requests

        self.host = host
        self.repo = repo
        self.store_url = store_url or (f"oci://{host}/{repo}" if repo else f"oci://{host}")  # errors' ``store``
        self.plain_http = plain_http
        self.tls = TLSConfig(host, verify=verify)
        self.max_attempts = int(max_attempts or envs.store_max_attempts())
        self.timeout = timeout
        self._session = requests.Session()
        self._session.headers["User-Agent"] = "cachetool"
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=32)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._auth_lock = threading.Lock()
        self._scheme_lock = threading.Lock()
        self._auth_header: str | None = None
        self._creds_loaded = False
        self._creds: tuple[str, str] | None = None
        self._base: str | None = "http://" + host if plain_http else None
        if not plain_http and not is_local(host):
            self._base = "https://" + host

    def close(self) -> None:
        self._session.close()
        self.tls.close()

    # -------------------------------------------------------------------------------------------- scheme
    @property
    def base(self) -> str:
        if self._base is None:
            with self._scheme_lock:
                if self._base is None:
                    self._base = f"{self._probe_scheme()}://{self.host}"
        return self._base

    def _probe_scheme(self) -> str:
        """For a local registry: HTTPS if it speaks TLS (and then its certificate must be trusted), else HTTP."""
        import requests

        if self.tls.configured:
            return "https"
        key = (self.host, self.tls.verify is not False)
        if key in _SCHEME_CACHE:
            return _SCHEME_CACHE[key]
        try:
            self._session.get(
                f"https://{self.host}/v2/", timeout=_PROBE_TIMEOUT, verify=self.tls.verify, cert=self.tls.cert
            ).close()
            scheme = "https"
        except requests.exceptions.SSLError as exc:
            reason, is_cert = describe_tls_error(exc)
            if is_cert:
                raise self.tls_error(exc, f"connect to {self.host}") from None
            scheme = "http"
        except requests.RequestException:
            scheme = "http"  # no TLS answer (a plain server waits for a request line, or resets)
        _SCHEME_CACHE[key] = scheme
        return scheme

    def tls_error(self, exc: BaseException, what: str) -> StoreError:
        reason, is_cert = describe_tls_error(exc)
        hint = (
            f": configure its CA ({self.tls.where}), or --insecure to skip verification"
            if is_cert
            else ": use --plain-http if it serves plain HTTP"
        )
        return StoreError(f"{what}: TLS with registry {self.host} failed, {reason}{hint}", store=self.store_url)

    # -------------------------------------------------------------------------------------------- auth
    def credentials(self) -> tuple[str, str] | None:
        if not self._creds_loaded:
            try:
                self._creds = registry_credentials(self.host, self.repo)
            except StoreError as exc:  # an unreadable credentials file or helper name, for this store
                filled(exc, store=self.store_url)
                raise
            self._creds_loaded = True
        return self._creds

    def _authenticate(self, challenge: str, what: str) -> None:
        scheme, params = parse_challenge(challenge)
        creds = self.credentials()
        if scheme == "basic":
            if not creds:
                raise StoreError(
                    f"{what}: {self.host} wants a login and no credentials file has one for it "
                    f"({where_logins_are()}; run `skopeo login {self.host}` or `docker login`)",
                    store=self.store_url,
                    status=401,
                )
            self._auth_header = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
            return
        if scheme != "bearer" or "realm" not in params:
            raise StoreError(
                f"{what}: {self.host} asks for unsupported auth {clip(challenge, 80)!r}",
                store=self.store_url,
                status=401,
            )
        self._auth_header = f"Bearer {self._token(params, creds, what)}"

    def _token(self, params: dict[str, str], creds: tuple[str, str] | None, what: str) -> str:
        """A bearer token from the challenge's token service (``params``: its realm, service and scope)."""
        import requests

        q = {
            "service": params.get("service", ""),
            "scope": params.get("scope")
            or (f"repository:{self.repo}:pull,push" if self.repo else "registry:catalog:*"),
        }
        try:
            if creds and creds[0] == TOKEN_USER:
                # an identity token: an OAuth2 refresh token, exchanged at the realm with a POST
                r = self._session.post(
                    params["realm"],
                    data={**q, "grant_type": "refresh_token", "client_id": "cachetool", "refresh_token": creds[1]},
                    timeout=self.timeout,
                    verify=self.tls.verify,
                    cert=self.tls.cert,
                )
            else:
                r = self._session.get(
                    params["realm"] + ("&" if "?" in params["realm"] else "?") + urlencode(q),
                    auth=creds,
                    timeout=self.timeout,
                    verify=self.tls.verify,
                    cert=self.tls.cert,
                )
        except requests.exceptions.SSLError as exc:
            raise self.tls_error(exc, f"{what}: token service {clip(params['realm'], 80)}") from None
        except requests.RequestException as exc:
            raise StoreError(
                f"{what}: token service {params['realm']} unreachable ({type(exc).__name__})", store=self.store_url
            ) from None
        return self._token_of(r, params["realm"], what)

    def _token_of(self, r: Any, realm: str, what: str) -> str:
        """The token in the token service's answer ``r``; a refusal or an answer without one, one line."""
        if r.status_code in (401, 403):
            raise StoreError(
                f"{what}: {self.host} refused the credentials ({r.status_code} from the token service): "
                "check the login (`skopeo login` / `docker login`)",
                store=self.store_url,
                status=r.status_code,
            )
        if r.status_code != 200:
            raise StoreError(
                f"{what}: token service {realm} answered {r.status_code}", store=self.store_url, status=r.status_code
            )
        try:
            tok = r.json()
            token = tok.get("token") or tok.get("access_token")
        except ValueError:
            token = None
        if not token:
            raise StoreError(
                f"{what}: token service {realm} returned no token", store=self.store_url, status=r.status_code
            )
        return token

    # -------------------------------------------------------------------------------------------- requests
    def request(
        self,
        method: str,
        url: str,
        what: str,
        *,
        ok=(200,),
        retry: bool = True,
        data_path=None,
        passing_codes: tuple[str, ...] = (),
        **kw,
    ):
        """One HTTP request with auth and retries; a status outside ``ok`` is a one-line error. Retried: cut
        connections, 429, 5xx, and a 4xx whose error code the caller knows to be passing (``passing_codes``)."""
        import requests

        if not url.startswith("http"):
            url = self.base + url
        headers = dict(kw.pop("headers", {}) or {})
        authed_once = False
        attempt = 0
        while True:
            h = dict(headers)
            if self._auth_header:
                h["Authorization"] = self._auth_header
            try:
                r = self._send(method, url, h, data_path, kw)
            except requests.exceptions.SSLError as exc:
                raise self.tls_error(exc, what) from None
            except requests.RequestException as exc:
                attempt += 1
                if not retry or attempt >= self.max_attempts:
                    raise StoreError(
                        f"{what}: cannot reach registry {self.host} ({type(exc).__name__}) after "
                        f"{attempt} attempt{'s' if attempt > 1 else ''}",
                        store=self.store_url,
                        key=urlsplit(url).path or None,
                    ) from None
                pause(what, attempt - 1, f"cannot reach {self.host} ({type(exc).__name__})")
                continue
            if r.status_code == 401 and not authed_once and "WWW-Authenticate" in r.headers:
                authed_once = True
                with self._auth_lock:
                    self._authenticate(r.headers["WWW-Authenticate"], what)
                continue
            passing = self._passing_code(r, passing_codes)
            if (r.status_code == 429 or r.status_code >= 500 or passing) and retry and attempt + 1 < self.max_attempts:
                attempt += 1
                pause(what, attempt - 1, f"{self.host} answered {r.status_code}{' ' + passing if passing else ''}")
                continue
            if r.status_code in ok:
                return r
            raise self.http_error(r, what)

    def _send(self, method: str, url: str, headers: dict[str, str], data_path: Any, kw: dict[str, Any]) -> Any:
        """One try of a request, its body streamed from ``data_path`` when there is one."""
        options = {"headers": headers, "timeout": self.timeout, "verify": self.tls.verify, "cert": self.tls.cert, **kw}
        if data_path is None:
            return self._session.request(method, url, **options)
        with open(data_path, "rb") as f:
            return self._session.request(method, url, data=f, **options)

    def _passing_code(self, r, passing_codes: tuple[str, ...]) -> str:
        """The first of ``passing_codes`` that a 4xx answer ``r`` carries ('' when none)."""
        if not passing_codes or not 400 <= r.status_code < 500:
            return ""
        return next((c for c in self.error_codes(r)[0] if c in passing_codes), "")

    def error_codes(self, r) -> tuple[list[str], str]:
        try:
            errs = [e for e in r.json().get("errors") or [] if isinstance(e, dict)]
            codes = ["".join(str(e.get("code")).split())[:40] for e in errs]
            msg = " ".join(str(errs[0].get("message", "")).split())[:200] if errs else ""  # one line
            return codes, msg
        except (ValueError, AttributeError, TypeError, RecursionError):
            return [], ""

    def http_error(self, r, what: str) -> Exception:
        codes, msg = self.error_codes(r)
        fields = {
            "store": self.store_url,
            "key": urlsplit(getattr(r, "url", "") or "").path or None,
            "status": r.status_code,
        }
        if r.status_code in (401, 403):
            return StoreError(
                f"{what}: access denied by registry {self.host} ({r.status_code}{' ' + codes[0] if codes else ''}): "
                f"check the login ({where_logins_are()})",
                **fields,
            )
        if "NAME_UNKNOWN" in codes:
            return NotFoundError(f"repository {self.repo!r} not found on {self.host}", **fields)
        if r.status_code == 404:
            return NotFoundError(f"{what}: not found on {self.host}{' (' + codes[0] + ')' if codes else ''}", **fields)
        if r.status_code == 405 and r.request.method == "DELETE":
            return StoreError(f"{what}: registry {self.host} has deletes disabled", **fields)
        if r.status_code == 413 or "SIZE_INVALID" in codes and "manifest" in what:
            return StoreError(f"{what}: registry {self.host} refused it as too large ({r.status_code})", **fields)
        detail = f" {codes[0]}: {msg}" if codes else ""
        return StoreError(f"{what}: registry {self.host} answered {r.status_code}{detail}".strip(), **fields)

    def read_body(self, r, limit: int, what: str) -> bytes:
        """A streamed body, at most ``limit`` bytes (VerificationError past it); cut mid-way: StoreError."""
        import requests

        data = bytearray()
        fields = {"store": self.store_url, "key": urlsplit(getattr(r, "url", "") or "").path or None}
        try:
            for chunk in r.iter_content(CHUNK):
                data += chunk
                if len(data) > limit:
                    raise VerificationError(f"{what}: larger than {limit} bytes", **fields)
        except requests.RequestException as exc:
            raise StoreError(f"{what}: transfer from {self.host} cut ({type(exc).__name__})", **fields) from None
        finally:
            r.close()
        return bytes(data)

    def v2(self, rest: str) -> str:
        return f"/v2/{self.repo}/{rest}"

    def next_link(self, r) -> str | None:
        m = re.match(r"<([^>]+)>", r.headers.get("Link", ""))
        return urljoin(self.base + "/", m.group(1)) if m else None
