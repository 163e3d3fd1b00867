"""Which install units a ``--ranks`` choice takes: the named rank folders and every unit without a rank (folders
beside the rank folders, e.g. vLLM's shared ``inductor_cache/``, and the root's ``modelinfos/``)."""

from __future__ import annotations

from collections.abc import Iterable

from cachetool.bundle.manifest import Manifest, Unit
from cachetool.errors import UsageError


def parse_ranks(spec: str | Iterable | None) -> set[str] | None:
    """``"0,1"`` (tensor-parallel ranks, any dp rank), ``"0_1"`` or ``"rank_0_1"``; None = all."""
    if spec is None:
        return None
    items = spec.split(",") if isinstance(spec, str) else [str(s) for s in spec]
    out = set()
    for it in items:
        it = it.strip()
        if not it:
            continue
        name = it[5:] if it.startswith("rank_") else it
        parts = name.split("_")
        if not all(p.isdigit() for p in parts) or len(parts) not in (1, 2):
            raise UsageError(f"bad rank {it!r}: use 0, 0_1 or rank_0_1")
        out.add(name)
    if not out:
        raise UsageError(f"--ranks {spec!r} names no rank: use 0, 0_1 or rank_0_1 (comma-separated)")
    return out


def select_units(manifest: Manifest, ranks: set[str] | None) -> list[Unit]:
    if ranks is None:
        return list(manifest.units)
    chosen = []
    matched = set()
    for u in manifest.units:
        if u.rank is None:
            chosen.append(u)
            continue
        r, dp = u.rank[5:].split("_")
        for want in ranks:
            if want == r or want == f"{r}_{dp}":
                chosen.append(u)
                matched.add(want)
                break
    missing = ranks - matched
    if missing:
        raise UsageError(
            f"bundle has no rank {', '.join(sorted(missing))} (it has {', '.join(manifest.ranks) or 'none'})"
        )
    return chosen
