"""One repository of a registry, the requests every part of the OCI store makes: blobs by digest (HEAD, GET),
manifests by tag or digest (GET, PUT, HEAD), tags and the catalog. Errors name the tag or the repository."""

from __future__ import annotations

import json

from cachetool.errors import DigestMismatchError, NotFoundError, StoreError, UsageError, VerificationError
from cachetool.stores.oci import media

MAX_CHILD_MANIFEST = 16 << 20


class RepositoryAccess:
    """Mixed into :class:`cachetool.stores.oci.store.OCIStore`, which sets ``client``, ``host``, ``repo``, ``url`` and
    ``counters``."""

    def _req(self, *a, **kw):
        return self.client.request(*a, **kw)

    def _v2(self, rest: str) -> str:
        if not self.repo:
            raise UsageError(f"{self.url} names a registry, not a repository (oci://host/repo)", store=self.url)
        return self.client.v2(rest)

    def _head_blob(self, digest: str, *, retry: bool = True) -> int | None:
        r = self._req("HEAD", self._v2(f"blobs/{digest}"), f"check blob {digest[:19]} in {self.url}", ok=(200, 404),
                      retry=retry)
        if r.status_code == 404:
            return None
        try:
            return int(r.headers.get("Content-Length", -1))
        except ValueError:
            return -1

    def _get_blob_bytes(self, digest: str, what: str, limit: int = 64 << 20) -> bytes:
        r = self._req("GET", self._v2(f"blobs/{digest}"), what, stream=True)
        data = self.client.read_body(r, limit, what)
        self.counters.down(len(data))
        if media.sha(data) != digest:
            raise DigestMismatchError(f"{what}: content does not match digest {digest[:19]}", store=self.url,
                                      key=digest)
        return data

    def _put_manifest(self, ref: str, body: bytes, media_type: str, what: str):
        r = self._req("PUT", self._v2(f"manifests/{ref}"), what, ok=(201,), data=body,
                      headers={"Content-Type": media_type})
        self.counters.up(len(body))
        return r

    def _get_manifest(self, ref: str, what: str, accept: str = media.ACCEPT) -> tuple[bytes, str, str]:
        """(body, media type, digest) of a manifest by tag or digest; NotFoundError names tag vs repository."""
        r = self._req("GET", self._v2(f"manifests/{ref}"), what, ok=(200, 404), headers={"Accept": accept},
                      stream=True)
        if r.status_code == 404:
            codes = []
            try:
                codes = [e.get("code") for e in json.loads(self.client.read_body(r, 1 << 20, what)).get("errors") or []]
            except (ValueError, AttributeError, RecursionError, StoreError, VerificationError):
                pass
            fields = {"store": self.url, "key": ref, "status": 404}
            if "NAME_UNKNOWN" in codes or not self._repo_exists():
                raise NotFoundError(f"repository {self.repo!r} not found on {self.host}", **fields)
            raise NotFoundError(f"{what}: not found (no such tag)" if not ref.startswith("sha256") else
                                f"{what}: manifest {ref[:19]} not found", **fields)
        body = self.client.read_body(r, MAX_CHILD_MANIFEST, what)
        self.counters.down(len(body))
        digest = media.sha(body)
        if ref.startswith("sha256:") and digest != ref:
            raise DigestMismatchError(f"{what}: manifest does not match its digest", store=self.url, key=ref)
        mt = r.headers.get("Content-Type", "").split(";")[0].strip()
        return body, mt, digest

    def _repo_exists(self) -> bool:
        r = self._req("GET", self._v2("tags/list"), f"list {self.url}", ok=(200, 404))
        return r.status_code == 200

    def _tag_digest(self, tag: str) -> str | None:
        r = self._req("HEAD", self._v2(f"manifests/{tag}"), f"check {self.url}:{tag}", ok=(200, 404),
                      headers={"Accept": media.ACCEPT})
        if r.status_code == 404:
            return None
        return r.headers.get("Docker-Content-Digest") or self._get_manifest(tag, f"read {self.url}:{tag}")[2]

    def tags(self) -> list[str]:
        out: list[str] = []
        url = self._v2("tags/list?n=1000")
        while url:
            r = self._req("GET", url, f"list tags of {self.url}")
            try:
                tags = r.json().get("tags") or []
                out += [t for t in tags if isinstance(t, str)]
            except (ValueError, AttributeError, TypeError, RecursionError):
                raise StoreError(f"list tags of {self.url}: the registry's answer is not a tag list",
                                 store=self.url, status=r.status_code) from None
            url = self.client.next_link(r)
        return out

    def repositories(self) -> list[str]:
        """Every repository of the registry (``/v2/_catalog``, paginated)."""
        out: list[str] = []
        url = "/v2/_catalog?n=1000"
        while url:
            r = self._req("GET", url, f"list repositories of {self.host}")
            try:
                out += [x for x in r.json().get("repositories") or [] if isinstance(x, str)]
            except (ValueError, AttributeError, TypeError, RecursionError):
                raise StoreError(f"list repositories of {self.host}: the answer is not a repository list",
                                 store=self.url, status=r.status_code) from None
            url = self.client.next_link(r)
        return out

