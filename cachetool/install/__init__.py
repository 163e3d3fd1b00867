"""Install a bundle into a cache root: verify, preflight, fetch + verify blobs, stage, rename into place.

The order is the safety contract (see :mod:`cachetool.bundle.source`):

1. read the manifest and the signature; verify the signature against the pinned keys (unless
   ``insecure_skip_verify``); parse and validate the manifest (schema, paths, modes, sizes, duplicates);
2. preflight: the bundle's fingerprint and compiler/env factors against this machine, naming what differs;
   nothing is downloaded and nothing is written before this passes;
3. take an exclusive ``fcntl.flock`` on the cache root folder itself (no lock file is left behind); remove
   stale staging folders of killed installs; plan: units already present with the same content are skipped,
   units whose files differ are replaced (``keep_changed``: refused as a miss), paths the root's file system
   cannot hold are refused;
4. fetch each needed blob into a staging folder ``{root}/.cachetool-staging-*`` (same filesystem), check its
   stored size and sha256, decompress it with output bounded by the declared size, check the content sha256,
   and write the files (``O_EXCL|O_NOFOLLOW``) with their modes; a small blob (at most ``blobs.IN_MEMORY_MAX``)
   is read, checked and expanded in memory, a larger one from a fetched file: the same checks in the same order;
5. durable: one ``syncfs`` of the staged tree (else an ``fsync`` of each staged file and folder), so every file is
   on disk, whole, before any of it is renamed into place;
6. commit: rename each install unit (a rank folder) into place with ``renameat`` relative to parent folders
   opened with ``O_NOFOLLOW`` (a symlink planted in the destination is refused, never followed); a unit being
   replaced is swapped in with ``renameat2(RENAME_EXCHANGE)``; then ``fsync`` each parent folder a rename changed
   (and each folder created on the way), so a power cut leaves a unit whole or absent;
7. settle, under the lock still: the Triton group files of the units installed name their kernel's files where they
   landed (:mod:`cachetool.layouts.triton_groups`), and the layout's own rule runs (vLLM's FlashInfer file times).

Each phase is a module of this package: ``verify`` (phase 1, shared with :func:`verify_bundle`), ``preflight``
(2), ``fs`` (the root, its lock, the fd-relative primitives, durability) and ``plan`` (3), ``blobs`` and ``stage``
(4), ``commit`` (6); ``options`` holds what a caller asks of an install (:class:`InstallOptions`, each option's
default written there alone), ``ranks`` chooses the units, ``installer`` runs the phases in order and ``timing``
records where the time goes (``InstallResult.phases``). A failure at any step removes the staging folder, the source
settles its downloads under the lock (:meth:`BundleSource.settle`), and a cache root this call created is removed
again if empty; a full disk is :class:`DiskFullError` (exit 9).
A kill -9 leaves at most a stale staging folder (never a partial unit); the next install removes it.
"""

from __future__ import annotations

from cachetool.install.blobs import expand_blob
from cachetool.install.installer import InstallResult, install_bundle
from cachetool.install.options import InstallOptions
from cachetool.install.preflight import run_preflight
from cachetool.install.ranks import parse_ranks
from cachetool.install.verify import INSECURE_WARNING, verified_manifest, verify_bundle

__all__ = [
    "INSECURE_WARNING",
    "InstallOptions",
    "InstallResult",
    "expand_blob",
    "install_bundle",
    "parse_ranks",
    "run_preflight",
    "verified_manifest",
    "verify_bundle",
]
