"""Preflight: will this bundle hit here? The bundle's fingerprint (with its engine's facts) and compiler/env factors
against this machine, and with the server's model/config the cache key it needs, each refusal naming the first
difference. Nothing is downloaded or written before it passes."""

from __future__ import annotations

import logging

from cachetool.errors import PreflightError, clip
from cachetool.factors import FACTORS, Factors, compare_factors, short_repr
from cachetool.manifest import Manifest

log = logging.getLogger("cachetool.install")


def _factor_refusal(diffs: list, what: str, ours: str, suffix: str, also: int, of: str = "") -> PreflightError:
    """The one-line refusal naming the first of ``diffs`` (then up to ``also`` more field names)."""
    d = diffs[0]
    more = f" (also: {', '.join(x.name for x in diffs[1:1 + also])}{', ...' if len(diffs) > 1 + also else ''})" \
        if len(diffs) > 1 else ""
    return PreflightError(f"preflight: bundle cannot hit here: {what} {d.name!r}{of} differs: bundle "
                          f"{short_repr(d.a)}, {ours} {short_repr(d.b)}{more}{suffix}")


def check_expected_key(manifest: Manifest, expected: dict) -> str:
    """Compare the bundle's cache keys with ``expected`` (``CacheKey.to_json()`` of the config the server will
    run, from :func:`compiler.runner.compute_cache_key`). Returns the matching hash; raises
    :class:`PreflightError` naming the first factor and field that differ when no hash folder matches."""
    want = expected.get("hash")
    if any(k.hash == want for k in manifest.keys):
        return want
    with_factors = [k for k in manifest.keys if k.factors is not None]
    if not with_factors:
        raise PreflightError(f"preflight: bundle cannot hit here: it holds cache(s) "
                             f"{', '.join(k.hash for k in manifest.keys) or '(none)'}, this config needs {want}")
    k = with_factors[0]
    ours = Factors.parse(expected.get("factors")) or Factors({})
    for name in FACTORS:  # the first factor present on both sides that differs
        if k.factors.factor(name) is None or ours.factor(name) is None:
            continue
        diffs = compare_factors(k.factors, ours, only=(name,))
        if diffs:
            raise _factor_refusal(diffs, f"{name} factor field", "this config", f" (cache {k.hash} vs {want})", 3)
    raise PreflightError(f"preflight: bundle cannot hit here: cache {k.hash} differs from this config's {want}")


