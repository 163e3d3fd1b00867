"""``cachetool diff A B``: name every hash factor that differs between two caches ("why did my cache miss").

A side is a ``.ctb`` bundle, a store ref (its manifest is read), a cache folder (any layout; a root, hash or rank folder) or ``local``: this machine
(its ``env`` and ``compiler`` factors from ``compiler.cache_key`` and its fingerprint; ``config`` and ``code``
need the model and are not known for ``local``, so they are skipped). Bundles are read, not verified: diff only
reports.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from cachetool.errors import NotFoundError, UsageError
from cachetool.factors import FACTORS, UNSET, Difference, Factors, compare_factors


@dataclasses.dataclass
class Side:
    label: str
    keys: list[tuple[str, Factors | None]]  # (cache hash, factors)
    fingerprint: dict
    partial: bool = False  # True for "local": this machine's facts (not a requirement), only env + compiler known
    layout: str | None = None  # the cache's layout (None for "local")


def load_side(spec: str, *, device: str | None = None, reading: dict[str, Any] | None = None) -> Side:
    """A side of a diff: ``local``, a store ref (its manifest only: ``reading`` holds ``platform`` and
    ``store_options``, :func:`cachetool.read_bundle.open_bundle`), a bundle file or a cache folder."""
    from cachetool.fingerprint import fingerprint_from_factors, local_fingerprint, require_device

    if spec == "local":
        try:
            from compiler import cache_key as ck
        except ImportError as exc:
            raise UsageError(f"'local' needs the compiler package ({exc})") from None
        device = require_device(device)
        fp = local_fingerprint(device=device)
        dev = device or fp["device"]
        env, comp = ck.local_env_factors(), ck.local_compiler_factors(dev)
        factors = Factors.from_entries({"env": ck.Factor(ck.factor_hash(env), env),
                                        "compiler": ck.Factor(ck.factor_hash(comp), comp)})
        return Side("local", [("local", factors)], fp, partial=True)
    from cachetool.read_bundle import is_ref, open_bundle

    p = Path(spec)
    if not is_ref(spec) and not p.exists():
        raise NotFoundError(f"{spec} is neither 'local', a ref, a bundle file nor a cache folder")
    if is_ref(spec) or p.is_file():
        # the platform and store options are the ref's (the other side may be a file, which has one platform)
        with (open_bundle(spec, **(reading or {})) if is_ref(spec) else open_bundle(spec)) as b:
            m = b.manifest
            return Side(spec, [(k.hash, k.factors) for k in m.keys], dict(m.fingerprint), layout=m.layout)
    from cachetool.layouts import scan

    s = scan(p)
    comp = next((k.factors.values("compiler") for k in s.keys
                 if k.factors is not None and k.factors.values("compiler") is not None), None)
    fp = local_fingerprint(device="cpu")
    fp.update(s.fingerprint_hints)
    return Side(str(p), [(k.hash, k.factors) for k in s.keys], fingerprint_from_factors(comp, fp), layout=s.kind)


def _engine(side: Side) -> str:
    from cachetool import engines

    return engines.for_layout(side.layout).name if side.layout else "native"


def fingerprint_differences(a: Side, b: Side) -> list[Difference]:
    """The fingerprint fields that decide a hit, by the install preflight's own comparison
    (:func:`cachetool.fingerprint.compare`). A recorded side (bundle, ref, folder) is a requirement and this machine
    (``local``) a set of facts: against ``local``, the preflight's question exactly; between two recorded sides,
    each against the other, so that diff A B and diff B A name the same fields."""
    from cachetool.fingerprint import CHECKED, compare

    found: dict[str, tuple] = {}
    if not a.partial:
        found.update({f: (va, vb) for f, va, vb in compare(a.fingerprint, b.fingerprint, _engine(a))})
    if not b.partial:
        found.update({f: (va, vb) for f, vb, va in compare(b.fingerprint, a.fingerprint, _engine(b))})
    return [Difference("fingerprint", f, *found[f]) for f in CHECKED if f in found]


def diff_sides(a: Side, b: Side) -> list[Difference]:
    """The fingerprint fields that decide a hit (:func:`fingerprint_differences`: the driver and the GPU's name are
    recorded, not compared), then the factors of each pair of caches."""
    out = fingerprint_differences(a, b)
    only = ("env", "compiler") if (a.partial or b.partial) else FACTORS
    if not a.keys or not b.keys:
        if a.keys or b.keys:
            out.append(Difference("keys", "caches", [h for h, _ in a.keys] or UNSET, [h for h, _ in b.keys] or UNSET))
        return out
    pairs: list[tuple[tuple, tuple]] = []
    if a.partial or b.partial:
        pairs = [(x, y) for x in a.keys for y in b.keys]
    else:
        bh = {h: (h, f) for h, f in b.keys}
        rest_a = [(h, f) for h, f in a.keys if h not in bh]
        rest_b = [(h, f) for h, f in b.keys if h not in {x for x, _ in a.keys}]
        pairs = [((h, f), bh[h]) for h, f in a.keys if h in bh]
        pairs += list(zip(rest_a, rest_b))
        for h, _ in rest_a[len(rest_b):]:
            out.append(Difference("keys", h, "present", UNSET))
        for h, _ in rest_b[len(rest_a):]:
            out.append(Difference("keys", h, UNSET, "present"))
    multi = len(pairs) > 1
    for (ha, fa), (hb, fb) in pairs:
        cache = f"{ha} vs {hb}" if multi else ""
        names = only if (a.partial or b.partial) else _factor_names(fa, fb)
        found = compare_factors(fa, fb, only=names, cache=cache)
        if not found and ha != hb and not (a.partial or b.partial):
            # two caches in different key folders are two keys, whatever their recorded inputs say (a server
            # looks up one folder): never "no differences"
            found = [Difference("keys", "cache key", ha, hb, cache)]
        out += found
    return out


def _factor_names(fa: Factors | None, fb: Factors | None) -> tuple[str, ...]:
    """Our four factors first, then every other factor either side records (vLLM's ``inductor``, ``serve``,
    ``launch``): each can tell why two keys differ."""
    extra = {n for f in (fa, fb) if f is not None for n in f.names} - set(FACTORS)
    return (*FACTORS, *sorted(extra))


def diff_sources(a: str | os.PathLike, b: str | os.PathLike, *, device: str | None = None,
                 reading: dict[str, Any] | None = None) -> list[Difference]:
    """Differences between two bundles / refs / cache folders / ``"local"``; empty when nothing differs. A vLLM
    cache against ``"local"`` is compared as :func:`diff_against_server` does (vLLM's facts, not the native
    factors)."""
    reading_a, reading_b = _readings(str(a), str(b), reading or {})
    side_a = load_side(str(a), device=device, reading=reading_a)
    if str(b) == "local" and side_a.layout not in (None, "native", "triton"):
        return diff_against_server(a, engine=side_a.layout, device=device, reading=reading_a)
    return diff_sides(side_a, load_side(str(b), device=device, reading=reading_b))


def _readings(a: str, b: str, reading: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each ref side's reading with the store options its kind takes (S3's endpoint for the S3 side, OCI's
    --insecure for the registry), when the two refs are stores of different kinds; the same store kind, or one
    ref, gets them all, so that an option no side takes is refused by ``open_store`` as a usage error."""
    from cachetool.read_bundle import is_ref
    from cachetool.refs import parse_ref
    from cachetool.stores import given_options, options_taken

    if not (is_ref(a) and is_ref(b)):
        return reading, reading
    store_a, store_b = parse_ref(a).store, parse_ref(b).store
    if store_a.scheme == store_b.scheme:
        return reading, reading
    options = reading.get("store_options") or {}
    taken_a, taken_b = options_taken(store_a, options), options_taken(store_b, options)
    if set(given_options(options)) - set(taken_a) - set(taken_b):
        return reading, reading  # an option neither kind takes: open_store names it
    return {**reading, "store_options": taken_a}, {**reading, "store_options": taken_b}


