"""``oci://host[:port]/repo``: bundles as OCI artifacts in a registry, by the ecosystem's rules.

- A bundle is an OCI image manifest (:mod:`.media`), its small blobs in packs (:mod:`.packs`), written by one push
  session (:mod:`.push`).
- A tag is an OCI image index of those manifests (one per platform). Reading accepts any wrapping: our index,
  an index a copy rewrote (``skopeo copy --all`` drops artifactType), or a tag that points straight at a bundle
  manifest (``skopeo copy`` without ``--all``). Each child is identified by its own manifest.
- The signature is an OCI 1.1 referrer of the bundle's manifest: pushed by digest with ``subject``; where the
  registry has no referrers API, listed in the referrers tag ``sha256-<hex>`` (an index), as the distribution
  spec says. Read: the referrers API, then that tag, then the ``sha256-<hex>.sig`` tag of older cachetool.
- Pins: ``oci://host/repo@sha256:...`` is the OCI digest of a bundle manifest or of an index.
- Ref updates: registries have no compare-and-swap; see :meth:`.refs.Tags.converge` for the strategy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from cachetool.stores.base import (
    GC_MIN_AGE_S,
    BlobRef,
    Capabilities,
    GcReport,
    PushSession,
    RefIndex,
    Store,
    TransferCounters,
)
from cachetool.stores.oci.client import RegistryClient
from cachetool.stores.oci.gc import SignatureGc
from cachetool.stores.oci.manifests import BundleManifests
from cachetool.stores.oci.push import OCIPush
from cachetool.stores.oci.refs import Tags
from cachetool.stores.oci.repository import Repository
from cachetool.stores.oci.signatures import Signatures
from cachetool.stores.oci.uploads import BlobTransfer


class OCIStore(Store):
    """The :class:`Store` of a registry repository, put together from its parts, each with its own state:
    ``repository`` (the requests), ``manifests`` (what is known of each bundle manifest), ``blobs`` (transfers and
    packs), ``tags`` (refs), ``signatures`` (referrers) and ``signature_gc``. A push's own state is its session's."""

    capabilities = Capabilities(frozenset({"signatures"}), "converge")  # the registry collects blobs

    def __init__(
        self,
        host: str,
        repo: str,
        *,
        insecure: bool = False,
        plain_http: bool = False,
        max_attempts: int | None = None,
        timeout: tuple[float, float] = (10.0, 120.0),
    ):
        self.host = host
        self.repo = repo
        self.insecure = insecure
        self.url = f"oci://{host}/{repo}" if repo else f"oci://{host}"
        self._opts = {"insecure": insecure, "plain_http": plain_http, "max_attempts": max_attempts, "timeout": timeout}
        self.client = RegistryClient(
            host,
            repo,
            plain_http=plain_http,
            verify=not insecure,
            max_attempts=max_attempts,
            timeout=timeout,
            store_url=self.url,
        )
        self.counters = TransferCounters()
        self.repository = Repository(self.client, repo, self.url, self.counters)
        self.manifests = BundleManifests(self.repository)
        self.blobs = BlobTransfer(self.repository, self.manifests)
        self.tags = Tags(self.repository, self.manifests)
        self.signatures = Signatures(self.repository, self.manifests, self.tags, self.blobs)
        self.signature_gc = SignatureGc(self.repository, self.tags, self.signatures)

    def close(self) -> None:
        self.client.close()
        self.blobs.close()  # the scratch folder, with the pack files of any push left open

    def push(self, blobs: list[BlobRef], blob_path: Callable[[BlobRef], Path]) -> PushSession:
        return OCIPush(
            blobs,
            blob_path,
            repository=self.repository,
            transfer=self.blobs,
            manifests=self.manifests,
            signatures=self.signatures,
        )

    def get_blob(self, blob: BlobRef, dest: Path) -> None:
        self.blobs.get_blob(blob, dest)

    def get_manifest(self, manifest_digest: str) -> bytes:
        return self.manifests.get(manifest_digest)

    def get_signature(self, manifest_digest: str) -> bytes | None:
        return self.signatures.get_signature(manifest_digest)

    def get_ref(self, name: str, tag: str, *, digest: str | None = None) -> RefIndex:
        return self.tags.get_ref(name, tag, digest=digest)

    def update_ref(self, name: str, tag: str, update: Callable[[RefIndex | None], RefIndex | None]) -> RefIndex | None:
        return self.tags.update_ref(name, tag, update)

    def list_refs(self) -> Iterator[RefIndex]:
        return self.tags.list_refs(self._sibling_tags)

    @contextlib.contextmanager
    def _sibling_tags(self, repo: str) -> Iterator[Tags]:
        """The tags of another repository of this registry, through a store of its own (its own token scope)."""
        with OCIStore(self.host, repo, **self._opts) as sibling:  # type: ignore[arg-type]  # baseline (issue 46)
            yield sibling.tags

    def gc(self, dry_run: bool = False, older_than: float = GC_MIN_AGE_S) -> GcReport:
        """Delete signatures whose bundle no tag reaches (see :meth:`.gc.SignatureGc.collect`)."""
        return self.signature_gc.collect(dry_run, older_than)