def run_preflight(manifest: Manifest, *, device: str | None = None, expected_key=None) -> list[str]:
    """Raise :class:`PreflightError` naming the first difference; return the list of things checked.

    ``expected_key``: the cache key the server's model/config will use, as a dict (``CacheKey.to_json()``) or a
    :class:`compiler.key_prediction.ServerKeyPredictor` (predicted from the bundle's own factors, no trace);
    checked first (config and code factors can only be checked with it). Compiler factors are taken without
    importing torch where the bundle's evidence matches this machine (:func:`compiler.cache_key.cheap_compiler_factors`);
    only a difference is confirmed with the exact values, so a message names a real difference."""
    from cachetool import engines
    from cachetool.fingerprint import compare, local_fingerprint

    checked = []
    engine = engines.for_layout(manifest.layout)
    asks_engine = expected_key is not None and hasattr(expected_key, "expected_for")
    if expected_key is not None and not asks_engine:
        checked.append(f"cache key {check_expected_key(manifest, _expected(manifest, expected_key))}")
    bundle_fp = manifest.fingerprint or {}
    dev = device or bundle_fp.get("device") or "cpu"
    local_fp = local_fingerprint(device=dev)
    local_fp.update(engine.machine_facts(local_fp["device"]))
    diffs = compare(bundle_fp, local_fp, engine.name)
    if diffs:
        field, b, l = diffs[0]
        more = f" (also: {', '.join(d[0] for d in diffs[1:])})" if len(diffs) > 1 else ""
        raise PreflightError(
            f"preflight: bundle cannot hit here: fingerprint {field!r} differs: bundle {short_repr(b)}, "
            f"this machine {short_repr(l)}{more}")
    checked.append("fingerprint")
    if asks_engine:  # the engine itself says which key folder the server will use (vLLM: its parser and config)
        h = expected_key.expected_for(manifest)
        how = expected_key.describe() if hasattr(expected_key, "describe") else None
        checked.append(f"cache key {h}" + (f" ({how})" if how else ""))
    if engine.name != "native":
        return checked  # the native compiler's factors below do not describe another engine's caches

    with_factors = [k for k in manifest.keys if k.factors is not None
                    and (k.factors.factor("compiler") is not None or k.factors.factor("env") is not None)]
    if not with_factors:
        return checked
    # The device this machine really has (asked for cuda on a machine without a GPU: the cpu); a bundle's own
    # fingerprint may name any device string, and only a real one reaches torch.
    local_dev = dev if local_fp["device"] == "cuda" and dev.startswith("cuda") else local_fp["device"]
    try:
        from compiler import cache_key as ck  # lazy: cachetool works without compiler (e.g. Triton bundles)
    except ImportError as exc:
        log.warning("preflight: compiler.cache_key is not importable (%s); factors not checked", exc)
        return checked
    local_env = ck.local_env_factors()
    for k in with_factors:
        for name, local in (("compiler", _local_compiler_values(ck, local_dev, k.factors)), ("env", local_env)):
            values = k.factors.values(name)
            # values against values, no hashes: a difference is named field by field
            diff = compare_factors(Factors({name: {"values": values}}), Factors({name: {"values": local}}),
                                   only=(name,)) if values is not None else []
            if diff:
                raise _factor_refusal(diff, f"{name} factor", "this machine", "", 5, of=f" of cache {k.hash}")
    checked += ["compiler factors", "env factors"]
    return checked


def _expected(manifest: Manifest, expected_key) -> dict:
    """A predictor's key for this bundle (``{"hash", "factors"}``), or the dict given."""
    predict = getattr(expected_key, "predict", None)
    if predict is None:
        return expected_key
    from cachetool.warmup import compiler_errors_mapped
    from compiler.key_prediction import KeyMiss

    candidates = [key for key in (k.cache_key() for k in manifest.keys) if key is not None]
    if not candidates:
        raise PreflightError(f"preflight: bundle cannot hit here: it records no hash factors for "
                             f"{', '.join(k.hash for k in manifest.keys) or 'its caches'}")
    try:
        with compiler_errors_mapped():  # a model or config the compiler refuses: its kind's cachetool error
            key = predict(candidates)
    except KeyMiss as miss:
        raise PreflightError(f"preflight: bundle cannot hit here: {miss.reason}") from None
    except (RuntimeError, AssertionError) as exc:  # torch cannot describe the device
        raise _factors_unavailable(getattr(expected_key, "device", "?"), exc) from None
    return key.to_json()


def _local_compiler_values(ck, device: str, factors: Factors) -> dict:
    """This machine's compiler factor values for a bundle key, "cheap, else exact" as the hot start takes them
    (:func:`compiler.key_prediction.compiler_factors_for`): from the bundle's evidence when it matches (no torch
    import), else computed, so a refusal names a real difference."""
    from compiler.key_prediction import compiler_factors_for

    def exact() -> dict:
        from cachetool.warmup import compiler_errors_mapped

        try:
            with compiler_errors_mapped():
                return ck.local_compiler_factors(device)
        except (RuntimeError, AssertionError) as exc:  # torch cannot describe the device
            raise _factors_unavailable(device, exc) from None

    return compiler_factors_for(device, factors.factor("compiler"), exact)[0]


def _factors_unavailable(device: str, exc: BaseException) -> PreflightError:
    first = clip((str(exc).splitlines() or [type(exc).__name__])[0], 160)
    return PreflightError(f"preflight: cannot compute this machine's compiler factors for {device!r}: {first}")
