"""Stores: where bundles live in their store form (see :mod:`cachetool.stores.base`).

``open_store(url)`` returns the implementation for ``file://``, ``s3://`` or ``oci://``; a ref's store is
``open_store(parse_ref(text).store)``. Options that only one kind understands are ignored by the others:

- ``endpoint_url`` / ``profile`` / ``region`` (S3; defaults: ``AWS_ENDPOINT_URL``, the standard chain),
- ``insecure`` (OCI: TLS without certificate verification), ``plain_http`` (OCI: plain HTTP, no TLS).
"""

from __future__ import annotations

from cachetool.refs import StoreURL, parse_store
from cachetool.stores.base import BlobRef, RefEntry, RefIndex, Store

__all__ = ["open_store", "Store", "BlobRef", "RefEntry", "RefIndex"]


def open_store(url: str | StoreURL, *, endpoint_url: str | None = None, profile: str | None = None,
               region: str | None = None, insecure: bool = False, plain_http: bool = False, **_ignored) -> Store:
    su = url if isinstance(url, StoreURL) else parse_store(url)
    if su.scheme == "file":
        from cachetool.stores.file import FileStore

        return FileStore(su.location)
    if su.scheme == "s3":
        from cachetool.stores.s3 import S3Store

        return S3Store(su.location, su.path, endpoint_url=endpoint_url, profile=profile, region=region)
    from cachetool.stores.oci import OCIStore

    return OCIStore(su.location, su.path, insecure=insecure, plain_http=plain_http)
