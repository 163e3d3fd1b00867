"""A bundle in a store as a :class:`~cachetool.bundle.source.BundleSource` (what a pull installs from and a reader
reads): manifest and signature first, each blob only when asked, its downloads kept by the partial-download policy
of :mod:`cachetool.transfer.partials`."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from cachetool import bounds
from cachetool.bundle.source import BundleSource
from cachetool.digests import hexof, sha256_bytes, sha256_file
from cachetool.errors import StoreError, UnsafeDestinationError, VerificationError
from cachetool.stores.addresses import Ref
from cachetool.stores.base import BlobRef, RefEntry, Store
from cachetool.transfer.partials import RETRYABLE, partial_cap, trim_partials

__all__ = ["StoreSource", "remove_if_empty"]


class StoreSource(BundleSource):
    """A bundle in a store, read lazily: manifest and signature first, each blob only when the installer asks."""

    def __init__(
        self,
        store: Store,
        ref: Ref,
        entry: RefEntry,
        partial_dir: Path,
        *,
        on_blob: Callable[[BlobRef], None] | None = None,
    ):
        self.store = store
        self.entry = entry
        self.fields = {"store": store.url, "ref": ref.url}  # of every error this source raises itself
        self.description = f"{ref.url} [{entry.platform}]"
        self.partial_dir = Path(partial_dir)
        self.on_blob = on_blob
        self._manifest: bytes | None = None
        self._signature: bytes | None = None
        self._sig_read = False
        self._lock = threading.Lock()
        self._failed: StoreError | None = None
        self.used: set[Path] = set()  # partial files this pull wrote or read
        self.downloaded = 0
        self.resumed = 0
        self.reused = 0

    def _check_bounds(self) -> None:
        """Before each request: the bounds the pull applied (its ``--timeout``, a stop signal; :mod:`cachetool.
        bounds`) end it here, named with the store and ref."""
        bounds.check(f"pull of {self.description}", **self.fields)

    def manifest_bytes(self) -> bytes:
        if self._manifest is None:
            self._check_bounds()
            with bounds.phase(f"the read of {self.description}'s manifest from the store"):
                data = self.store.get_manifest(self.entry.manifest_digest)
            if sha256_bytes(data) != self.entry.manifest_digest:
                raise VerificationError(
                    f"{self.description}: the manifest in the store does not match its digest",
                    key=self.entry.manifest_digest,
                    **self.fields,
                )
            self._manifest = data
        return self._manifest

    def signature_bytes(self) -> bytes | None:
        if not self._sig_read:
            self._check_bounds()
            with bounds.phase(f"the read of {self.description}'s signature from the store"):
                self._signature = self.store.get_signature(self.entry.manifest_digest)
            self._sig_read = True
        return self._signature

    @staticmethod
    def _stored_ok(path: Path, blob: BlobRef) -> bool:
        return sha256_file(path)[0] == blob.stored_digest

    def fetch_blob(self, blob: BlobRef, dest: Path) -> None:
        if self._failed is not None:
            # The store already failed this pull (server down, credentials): don't hammer it blob by blob.
            raise self._failed
        self._check_bounds()
        try:
            self._fetch(blob, dest)
        except StoreError as exc:
            self._failed = exc
            raise

    def read_blob(self, blob: BlobRef, scratch_dir: Path) -> bytes:
        """A small blob. From a store that reads in place (``capabilities.local_reads``: the file store) read whole,
        with no partial file; from any other through :meth:`fetch_blob`, whose partial file a rerun resumes."""
        if not self.store.capabilities.local_reads:
            return super().read_blob(blob, scratch_dir)
        if self._failed is not None:
            raise self._failed
        self._check_bounds()
        try:
            data = self.store.read_blob(blob, scratch_dir)
        except StoreError as exc:
            self._failed = exc
            raise
        with self._lock:
            self.downloaded += 1
        if self.on_blob:
            self.on_blob(blob)
        return data

    def discard_partials(self) -> None:
        """Delete the partial files this pull used (only those: another pull may share the folder)."""
        for p in self.used:
            p.unlink(missing_ok=True)
        remove_if_empty(self.partial_dir)

    def settle(self, error: BaseException | None) -> None:
        """Under the cache root's lock, as the install ends: keep this pull's partial files only when a rerun can
        use them (the store failed or the time ran out), else delete them (installed; a blob missing from the
        store or failing its check; a full disk). Then bound the whole folder (:func:`trim_partials`)."""
        if not isinstance(error, RETRYABLE):
            self.discard_partials()
        trim_partials(self.partial_dir, partial_cap())
        remove_if_empty(self.partial_dir)

    def _partial(self, blob: BlobRef) -> Path:
        """The partial file of ``blob``, never through a link: the folder must be a real folder, and a partial that
        is a symlink, a hard link or not a regular file is removed (a download appends to it)."""
        try:
            self.partial_dir.mkdir(mode=0o700)
        except FileExistsError:
            pass
        if not stat.S_ISDIR(os.lstat(self.partial_dir).st_mode):
            raise UnsafeDestinationError(
                f"{self.partial_dir} is a symlink or not a folder; refusing to download through it",
                key=blob.stored_digest,
                path=str(self.partial_dir),
                **self.fields,
            )
        part = self.partial_dir / hexof(blob.stored_digest)
        try:
            st = os.lstat(part)
        except FileNotFoundError:
            return part
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            part.unlink()
        return part

    def _fetch(self, blob: BlobRef, dest: Path) -> None:
        part = self._partial(blob)
        with self._lock:
            self.used.add(part)
        try:
            had = part.stat().st_size
        except FileNotFoundError:
            had = 0
        if 0 < had <= blob.stored_size:
            # Left by an interrupted pull: finish it (Range request) and check the whole; a bad one starts over.
            if had < blob.stored_size:
                self.store.get_blob(blob, part)
            if part.stat().st_size == blob.stored_size and self._stored_ok(part, blob):
                with self._lock:
                    if had == blob.stored_size:
                        self.reused += 1
                    else:
                        self.resumed += 1
                        self.downloaded += 1
            else:
                part.unlink(missing_ok=True)
                self.store.get_blob(blob, part)
                with self._lock:
                    self.downloaded += 1
        else:
            part.unlink(missing_ok=True)
            self.store.get_blob(blob, part)
            with self._lock:
                self.downloaded += 1
        try:
            os.link(part, dest)  # the partial stays until the install succeeds (a rerun reuses it)
        except OSError:
            shutil.copyfile(part, dest)
        if self.on_blob:
            self.on_blob(blob)


def remove_if_empty(p: Path) -> None:
    try:
        p.rmdir()
    except OSError:
        pass