def diff_against_server(spec: str | os.PathLike, *, engine: str, model: str | None = None,
                        flags: list[str] | tuple[str, ...] = (), device: str | None = None,
                        reading: dict[str, Any] | None = None) -> list[Difference]:
    """Differences between a bundle or cache folder and a server of ``engine`` on this machine: the fingerprint
    with the engine's facts (vLLM version, CPU ISA) and, with ``model`` (and the server's ``flags``), the key
    inputs as the engine itself computes them for that server."""
    import tempfile

    from cachetool import engines
    from cachetool.fingerprint import local_fingerprint, require_device

    side = load_side(str(spec), device=device, reading=reading)
    eng = engines.get(engine)
    fp = local_fingerprint(device=require_device(device))
    fp.update({k: v for k, v in eng.machine_facts(fp["device"]).items() if k != "engine"})
    out = diff_sides(side, Side("local", [], fp, partial=True))
    out = [d for d in out if d.category == "fingerprint"]
    if model is None:
        return out
    from cachetool.manifest import KeyFolder

    with tempfile.TemporaryDirectory(prefix="cachetool-diff-") as scratch:
        check = eng.key_check(model, cache_root=scratch, flags=list(flags))
        _key, diffs = check.closest([KeyFolder(h, "aot", f) for h, f in side.keys])
    return out + diffs
