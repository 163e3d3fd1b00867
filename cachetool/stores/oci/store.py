"""``oci://host[:port]/repo``: bundles as OCI artifacts in a registry, by the ecosystem's rules.

- A bundle is an OCI image manifest (:mod:`.media`), its small blobs in packs (:mod:`.packs`).
- A tag is an OCI image index of those manifests (one per platform). Reading accepts any wrapping: our index,
  an index a copy rewrote (``skopeo copy --all`` drops artifactType), or a tag that points straight at a bundle
  manifest (``skopeo copy`` without ``--all``). Each child is identified by its own manifest.
- The signature is an OCI 1.1 referrer of the bundle's manifest: pushed by digest with ``subject``; where the
  registry has no referrers API, listed in the referrers tag ``sha256-<hex>`` (an index), as the distribution
  spec says. Read: the referrers API, then that tag, then the ``sha256-<hex>.sig`` tag of older cachetool.
- Pins: ``oci://host/repo@sha256:...`` is the OCI digest of a bundle manifest or of an index.
- Ref updates: registries have no compare-and-swap; see :meth:`OCIStore.update_ref` for the strategy.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import random
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from cachetool.digests import hexof, sha256_file
from cachetool.errors import NotFoundError, StoreError, UsageError, VerificationError
from cachetool.retry import log as retry_log, pause
from cachetool.stores.common import DL_CHUNK, Counters, download_resumable, now_iso, ref_entry
from cachetool.stores.base import GC_MIN_AGE_S, BlobRef, Capabilities, RefEntry, RefIndex, Store
from cachetool.stores.oci import media, packs
from cachetool.stores.oci.client import RegistryClient
from cachetool.stores.oci.media import A, CREATED

_REFERRERS_TAG = re.compile(r"^sha256-[0-9a-f]{64}$")
_LEGACY_SIG_TAG = re.compile(r"^sha256-([0-9a-f]{64})\.sig$")
MAX_CHILD_MANIFEST = 16 << 20


def _age_seconds(created: str) -> float:
    """Seconds since an ISO-8601 time; 0 (brand new) when it cannot be read, so it is kept."""
    try:
        t = _dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
        if t.tzinfo is None:
            t = t.replace(tzinfo=_dt.timezone.utc)
        return max(0.0, (_dt.datetime.now(_dt.timezone.utc) - t).total_seconds())
    except (ValueError, AttributeError, TypeError):
        return 0.0


class OCIStore(Store):
    capabilities = Capabilities(frozenset({"signatures"}), "converge")  # the registry collects blobs
    # Ref updates: how long a writer waits before it re-reads the tag to see that its write stuck.
    settle_s = 0.25
    update_attempts = 10

    def __init__(self, host: str, repo: str, *, insecure: bool = False, plain_http: bool = False,
                 max_attempts: int | None = None, timeout: tuple[float, float] = (10.0, 120.0)):
        self.host = host
        self.repo = repo
        self.insecure = insecure
        self.url = f"oci://{host}/{repo}" if repo else f"oci://{host}"
        self._opts = {"insecure": insecure, "plain_http": plain_http, "max_attempts": max_attempts, "timeout": timeout}
        self.client = RegistryClient(host, repo, plain_http=plain_http, verify=not insecure, max_attempts=max_attempts,
                                     timeout=timeout)
        self.max_attempts = self.client.max_attempts
        self.counters = Counters()
        self._lock = threading.Lock()
        self._oci: dict[str, tuple[str, int]] = {}  # bundle manifest digest -> (OCI manifest digest, size)
        self._layouts: dict[str, packs.PackIndex] = {}  # bundle manifest digest -> where its blobs are
        self._entries: dict[str, tuple[str, dict, int]] = {}  # OCI digest -> (platform, fingerprint, size)
        self._blob_bundle: dict[str, str] = {}  # stored digest -> bundle manifest digest (pulls with packs)
        self._members: dict[str, dict[str, BlobRef]] = {}  # bundle digest -> pack member name -> blob
        self._push: dict[str, tuple[str, int, Path]] = {}  # content digest -> its pack (digest, size, file)
        self._push_layers: list[dict] | None = None
        self._push_blobs: frozenset[str] = frozenset()
        self._head_cache: dict[str, bool] = {}
        self._pack_locks: dict[str, threading.Lock] = {}
        self._scratch: str | None = None

    @property
    def base(self) -> str:
        return self.client.base

    @property
    def plain_http(self) -> bool:
        return self.client.base.startswith("http://")

    def close(self) -> None:
        self.client.close()
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _req(self, *a, **kw):
        return self.client.request(*a, **kw)

    def _v2(self, rest: str) -> str:
        if not self.repo:
            raise UsageError(f"{self.url} names a registry, not a repository (oci://host/repo)")
        return self.client.v2(rest)

    def _scratch_dir(self) -> Path:
        with self._lock:
            if self._scratch is None:
                self._scratch = tempfile.mkdtemp(prefix="cachetool-oci-")
        return Path(self._scratch)

    # -------------------------------------------------------------------------------------------- blobs
    def _head_blob(self, digest: str) -> int | None:
        r = self._req("HEAD", self._v2(f"blobs/{digest}"), f"check blob {digest[:19]} in {self.url}", ok=(200, 404))
        if r.status_code == 404:
            return None
        try:
            return int(r.headers.get("Content-Length", -1))
        except ValueError:
            return -1

    def _has(self, digest: str, size: int) -> bool:
        if digest not in self._head_cache:
            got = self._head_blob(digest)
            self._head_cache[digest] = got is not None and got in (size, -1)
        return self._head_cache[digest]

    def prepare_push(self, blobs: list[BlobRef], blob_path: Callable[[BlobRef], Path]) -> None:
        """Group the small blobs into packs (files in a private temp folder) before has_blob/put_blob are asked:
        a small blob "is there" when its pack is, and "uploading" it uploads its pack once."""
        plan = packs.plan(list(blobs))
        layers = []
        scratch = self._scratch_dir()
        for members in plan.packs:
            path = scratch / f"pack-{len(layers)}.tar"
            with open(path, "wb") as f:
                packs.write_pack(members, blob_path, f)
            digest, size = sha256_file(path)
            final = scratch / (hexof(digest) + ".tar")
            path.replace(final)
            for b in members:
                self._push[b.digest] = (digest, size, final)
            layers.append({"mediaType": media.PACK_MEDIA_TYPE, "digest": digest, "size": size,
                           "annotations": {A + "pack.first": members[0].digest, A + "pack.count": str(len(members)),
                                           media.TITLE: f"pack-{hexof(members[0].digest)[:16]}.tar"}})
        self._push_layers = layers
        self._push_singles = plan.singles
        self._push_blobs = frozenset(b.stored_digest for b in blobs)

    def has_blob(self, blob: BlobRef) -> bool:
        if blob.digest in self._push:
            digest, size, _ = self._push[blob.digest]
            return self._has(digest, size)
        return self._has(blob.stored_digest, blob.stored_size)

    def _upload(self, digest: str, size: int, what: str, *, data: bytes | None = None, path: Path | None = None) -> None:
        r = self._req("POST", self._v2("blobs/uploads/"), what, ok=(202,))
        loc = r.headers.get("Location")
        if not loc:
            raise StoreError(f"{what}: registry {self.host} gave no upload location")
        from urllib.parse import urljoin

        loc = urljoin(self.base + "/", loc)
        sep = "&" if "?" in loc else "?"
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        # The upload session is single-use: a failed PUT is retried by the caller with a new POST.
        if path is not None:
            self._req("PUT", f"{loc}{sep}digest={digest}", what, ok=(201,), retry=False, data_path=path, headers=headers)
        else:
            self._req("PUT", f"{loc}{sep}digest={digest}", what, ok=(201,), retry=False, data=data, headers=headers)
        self.counters.up(size)

    def _upload_retrying(self, digest: str, size: int, what: str, **kw) -> None:
        for attempt in range(self.max_attempts):
            try:
                return self._upload(digest, size, what, **kw)
            except StoreError:
                if attempt + 1 >= self.max_attempts:
                    raise
                pause(what, attempt, "upload failed; new upload session")

    def _lock_for(self, key: str) -> threading.Lock:
        with self._lock:
            return self._pack_locks.setdefault(key, threading.Lock())

    def put_blob(self, blob: BlobRef, stored_bytes_path: Path) -> None:
        if blob.digest in self._push:
            digest, size, path = self._push[blob.digest]
            with self._lock_for(digest):
                if not self._head_cache.get(digest):
                    self._upload_retrying(digest, size, f"upload pack {digest[:19]} to {self.url}", path=path)
                    self._head_cache[digest] = True
            return
        self._upload_retrying(blob.stored_digest, blob.stored_size, f"upload blob {blob.stored_digest[:19]} to {self.url}",
                              path=Path(stored_bytes_path))

    def _get_blob_bytes(self, digest: str, what: str, limit: int = 64 << 20) -> bytes:
        r = self._req("GET", self._v2(f"blobs/{digest}"), what, stream=True)
        data = self.client.read_body(r, limit, what)
        self.counters.down(len(data))
        if media.sha(data) != digest:
            raise VerificationError(f"{what}: content does not match digest {digest[:19]}")
        return data

    def _download(self, digest: str, size: int, dest: Path, what: str) -> None:
        import requests

        def open_from(offset: int):
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            try:
                r = self._req("GET", self._v2(f"blobs/{digest}"), what, ok=(200, 206, 416), stream=True, headers=headers)
            except NotFoundError:
                raise NotFoundError(f"blob {digest[:19]} is missing from store {self.url}") from None
            if r.status_code == 416:
                return None
            return r.iter_content(DL_CHUNK), r.status_code, r.headers.get("Content-Range")

        download_resumable(Path(dest), size, what, open_from, (requests.RequestException,),
                           lambda exc: StoreError(f"{what}: transfer from {self.host} cut ({type(exc).__name__})"),
                           self.counters, self.max_attempts)

    def get_blob(self, blob: BlobRef, dest: Path) -> None:
        bundle = self._blob_bundle.get(blob.stored_digest)
        layout = self._layouts.get(bundle) if bundle else None
        if layout and blob.digest not in layout.singles:
            pack = layout.pack_of(blob.digest)
            if pack is not None:
                return self._get_from_pack(blob, pack, bundle, Path(dest))
        self._download(blob.stored_digest, blob.stored_size, Path(dest),
                       f"download blob {blob.stored_digest[:19]} from {self.url}")

    def _get_from_pack(self, blob: BlobRef, pack: packs.PackLayer, bundle: str, dest: Path) -> None:
        what = f"download pack {pack.digest[:19]} from {self.url}"
        scratch = self._scratch_dir()
        member = scratch / hexof(blob.stored_digest)
        with self._lock_for(pack.digest):
            if not member.exists():
                tmp = scratch / f"{hexof(pack.digest)}.tar"
                self._download(pack.digest, pack.size, tmp, what)
                if sha256_file(tmp)[0] != pack.digest:
                    tmp.unlink(missing_ok=True)
                    raise VerificationError(f"{what}: content does not match digest {pack.digest[:19]}")
                try:
                    packs.split_pack(tmp, self._members[bundle], scratch, what)
                finally:
                    tmp.unlink(missing_ok=True)
        try:
            os.replace(member, dest)
        except FileNotFoundError:
            raise VerificationError(f"{what}: the pack lacks blob {blob.digest[:19]}") from None
        except OSError:
            shutil.copyfile(member, dest)
            member.unlink(missing_ok=True)

    # -------------------------------------------------------------------------------------------- manifests
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
            if "NAME_UNKNOWN" in codes or not self._repo_exists():
                raise NotFoundError(f"repository {self.repo!r} not found on {self.host}")
            raise NotFoundError(f"{what}: not found (no such tag)" if not ref.startswith("sha256") else
                                f"{what}: manifest {ref[:19]} not found")
        body = self.client.read_body(r, MAX_CHILD_MANIFEST, what)
        self.counters.down(len(body))
        digest = media.sha(body)
        if ref.startswith("sha256:") and digest != ref:
            raise VerificationError(f"{what}: manifest does not match its digest")
        mt = r.headers.get("Content-Type", "").split(";")[0].strip()
        return body, mt, digest

    def _repo_exists(self) -> bool:
        r = self._req("GET", self._v2("tags/list"), f"list {self.url}", ok=(200, 404))
        return r.status_code == 200

    def put_manifest(self, manifest_bytes: bytes, blobs: list[BlobRef]) -> str:
        from cachetool.manifest import Manifest

        digest = media.sha(manifest_bytes)
        what = f"upload manifest {digest[:19]} to {self.url}"
        if self._head_blob(digest) is None:
            self._upload_retrying(digest, len(manifest_bytes), what, data=manifest_bytes)
        man = Manifest.from_bytes(manifest_bytes)
        uniq = {b.digest: b for b in blobs}
        if self._push_layers is not None and self._push_blobs == frozenset(b.stored_digest for b in uniq.values()):
            layers = list(self._push_layers)
            singles = self._push_singles
        else:  # no prepare_push: one layer per blob, as before packs
            layers, singles = [], sorted(uniq.values(), key=lambda b: b.digest)
        first_path: dict[str, str] = {}
        for f in sorted(man.files, key=lambda f: f.path):
            first_path.setdefault(f.digest, f.path)
        for b in singles:
            ann = {A + "content.digest": b.digest, A + "content.size": str(b.size)}
            if b.digest in first_path:
                ann[media.TITLE] = first_path[b.digest] + ".zst"
            layers.append({"mediaType": media.BLOB_MEDIA_TYPE, "digest": b.stored_digest, "size": b.stored_size,
                           "annotations": ann})
        layers.sort(key=lambda l: (l["mediaType"], l["digest"]))
        size = man.stored_size + len(manifest_bytes)
        body = media.compose_bundle_manifest(manifest_bytes, layers, man.platform, dict(man.fingerprint or {}), size)
        oci = media.sha(body)
        if self._tag_digest(oci) != oci:  # a re-push of the same bundle sends no manifest again
            self._put_manifest(oci, body, media.OCI_MANIFEST, what)
        self._remember(digest, oci, len(body), layers)
        return digest

    def _remember(self, manifest_digest: str, oci: str, size: int, layers: list) -> None:
        self._oci[manifest_digest] = (oci, size)
        idx = packs.PackIndex()
        idx.add_layers(layers)
        self._layouts[manifest_digest] = idx

    def get_manifest(self, manifest_digest: str) -> bytes:
        what = f"download manifest {manifest_digest[:19]} from {self.url}"
        try:
            data = self._get_blob_bytes(manifest_digest, what, limit=512 << 20)
        except NotFoundError:
            raise NotFoundError(f"manifest {manifest_digest[:19]} is missing from store {self.url}") from None
        layout = self._layouts.get(manifest_digest)
        if layout:  # a bundle with packs: which pack holds which blob comes from this manifest's blob list
            from cachetool.manifest import Manifest

            man = Manifest.from_bytes(data)
            self._members[manifest_digest] = {packs.member_name(b): b for b in man.blobs}
            for b in man.blobs:
                self._blob_bundle[b.stored_digest] = manifest_digest
        return data

    def _oci_of(self, manifest_digest: str) -> tuple[str, int]:
        if manifest_digest not in self._oci:
            raise StoreError(f"{self.url}: no OCI manifest known for bundle {manifest_digest[:19]} "
                             "(read it through a tag or an OCI digest pin)")
        return self._oci[manifest_digest]

    def pinned_digest(self, manifest_digest: str) -> str:
        """The digest a pin of this bundle names here: the OCI manifest's (what docker, skopeo and Kubernetes use)."""
        return self._oci_of(manifest_digest)[0]

    # -------------------------------------------------------------------------------------------- signatures
    def put_signature(self, manifest_digest: str, envelope: bytes) -> None:
        what = f"upload signature to {self.url}"
        oci, size = self._oci_of(manifest_digest)
        env_digest = media.sha(envelope)
        if self._head_blob(env_digest) is None:
            self._upload_retrying(env_digest, len(envelope), what, data=envelope)
        if self._head_blob(media.EMPTY_DIGEST) is None:
            self._upload_retrying(media.EMPTY_DIGEST, len(media.EMPTY_JSON), what, data=media.EMPTY_JSON)
        created = now_iso()
        body = media.compose_signature(envelope, {"mediaType": media.OCI_MANIFEST, "digest": oci, "size": size},
                                       manifest_digest, created)
        sig = media.sha(body)
        r = self._put_manifest(sig, body, media.OCI_MANIFEST, what)
        if r.headers.get("OCI-Subject"):
            return  # the registry keeps the referrers list itself
        desc = {"mediaType": media.OCI_MANIFEST, "digest": sig, "size": len(body),
                "artifactType": media.SIGNATURE_ARTIFACT_TYPE,
                "annotations": {A + "manifest.digest": manifest_digest, CREATED: created}}

        def add(old: list[dict]) -> list[dict]:
            # the newest envelope holds every signature (re-signing merges), so it replaces ours before it
            kept = [d for d in old or [] if d.get("artifactType") != media.SIGNATURE_ARTIFACT_TYPE or d.get("digest") == sig]
            return kept if any(d.get("digest") == sig for d in kept) else kept + [desc]

        self._converge(media.referrers_tag(oci), lambda: self._read_referrers_tag(oci), add,
                       lambda descs: self._write_referrers_tag(oci, descs), f"attach signature to {oci[:19]}")

    def _read_referrers_tag(self, subject: str) -> tuple[list[dict] | None, str | None]:
        tag = media.referrers_tag(subject)
        try:
            body, _, digest = self._get_manifest(tag, f"read referrers of {subject[:19]} in {self.url}")
        except NotFoundError:
            return None, None
        try:
            doc = json.loads(body)
            if media.is_index(doc):
                descs = [d for d in doc.get("manifests") or [] if isinstance(d, dict)]
            else:  # a copy without --all leaves the tag on the one referrer itself
                descs = [{"mediaType": media.OCI_MANIFEST, "digest": digest, "size": len(body),
                          "artifactType": doc.get("artifactType"), "annotations": doc.get("annotations") or {}}]
        except (ValueError, AttributeError, RecursionError):
            raise StoreError(f"{self.url}:{tag} is not a referrers index") from None
        return descs, digest

    def _write_referrers_tag(self, subject: str, descs: list[dict]) -> None:
        tag = media.referrers_tag(subject)
        self._put_manifest(tag, media.compose_index(descs), media.OCI_INDEX, f"write {self.url}:{tag}")

    def _referrers(self, subject: str) -> list[dict]:
        """Descriptors of the referrers of ``subject``: the referrers API, else the referrers tag."""
        what = f"list referrers of {subject[:19]} in {self.url}"
        r = self._req("GET", self._v2(f"referrers/{subject}"), what, ok=(200, 400, 404, 405),
                      headers={"Accept": media.OCI_INDEX}, stream=True)
        if r.status_code == 200 and r.headers.get("Content-Type", "").startswith(media.OCI_INDEX):
            try:
                return [d for d in json.loads(self.client.read_body(r, 4 << 20, what)).get("manifests") or []
                        if isinstance(d, dict)]
            except (ValueError, AttributeError, RecursionError):
                raise StoreError(f"{what}: the registry's answer is not an index") from None
        r.close()
        return self._read_referrers_tag(subject)[0] or []

    def get_signature(self, manifest_digest: str) -> bytes | None:
        what = f"download signature of {manifest_digest[:19]} from {self.url}"
        oci, _ = self._oci_of(manifest_digest)
        # a copy may drop the descriptors' artifactType: then the manifest itself says what it is
        sigs = [d for d in self._referrers(oci) if d.get("artifactType") in (None, media.SIGNATURE_ARTIFACT_TYPE)]
        sigs.sort(key=lambda d: str((d.get("annotations") or {}).get(CREATED, "")))
        for d in reversed(sigs):
            try:
                body, _, _ = self._get_manifest(str(d.get("digest")), what, media.OCI_MANIFEST)
            except NotFoundError:
                continue  # listed but gone (a registry GC): try the next one
            try:
                if not media.is_signature_manifest(json.loads(body)):
                    continue
            except (ValueError, RecursionError):
                continue
            return self._envelope_of(body, oci, what)
        try:  # cachetool before referrers: the signature manifest under sha256-<hex>.sig
            body, _, _ = self._get_manifest(media.legacy_signature_tag(oci), what, media.OCI_MANIFEST)
        except NotFoundError:
            return None
        return self._envelope_of(body, oci, what)

    def _envelope_of(self, body: bytes, subject: str, what: str) -> bytes:
        try:
            doc = json.loads(body)
            layer = doc["layers"][0]
            if layer.get("mediaType") != media.DSSE_MEDIA_TYPE:
                raise ValueError(layer.get("mediaType"))
            if (doc.get("subject") or {}).get("digest") != subject:
                raise ValueError("subject")
            digest = layer["digest"]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
            raise VerificationError(f"{what}: malformed signature artifact ({type(exc).__name__}: {str(exc)[:40]})") from None
        # The envelope holds the manifest (base64, up to 64 MiB here) and every signature.
        return self._get_blob_bytes(digest, what, limit=128 << 20)

    # -------------------------------------------------------------------------------------------- reading tags
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
                from cachetool.manifest import Manifest

                man = Manifest.from_bytes(self._get_blob_bytes(md, what, limit=512 << 20))
                fp, platform = dict(man.fingerprint or {}), man.platform
            size = ann.get(A + "size") or (sum(int(l.get("size") or 0) for l in doc.get("layers") or [])
                                          + int(doc["config"].get("size") or 0))
            self._entries[oci] = (platform, fp, int(size))
        return (md, *self._entries[oci])

    def _resolve(self, ref: str, what: str) -> list[RefEntry]:
        return [e for e, _ in self._resolve_with_digests(ref, what)]

    def _resolve_with_digests(self, ref: str, what: str) -> list[tuple[RefEntry, str]]:
        """The bundles a tag (or an OCI digest) reaches, each recognised by its own manifest. An index child that
        is not a bundle is skipped; an empty list means "not a cachetool bundle"."""
        body, mt, digest = self._get_manifest(ref, what)
        try:
            doc = json.loads(body)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            if media.is_index(doc, mt):
                idx_created = str((doc.get("annotations") or {}).get(CREATED, ""))
                children = [(m, str(m["digest"]), m.get("annotations") or {}) for m in doc.get("manifests") or []
                            if isinstance(m, dict) and m.get("artifactType") in (None, media.ARTIFACT_TYPE)]
            else:
                idx_created, children = "", [(None, digest, {})]
            entries = []
            for m, child, ann in children:
                hexof(child)
                cdoc = doc if m is None else json.loads(self._get_manifest(child, what, media.ACCEPT)[0])
                if not media.is_bundle_manifest(cdoc):
                    continue
                md, platform, fp, size = self._entry_of(child, cdoc, what)
                created = ann.get(CREATED) or idx_created or (cdoc.get("annotations") or {}).get(CREATED, "")
                body_size = int(m["size"]) if m is not None else len(body)
                self._remember(md, child, body_size, cdoc.get("layers") or [])
                entries.append((ref_entry(md, platform, fp, size, created), child))
        except NotFoundError:
            raise StoreError(f"{what}: the index names a manifest the registry does not have") from None
        except (KeyError, ValueError, TypeError, AttributeError, RecursionError, VerificationError) as exc:
            if isinstance(exc, VerificationError) and "digest" in str(exc):
                raise
            raise StoreError(f"{what}: malformed cachetool index ({type(exc).__name__}: {str(exc)[:80]})") from None
        return sorted(entries, key=lambda x: x[0].platform)

    def get_ref(self, name: str, tag: str) -> RefIndex:
        ref = f"{self.url}:{tag}"
        entries = self._resolve(tag, f"read {ref}")
        if not entries:
            raise StoreError(f"{ref} is not a cachetool bundle (no manifest under it has artifactType "
                             f"{media.ARTIFACT_TYPE} or a config of type {media.CONFIG_MEDIA_TYPE})")
        return RefIndex(name, tag, tuple(entries))

    def get_pinned(self, name: str, digest: str) -> RefIndex:
        """A pin: the bundle manifest or index with this OCI digest, exactly (the body is checked against it)."""
        hexof(digest)
        ref = f"{self.url}@{digest}"
        entries = self._resolve(digest, f"read {ref}")
        if not entries:
            raise StoreError(f"{ref} is not a cachetool bundle")
        return RefIndex(name, digest, tuple(entries))

    # -------------------------------------------------------------------------------------------- writing tags
    def _index_body(self, index: RefIndex) -> bytes:
        manifests = []
        for e in index.entries:
            oci, size = self._oci_of(e.manifest_digest)
            manifests.append({
                "mediaType": media.OCI_MANIFEST, "digest": oci, "size": size, "artifactType": media.ARTIFACT_TYPE,
                "platform": media.platform_of(e.fingerprint),
                "annotations": {A + "platform": e.platform, A + "manifest.digest": e.manifest_digest,
                                A + "fingerprint": json.dumps(e.fingerprint or {}, sort_keys=True, separators=(",", ":")),
                                A + "size": str(e.size), CREATED: e.created or now_iso()},
            })
        return media.compose_index(manifests, {A + "name": index.name, A + "tag": index.tag}, media.ARTIFACT_TYPE)

    def put_ref(self, index: RefIndex) -> None:
        self._put_manifest(index.tag, self._index_body(index), media.OCI_INDEX, f"write ref {self.url}:{index.tag}")

    def _tag_digest(self, tag: str) -> str | None:
        r = self._req("HEAD", self._v2(f"manifests/{tag}"), f"check {self.url}:{tag}", ok=(200, 404),
                      headers={"Accept": media.ACCEPT})
        if r.status_code == 404:
            return None
        return r.headers.get("Docker-Content-Digest") or self._get_manifest(tag, f"read {self.url}:{tag}")[2]

    def _read_ref(self, name: str, tag: str) -> tuple[RefIndex | None, str | None]:
        try:
            digest = self._tag_digest(tag)
            if digest is None:
                return None, None
            return self.get_ref(name, tag), digest
        except NotFoundError:
            return None, None

    def _converge(self, tag: str, read, update, write, what: str):
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
            if self._tag_digest(tag) != digest:
                retry_log.info("%s: %s:%s changed since it was read; merging again", what, self.url, tag)
                continue
            write(new)
            time.sleep(self.settle_s * (1 + random.random()))
            after, _ = read()
            if after is not None and update(after) == after:
                return after
            if after is None and not _has_entries(new):
                return new
        raise StoreError(f"{what}: {self.url}:{tag} kept changing under concurrent writers; "
                         f"gave up after {self.update_attempts} attempts")

    def update_ref(self, name: str, tag: str,
                   update: Callable[[RefIndex | None], RefIndex | None]) -> RefIndex | None:
        """Read-modify-write of a ref, by :meth:`_converge`. An update that leaves no entries deletes the tag."""

        def write(new: RefIndex | None) -> None:
            if new is not None and new.entries:
                self.put_ref(new)
            else:
                self.delete_ref(name, tag)

        return self._converge(tag, lambda: self._read_ref(name, tag), update, write, f"update {self.url}:{tag}")

    def delete_ref(self, name: str, tag: str) -> None:
        """Delete the tag's index (by digest: the distribution API deletes manifests, not tags)."""
        what = f"delete {self.url}:{tag}"
        d = self._tag_digest(tag)
        if d is None:
            if not self._repo_exists():
                raise NotFoundError(f"repository {self.repo!r} not found on {self.host}")
            raise NotFoundError(f"{self.url}:{tag} not found")
        self._req("DELETE", self._v2(f"manifests/{d}"), what, ok=(202, 200))

    # -------------------------------------------------------------------------------------------- listing
    def tags(self) -> list[str]:
        out: list[str] = []
        url = self._v2("tags/list?n=1000")
        while url:
            r = self._req("GET", url, f"list tags of {self.url}")
            try:
                tags = r.json().get("tags") or []
                out += [t for t in tags if isinstance(t, str)]
            except (ValueError, AttributeError, TypeError, RecursionError):
                raise StoreError(f"list tags of {self.url}: the registry's answer is not a tag list") from None
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
                raise StoreError(f"list repositories of {self.host}: the answer is not a repository list") from None
            url = self.client.next_link(r)
        return out

    def _refs_of_repo(self, name: str) -> Iterator[RefIndex]:
        for tag in sorted(self.tags()):
            if _REFERRERS_TAG.match(tag) or _LEGACY_SIG_TAG.match(tag):
                continue
            try:
                yield self.get_ref(name, tag)
            except NotFoundError:
                continue  # removed while listing
            except StoreError as exc:
                if "is not a cachetool bundle" in str(exc):
                    continue
                raise

    def list_refs(self) -> Iterator[RefIndex]:
        """The refs of the repository; for a registry (``oci://host``) or a namespace (``oci://host/team``), those
        of every repository under it, named by their path."""
        found = False
        if self.repo:
            try:
                refs = list(self._refs_of_repo(self.repo.rsplit("/", 1)[-1]))
                found = True
                yield from refs
            except NotFoundError:
                pass
        prefix = self.repo + "/" if self.repo else ""
        try:
            subs = [r for r in self.repositories() if r.startswith(prefix)]
        except StoreError:
            if found:
                return  # the registry hides its catalog; the repository itself was listed
            raise
        if not subs and not found:
            raise NotFoundError(f"repository {self.repo!r} not found on {self.host}" if self.repo else
                                f"registry {self.host} has no repositories")
        for sub in subs:
            with OCIStore(self.host, sub, **self._opts) as child:
                yield from (RefIndex(sub, i.tag, i.entries) for i in child._refs_of_repo(sub))

    # -------------------------------------------------------------------------------------------- gc
    def gc(self, dry_run: bool = False, older_than: float = GC_MIN_AGE_S) -> list[str]:
        """Delete signatures whose bundle no tag reaches, written at least ``older_than`` seconds ago.

        Every tag is read first; a tag that cannot be read (a transient error) stops the collection before
        anything is deleted: a live signature is never taken for an orphan. Blobs and untagged manifests are
        reclaimed by the registry's own garbage collection (``registry garbage-collect --delete-untagged``)."""
        what = f"gc {self.url}"
        live: set[str] = set()
        referrer_tags, legacy = [], []
        for t in self.tags():
            if _REFERRERS_TAG.match(t):
                referrer_tags.append(t)
                continue
            if _LEGACY_SIG_TAG.match(t):
                legacy.append(t)
                continue
            try:
                live.update(oci for _, oci in self._resolve_with_digests(t, f"{what}: read {t}"))
            except NotFoundError:
                continue  # the tag went away meanwhile
            except StoreError as exc:
                raise StoreError(f"{what} stopped, nothing deleted: cannot read tag {t} ({exc})") from None
        doomed: list[tuple[str, list[str]]] = []  # (tag, manifest digests to delete)
        for t in legacy:
            if "sha256:" + _LEGACY_SIG_TAG.match(t).group(1) not in live:
                doomed.append((t, []))  # older cachetool: no date, and no push writes these any more
        for t in referrer_tags:
            subject = "sha256:" + t[len("sha256-"):]
            if subject in live:
                continue
            descs, _ = self._read_referrers_tag(subject)
            ours = [d for d in descs or [] if d.get("artifactType") == media.SIGNATURE_ARTIFACT_TYPE
                    or d.get("artifactType") is None and str((d.get("annotations") or {}).get(A + "manifest.digest", ""))]
            if len(ours) != len(descs or []):
                continue  # referrers of other tools: not ours to delete
            if any(_age_seconds(str((d.get("annotations") or {}).get(CREATED, ""))) < older_than for d in ours):
                continue  # a push in flight writes the signature before its ref
            doomed.append((t, [str(d.get("digest")) for d in ours]))
        out = []
        for t, sigs in doomed:
            out.append(f"tag {t}")
            if dry_run:
                continue
            d = self._tag_digest(t)
            if d is not None:
                self._req("DELETE", self._v2(f"manifests/{d}"), what, ok=(202, 200, 404))
            for s in sigs:
                self._req("DELETE", self._v2(f"manifests/{s}"), what, ok=(202, 200, 404))
        return out


def _has_entries(x) -> bool:
    return bool(getattr(x, "entries", x))
