"""``cachetool diff A B``: name every hash factor that differs between two caches ("why did my cache miss").

A side is a ``.ctb`` bundle, a store ref (its manifest is read), a cache folder (any layout; a root, hash or rank
folder) or ``local``: this machine (its fingerprint and the factors its engine records without a model:
``Engine.local_factors``; ``config`` and ``code`` need the model and are not known for ``local``, so they are
skipped). An engine whose server computes its key (vLLM) compares ``local`` by asking it
(:func:`diff_against_server`). The engine reads and compares the keys (``Engine.compare_keys``); nothing here
names one. Bundles are read, not verified: diff only reports.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from cachetool import engines
from cachetool.engines.base import Engine
from cachetool.errors import NotFoundError, UsageError
from cachetool.layouts.factors import UNSET, Difference, Factors


@dataclasses.dataclass
class Side:
    label: str
    keys: list[tuple[str, Factors | None]]  # (cache hash, factors)
    fingerprint: dict
    partial: bool = False  # True for "local": this machine's facts (not a requirement), only env + compiler known
    layout: str | None = None  # the cache's layout (None for "local")


def load_side(
    spec: str, *, device: str | None = None, reading: dict[str, Any] | None = None, engine: Engine | None = None
) -> Side:
    """A side of a diff: ``local`` (as ``engine``, default the default engine, records it), a store ref (its
    manifest only: ``reading`` holds ``platform`` and ``store_options``,
    :func:`cachetool.transfer.reading.open_bundle`), a bundle file or a cache folder."""
    from cachetool.bundle.fingerprint import fingerprint_from_factors, local_fingerprint, require_device

    if spec == "local":
        device = require_device(device)
        chosen = engine or engines.default()
        fp = engines.machine_fingerprint(chosen, device)  # its own fields, as the install preflight compares them
        factors = chosen.local_factors(device or fp["device"])  # type: ignore[attr-defined]  # baseline (issue 46)
        return Side("local", [("local", factors)] if factors is not None else [], fp, partial=True)
    from cachetool.transfer.reading import is_ref, open_bundle

    p = Path(spec)
    if not is_ref(spec) and not p.exists():
        raise NotFoundError(f"{spec} is neither 'local', a ref, a bundle file nor a cache folder")
    if is_ref(spec) or p.is_file():
        # the platform and store options are the ref's (the other side may be a file, which has one platform)
        with open_bundle(spec, **(reading or {})) if is_ref(spec) else open_bundle(spec) as b:
            m = b.manifest
            return Side(spec, [(k.hash, k.factors) for k in m.keys], dict(m.fingerprint), layout=m.layout)
    from cachetool.engines.layouts import scan

    s = scan(p)
    comp = next(
        (
            k.factors.values("compiler")
            for k in s.keys
            if k.factors is not None and k.factors.values("compiler") is not None
        ),
        None,
    )
    fp = local_fingerprint(device="cpu")
    fp.update(s.fingerprint_hints)
    return Side(str(p), [(k.hash, k.factors) for k in s.keys], fingerprint_from_factors(comp, fp), layout=s.kind)


def _engine(side: Side) -> Engine:
    return engines.for_layout(side.layout)


def _own_engine(side: Side) -> Engine | None:
    """The engine whose own layout the side's cache is (None for ``local`` and a layout no engine writes)."""
    return next((e for e in engines.ENGINES.values() if e.layout == side.layout), None)


@dataclasses.dataclass(frozen=True)
class EngineDifference(Difference):
    """A and B are caches of different engines: their servers read different roots and neither reads the other's
    cache, so their factors are not compared (each side's would be "unset" in the other, hundreds of lines)."""

    def line(self) -> str:
        a, b = engines.get(self.a), engines.get(self.b)
        return (
            f"engine: A is a {a.name} cache and B a {b.name} cache: bundles of different engines, read by "
            f"different servers (a {a.name} server reads {a.cache_root_variable}, a {b.name} server "
            f"{b.cache_root_variable}); their factors are not compared"
        )


def engine_difference(a: Side, b: Side) -> EngineDifference | None:
    """The one difference of two recorded caches of different engines, or None."""
    ea, eb = _own_engine(a), _own_engine(b)
    if a.partial or b.partial or ea is None or eb is None or ea is eb:
        return None
    return EngineDifference("engine", "engine", ea.name, eb.name)


def fingerprint_differences(a: Side, b: Side) -> list[Difference]:
    """The fingerprint fields that decide a hit, by the install preflight's own comparison
    (:func:`cachetool.bundle.fingerprint.compare`). A recorded side (bundle, ref, folder) is a requirement and this machine
    (``local``) a set of facts: against ``local``, the preflight's question exactly; between two recorded sides,
    each against the other, so that diff A B and diff B A name the same fields."""
    from cachetool.bundle.fingerprint import checked_fields, compare

    found: dict[str, tuple] = {}
    if not a.partial:
        found.update(
            {f: (va, vb) for f, va, vb in compare(a.fingerprint, b.fingerprint, engines.fields_ignored_by(_engine(a)))}
        )
    if not b.partial:
        found.update(
            {f: (va, vb) for f, vb, va in compare(b.fingerprint, a.fingerprint, engines.fields_ignored_by(_engine(b)))}
        )
    return [Difference("fingerprint", f, *found[f]) for f in checked_fields() if f in found]


