"""A ref and the store it names, opened together: what push, pull and rm start with."""

from __future__ import annotations

from cachetool.refs import Ref, parse_ref
from cachetool.stores import open_store
from cachetool.stores.base import Store


def open_ref(ref: str | Ref, store: Store | None = None, store_options: dict | None = None) -> tuple[Ref, Store, bool]:
    """(the parsed ref, its store, whether the caller owns the store and closes it): ``store`` if given, else the
    ref's store opened with ``store_options``."""
    r = ref if isinstance(ref, Ref) else parse_ref(ref)
    if store is not None:
        return r, store, False
    return r, open_store(r.store, **(store_options or {})), True
