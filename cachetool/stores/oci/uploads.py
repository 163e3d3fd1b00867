"""Blob transfers of the OCI store, shared by its pushes and pulls: what the registry is known to have (asked once
per store), one upload at a time per digest (two pushes of one pack send it once), and downloads that fetch a pack
once and split it (small blobs travel in packs, :mod:`.packs`)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

from cachetool.digests import BlobRef, hexof, sha256_file
from cachetool.errors import DigestMismatchError, VerificationError
from cachetool.stores.oci import packs
from cachetool.stores.oci.manifests import BundleManifests
from cachetool.stores.oci.repository import Repository


class BlobTransfer:
    """The store's blob traffic through ``repository``; ``manifests`` says which pack holds a pulled blob."""

    def __init__(self, repository: Repository, manifests: BundleManifests):
        self.repository = repository
        self.manifests = manifests
        self._lock = threading.Lock()
        self._present: dict[str, bool] = {}  # digest -> the registry has it (asked, or uploaded by this store)
        self._digest_locks: dict[str, threading.Lock] = {}
        self._scratch: str | None = None  # downloaded packs and their split members

    def close(self) -> None:
        with self._lock:
            scratch, self._scratch = self._scratch, None
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)

    def scratch(self) -> Path:
        """A private folder of this store's, removed by :meth:`close` (pushes make their own folders in it)."""
        with self._lock:
            if self._scratch is None:
                self._scratch = tempfile.mkdtemp(prefix="cachetool-oci-")
            return Path(self._scratch)

    def has(self, digest: str, size: int) -> bool:
        if digest not in self._present:
            got = self.repository.head_blob(digest)
            found = got is not None and got in (size, -1)
            with self._lock:  # an upload through this store that landed while we asked is not undone by our answer
                self._present[digest] = self._present.get(digest, False) or found
        return self._present[digest]

    def _lock_for(self, digest: str) -> threading.Lock:
        with self._lock:
            return self._digest_locks.setdefault(digest, threading.Lock())

    def upload_once(
        self, digest: str, size: int, what: str, *, path: Path | None = None, data: bytes | None = None
    ) -> None:
        """Upload the file at ``path`` (or ``data``) unless this store already sent (or found) ``digest``: a pack two
        pushes share goes up once, and a later push through this store does not send it again. (Sent twice,
        docker-registry rewrites the blob's link under the other push's manifest PUT: see
        :meth:`Repository.put_manifest`.)"""
        with self._lock_for(digest):
            if not self._present.get(digest):
                self.repository.upload_retrying(digest, size, what, path=path, data=data)
                self._present[digest] = True

    def get_blob(self, blob: BlobRef, dest: Path) -> None:
        held = self.manifests.pack_holding(blob)
        if held is not None:
            return self._get_from_pack(blob, *held, Path(dest))
        self.repository.download(
            blob.stored_digest,
            blob.stored_size,
            Path(dest),
            f"download blob {blob.stored_digest[:19]} from {self.repository.url}",
        )

    def _get_from_pack(self, blob: BlobRef, pack: packs.PackLayer, members: dict[str, BlobRef], dest: Path) -> None:
        url = self.repository.url
        what = f"download pack {pack.digest[:19]} from {url}"
        scratch = self.scratch()
        member = scratch / hexof(blob.stored_digest)
        with self._lock_for(pack.digest):
            if not member.exists():
                tmp = scratch / f"{hexof(pack.digest)}.tar"
                self.repository.download(pack.digest, pack.size, tmp, what)
                if sha256_file(tmp)[0] != pack.digest:
                    tmp.unlink(missing_ok=True)
                    raise DigestMismatchError(
                        f"{what}: content does not match digest {pack.digest[:19]}", store=url, key=pack.digest
                    )
                try:
                    packs.split_pack(tmp, members, scratch, what, store=url, key=pack.digest)
                finally:
                    tmp.unlink(missing_ok=True)
        try:
            os.replace(member, dest)
        except FileNotFoundError:
            raise VerificationError(
                f"{what}: the pack lacks blob {blob.digest[:19]}", store=url, key=pack.digest
            ) from None
        except OSError:
            shutil.copyfile(member, dest)
            member.unlink(missing_ok=True)
