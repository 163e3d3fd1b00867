"""gc on OCI: the signatures (referrers tags) of bundles no tag reaches. Blobs and untagged manifests are the
registry's own garbage collection (``registry garbage-collect --delete-untagged``)."""

from __future__ import annotations

import datetime as _dt

from cachetool.errors import NotFoundError, StoreError
from cachetool.stores.base import GC_MIN_AGE_S
from cachetool.stores.gc import GcReport
from cachetool.stores.oci import media
from cachetool.stores.oci.media import CREATED, A
from cachetool.stores.oci.refs import LEGACY_SIG_TAG, REFERRERS_TAG, Tags
from cachetool.stores.oci.repository import Repository
from cachetool.stores.oci.signatures import Signatures


def _age_seconds(created: str) -> float:
    """Seconds since an ISO-8601 time; 0 (brand new) when it cannot be read, so it is kept."""
    try:
        t = _dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
        if t.tzinfo is None:
            t = t.replace(tzinfo=_dt.UTC)
        return max(0.0, (_dt.datetime.now(_dt.UTC) - t).total_seconds())
    except (ValueError, AttributeError, TypeError):
        return 0.0


class SignatureGc:
    """Collects the orphaned signatures of ``repository``: ``tags`` says which bundles are live, ``signatures``
    reads the referrers tags."""

    def __init__(self, repository: Repository, tags: Tags, signatures: Signatures):
        self.repository = repository
        self.tags = tags
        self.signatures = signatures
        self.url = repository.url

    def collect(self, dry_run: bool = False, older_than: float = GC_MIN_AGE_S) -> GcReport:
        """Delete signatures whose bundle no tag reaches, written at least ``older_than`` seconds ago.

        Every tag is read first; a tag that cannot be read (a transient error) stops the collection before
        anything is deleted: a live signature is never taken for an orphan. Blobs and untagged manifests are
        reclaimed by the registry's own garbage collection (``registry garbage-collect --delete-untagged``)."""
        what = f"gc {self.url}"
        live, referrer_tags, legacy = self._live_subjects(what)
        doomed: list[tuple[str, list[str]]] = []  # (tag, manifest digests to delete)
        reached = young = foreign = 0
        for t in legacy:
            if "sha256:" + LEGACY_SIG_TAG.match(t).group(1) in live:  # type: ignore[union-attr]  # baseline (issue 46)
                reached += 1
            else:
                doomed.append((t, []))  # older cachetool: no date, and no push writes these any more
        for t in referrer_tags:
            subject = "sha256:" + t[len("sha256-") :]
            if subject in live:
                reached += 1
                continue
            descs, _ = self.signatures.read_referrers_tag(subject)
            ours = [
                d
                for d in descs or []
                if d.get("artifactType") == media.SIGNATURE_ARTIFACT_TYPE
                or d.get("artifactType") is None
                and str((d.get("annotations") or {}).get(A + "manifest.digest", ""))
            ]
            if len(ours) != len(descs or []):
                foreign += 1  # referrers of other tools: not ours to delete
            elif any(_age_seconds(str((d.get("annotations") or {}).get(CREATED, ""))) < older_than for d in ours):
                young += 1  # a push in flight writes the signature before its ref
            else:
                doomed.append((t, [str(d.get("digest")) for d in ours]))
        if not dry_run:
            for t, sigs in doomed:
                self._delete_tag_and(t, sigs, what)
        return GcReport(
            self.url,
            dry_run,
            older_than,
            tuple(f"tag {t}" for t, _ in doomed),
            kept_reachable=reached,
            kept_young=young,
            kept_foreign=foreign,
        )

    def _live_subjects(self, what: str) -> tuple[set[str], list[str], list[str]]:
        """(OCI digests of every bundle a tag reaches, the referrers tags, the legacy signature tags)."""
        live: set[str] = set()
        referrer_tags, legacy = [], []
        for t in self.repository.tags():
            if REFERRERS_TAG.match(t):
                referrer_tags.append(t)
                continue
            if LEGACY_SIG_TAG.match(t):
                legacy.append(t)
                continue
            try:
                live.update(oci for _, oci in self.tags.resolve_with_digests(t, f"{what}: read {t}"))
            except NotFoundError:
                continue  # the tag went away meanwhile
            except StoreError as exc:
                raise StoreError(
                    f"{what} stopped, nothing deleted: cannot read tag {t} ({exc})",
                    store=self.url,
                    key=t,
                    status=exc.status,
                ) from None
        return live, referrer_tags, legacy

    def _delete_tag_and(self, tag: str, manifests: list[str], what: str) -> None:
        d = self.repository.tag_digest(tag)
        for m in ([d] if d is not None else []) + manifests:
            self.repository.delete_manifest(m, what)
