"""What ``ls``, ``rm`` and ``gc`` do to a store: list its tags, remove a tag or one platform's entry of it, and
collect what no ref reaches."""

from __future__ import annotations

from cachetool.errors import NotFoundError, UsageError
from cachetool.refs.opening import open_ref
from cachetool.stores.addresses import Ref
from cachetool.stores import open_store
from cachetool.stores.base import GC_MIN_AGE_S, RefIndex, Store
from cachetool.stores.gc import GcReport


def list_refs(store_url: str, *, store_options: dict | None = None) -> list[RefIndex]:
    with open_store(store_url, **(store_options or {})) as st:
        return list(st.list_refs())


def remove(ref: str | Ref, *, store_options: dict | None = None, platform: str | None = None,
           store: Store | None = None) -> RefIndex | None:
    """Delete the tag (or only one platform's entry of it); return the remaining index, or None if deleted.

    Both are a read-modify-write of the tag through ``Store.update_ref`` (locked, conditional or converging): a
    platform pushed to the same tag at the same moment is kept by ``--platform``, and no lock file stays behind.
    ``store``: an open store to use (the caller closes it); default: the ref's, opened with ``store_options``."""
    r, st, own = open_ref(ref, store, store_options)
    try:
        if r.digest:
            raise UsageError(f"{r.url}: rm removes a tag; a digest pin names no tag", ref=r.url)
        index = st.get_ref(r.name, r.tag)  # NotFoundError names what is missing: the tag, the store, the bucket
        if platform is None:
            return st.update_ref(r.name, r.tag, lambda old: None)
        if not any(e.platform == platform for e in index.entries):
            raise NotFoundError(f"{r.url} has no {platform} entry (has {', '.join(e.platform for e in index.entries)})",
                                store=st.url, ref=r.url)
        return st.update_ref(r.name, r.tag, lambda old: without_platform(old, r, platform))
    finally:
        if own:
            st.close()


def without_platform(index: RefIndex | None, r: Ref, platform: str) -> RefIndex | None:
    """``index`` less ``platform``'s entry; None when nothing is left (the tag is then removed). Idempotent, as
    a store that re-reads and merges again (OCI) needs."""
    kept = tuple(e for e in (index.entries if index else ()) if e.platform != platform)
    return RefIndex(r.name, r.tag, kept) if kept else None


def gc(store_url: str, *, dry_run: bool = False, older_than: float = GC_MIN_AGE_S,
       store_options: dict | None = None) -> GcReport:
    """Collect what no ref of the store reaches and is at least ``older_than`` seconds old; the report says what was
    deleted (or would be, with ``dry_run``) and how many objects were kept, and why."""
    with open_store(store_url, **(store_options or {})) as st:
        return st.gc(dry_run=dry_run, older_than=older_than)
