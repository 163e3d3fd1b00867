"""Stores: where bundles live in their store form (see :mod:`cachetool.stores.base`).

``open_store(url, **options)`` returns the store for ``file://``, ``s3://`` or ``oci://``; a ref's store is
``open_store(parse_ref(text).store)``. File and S3 are one :class:`~cachetool.stores.object_store.ObjectStore`
on an object backend (:mod:`.objects`); OCI is its own store (:mod:`.oci`). The options (:data:`OPTIONS`):

- ``endpoint_url`` / ``profile`` / ``region`` (S3; defaults: ``AWS_ENDPOINT_URL``, the standard chain),
- ``insecure`` (OCI: TLS without certificate verification), ``plain_http`` (OCI: plain HTTP, no TLS).

An option left at its default (``None``, or ``False`` for the two OCI switches) is not given; a given option
that the URL's kind of store does not take (``region`` for a ``file://`` store) is a usage error naming the option
and the kind, and so is a name that is no option at all (a misspelling).
"""

from __future__ import annotations

from typing import Any

from cachetool.errors import UsageError
from cachetool.stores.addresses import StoreURL, parse_store
from cachetool.stores.base import BlobRef, RefEntry, RefIndex, Store
from cachetool.stores.gc import GcReport

__all__ = [
    "open_store",
    "checked_options",
    "given_options",
    "options_taken",
    "OPTIONS",
    "Store",
    "BlobRef",
    "RefEntry",
    "RefIndex",
    "GcReport",
]

OPTIONS: dict[str, tuple[str, ...]] = {
    "file": (),
    "s3": ("endpoint_url", "profile", "region"),
    "oci": ("insecure", "plain_http"),
}


def checked_options(url: str | StoreURL, options: dict[str, Any]) -> dict[str, Any]:
    """The options given (set) for ``url``'s store, after refusing a name that is no option and a set option of
    another kind as usage errors: what :func:`open_store` opens with, and what a command checks before long work
    (``warm --push``, before it compiles)."""
    unknown = sorted(set(options) - {name for names in OPTIONS.values() for name in names})
    if unknown:
        known = ", ".join(sorted(n for names in OPTIONS.values() for n in names))
        raise UsageError(
            f"unknown store option {', '.join(map(repr, unknown))} (the options are: {known})", store=str(url)
        )
    su = url if isinstance(url, StoreURL) else parse_store(url)
    given = given_options(options)
    _refuse_foreign(su, given, str(url))
    return given


def open_store(url: str | StoreURL, **options: Any) -> Store:
    mine = checked_options(url, options)
    su = url if isinstance(url, StoreURL) else parse_store(url)
    if su.scheme == "file":
        from cachetool.stores.file import FileStore

        return FileStore(su.location)
    if su.scheme == "s3":
        from cachetool.stores.s3 import S3Store

        return S3Store(su.location, su.path, **mine)
    from cachetool.stores.oci import OCIStore

    return OCIStore(su.location, su.path, **{k: bool(v) for k, v in mine.items()})  # type: ignore[arg-type]  # baseline (issue 46)


def given_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options a caller gave: one left at its default (``None``, or ``False`` for the OCI switches) is not."""
    return {k: v for k, v in options.items() if v is not None and v is not False}


def options_taken(url: str | StoreURL, options: dict[str, Any]) -> dict[str, Any]:
    """The given ``options`` that ``url``'s kind of store takes: for a command over two stores of different kinds
    (``diff s3://... oci://... --endpoint-url X``), whose one set of flags holds both kinds' options."""
    su = url if isinstance(url, StoreURL) else parse_store(url)
    return {k: v for k, v in given_options(options).items() if k in OPTIONS[su.scheme]}


def _refuse_foreign(su: StoreURL, given: dict[str, Any], store: str) -> None:
    """A given option of another kind of store: one line naming it, the kind, and what that kind takes."""
    foreign = sorted(set(given) - set(OPTIONS[su.scheme]))
    if not foreign:
        return
    takes = OPTIONS[su.scheme]
    names = ", ".join(map(repr, foreign))
    raise UsageError(
        f"option{'s' if len(foreign) > 1 else ''} {names} {'do' if len(foreign) > 1 else 'does'} not "
        f"apply to {su.scheme}:// stores (they take" + (f": {', '.join(takes)})" if takes else " no options)"),
        store=store,
    )
