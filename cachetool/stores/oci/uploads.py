"""Blob uploads and downloads of the OCI store, small blobs in packs (:mod:`.packs`): a push groups them before it
asks which the registry has; a pull downloads a pack once and splits it."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cachetool.digests import hexof, sha256_file
from cachetool.errors import DigestMismatchError, NotFoundError, StoreError, VerificationError
from cachetool.retry import pause
from cachetool.stores.base import BlobRef
from cachetool.stores.common import DL_CHUNK, download_resumable
from cachetool.stores.oci import media, packs
from cachetool.stores.oci.media import A


@dataclass(frozen=True)
class PushPlan:
    """One push's packing, from ``missing_blobs`` for ``put_blob`` and ``put_manifest``: the pack layers its
    manifest lists, the blobs it sends alone, and the pack of each packed blob (content digest -> (pack digest,
    size, file))."""

    layers: list[dict]
    singles: list[BlobRef]
    pack_of: dict[str, tuple[str, int, Path]]

    @property
    def single_digests(self) -> frozenset[str]:
        return frozenset(b.digest for b in self.singles)


class BlobTransfer:
    """Mixed into :class:`cachetool.stores.oci.store.OCIStore` (its ``__init__`` sets the caches used here):
    missing_blobs, put_blob, get_blob."""

    def _has(self, digest: str, size: int) -> bool:
        if digest not in self._head_cache:
            got = self._head_blob(digest)
            self._head_cache[digest] = got is not None and got in (size, -1)
        return self._head_cache[digest]

    def missing_blobs(self, blobs: list[BlobRef], blob_path: Callable[[BlobRef], Path], *,
                      workers: int = 8) -> list[BlobRef]:
        """Group the small blobs into packs first (files in a private temp folder): a small blob is missing when its
        pack is, and uploading it uploads its pack once. Then one HEAD per pack or single blob, ``workers`` at a
        time."""
        plan = self._plan_packs(blobs, blob_path)
        # keyed by the push's blob set: two pushes through one store at once (threads) each find their own plan;
        # two pushes of one bundle plan alike, and each manifest takes one of their plans
        with self._lock:
            self._push_plans.setdefault(frozenset(b.stored_digest for b in blobs), []).append(plan)
        with ThreadPoolExecutor(max(1, workers)) as ex:
            present = list(ex.map(lambda b: self._has_blob(plan, b), blobs))
        return [b for b, there in zip(blobs, present) if not there]

    def _plan_packs(self, blobs: list[BlobRef], blob_path: Callable[[BlobRef], Path]) -> PushPlan:
        """Write the packs of this push and note which layer holds each blob (``put_manifest`` lists them)."""
        plan = packs.plan(list(blobs))
        layers, pack_of = [], {}
        scratch = self._scratch_dir()
        for members in plan.packs:
            # a name of its own: another push through this store may be writing its packs into the same folder
            fd, name = tempfile.mkstemp(prefix="pack-", suffix=".tar", dir=scratch)
            path = Path(name)
            with os.fdopen(fd, "wb") as f:
                packs.write_pack(members, blob_path, f)
            digest, size = sha256_file(path)
            final = scratch / (hexof(digest) + ".tar")
            path.replace(final)
            for b in members:
                pack_of[b.digest] = (digest, size, final)
            layers.append({"mediaType": media.PACK_MEDIA_TYPE, "digest": digest, "size": size,
                           "annotations": {A + "pack.first": members[0].digest, A + "pack.count": str(len(members)),
                                           media.TITLE: f"pack-{hexof(members[0].digest)[:16]}.tar"}})
        return PushPlan(layers, plan.singles, pack_of)

    def _has_blob(self, plan: PushPlan, blob: BlobRef) -> bool:
        if blob.digest in plan.pack_of:
            digest, size, _ = plan.pack_of[blob.digest]
            return self._has(digest, size)
        return self._has(blob.stored_digest, blob.stored_size)

    def _upload(self, digest: str, size: int, what: str, *, data: bytes | None = None, path: Path | None = None) -> None:
        r = self._req("POST", self._v2("blobs/uploads/"), what, ok=(202,))
        loc = r.headers.get("Location")
        if not loc:
            raise StoreError(f"{what}: registry {self.host} gave no upload location", store=self.url, key=digest,
                             status=r.status_code)
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
                # Two pushers committing one blob at once: docker-registry may fail the loser's PUT (400
                # DIGEST_INVALID) although the blob is there now. Content-addressed, so theirs is ours.
                if self._blob_there(digest, size):
                    return
                if attempt + 1 >= self.max_attempts:
                    raise
                pause(what, attempt, "upload failed; new upload session")

    def _blob_there(self, digest: str, size: int) -> bool:
        """Whether the registry has the blob now, asked once (the upload's own attempts are the retries); a failed
        check is a no, so the upload is tried again and its failure is the one reported."""
        try:
            return self._head_blob(digest, retry=False) in (size, -1)
        except StoreError:
            return False

    def _lock_for(self, key: str) -> threading.Lock:
        with self._lock:
            return self._pack_locks.setdefault(key, threading.Lock())

    def put_blob(self, blob: BlobRef, stored_bytes_path: Path) -> None:
        """Upload what any open push plan needs for ``blob``: each pack that holds it (once), and the blob itself
        where a plan sends it alone (a small bundle's plan packs nothing) or no plan knows it. A plan is open from
        ``missing_blobs`` until its push's ``put_manifest`` (or the store's close)."""
        with self._lock:
            plans = [p for same_blobs in self._push_plans.values() for p in same_blobs]
        holders = {p.pack_of[blob.digest] for p in plans if blob.digest in p.pack_of}
        for digest, size, path in sorted(holders):
            with self._lock_for(digest):
                if not self._head_cache.get(digest):
                    self._upload_retrying(digest, size, f"upload pack {digest[:19]} to {self.url}", path=path)
                    self._head_cache[digest] = True
        if holders and not any(blob.digest in p.single_digests for p in plans):
            return
        self._upload_retrying(blob.stored_digest, blob.stored_size, f"upload blob {blob.stored_digest[:19]} to {self.url}",
                              path=Path(stored_bytes_path))
        self._head_cache[blob.stored_digest] = True  # a later push through this store does not upload it again

    def _download(self, digest: str, size: int, dest: Path, what: str) -> None:
        import requests

        def open_from(offset: int):
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            try:
                r = self._req("GET", self._v2(f"blobs/{digest}"), what, ok=(200, 206, 416), stream=True, headers=headers)
            except NotFoundError as exc:
                raise NotFoundError(f"blob {digest[:19]} is missing from store {self.url}", store=self.url,
                                    key=digest, status=exc.status) from None
            if r.status_code == 416:
                return None
            return r.iter_content(DL_CHUNK), r.status_code, r.headers.get("Content-Range")

        fields = {"store": self.url, "key": digest}
        download_resumable(Path(dest), size, what, open_from, (requests.RequestException,),
                           lambda exc: StoreError(f"{what}: transfer from {self.host} cut ({type(exc).__name__})",
                                                  **fields),
                           self.counters, self.max_attempts, fields)

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
                    raise DigestMismatchError(f"{what}: content does not match digest {pack.digest[:19]}",
                                              store=self.url, key=pack.digest)
                try:
                    packs.split_pack(tmp, self._members[bundle], scratch, what, store=self.url, key=pack.digest)
                finally:
                    tmp.unlink(missing_ok=True)
        try:
            os.replace(member, dest)
        except FileNotFoundError:
            raise VerificationError(f"{what}: the pack lacks blob {blob.digest[:19]}", store=self.url,
                                    key=pack.digest) from None
        except OSError:
            shutil.copyfile(member, dest)
            member.unlink(missing_ok=True)

