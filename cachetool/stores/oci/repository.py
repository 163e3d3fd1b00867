"""One repository of a registry, the requests every part of the OCI store makes: blobs by digest (HEAD, GET, a
resumable download, an upload), manifests by tag or digest (GET, PUT, HEAD, DELETE), tags and the catalog. Errors
name the tag or the repository."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urljoin

from cachetool.errors import DigestMismatchError, NotFoundError, StoreError, UsageError, VerificationError
from cachetool.retry import pause
from cachetool.stores.base import TransferCounters
from cachetool.stores.common import DL_CHUNK, download_resumable
from cachetool.stores.oci import media
from cachetool.stores.oci.client import RegistryClient

MAX_CHILD_MANIFEST = 16 << 20


class Repository:
    """The requests to ``repo`` on ``client``'s registry; what they move is counted in ``counters``."""

    def __init__(self, client: RegistryClient, repo: str, url: str, counters: TransferCounters):
        self.client = client
        self.host = client.host
        self.repo = repo
        self.url = url
        self.counters = counters

    @property
    def max_attempts(self) -> int:
        return self.client.max_attempts

    def request(self, *a, **kw):
        return self.client.request(*a, **kw)

    def v2(self, rest: str) -> str:
        if not self.repo:
            raise UsageError(f"{self.url} names a registry, not a repository (oci://host/repo)", store=self.url)
        return self.client.v2(rest)

    # blobs
    def head_blob(self, digest: str, *, retry: bool = True) -> int | None:
        """The blob's size (-1: not said), None when the registry lacks it."""
        r = self.request(
            "HEAD", self.v2(f"blobs/{digest}"), f"check blob {digest[:19]} in {self.url}", ok=(200, 404), retry=retry
        )
        if r.status_code == 404:
            return None
        try:
            return int(r.headers.get("Content-Length", -1))
        except ValueError:
            return -1

    def get_blob_bytes(self, digest: str, what: str, limit: int = 64 << 20) -> bytes:
        r = self.request("GET", self.v2(f"blobs/{digest}"), what, stream=True)
        data = self.client.read_body(r, limit, what)
        self.counters.down(len(data))
        if media.sha(data) != digest:
            raise DigestMismatchError(
                f"{what}: content does not match digest {digest[:19]}", store=self.url, key=digest
            )
        return data

    def upload(self, digest: str, size: int, what: str, *, data: bytes | None = None, path: Path | None = None) -> None:
        """One upload session (POST, then a monolithic PUT), not retried: it is single-use."""
        r = self.request("POST", self.v2("blobs/uploads/"), what, ok=(202,))
        loc = r.headers.get("Location")
        if not loc:
            raise StoreError(
                f"{what}: registry {self.host} gave no upload location",
                store=self.url,
                key=digest,
                status=r.status_code,
            )
        loc = urljoin(self.client.base + "/", loc)
        sep = "&" if "?" in loc else "?"
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        body = {"data_path": path} if path is not None else {"data": data}
        self.request("PUT", f"{loc}{sep}digest={digest}", what, ok=(201,), retry=False, headers=headers, **body)
        self.counters.up(size)

    def upload_retrying(self, digest: str, size: int, what: str, **kw) -> None:
        """:meth:`upload`, with a new upload session per attempt; a failed PUT is checked with a HEAD first."""
        for attempt in range(self.max_attempts):
            try:
                return self.upload(digest, size, what, **kw)
            except StoreError:
                # A failed PUT of a blob that is there now (another pusher's) is done: a blob is named by its
                # digest, so theirs is ours. Two pushers racing on one tag are put_manifest's to settle.
                if self._blob_there(digest, size):
                    return
                if attempt + 1 >= self.max_attempts:
                    raise
                pause(what, attempt, "upload failed; new upload session")

    def _blob_there(self, digest: str, size: int) -> bool:
        """Whether the registry has the blob now, asked once (the upload's own attempts are the retries); a failed
        check is a no, so the upload is tried again and its failure is the one reported."""
        try:
            return self.head_blob(digest, retry=False) in (size, -1)
        except StoreError:
            return False

    def download(self, digest: str, size: int, dest: Path, what: str) -> None:
        """The blob's bytes into ``dest``, resuming a partial file (ranged GETs)."""
        import requests

        def open_from(offset: int):
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            try:
                r = self.request(
                    "GET", self.v2(f"blobs/{digest}"), what, ok=(200, 206, 416), stream=True, headers=headers
                )
            except NotFoundError as exc:
                raise NotFoundError(
                    f"blob {digest[:19]} is missing from store {self.url}",
                    store=self.url,
                    key=digest,
                    status=exc.status,
                ) from None
            if r.status_code == 416:
                return None
            return r.iter_content(DL_CHUNK), r.status_code, r.headers.get("Content-Range")

        fields = {"store": self.url, "key": digest}
        download_resumable(
            Path(dest),
            size,
            what,
            open_from,
            (requests.RequestException,),
            lambda exc: StoreError(f"{what}: transfer from {self.host} cut ({type(exc).__name__})", **fields),
            self.counters,
            self.max_attempts,
            fields,
        )

    # manifests
    def put_manifest(self, ref: str, body: bytes, media_type: str, what: str):
        """PUT ``body`` under ``ref`` (a tag, or the body's digest). docker-registry rewrites a blob's or manifest's
        link file in place (truncate, then write) whenever anyone uploads it again, and a manifest PUT that checks
        its references at that instant reads an empty link and answers 400 DIGEST_INVALID: another pusher's moment,
        asked again. A digest that is not the body's is our own error, answered at once."""
        digest_is_the_bodys = not ref.startswith("sha256:") or media.sha(body) == ref
        passing = ("DIGEST_INVALID",) if digest_is_the_bodys else ()
        r = self.request(
            "PUT",
            self.v2(f"manifests/{ref}"),
            what,
            ok=(201,),
            data=body,
            headers={"Content-Type": media_type},
            passing_codes=passing,
        )
        self.counters.up(len(body))
        return r

    def get_manifest(self, ref: str, what: str, accept: str = media.ACCEPT) -> tuple[bytes, str, str]:
        """(body, media type, digest) of a manifest by tag or digest; NotFoundError names tag vs repository."""
        r = self.request(
            "GET", self.v2(f"manifests/{ref}"), what, ok=(200, 404), headers={"Accept": accept}, stream=True
        )
        if r.status_code == 404:
            codes = []
            try:
                codes = [e.get("code") for e in json.loads(self.client.read_body(r, 1 << 20, what)).get("errors") or []]
            except (ValueError, AttributeError, RecursionError, StoreError, VerificationError):
                pass
            fields = {"store": self.url, "key": ref, "status": 404}
            if "NAME_UNKNOWN" in codes or not self.exists():
                raise NotFoundError(f"repository {self.repo!r} not found on {self.host}", **fields)  # type: ignore[arg-type]  # baseline (issue 46)
            raise NotFoundError(
                f"{what}: not found (no such tag)"
                if not ref.startswith("sha256")
                else f"{what}: manifest {ref[:19]} not found",
                **fields,  # type: ignore[arg-type]  # baseline (issue 46)
            )
        body = self.client.read_body(r, MAX_CHILD_MANIFEST, what)
        self.counters.down(len(body))
        digest = media.sha(body)
        if ref.startswith("sha256:") and digest != ref:
            raise DigestMismatchError(f"{what}: manifest does not match its digest", store=self.url, key=ref)
        mt = r.headers.get("Content-Type", "").split(";")[0].strip()
        return body, mt, digest

    def delete_manifest(self, digest: str, what: str, *, gone_ok: bool = True) -> None:
        """Delete by digest (the distribution API deletes manifests, not tags)."""
        self.request("DELETE", self.v2(f"manifests/{digest}"), what, ok=(202, 200, 404) if gone_ok else (202, 200))

    def exists(self) -> bool:
        r = self.request("GET", self.v2("tags/list"), f"list {self.url}", ok=(200, 404))
        return r.status_code == 200

    def tag_digest(self, tag: str) -> str | None:
        """The digest the tag (or a digest) names now; None when there is no such tag."""
        r = self.request(
            "HEAD",
            self.v2(f"manifests/{tag}"),
            f"check {self.url}:{tag}",
            ok=(200, 404),
            headers={"Accept": media.ACCEPT},
        )
        if r.status_code == 404:
            return None
        return r.headers.get("Docker-Content-Digest") or self.get_manifest(tag, f"read {self.url}:{tag}")[2]

    # listings
    def tags(self) -> list[str]:
        out: list[str] = []
        url = self.v2("tags/list?n=1000")
        while url:
            r = self.request("GET", url, f"list tags of {self.url}")
            try:
                tags = r.json().get("tags") or []
                out += [t for t in tags if isinstance(t, str)]
            except (ValueError, AttributeError, TypeError, RecursionError):
                raise StoreError(
                    f"list tags of {self.url}: the registry's answer is not a tag list",
                    store=self.url,
                    status=r.status_code,
                ) from None
            url = self.client.next_link(r)  # type: ignore[assignment]  # baseline (issue 46)
        return out

    def repositories(self) -> list[str]:
        """Every repository of the registry (``/v2/_catalog``, paginated)."""
        out: list[str] = []
        url = "/v2/_catalog?n=1000"
        while url:
            r = self.request("GET", url, f"list repositories of {self.host}")
            try:
                out += [x for x in r.json().get("repositories") or [] if isinstance(x, str)]
            except (ValueError, AttributeError, TypeError, RecursionError):
                raise StoreError(
                    f"list repositories of {self.host}: the answer is not a repository list",
                    store=self.url,
                    status=r.status_code,
                ) from None
            url = self.client.next_link(r)  # type: ignore[assignment]  # baseline (issue 46)
        return out
