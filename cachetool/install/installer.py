"""``install_bundle``: the install contract of :mod:`cachetool.install`, carried out as its phases in order."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cachetool.bundle import engine_rules
from cachetool.bundle.manifest import Manifest, Unit, manifest_digest
from cachetool.bundle.source import BundleSource
from cachetool.cache_root import CacheRoot
from cachetool.install.commit import commit
from cachetool.install.fs import (
    STAGING_PREFIX,
    fs_error,
    lock_root,
    open_root,
    remove_empty_tree,
    remove_stale_staging,
    sync_tree,
)
from cachetool.install.key_check import KeyCheck
from cachetool.install.options import InstallOptions
from cachetool.install.plan import Plan, plan_install
from cachetool.install.preflight import run_preflight
from cachetool.install.ranks import parse_ranks, select_units
from cachetool.install.stage import check_complete, stage
from cachetool.install.timing import PhaseClock
from cachetool.install.verify import verified_manifest
from cachetool.layouts import triton_groups

log = logging.getLogger("cachetool.install")


@dataclasses.dataclass
class InstallResult:
    manifest_digest: str
    cache_root: Path
    units_installed: list[str]
    units_present: list[str]
    files: int  # files written by this call
    bytes: int  # content bytes written by this call
    blobs_fetched: int
    key_id: str | None  # the trusted key that verified the signature; None with insecure_skip_verify
    verified: bool
    preflight: list[str]  # what preflight checked ("fingerprint", "compiler factors", ...)
    seconds: float = 0.0
    units_replaced: list[str] = dataclasses.field(default_factory=list)  # in units_installed: they had other files
    preflight_seconds: float = 0.0  # of ``seconds``: the preflight (fingerprint, factors, the server's key)
    units_skipped: dict[str, str] = dataclasses.field(default_factory=dict)  # units that cannot be valid here: why
    # of ``seconds``, by phase in the order they ran: manifest, preflight, lock, plan, read, verify, write, complete,
    # fsync, rename, cleanup (see cachetool.install.timing)
    phases: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def already_installed(self) -> bool:
        return not self.units_installed

    def to_json(self) -> dict:
        return {
            "cache_root": str(self.cache_root),
            "manifest_digest": self.manifest_digest,
            "units_installed": self.units_installed,
            "units_present": self.units_present,
            "files": self.files,
            "bytes": self.bytes,
            "key_id": self.key_id,
            "verified": self.verified,
            "preflight": self.preflight,
            "already_installed": self.already_installed,
            "units_replaced": self.units_replaced,
            "seconds": self.seconds,
            "preflight_seconds": self.preflight_seconds,
            "units_skipped": self.units_skipped,
        }


def install_bundle(
    source: BundleSource,
    cache_root: CacheRoot | str | os.PathLike,
    options: InstallOptions = InstallOptions(),
    *,
    key_check: KeyCheck | None = None,
) -> InstallResult:
    """Install ``source`` into ``cache_root``; see the module docstring. Returns an :class:`InstallResult`.

    ``options``: what the caller asks of the install (:class:`~cachetool.install.options.InstallOptions`, each
    option with its default: the keys trusted, the ranks, the preflight's device, replacing a unit whose files
    differ, the workers). ``key_check``: which key folder the server will look up (its engine's answer,
    :class:`~cachetool.install.key_check.KeyCheck`); for a server that compiles no graph only the units that belong to
    no key are installed (none: nothing is written). A time limit or a stop request is the caller's bound
    (:mod:`cachetool.bounds`, ``pull --timeout``), applied around the call: every wait of the install (the root's
    lock, a blob's download and expansion, the preflight's checks) ends with it; no deadline is passed in.
    """
    from cachetool.bundle.fingerprint import require_device

    t0 = time.monotonic()
    clock = PhaseClock()
    given_root = CacheRoot.given(cache_root)
    # pull's rule too: --device cuda without CUDA must not take the CPU bundle
    device = require_device(options.device)
    with clock.phase("manifest"):
        mbytes, manifest, key_id = verified_manifest(
            source, trust=options.trust, insecure_skip_verify=options.insecure_skip_verify, warn=options.warn
        )
    units, checked, preflight_seconds, skipped = _units_to_install(
        manifest, given_root, device, options, key_check, clock
    )
    # what every result says, installed or not
    result = functools.partial(
        InstallResult,
        manifest_digest=manifest_digest(mbytes),
        key_id=key_id,
        verified=not options.insecure_skip_verify,
        preflight=checked,
        preflight_seconds=preflight_seconds,
        units_skipped=skipped,
    )
    if not units:  # nothing this server reads: no root is made, no lock taken
        return result(
            cache_root=given_root.path,
            units_installed=[],
            units_present=[],
            files=0,
            bytes=0,
            blobs_fetched=0,
            seconds=time.monotonic() - t0,
            phases=clock.phases(),
        )

    return _install_into(source, manifest, units, given_root, options, clock, result, t0)


def _install_into(
    source: BundleSource,
    manifest,
    units: list,
    given_root: CacheRoot,
    options: InstallOptions,
    clock: PhaseClock,
    result: Callable[..., InstallResult],
    t0: float,
) -> InstallResult:
    """The units installed under the root's lock, then what the layout's files need in place (settled under the lock
    still); a root this install made is removed again if it fails."""
    root, root_fd, created_root = open_root(given_root)
    try:
        with clock.phase("lock"):
            lock_root(root_fd, root)
        plan, nbytes, nfiles, fetched = _install_locked(
            source, manifest, units, root, root_fd, options.keep_changed and not options.force, options.workers, clock
        )
        with clock.phase("settle"):
            triton_groups.rewrite_groups(_group_files(plan, root), options.warn or log.warning)
            engine_rules.layouts().settle_installed(manifest.layout, root)
        for path in sorted(plan.replace):
            (options.warn or log.warning)(f"replaced {path} in {root}: its files differed from the bundle")
        return result(
            cache_root=root,
            units_installed=[u.path for u in plan.units],
            units_present=plan.present,
            files=nfiles,
            bytes=nbytes,
            blobs_fetched=fetched,
            seconds=time.monotonic() - t0,
            units_replaced=sorted(plan.replace),
            phases=clock.phases(),
        )
    except BaseException as exc:
        if created_root is not None:
            remove_empty_tree(created_root)
        if isinstance(exc, OSError):
            raise fs_error(exc, root, f"install into {root} failed") from exc
        raise
    finally:
        os.close(root_fd)  # releases the lock


def _group_files(plan: Plan, root: Path) -> list[Path]:
    """The Triton group files of the units this install put in place (:mod:`cachetool.layouts.triton_groups`)."""
    return [
        root / f.path
        for u in plan.units
        for f in plan.files[u.path]
        if triton_groups.is_group_file(f.path.rsplit("/", 1)[-1])
    ]


def _units_to_install(
    manifest,
    given_root: CacheRoot,
    device: str | None,
    options: InstallOptions,
    key_check: KeyCheck | None,
    clock: PhaseClock,
) -> tuple[list, list, float, dict[str, str]]:
    """The units this server reads (its ranks; none of a key for a server that compiles nothing), the preflight's
    checks and seconds, and the units left out before any blob because they cannot be valid here (logged)."""
    units = select_units(manifest, parse_ranks(options.ranks))
    if key_check is not None and key_check.compiles_nothing:  # an eager server reads no key folder
        units = [u for u in units if u.key is None]
    t_pre = time.monotonic()
    with clock.phase("preflight"):
        checked = run_preflight(manifest, device=device, key_check=key_check) if options.preflight else []
    preflight_seconds = time.monotonic() - t_pre
    rules = engine_rules.layouts()
    skipped = rules.invalid_units(manifest.layout, manifest, given_root.resolved) if options.preflight else {}
    for path, why in sorted(skipped.items()):
        (options.warn or log.warning)(f"skipped {path}: it cannot be valid here ({why})")
    return [u for u in units if u.path not in skipped], checked, preflight_seconds, skipped


def _install_locked(
    source: BundleSource,
    manifest: Manifest,
    units: list[Unit],
    root: Path,
    root_fd: int,
    keep_changed: bool,
    workers: int | None,
    clock: PhaseClock,
) -> tuple[Plan, int, int, int]:
    """Plan, stage, make the staged tree durable and commit, with the root lock held; the staging folder is always
    removed, and the source settles (its partial downloads) still under the lock, told how the install ended."""
    staging: Path | None = None
    error: BaseException | None = None
    try:
        with clock.phase("plan"):
            remove_stale_staging(root)
            plan = plan_install(manifest, units, root_fd, root, keep_changed)
        nbytes = nfiles = fetched = 0
        if plan.units:
            staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=root))
            with clock.phase("stage"):
                nbytes, nfiles, fetched = stage(source, manifest, plan, staging, workers, clock)
            with clock.phase("complete"):
                check_complete(manifest, plan, staging)
            with clock.phase("fsync"):  # every staged file on disk before any of them is given its name
                sync_tree(staging / "tree")
            with clock.phase("rename"):
                commit(plan, manifest, staging, root_fd, root)
        return plan, nbytes, nfiles, fetched
    except OSError as exc:
        error = fs_error(exc, root, f"install into {root} failed")
        raise error from exc
    except BaseException as exc:
        error = exc
        raise
    finally:
        if staging is not None:
            with clock.phase("cleanup"):
                shutil.rmtree(staging, ignore_errors=True)
        try:
            source.settle(error)
        except OSError as exc:  # cleaning up must not hide what happened
            log.warning("could not clean up after the install: %s", exc)
