"""Stores: where bundles live in their store form (see :mod:`cachetool.stores.base`).

``open_store(url, **options)`` returns the store for ``file://``, ``s3://`` or ``oci://``; a ref's store is
``open_store(parse_ref(text).store)``. File and S3 are one :class:`~cachetool.stores.object_store.ObjectStore`
on an object backend (:mod:`.objects`); OCI is its own store (:mod:`.oci`). The options (:data:`OPTIONS`):

- ``endpoint_url`` / ``profile`` / ``region`` (S3; defaults: ``AWS_ENDPOINT_URL``, the standard chain),
- ``insecure`` (OCI: TLS without certificate verification), ``plain_http`` (OCI: plain HTTP, no TLS).

An option of another kind of store is ignored (one set of CLI flags serves every store); a name that is no option
at all (a misspelling) is a usage error.
"""

from __future__ import annotations

from cachetool.errors import UsageError
from cachetool.refs import StoreURL, parse_store
from cachetool.stores.base import BlobRef, RefEntry, RefIndex, Store
from cachetool.stores.gc import GcReport

__all__ = ["open_store", "OPTIONS", "Store", "BlobRef", "RefEntry", "RefIndex", "GcReport"]

OPTIONS = {"file": (), "s3": ("endpoint_url", "profile", "region"), "oci": ("insecure", "plain_http")}


def open_store(url: str | StoreURL, **options) -> Store:
    unknown = sorted(set(options) - {name for names in OPTIONS.values() for name in names})
    if unknown:
        known = ", ".join(sorted(n for names in OPTIONS.values() for n in names))
        raise UsageError(f"unknown store option {', '.join(map(repr, unknown))} (the options are: {known})",
                         store=str(url))
    su = url if isinstance(url, StoreURL) else parse_store(url)
    mine = {k: v for k, v in options.items() if k in OPTIONS[su.scheme]}
    if su.scheme == "file":
        from cachetool.stores.file import FileStore

        return FileStore(su.location)
    if su.scheme == "s3":
        from cachetool.stores.s3 import S3Store

        return S3Store(su.location, su.path, **mine)
    from cachetool.stores.oci import OCIStore

    return OCIStore(su.location, su.path, **{k: bool(v) for k, v in mine.items()})
