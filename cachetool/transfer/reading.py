"""A bundle to read (``inspect``, ``verify``, ``diff``), named by a ``.ctb`` file or by a store ref.

:func:`open_bundle` gives the same reading surface for both: ``manifest`` (parsed and validated; a hostile one is a
:class:`~cachetool.errors.VerificationError`), ``manifest_digest``, ``platform``, ``description``, and the
:class:`~cachetool.bundle.source.BundleSource` calls (``manifest_bytes``, ``signature_bytes``, ``fetch_blob``). A ref reads
the manifest and signature only; a blob is downloaded when ``fetch_blob`` asks for it (``verify``), into a private
temporary folder removed by ``close``. Which of a tag's platforms: ``platform`` if given, else the only one, else
this machine's; a tag of several platforms none of which is this machine's asks for ``--platform``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from cachetool.bundle.manifest import Manifest
from cachetool.bundle.source import BundleSource
from cachetool.errors import CachetoolError, UsageError, filled
from cachetool.stores.base import BlobRef, RefEntry


def is_ref(spec: str | os.PathLike) -> bool:
    return "://" in str(spec)


def open_bundle(
    spec: str | os.PathLike, *, platform: str | None = None, store_options: dict[str, Any] | None = None
) -> Any:
    """A ``.ctb`` file (:class:`cachetool.bundle.ctb.CtbBundle`) or a ref's bundle (:class:`RefBundle`); use it as a
    context manager."""
    if is_ref(spec):
        return RefBundle(str(spec), platform=platform, store_options=store_options)
    if platform is not None:
        raise UsageError(f"--platform is for a ref (a bundle file holds one platform): {spec}")
    from cachetool.bundle.ctb import open_ctb

    return open_ctb(spec)


class RefBundle(BundleSource):
    """A bundle in a store, opened for reading (see the module doc)."""

    def __init__(self, ref_text: str, *, platform: str | None, store_options: dict[str, Any] | None):
        from cachetool.refs.choice import choose_entry
        from cachetool.refs.opening import open_ref, read_index
        from cachetool.transfer.store_source import StoreSource

        self._tmp: Path | None = None
        self.entry: RefEntry | None = None
        ref, self._store, _ = open_ref(ref_text, None, store_options)
        self.fields = {"store": self._store.url, "ref": ref.url}  # what every failure reading this bundle knows
        try:
            self.entry = choose_entry(read_index(self._store, ref), ref.url, platform)
            self._tmp = Path(tempfile.mkdtemp(prefix="cachetool-read-"))
            self._source = StoreSource(self._store, ref, self.entry, self._tmp / "partial")
            self.description = self._source.description
            self.manifest = Manifest.from_bytes(self._source.manifest_bytes())
        except BaseException as exc:
            self.close()
            if isinstance(exc, CachetoolError):
                self.filled(exc)
            raise

    def filled(self, exc: CachetoolError) -> CachetoolError:
        """``exc`` with this bundle's store, ref and (once chosen) manifest digest where its raise left them out."""
        key = {"key": self.entry.manifest_digest} if self.entry is not None else {}
        return filled(exc, **self.fields, **key)

    @property
    def manifest_digest(self) -> str:
        return self.entry.manifest_digest  # type: ignore[union-attr]  # baseline (issue 46)

    @property
    def platform(self) -> str:
        return self.entry.platform  # type: ignore[union-attr]  # baseline (issue 46)

    def manifest_bytes(self) -> bytes:
        return self._source.manifest_bytes()

    def signature_bytes(self) -> bytes | None:
        return self._source.signature_bytes()

    def fetch_blob(self, blob: BlobRef, dest: Path) -> None:
        self._source.fetch_blob(blob, dest)
        self._source.discard_partials()

    def read_blob(self, blob: BlobRef, scratch_dir: Path) -> bytes:
        return self._source.read_blob(blob, scratch_dir)

    def parsed_manifest(self) -> Manifest:
        return self.manifest

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        store, self._store = getattr(self, "_store", None), None  # type: ignore[assignment]  # baseline (issue 46)
        if store is not None:
            store.close()

    def __enter__(self) -> RefBundle:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        # A failure while reading it (verify's signature check, a tampered blob) names this bundle's store and ref;
        # a usage error is about what the caller passed (a --trust file), not about this bundle.
        if isinstance(exc, CachetoolError) and not isinstance(exc, UsageError):
            self.filled(exc)
        self.close()
