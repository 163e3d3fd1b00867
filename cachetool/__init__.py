"""cachetool: warm, bundle, sign, push and pull torch.compile caches.

The Python API (typed results, :mod:`cachetool.errors` on failure)::

    cachetool.warm(model, cache_root=..., device=..., push=REF, sign_key=KEY) -> WarmSummary
    cachetool.check(model, cache_root=..., require_hit=True)                  -> CompileRunResult
    cachetool.push(path_or_ctb, REF, sign_key=KEY)                             -> PushResult
    cachetool.pull(REF, cache_root, trust=[PUB], model=..., device=...)        -> PullResult
    cachetool.pull_outcome(REF, cache_root, on_miss="continue", ...)           -> PullOutcome (never raises)

Every other verb of the CLI is a function here too (pack, keygen, sign, inspect, verify, ls, rm, gc), and of
:mod:`cachetool.api`, which also has ``install``, ``diff`` and ``prune`` (here those names are the modules).

Names are loaded on first use so that ``import cachetool`` stays cheap (no torch, no boto3).
"""

from __future__ import annotations

from typing import Any

from cachetool.version import __version__

# api's functions, but install, diff and prune: modules of that name (cachetool.api has all three)
_API = {
    "warm",
    "check",
    "push",
    "pull",
    "pull_outcome",
    "expected_cache_key",
    "compilation_config",
    "WarmSummary",
    "pack",
    "keygen",
    "sign",
    "inspect",
    "verify",
    "ls",
    "rm",
    "gc",
}
__all__ = sorted(_API) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from cachetool import api

        return getattr(api, name)
    raise AttributeError(f"module 'cachetool' has no attribute {name!r}")
