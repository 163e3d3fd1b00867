"""How a bundle is installed: the install's options, each with its default, listed here alone.

:func:`cachetool.install.install_bundle` takes them as one frozen value; a pull is an install from a store, so its
request (:class:`cachetool.transfer.pull.PullRequest`) extends them, and ``cachetool.api.install`` builds one from
its keywords (tests/structure/test_requests.py keeps them listed once).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["InstallOptions"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class InstallOptions:
    """What an install is asked to do besides where (the cache root) and from what (the bundle)."""

    trust: Iterable[Any] | None = None  # public key files or folders, or loaded keys; None: the pinned keys
    insecure_skip_verify: bool = False  # do NOT check the signature
    ranks: str | Iterable[str] | None = None  # "0,1" (tensor-parallel) or "0_1" / "rank_0_1"; None: every rank
    preflight: bool = True  # compare the bundle's factors and fingerprint with this machine before any blob
    device: str | None = None  # the device the preflight compares against; None: the bundle's
    force: bool = False  # replace a unit whose files differ even with keep_changed
    keep_changed: bool = False  # refuse (a miss) instead of replacing a unit whose files differ
    warn: Callable[[str], None] | None = None  # warning lines (default: the cachetool.install logger)
    workers: int | None = None  # parallel blob fetches (default: 2 per CPU core, from 2 to 8)

    def install_options(self, **settled: Any) -> InstallOptions:
        """These options alone (of a request that extends them), with ``settled`` values in place of the given ones
        (a pull's loaded trusted keys, its checked device)."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(InstallOptions)}
        return InstallOptions(**{**own, **settled})
