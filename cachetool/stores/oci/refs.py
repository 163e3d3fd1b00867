"""Tags on OCI: a tag is an image index of bundle manifests, one per platform. Reading accepts any wrapping (our
index, one a copy rewrote, a tag straight on a bundle manifest); writing converges, for the distribution API has no
compare-and-swap (:meth:`Tags.converge`)."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

from cachetool.digests import hexof
from cachetool.errors import (
    CachetoolError,
    DigestMismatchError,
    NotABundleError,
    NotFoundError,
    StoreError,
    VerificationError,
    cause,
    filled,
)
from cachetool.retry import log as retry_log
from cachetool.stores.base import RefEntry, RefIndex
from cachetool.stores.common import now_iso, ref_entry
from cachetool.stores.oci import media
from cachetool.stores.oci.manifests import BundleManifests
from cachetool.stores.oci.media import CREATED, A
from cachetool.stores.oci.repository import Repository

REFERRERS_TAG = re.compile(r"^sha256-[0-9a-f]{64}$")
LEGACY_SIG_TAG = re.compile(r"^sha256-([0-9a-f]{64})\.sig$")


class Tags:
    """The tags of ``repository``: get_ref (a tag or a pin), update_ref, list_refs. Every bundle a tag reaches is
    noted in ``manifests`` (its OCI manifest and packs), for the pull that follows."""

    # Ref updates: how long a writer waits before it re-reads the tag to see that its write stuck.
    settle_s = 0.25
    update_attempts = 10

    def __init__(self, repository: Repository, manifests: BundleManifests):
        self.repository = repository
        self.manifests = manifests
        self.url = repository.url
        self._entries: dict[str, tuple[str, dict, int]] = {}  # OCI digest -> (platform, fingerprint, size)

    def _entry_of(self, oci: str, doc: dict, what: str) -> tuple[str, str, dict, int]:
        """(bundle manifest digest, platform, fingerprint, size) of a bundle's OCI manifest ``doc``."""
        md = doc["config"]["digest"]
        hexof(md)
        ann = doc.get("annotations") or {}
        if oci not in self._entries:
            if ann.get(A + "platform"):
                fp = json.loads(ann.get(A + "fingerprint") or "{}")
                platform = ann[A + "platform"]
            else:  # cachetool before these annotations: read our manifest itself
                from cachetool.bundle.manifest import stored_summary

                man = stored_summary(self.repository.get_blob_bytes(md, what, limit=512 << 20))
                fp, platform = dict(man.fingerprint or {}), man.platform
            size = ann.get(A + "size") or (
                sum(int(l.get("size") or 0) for l in doc.get("layers") or []) + int(doc["config"].get("size") or 0)
            )
            self._entries[oci] = (platform, fp, int(size))
        return (md, *self._entries[oci])

    def _resolve(self, ref: str, what: str) -> list[RefEntry]:
        return [e for e, _ in self.resolve_with_digests(ref, what)]

    def resolve_with_digests(self, ref: str, what: str) -> list[tuple[RefEntry, str]]:
        """The bundles a tag (or an OCI digest) reaches, each recognised by its own manifest. An index child that
        is not a bundle is skipped; an empty list means "not a cachetool bundle"."""
        body, mt, digest = self.repository.get_manifest(ref, what)
        try:
            doc = json.loads(body)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            if media.is_index(doc, mt):
                idx_created = str((doc.get("annotations") or {}).get(CREATED, ""))
                children = [
                    (m, str(m["digest"]), m.get("annotations") or {})
                    for m in doc.get("manifests") or []
                    if isinstance(m, dict) and m.get("artifactType") in (None, media.ARTIFACT_TYPE)
                ]
            else:
                idx_created, children = "", [(None, digest, {})]  # type: ignore[list-item]  # baseline (issue 46)
            entries = []
            for m, child, ann in children:
                hexof(child)
                cdoc = doc if m is None else json.loads(self.repository.get_manifest(child, what, media.ACCEPT)[0])
                if not media.is_bundle_manifest(cdoc):
                    continue
                md, platform, fp, size = self._entry_of(child, cdoc, what)
                created = ann.get(CREATED) or idx_created or (cdoc.get("annotations") or {}).get(CREATED, "")
                body_size = int(m["size"]) if m is not None else len(body)
                self.manifests.remember(md, child, body_size, cdoc.get("layers") or [])
                entries.append((ref_entry(md, platform, fp, size, created), child))
        except NotFoundError as exc:
            raise StoreError(
                f"{what}: the index names a manifest the registry does not have",
                store=self.url,
                key=exc.key,
                status=exc.status,
            ) from None
        except (KeyError, ValueError, TypeError, AttributeError, RecursionError, VerificationError) as exc:
            if isinstance(exc, DigestMismatchError):  # a hostile registry: refused as such, not "malformed"
                raise
            raise StoreError(
                f"{what}: malformed cachetool index ({cause(exc, detail=True)})", store=self.url, key=ref
            ) from None
        return sorted(entries, key=lambda x: x[0].platform)

    def get_ref(self, name: str, tag: str, *, digest: str | None = None) -> RefIndex:
        """The tag's bundles; with ``digest`` (a pin) the bundle manifest or index with this OCI digest, exactly
        (the body is checked against it)."""
        if digest is not None:
            hexof(digest)
        at, fields = (
            (f"@{digest}", {"ref": f"{name}@{digest}", "key": digest})
            if digest
            else (f":{tag}", {"ref": f"{name}:{tag}", "key": tag})
        )
        where = f"{self.url}{at}"
        try:
            entries = self._resolve(digest or tag, f"read {where}")
        except CachetoolError as exc:
            filled(exc, store=self.url, **fields)
            raise
        if not entries:
            why = (
                ""
                if digest
                else (
                    f" (no manifest under it has artifactType {media.ARTIFACT_TYPE} or a config "
                    f"of type {media.CONFIG_MEDIA_TYPE})"
                )
            )
            raise NotABundleError(f"{where} is not a cachetool bundle{why}", store=self.url, **fields)
        return RefIndex(name, digest or tag, tuple(entries))

    # -------------------------------------------------------------------------------------------- writing tags
    def _index_body(self, index: RefIndex) -> bytes:
        manifests = []
        for e in index.entries:
            oci, size = self.manifests.oci_of(e.manifest_digest)
            manifests.append(
                {
                    "mediaType": media.OCI_MANIFEST,
                    "digest": oci,
                    "size": size,
                    "artifactType": media.ARTIFACT_TYPE,
                    "platform": media.platform_of(e.fingerprint),
                    "annotations": {
                        A + "platform": e.platform,
                        A + "manifest.digest": e.manifest_digest,
                        A + "fingerprint": json.dumps(e.fingerprint or {}, sort_keys=True, separators=(",", ":")),
                        A + "size": str(e.size),
                        CREATED: e.created or now_iso(),
                    },
                }
            )
        return media.compose_index(manifests, {A + "name": index.name, A + "tag": index.tag}, media.ARTIFACT_TYPE)

    def put_ref(self, index: RefIndex) -> None:
        self.repository.put_manifest(
            index.tag, self._index_body(index), media.OCI_INDEX, f"write ref {self.url}:{index.tag}"
        )

    def _read_ref(self, name: str, tag: str) -> tuple[RefIndex | None, str | None]:
        try:
            digest = self.repository.tag_digest(tag)
            if digest is None:
                return None, None
            return self.get_ref(name, tag), digest
        except NotFoundError:
            return None, None

    def converge(self, tag: str, read, update, write, what: str):
        """Read-modify-write of a tag without compare-and-swap (the distribution API has none):

        1. read the tag (value and digest) and compute the update;
        2. just before writing, check the digest again: a change since the read means another writer got in, so
           merge again from its value;
        3. write, wait ``settle_s`` (plus jitter), re-read: if the update is not in what the tag now holds,
           another writer overwrote it after our check, so merge into its value and write again.

        A lost update needs another writer to read, write and verify entirely inside our check→write gap
        (milliseconds), while its verify comes ``settle_s`` after its write: so each of two racing writers sees
        the other's value and the merges converge. ``update`` must be idempotent (merging twice = once)."""
        for _ in range(self.update_attempts):
            old, digest = read()
            new = update(old)
            if old is not None and new == old:
                return new
            if self.repository.tag_digest(tag) != digest:
                retry_log.info("%s: %s:%s changed since it was read; merging again", what, self.url, tag)
                continue
            write(new)
            time.sleep(self.settle_s * (1 + random.random()))
            after, _ = read()
            if after is not None and update(after) == after:
                return after
            if after is None and not _has_entries(new):
                return new
        raise StoreError(
            f"{what}: {self.url}:{tag} kept changing under concurrent writers; "
            f"gave up after {self.update_attempts} attempts",
            store=self.url,
            key=tag,
        )

    def update_ref(self, name: str, tag: str, update: Callable[[RefIndex | None], RefIndex | None]) -> RefIndex | None:
        """Read-modify-write of a ref, by :meth:`_converge`. An update that leaves no entries deletes the tag."""

        def write(new: RefIndex | None) -> None:
            if new is not None and new.entries:
                self.put_ref(new)
            else:
                self.delete_ref(name, tag)

        return self.converge(tag, lambda: self._read_ref(name, tag), update, write, f"update {self.url}:{tag}")

    def delete_ref(self, name: str, tag: str) -> None:
        """Delete the tag's index (by digest: the distribution API deletes manifests, not tags)."""
        what = f"delete {self.url}:{tag}"
        d = self.repository.tag_digest(tag)
        if d is None:
            fields = {"store": self.url, "ref": f"{name}:{tag}", "key": tag, "status": 404}
            if not self.repository.exists():
                raise NotFoundError(
                    f"repository {self.repository.repo!r} not found on {self.repository.host}",
                    **fields,  # type: ignore[arg-type]  # baseline (issue 46)
                )
            raise NotFoundError(f"{self.url}:{tag} not found", **fields)  # type: ignore[arg-type]  # baseline (issue 46)
        self.repository.delete_manifest(d, what, gone_ok=False)

    def refs_of_repo(self, name: str) -> Iterator[RefIndex]:
        for tag in sorted(self.repository.tags()):
            if REFERRERS_TAG.match(tag) or LEGACY_SIG_TAG.match(tag):
                continue
            try:
                yield self.get_ref(name, tag)
            except NotFoundError:
                continue  # removed while listing
            except NotABundleError:
                continue  # another tool's tag

    def list_refs(self, sibling: Callable[[str], AbstractContextManager[Tags]]) -> Iterator[RefIndex]:
        """The refs of the repository; for a registry (``oci://host``) or a namespace (``oci://host/team``), those
        of every repository under it, named by their path, each read through ``with sibling(path) as tags`` (the
        tags of another repository of this registry, with its own credentials scope)."""
        repo, host = self.repository.repo, self.repository.host
        found = False
        if repo:
            try:
                refs = list(self.refs_of_repo(repo.rsplit("/", 1)[-1]))
                found = True
                yield from refs
            except NotFoundError:
                pass
        prefix = repo + "/" if repo else ""
        try:
            subs = [r for r in self.repository.repositories() if r.startswith(prefix)]
        except StoreError:
            if found:
                return  # the registry hides its catalog; the repository itself was listed
            raise
        if not subs and not found:
            raise NotFoundError(
                f"repository {repo!r} not found on {host}" if repo else f"registry {host} has no repositories",
                store=self.url,
            )
        for sub in subs:
            with sibling(sub) as tags:
                try:
                    refs = list(tags.refs_of_repo(sub))
                except NotFoundError:
                    continue  # in the catalog with no tags (blobs only, every tag deleted) or removed while listing
            yield from (RefIndex(sub, i.tag, i.entries) for i in refs)


def _has_entries(x) -> bool:
    return bool(getattr(x, "entries", x))
