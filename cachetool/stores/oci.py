"""``oci://host[:port]/repo``: bundles as OCI artifacts in a registry (OCI distribution HTTP API).

One bundle (one platform) is one OCI image manifest::

    artifactType  application/vnd.cachetool.bundle.v1+json
    config        our bundle manifest JSON (mediaType application/vnd.cachetool.manifest.v1+json), so the
                  config digest *is* the bundle's manifest digest
    layers        one per blob: mediaType application/vnd.cachetool.blob.v1+zstd, digest/size of the zstd
                  bytes, annotations dev.cachetool.content.digest / .size for the uncompressed content

The tag is an OCI image index whose entries are those manifests, each with ``platform`` (os/architecture) and
annotations ``dev.cachetool.platform``, ``dev.cachetool.manifest.digest``, ``dev.cachetool.fingerprint`` (JSON),
``dev.cachetool.size`` and ``org.opencontainers.image.created``. The signature is attached by the referrers tag
fallback (``sha256-<hex of the bundle's OCI manifest>.sig``): an artifact manifest with artifactType
application/vnd.cachetool.signature.v1+json, the DSSE envelope as its one layer and ``subject`` = the bundle.

Credentials come from the docker ``config.json`` (``$DOCKER_CONFIG`` or ``~/.docker``): ``auths`` entries
(``auth`` or ``username``/``password``), ``credHelpers``/``credsStore`` (``docker-credential-*`` programs), with
the Bearer token flow (``WWW-Authenticate: Bearer realm=...``) and Basic auth. Plain HTTP is used only for
localhost / 127.0.0.1 / ::1, or with ``insecure=True``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator
from urllib.parse import urljoin, urlencode

from cachetool.errors import NotFoundError, StoreError, VerificationError
from cachetool.stores._common import (CHUNK, DL_CHUNK, Counters, download_resumable, hexof, now_iso,
                                      ref_entry)
from cachetool.stores.base import BlobRef, RefIndex, Store

ARTIFACT_TYPE = "application/vnd.cachetool.bundle.v1+json"
SIGNATURE_ARTIFACT_TYPE = "application/vnd.cachetool.signature.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.cachetool.manifest.v1+json"
BLOB_MEDIA_TYPE = "application/vnd.cachetool.blob.v1+zstd"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"
EMPTY_DIGEST = "sha256:" + hashlib.sha256(EMPTY_JSON).hexdigest()
A = "dev.cachetool."  # annotation prefix
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le",
         "s390x": "s390x"}


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def compose_bundle_manifest(manifest_bytes: bytes, blobs: list[BlobRef], platform: str | None = None) -> bytes:
    """The OCI image manifest for one bundle. Deterministic: the same bundle always has the same OCI digest."""
    layers = []
    seen = set()
    for b in sorted(blobs, key=lambda b: b.stored_digest):
        if b.stored_digest in seen:
            continue
        seen.add(b.stored_digest)
        layers.append({"mediaType": BLOB_MEDIA_TYPE, "digest": b.stored_digest, "size": b.stored_size,
                       "annotations": {A + "content.digest": b.digest, A + "content.size": str(b.size)}})
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": _sha(manifest_bytes), "size": len(manifest_bytes)},
        "layers": layers,
        "annotations": {A + "manifest.digest": _sha(manifest_bytes)},
    }
    return _json(doc)


# ------------------------------------------------------------------------------------------------ credentials
def docker_config_path() -> Path:
    d = os.environ.get("DOCKER_CONFIG")
    return Path(d) / "config.json" if d else Path.home() / ".docker" / "config.json"


def _cred_helper(helper: str, host: str) -> tuple[str, str] | None:
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


def docker_credentials(host: str) -> tuple[str, str] | None:
    """(username, password) for ``host`` from the docker config.json, or None."""
    path = docker_config_path()
    try:
        cfg = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read docker config {path}: {exc}") from None
    names = (host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/")
    helper = (cfg.get("credHelpers") or {}).get(host)
    if helper:
        return _cred_helper(helper, host)
    auths = cfg.get("auths") or {}
    for n in names:
        e = auths.get(n)
        if not isinstance(e, dict):
            continue
        if e.get("auth"):
            try:
                user, _, pw = base64.b64decode(e["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise StoreError(f"docker config {path}: the 'auth' of {n} is not base64 user:password") from None
            return user, pw
        if e.get("username"):
            return e["username"], e.get("password") or ""
        if e.get("identitytoken"):
            return "<token>", e["identitytoken"]
    if cfg.get("credsStore"):
        return _cred_helper(cfg["credsStore"], host)
    return None


def _parse_challenge(header: str) -> tuple[str, dict]:
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


# ------------------------------------------------------------------------------------------------ store
class OCIStore(Store):
    def __init__(self, host: str, repo: str, *, insecure: bool = False, max_attempts: int | None = None,
                 timeout: tuple[float, float] = (10.0, 120.0)):
        import requests

        self.host = host
        self.repo = repo
        self.insecure = insecure
        self.url = f"oci://{host}/{repo}"
        hostname = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        self.plain_http = hostname in _LOCAL_HOSTS or insecure
        self.base = f"{'http' if self.plain_http else 'https'}://{host}"
        self.max_attempts = int(max_attempts or os.environ.get("CACHETOOL_STORE_MAX_ATTEMPTS", "5"))
        self.timeout = timeout
        self.counters = Counters()
        self._session = requests.Session()
        self._session.headers["User-Agent"] = "cachetool"
        if insecure:
            self._session.verify = False
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=32)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._auth_lock = threading.Lock()
        self._auth_header: str | None = None
        self._creds_loaded = False
        self._creds: tuple[str, str] | None = None
        self._oci: dict[str, tuple[str, int]] = {}  # bundle manifest digest -> (OCI manifest digest, size)

    def close(self) -> None:
        self._session.close()

    # -------------------------------------------------------------------------------------------- HTTP
    def _credentials(self) -> tuple[str, str] | None:
        if not self._creds_loaded:
            self._creds = docker_credentials(self.host)
            self._creds_loaded = True
        return self._creds

    def _authenticate(self, challenge: str, what: str) -> None:
        import requests

        scheme, params = _parse_challenge(challenge)
        creds = self._credentials()
        if scheme == "basic":
            if not creds:
                raise StoreError(f"{what}: {self.host} wants a login and the docker config has none for it "
                                 f"({docker_config_path()}; run `docker login {self.host}`)")
            self._auth_header = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
            return
        if scheme != "bearer" or "realm" not in params:
            raise StoreError(f"{what}: {self.host} asks for unsupported auth {challenge!r}")
        q = {"service": params.get("service", "")}
        scope = params.get("scope") or f"repository:{self.repo}:pull,push"
        q["scope"] = scope
        try:
            if creds and creds[0] == "<token>":
                # docker config "identitytoken": an OAuth2 refresh token, exchanged at the realm with a POST
                r = self._session.post(params["realm"], data={**q, "grant_type": "refresh_token", "client_id": "cachetool",
                                                              "refresh_token": creds[1]}, timeout=self.timeout)
            else:
                r = self._session.get(params["realm"] + ("&" if "?" in params["realm"] else "?") + urlencode(q),
                                      auth=creds, timeout=self.timeout)
        except requests.RequestException as exc:
            raise StoreError(f"{what}: token service {params['realm']} unreachable ({type(exc).__name__})") from None
        if r.status_code in (401, 403):
            raise StoreError(f"{what}: {self.host} refused the credentials ({r.status_code} from the token service): "
                             "check `docker login`")
        if r.status_code != 200:
            raise StoreError(f"{what}: token service {params['realm']} answered {r.status_code}")
        try:
            tok = r.json()
            token = tok.get("token") or tok.get("access_token")
        except ValueError:
            token = None
        if not token:
            raise StoreError(f"{what}: token service {params['realm']} returned no token")
        self._auth_header = f"Bearer {token}"

    def _request(self, method: str, url: str, what: str, *, ok=(200,), retry: bool = True, data_path: Path | None = None,
                 **kw):
        """One HTTP request with auth and retries (connection errors, 429, 5xx; backoff 0.5 s doubling)."""
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
                if data_path is not None:
                    with open(data_path, "rb") as f:
                        r = self._session.request(method, url, headers=h, data=f, timeout=self.timeout, **kw)
                else:
                    r = self._session.request(method, url, headers=h, timeout=self.timeout, **kw)
            except requests.RequestException as exc:
                attempt += 1
                if not retry or attempt >= self.max_attempts:
                    raise StoreError(f"{what}: cannot reach registry {self.host} ({type(exc).__name__}) after "
                                     f"{attempt} attempt{'s' if attempt > 1 else ''}") from None
                time.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))
                continue
            if r.status_code == 401 and not authed_once and "WWW-Authenticate" in r.headers:
                authed_once = True
                with self._auth_lock:
                    self._authenticate(r.headers["WWW-Authenticate"], what)
                continue
            if (r.status_code == 429 or r.status_code >= 500) and retry and attempt + 1 < self.max_attempts:
                attempt += 1
                time.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))
                continue
            if r.status_code in ok:
                return r
            raise self._http_error(r, what)

    def _http_error(self, r, what: str) -> Exception:
        codes = []
        msg = ""
        try:
            errs = [e for e in r.json().get("errors") or [] if isinstance(e, dict)]
            codes = ["".join(str(e.get("code")).split())[:40] for e in errs]
            msg = " ".join(str(errs[0].get("message", "")).split())[:200] if errs else ""  # one line
        except (ValueError, AttributeError, TypeError, RecursionError):
            pass
        if r.status_code in (401, 403):
            return StoreError(f"{what}: access denied by registry {self.host} ({r.status_code}{' ' + codes[0] if codes else ''}): "
                              f"check the credentials in {docker_config_path()}")
        if "NAME_UNKNOWN" in codes:
            return NotFoundError(f"repository {self.repo!r} not found on {self.host}")
        if r.status_code == 404:
            return NotFoundError(f"{what}: not found on {self.host}{' (' + codes[0] + ')' if codes else ''}")
        if r.status_code == 405 and r.request.method == "DELETE":
            return StoreError(f"{what}: registry {self.host} has deletes disabled")
        detail = f" {codes[0]}: {msg}" if codes else ""
        return StoreError(f"{what}: registry {self.host} answered {r.status_code}{detail}".strip())

    def _v2(self, rest: str) -> str:
        return f"/v2/{self.repo}/{rest}"

    # -------------------------------------------------------------------------------------------- blobs
    def _head_blob(self, digest: str) -> int | None:
        r = self._request("HEAD", self._v2(f"blobs/{digest}"), f"check blob {digest[:19]} in {self.url}", ok=(200, 404))
        if r.status_code == 404:
            return None
        try:
            return int(r.headers.get("Content-Length", -1))
        except ValueError:
            return -1

    def has_blob(self, blob: BlobRef) -> bool:
        size = self._head_blob(blob.stored_digest)
        return size is not None and size in (blob.stored_size, -1)

    def _upload(self, digest: str, size: int, what: str, *, data: bytes | None = None, path: Path | None = None) -> None:
        r = self._request("POST", self._v2("blobs/uploads/"), what, ok=(202,))
        loc = r.headers.get("Location")
        if not loc:
            raise StoreError(f"{what}: registry {self.host} gave no upload location")
        loc = urljoin(self.base + "/", loc)
        sep = "&" if "?" in loc else "?"
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        # The upload session is single-use: a failed PUT is retried by the caller with a new POST.
        if path is not None:
            self._request("PUT", f"{loc}{sep}digest={digest}", what, ok=(201,), retry=False, data_path=path,
                          headers=headers)
        else:
            self._request("PUT", f"{loc}{sep}digest={digest}", what, ok=(201,), retry=False, data=data, headers=headers)
        self.counters.up(size)

    def _upload_retrying(self, digest: str, size: int, what: str, **kw) -> None:
        for attempt in range(self.max_attempts):
            try:
                return self._upload(digest, size, what, **kw)
            except StoreError:
                if attempt + 1 >= self.max_attempts:
                    raise
                time.sleep(min(8.0, 0.5 * 2 ** attempt))

    def put_blob(self, blob: BlobRef, stored_bytes_path: Path) -> None:
        self._upload_retrying(blob.stored_digest, blob.stored_size, f"upload blob {blob.stored_digest[:19]} to {self.url}",
                              path=Path(stored_bytes_path))

    def _read_body(self, r, limit: int, what: str) -> bytes:
        """A streamed response's body, at most ``limit`` bytes (VerificationError past it); a body cut mid-way is
        a StoreError, like any other transfer failure."""
        import requests

        data = bytearray()
        try:
            for chunk in r.iter_content(CHUNK):
                data += chunk
                if len(data) > limit:
                    raise VerificationError(f"{what}: larger than {limit} bytes")
        except requests.RequestException as exc:
            raise StoreError(f"{what}: transfer from {self.host} cut ({type(exc).__name__})") from None
        finally:
            r.close()
        return bytes(data)

    def _get_blob_bytes(self, digest: str, what: str, limit: int = 64 << 20) -> bytes:
        r = self._request("GET", self._v2(f"blobs/{digest}"), what, stream=True)
        data = self._read_body(r, limit, what)
        self.counters.down(len(data))
        if _sha(bytes(data)) != digest:
            raise VerificationError(f"{what}: content does not match digest {digest[:19]}")
        return bytes(data)

    def get_blob(self, blob: BlobRef, dest: Path) -> None:
        import requests

        what = f"download blob {blob.stored_digest[:19]} from {self.url}"

        def open_from(offset: int):
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            try:
                r = self._request("GET", self._v2(f"blobs/{blob.stored_digest}"), what, ok=(200, 206, 416),
                                  stream=True, headers=headers)
            except NotFoundError:
                raise NotFoundError(f"blob {blob.stored_digest[:19]} is missing from store {self.url}") from None
            if r.status_code == 416:
                return None
            return r.iter_content(DL_CHUNK), r.status_code, r.headers.get("Content-Range")

        download_resumable(Path(dest), blob.stored_size, what, open_from, (requests.RequestException,),
                           lambda exc: StoreError(f"{what}: transfer from {self.host} cut ({type(exc).__name__})"),
                           self.counters, self.max_attempts)

    # -------------------------------------------------------------------------------------------- manifests
    def _put_manifest(self, ref: str, body: bytes, media_type: str, what: str) -> None:
        self._request("PUT", self._v2(f"manifests/{ref}"), what, ok=(201,), data=body,
                      headers={"Content-Type": media_type})
        self.counters.up(len(body))

    def _get_manifest(self, ref: str, what: str, accept: str) -> tuple[bytes, str, str]:
        """(body, media type, digest) of a manifest by tag or digest; NotFoundError names tag vs repository."""
        r = self._request("GET", self._v2(f"manifests/{ref}"), what, ok=(200, 404), headers={"Accept": accept},
                          stream=True)
        if r.status_code == 404:
            codes = []
            try:
                codes = [e.get("code") for e in json.loads(self._read_body(r, 1 << 20, what)).get("errors") or []]
            except (ValueError, AttributeError, RecursionError, StoreError, VerificationError):
                pass
            if "NAME_UNKNOWN" in codes or not self._repo_exists():
                raise NotFoundError(f"repository {self.repo!r} not found on {self.host}")
            raise NotFoundError(f"{what}: not found (no such tag)" if not ref.startswith("sha256") else
                                f"{what}: manifest {ref[:19]} not found")
        body = self._read_body(r, 16 << 20, what)
        self.counters.down(len(body))
        digest = _sha(body)
        if ref.startswith("sha256:") and digest != ref:
            raise VerificationError(f"{what}: manifest does not match its digest")
        mt = r.headers.get("Content-Type", "").split(";")[0].strip()
        return body, mt, digest

    def _repo_exists(self) -> bool:
        r = self._request("GET", self._v2("tags/list"), f"list {self.url}", ok=(200, 404))
        return r.status_code == 200

    def put_manifest(self, manifest_bytes: bytes, blobs: list[BlobRef]) -> str:
        digest = _sha(manifest_bytes)
        what = f"upload manifest {digest[:19]} to {self.url}"
        if self._head_blob(digest) is None:
            self._upload_retrying(digest, len(manifest_bytes), what, data=manifest_bytes)
        body = compose_bundle_manifest(manifest_bytes, blobs)
        oci = _sha(body)
        self._put_manifest(oci, body, OCI_MANIFEST, what)
        self._oci[digest] = (oci, len(body))
        return digest

    def get_manifest(self, manifest_digest: str) -> bytes:
        what = f"download manifest {manifest_digest[:19]} from {self.url}"
        try:
            return self._get_blob_bytes(manifest_digest, what)
        except NotFoundError:
            raise NotFoundError(f"manifest {manifest_digest[:19]} is missing from store {self.url}") from None

    def _oci_of(self, manifest_digest: str) -> tuple[str, int]:
        if manifest_digest not in self._oci:
            from cachetool.manifest import Manifest

            mbytes = self.get_manifest(manifest_digest)
            body = compose_bundle_manifest(mbytes, list(Manifest.from_bytes(mbytes).blobs))
            self._oci[manifest_digest] = (_sha(body), len(body))
        return self._oci[manifest_digest]

    @staticmethod
    def _sig_tag(oci_digest: str) -> str:
        return f"sha256-{hexof(oci_digest)}.sig"

    def put_signature(self, manifest_digest: str, envelope: bytes) -> None:
        what = f"upload signature to {self.url}"
        oci, size = self._oci_of(manifest_digest)
        env_digest = _sha(envelope)
        if self._head_blob(env_digest) is None:
            self._upload_retrying(env_digest, len(envelope), what, data=envelope)
        if self._head_blob(EMPTY_DIGEST) is None:
            self._upload_retrying(EMPTY_DIGEST, len(EMPTY_JSON), what, data=EMPTY_JSON)
        doc = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": SIGNATURE_ARTIFACT_TYPE,
            "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": EMPTY_DIGEST, "size": len(EMPTY_JSON)},
            "layers": [{"mediaType": DSSE_MEDIA_TYPE, "digest": env_digest, "size": len(envelope)}],
            "subject": {"mediaType": OCI_MANIFEST, "digest": oci, "size": size},
            "annotations": {A + "manifest.digest": manifest_digest},
        }
        self._put_manifest(self._sig_tag(oci), _json(doc), OCI_MANIFEST, what)

    def get_signature(self, manifest_digest: str) -> bytes | None:
        what = f"download signature of {manifest_digest[:19]} from {self.url}"
        oci, _ = self._oci_of(manifest_digest)
        try:
            body, _, _ = self._get_manifest(self._sig_tag(oci), what, OCI_MANIFEST)
        except NotFoundError:
            return None
        try:
            doc = json.loads(body)
            layer = doc["layers"][0]
            if layer.get("mediaType") != DSSE_MEDIA_TYPE:
                raise ValueError(layer.get("mediaType"))
            digest = layer["digest"]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
            raise VerificationError(f"{what}: malformed signature artifact ({type(exc).__name__})") from None
        # The envelope holds the manifest (base64, up to 64 MiB here) and every signature.
        return self._get_blob_bytes(digest, what, limit=128 << 20)

    # -------------------------------------------------------------------------------------------- refs
    def put_ref(self, index: RefIndex) -> None:
        manifests = []
        for e in index.entries:
            oci, size = self._oci_of(e.manifest_digest)
            fp = e.fingerprint or {}
            manifests.append({
                "mediaType": OCI_MANIFEST,
                "digest": oci,
                "size": size,
                "artifactType": ARTIFACT_TYPE,
                "platform": {"os": fp.get("os") or "linux",
                             "architecture": _ARCH.get(fp.get("arch") or "", fp.get("arch") or "unknown")},
                "annotations": {
                    A + "platform": e.platform,
                    A + "manifest.digest": e.manifest_digest,
                    A + "fingerprint": json.dumps(fp, sort_keys=True, separators=(",", ":")),
                    A + "size": str(e.size),
                    "org.opencontainers.image.created": e.created or now_iso(),
                },
            })
        doc = {"schemaVersion": 2, "mediaType": OCI_INDEX, "artifactType": ARTIFACT_TYPE, "manifests": manifests,
               "annotations": {A + "name": index.name, A + "tag": index.tag}}
        self._put_manifest(index.tag, _json(doc), OCI_INDEX, f"write ref {self.url}:{index.tag}")

    def get_ref(self, name: str, tag: str) -> RefIndex:
        ref = f"{self.url}:{tag}"
        body, mt, _ = self._get_manifest(tag, f"read {ref}", f"{OCI_INDEX}, {OCI_MANIFEST}")
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise StoreError(f"{ref} is not JSON") from None
        if not isinstance(doc, dict):
            raise StoreError(f"{ref} is not a cachetool bundle (not a JSON object)")
        if doc.get("mediaType", mt) != OCI_INDEX or doc.get("artifactType") != ARTIFACT_TYPE:
            raise StoreError(f"{ref} is not a cachetool bundle (artifactType {doc.get('artifactType')!r})")
        entries = []
        try:
            for m in doc.get("manifests") or []:
                ann = m.get("annotations") or {}
                md = ann[A + "manifest.digest"]
                hexof(md)
                hexof(m["digest"])
                self._oci[md] = (m["digest"], int(m["size"]))
                entries.append(ref_entry(md, ann[A + "platform"], json.loads(ann.get(A + "fingerprint") or "{}"),
                                         ann.get(A + "size") or 0, ann.get("org.opencontainers.image.created", "")))
        except (KeyError, ValueError, TypeError, AttributeError, RecursionError, VerificationError) as exc:
            raise StoreError(f"{ref}: malformed cachetool index ({type(exc).__name__}: {str(exc)[:80]})") from None
        return RefIndex(name, tag, tuple(entries))

    def tags(self) -> list[str]:
        out: list[str] = []
        url = self._v2("tags/list?n=1000")
        while url:
            r = self._request("GET", url, f"list tags of {self.url}")
            try:
                tags = r.json().get("tags") or []
                out += [t for t in tags if isinstance(t, str)]
            except (ValueError, AttributeError, TypeError, RecursionError):
                raise StoreError(f"list tags of {self.url}: the registry's answer is not a tag list") from None
            link = r.headers.get("Link", "")
            m = re.match(r'<([^>]+)>', link)
            url = urljoin(self.base + "/", m.group(1)) if m else None
        return out

    def list_refs(self) -> Iterator[RefIndex]:
        name = self.repo.rsplit("/", 1)[-1]
        for tag in sorted(self.tags()):
            if tag.startswith("sha256-"):
                continue
            try:
                yield self.get_ref(name, tag)
            except StoreError:
                continue  # a tag that is not a cachetool bundle

    def _digest_of_tag(self, tag: str, what: str) -> str:
        r = self._request("HEAD", self._v2(f"manifests/{tag}"), what, ok=(200, 404),
                          headers={"Accept": f"{OCI_INDEX}, {OCI_MANIFEST}"})
        if r.status_code == 404:
            if not self._repo_exists():
                raise NotFoundError(f"repository {self.repo!r} not found on {self.host}")
            raise NotFoundError(f"{self.url}:{tag} not found")
        d = r.headers.get("Docker-Content-Digest")
        if not d:
            d = self._get_manifest(tag, what, f"{OCI_INDEX}, {OCI_MANIFEST}")[2]
        return d

    def delete_ref(self, name: str, tag: str) -> None:
        """Delete the tag's index (by digest: the distribution API deletes manifests, not tags)."""
        what = f"delete {self.url}:{tag}"
        d = self._digest_of_tag(tag, what)
        self._request("DELETE", self._v2(f"manifests/{d}"), what, ok=(202, 200))

    def gc(self, dry_run: bool = False, older_than: float = 0.0) -> list[str]:
        """Delete signature tags whose bundle no ref names. Blobs and untagged manifests are reclaimed by the
        registry's own garbage collection (``registry garbage-collect --delete-untagged``)."""
        tags = self.tags()
        live = set()
        for t in tags:
            if t.startswith("sha256-"):
                continue
            try:
                for e in self.get_ref(self.repo.rsplit("/", 1)[-1], t).entries:
                    live.add(self._oci_of(e.manifest_digest)[0])
            except StoreError:
                continue
        out = []
        for t in tags:
            m = re.match(r"^sha256-([0-9a-f]{64})\.sig$", t)
            if m and "sha256:" + m.group(1) not in live:
                out.append(f"tag {t}")
                if not dry_run:
                    d = self._digest_of_tag(t, f"gc {self.url}")
                    self._request("DELETE", self._v2(f"manifests/{d}"), f"gc {self.url}", ok=(202, 200, 404))
        return out
