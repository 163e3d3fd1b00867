"""What ``ls``, ``rm`` and ``gc`` do to a store: list its tags (of every name, of one name, or one tag), remove a tag
or one platform's entry of it, and collect what no ref reaches."""

from __future__ import annotations

from cachetool.errors import NotFoundError, UsageError
from cachetool.refs.opening import open_ref, read_index
from cachetool.stores import open_store
from cachetool.stores.addresses import Ref, parse_store_or_ref, repository_named
from cachetool.stores.base import GC_MIN_AGE_S, RefIndex, Store
from cachetool.stores.gc import GcReport


def list_refs(store_url: str, *, store_options: dict | None = None) -> list[RefIndex]:
    with open_store(store_url, **(store_options or {})) as st:
        return list(st.list_refs())


def listing(target: str, *, store_options: dict | None = None) -> tuple[str, list[RefIndex]]:
    """What ``ls TARGET`` lists, as (the URL listed, its tags' indexes). TARGET is read as every verb reads a ref:
    a ref with a tag or pin lists that tag (:class:`NotFoundError` naming the tags there if it has none); a store
    lists every tag of every name; a tagless file or S3 URL that is no store but a bundle name in the store above it
    (``file:///dir/store/tiny``, as ``pull`` reads it) lists every tag of that name."""
    su, ref = parse_store_or_ref(target)
    if ref is not None:
        r, st, _ = open_ref(ref, None, store_options)
        with st:
            return r.url, [read_index(st, r)]
    repo = repository_named(target)
    try:
        found = list_refs(su, store_options=store_options)  # type: ignore[arg-type]  # baseline (issue 46)
    except NotFoundError as missing:  # no store there: the bundle name in the store above, if that is one
        if repo is None:
            raise
        try:
            tags, names = named(repo, store_options)
        except NotFoundError:
            raise missing from None
        if not tags:
            raise NotFoundError(
                f"{repo.repository} not found: neither a store nor a bundle name in {repo.store.url} "
                f"({'names there: ' + ', '.join(names) if names else 'it holds no refs'})",
                store=repo.store.url,
                ref=repo.repository,
            ) from None
        return repo.repository, tags
    if found or repo is None:
        return su.url, found
    tags, _ = named(repo, store_options)  # an S3 prefix that holds no store: the name in the one above, if any
    return (repo.repository, tags) if tags else (su.url, [])


def named(repo: Ref, store_options: dict | None = None) -> tuple[list[RefIndex], list[str]]:
    """Every tag of ``repo``'s bundle name in its store, and every name the store holds."""
    indexes = list_refs(repo.store.url, store_options=store_options)
    return [i for i in indexes if i.name == repo.name], sorted({i.name for i in indexes})


def remove(
    ref: str | Ref, *, store_options: dict | None = None, platform: str | None = None, store: Store | None = None
) -> RefIndex | None:
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
            raise NotFoundError(
                f"{r.url} has no {platform} entry (has {', '.join(e.platform for e in index.entries)})",
                store=st.url,
                ref=r.url,
            )
        return st.update_ref(r.name, r.tag, lambda old: without_platform(old, r, platform))
    finally:
        if own:
            st.close()


def without_platform(index: RefIndex | None, r: Ref, platform: str) -> RefIndex | None:
    """``index`` less ``platform``'s entry; None when nothing is left (the tag is then removed). Idempotent, as
    a store that re-reads and merges again (OCI) needs."""
    kept = tuple(e for e in (index.entries if index else ()) if e.platform != platform)
    return RefIndex(r.name, r.tag, kept) if kept else None


def gc(
    store_url: str, *, dry_run: bool = False, older_than: float = GC_MIN_AGE_S, store_options: dict | None = None
) -> GcReport:
    """Collect what no ref of the store reaches and is at least ``older_than`` seconds old; the report says what was
    deleted (or would be, with ``dry_run``) and how many objects were kept, and why."""
    with open_store(store_url, **(store_options or {})) as st:
        return st.gc(dry_run=dry_run, older_than=older_than)
