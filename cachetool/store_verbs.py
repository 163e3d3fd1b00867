"""The verbs of stores and cache roots kept over time: ls, rm, gc, prune (re-exported by :mod:`cachetool.api`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.results import Listing, RefRow, RemoveResult
from cachetool.stores.base import GC_MIN_AGE_S

if TYPE_CHECKING:
    from cachetool.prune import PruneReport
    from cachetool.stores.gc import GcReport

__all__ = ["gc", "ls", "prune", "rm"]


def ls(store: str, *, store_options: dict[str, Any] | None = None) -> Listing:
    """Every platform's bundle under every tag of ``store``: a store lists every name's tags, a ref one tag, a
    bundle name without a tag (``file:///dir/store/tiny``) that name's tags (:func:`cachetool.refs.admin.listing`)."""
    from cachetool.refs.admin import listing

    url, idx = listing(store, store_options=store_options)
    return Listing(
        url,
        [
            RefRow(f"{i.name}:{i.tag}", e.platform, e.created, e.size, e.manifest_digest, dict(e.fingerprint or {}))
            for i in idx
            for e in i.entries
        ],
    )


def rm(ref: str, *, platform: str | None = None, store_options: dict[str, Any] | None = None) -> RemoveResult:
    """Remove the tag, or one platform's entry of it (blobs stay until :func:`gc`)."""
    from cachetool.refs.admin import remove

    left = remove(ref, platform=platform, store_options=store_options)
    return RemoveResult(ref, platform or "all", [e.platform for e in left.entries] if left else [])


def gc(
    store: str, *, dry_run: bool = False, older_than: float | None = None, store_options: dict[str, Any] | None = None
) -> GcReport:
    """Delete what no ref of ``store`` reaches and is older than ``older_than`` seconds (default: the stores'
    minimum age); returns the :class:`cachetool.stores.gc.GcReport` (deleted, kept and why)."""
    from cachetool.refs.admin import gc as collect
    from cachetool.stores.addresses import parse_store_or_ref

    su, _ = parse_store_or_ref(store)
    return collect(
        su.url,
        dry_run=dry_run,
        older_than=GC_MIN_AGE_S if older_than is None else older_than,
        store_options=store_options,
    )


def prune(cache_root: str | Path, *, older_than: float | None = None, dry_run: bool = False) -> PruneReport:
    """Remove from a local cache root what no later start reads (vLLM's per-start AOTAutograd entries but the
    last start's of each key folder: one per rank), if older than ``older_than`` seconds (default: the stores' minimum age); returns
    :class:`cachetool.prune.PruneReport`."""
    from cachetool.prune import prune as prune_root

    return prune_root(cache_root, older_than=GC_MIN_AGE_S if older_than is None else older_than, dry_run=dry_run)
