"""A ref and the store it names, opened together, and the ref read: what push, pull, rm and the readers start with."""

from __future__ import annotations

from cachetool.stores import open_store
from cachetool.stores.addresses import Ref, parse_ref
from cachetool.stores.base import RefIndex, Store


def open_ref(ref: str | Ref, store: Store | None = None, store_options: dict | None = None) -> tuple[Ref, Store, bool]:
    """(the parsed ref, its store, whether the caller owns the store and closes it): ``store`` if given, else the
    ref's store opened with ``store_options``."""
    r = ref if isinstance(ref, Ref) else parse_ref(ref)
    if store is not None:
        return r, store, False
    return r, open_store(r.store, **(store_options or {})), True


def read_index(store: Store, ref: Ref) -> RefIndex:
    """The tag's index, or the one-entry index of a digest pin (``name@sha256:...``)."""
    return store.get_ref(ref.name, ref.tag, digest=ref.digest)
