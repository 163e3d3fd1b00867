"""Where an install reads a bundle from: a single ``.ctb`` file or a store ref.

:func:`cachetool.install.install_bundle` only talks to this interface, so the same preflight, verification
and atomic install serve ``cachetool install FILE`` and ``cachetool pull REF``. The order of calls is the
safety contract: manifest and signature first (verify, then preflight against this machine), and only then
``fetch_blob`` for the blobs the chosen ranks need, each verified by the installer before use.
"""

from __future__ import annotations

import abc
from pathlib import Path

from cachetool.digests import BlobRef


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

    def settle(self, error: BaseException | None) -> None:
        """Called once by the installer when an install that got the cache root's lock ends, still under the lock:
        ``error`` is None on success, else the error it ends with. A source that keeps downloads for a retry
        decides here what to keep."""