def diff_sides(a: Side, b: Side, engine: Engine | None = None) -> list[Difference]:
    """The fingerprint fields that decide a hit (:func:`fingerprint_differences`: the driver and the GPU's name are
    recorded, not compared), then the factors of each pair of caches, compared by ``engine`` (default: A's, or
    B's where A is ``local``); caches of two engines differ in that alone (:func:`engine_difference`)."""
    other_engine = engine_difference(a, b)
    if other_engine is not None:
        return [other_engine]
    out = fingerprint_differences(a, b)
    eng = engine or _engine(b if a.partial else a)
    partial = a.partial or b.partial
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
        for h, _ in rest_a[len(rest_b) :]:
            out.append(Difference("keys", h, "present", UNSET))
        for h, _ in rest_b[len(rest_a) :]:
            out.append(Difference("keys", h, UNSET, "present"))
    multi = len(pairs) > 1
    for (ha, fa), (hb, fb) in pairs:
        cache = f"{ha} vs {hb}" if multi else ""
        # against "local" only what this machine records (the env and compiler factors) is compared
        mine = fa if a.partial else fb
        names = tuple(mine.names) if partial and mine is not None else None
        found = eng.compare_keys(fa, fb, only=names, cache=cache)  # type: ignore[attr-defined]  # baseline (issue 46)
        if not found and ha != hb and not (a.partial or b.partial):
            # two caches in different key folders are two keys, whatever their recorded inputs say (a server
            # looks up one folder): never "no differences"
            found = [Difference("keys", "cache key", ha, hb, cache)]
        out += found
    return out


def diff_sources(
    a: str | os.PathLike,
    b: str | os.PathLike,
    *,
    device: str | None = None,
    engine: Engine | None = None,
    model: str | None = None,
    flags: list[str] | tuple[str, ...] = (),
    reading: dict[str, Any] | None = None,
) -> list[Difference]:
    """Differences between two bundles / refs / cache folders / ``"local"``; empty when nothing differs. The
    engine is ``engine``, else A's (by its layout). Against ``"local"``, an engine whose server computes its key
    is asked (:func:`diff_against_server`: its facts and, with ``model`` and the server's ``flags``, its key)."""
    if engine is not None and engine.local_by_server and str(b) != "local":  # type: ignore[attr-defined]  # baseline (issue 46)
        raise UsageError(f"diff --engine {engine.name} compares A with this machine: B must be 'local'")
    reading_a, reading_b = _readings(str(a), str(b), reading or {})
    side_a = load_side(str(a), device=device, reading=reading_a, engine=engine)
    own = _engine(side_a)  # the default engine's for a layout no engine writes (triton) and for "local"
    eng = engine or own
    if engine is not None and own is not engine and own.layout == side_a.layout:
        raise UsageError(
            f"A is a {own.name} cache: diff it with --engine {own.name} (or without --engine), "
            f"not --engine {engine.name}"
        )
    if eng.local_by_server and str(b) == "local":  # type: ignore[attr-defined]  # baseline (issue 46)
        return diff_against_server(side_a, eng, model=model, flags=flags, device=device)
    if model or flags:
        by_server = [e.name for e in engines.ENGINES.values() if e.local_by_server]  # type: ignore[attr-defined]  # baseline (issue 46)
        raise UsageError(f"--model and flags after -- on diff are for --engine {' or '.join(by_server)}")
    return diff_sides(side_a, load_side(str(b), device=device, reading=reading_b, engine=eng), eng)


def _readings(a: str, b: str, reading: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each ref side's reading with the store options its kind takes (S3's endpoint for the S3 side, OCI's
    --insecure for the registry), when the two refs are stores of different kinds; the same store kind, or one
    ref, gets them all, so that an option no side takes is refused by ``open_store`` as a usage error."""
    from cachetool.stores import given_options, options_taken
    from cachetool.stores.addresses import parse_ref
    from cachetool.transfer.reading import is_ref

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


def diff_against_server(
    side: Side,
    engine: Engine,
    *,
    model: str | None = None,
    flags: list[str] | tuple[str, ...] = (),
    device: str | None = None,
) -> list[Difference]:
    """Differences between a bundle or cache folder (``side``) and a server of ``engine`` on this machine: the
    fingerprint with the engine's facts (vLLM version, CPU ISA) and, with ``model`` (and the server's ``flags``),
    the key inputs as the engine itself computes them for that server."""
    import tempfile

    from cachetool.bundle.fingerprint import require_device

    fp = engines.machine_fingerprint(engine, require_device(device))
    out = [d for d in diff_sides(side, Side("local", [], fp, partial=True), engine) if d.category == "fingerprint"]
    if model is None:
        return out
    with tempfile.TemporaryDirectory(prefix="cachetool-diff-") as scratch:
        return out + engine.server_differences(list(side.keys), model, list(flags), Path(scratch))  # type: ignore[attr-defined]  # baseline (issue 46)
