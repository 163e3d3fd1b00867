"""Where an install reads a bundle from: a single ``.ctb`` file or a store ref.

:func:`cachetool.install.install_bundle` only talks to this interface, so the same preflight, verification
and atomic install serve ``cachetool install FILE`` and ``cachetool pull REF``. The order of calls is the
safety contract: manifest and signature first (verify, then preflight against this machine), and only then
``fetch_blob`` (or, for a small blob, ``read_blob``) for the blobs the chosen ranks need, each verified by the
installer before use.
"""

from __future__ import annotations

import abc
from pathlib import Path

from cachetool.bundle.manifest import Manifest
from cachetool.digests import BlobRef, read_fetched


class BundleSource(abc.ABC):
    description: str  # for messages: "bundle file x.ctb", "s3://b/p/name:tag"

    @abc.abstractmethod
    def manifest_bytes(self) -> bytes:
        """The manifest's canonical JSON bytes, exactly as signed."""

    @abc.abstractmethod
    def signature_bytes(self) -> bytes | None:
        """The DSSE envelope, or None if the bundle is unsigned."""

    @abc.abstractmethod
    def fetch_blob(self, blob: BlobRef, dest: Path) -> None:
        """Write the blob's stored (zstd) bytes to ``dest``. The caller verifies and decompresses."""

    def read_blob(self, blob: BlobRef, scratch_dir: Path) -> bytes:
        """The blob's stored (zstd) bytes in memory, at most ``blob.stored_size + 1`` of them: how the installer
        asks for a small blob. The caller verifies and decompresses. By default through :meth:`fetch_blob` into a
        file in ``scratch_dir`` (a folder of the caller's), which is removed again."""
        return read_fetched(blob, lambda dest: self.fetch_blob(blob, dest), scratch_dir)

    def parsed_manifest(self) -> Manifest:
        """:meth:`manifest_bytes` parsed and validated (:meth:`Manifest.from_bytes`); a source that has parsed them
        already (to read them) gives that manifest instead of parsing 100,000 entries twice."""
        return Manifest.from_bytes(self.manifest_bytes())

    def settle(self, error: BaseException | None) -> None:
        """Called once by the installer when an install that got the cache root's lock ends, still under the lock:
        ``error`` is None on success, else the error it ends with. A source that keeps downloads for a retry
        decides here what to keep."""
