"""The native engine's cache keys, through :mod:`compiler.cache_key` and :mod:`compiler.key_prediction`: the key a
server will look up (:class:`NativeKeyCheck`: predicted from a bundle's own factors, or traced), and the factors
this machine would record (:func:`check_machine_factors`, :func:`local_factors`); two keys are compared by every
engine's comparison (:mod:`cachetool.facts.factor_compare`). Everything here works on cachetool's engine-neutral
:class:`cachetool.layouts.factors.Factors`; the compiler's types stay inside this module."""

from __future__ import annotations

from typing import Any

from cachetool.engines.native.error_mapping import compiler_errors_mapped
from cachetool.errors import PreflightError, UsageError, clip
from cachetool.facts.factor_compare import FACTOR_NAMES, compare_factors
from cachetool.layouts.factors import Difference, Factors, also_named, short_repr
from compiler import cache_key

__all__ = [
    "NativeKeyCheck",
    "check_expected_key",
    "check_machine_factors",
    "local_factors",
    "server_key_check",
    "traced_key",
]


def factor_refusal(
    diffs: list[Difference], what: str, ours: str, suffix: str, also: int, of: str = ""
) -> PreflightError:
    """The one-line refusal naming the first of ``diffs`` (then up to ``also`` more field names)."""
    d = diffs[0]
    more = also_named([x.name for x in diffs[1:]], also)
    return PreflightError(
        f"preflight: bundle cannot hit here: {what} {d.name!r}{of} differs: bundle "
        f"{short_repr(d.a)}, {ours} {short_repr(d.b)}{more}{suffix}"
    )


# ------------------------------------------------------------------------------- the key a server looks up
def check_expected_key(manifest: Any, expected: dict) -> str:
    """Compare the bundle's cache keys with ``expected`` (``{"hash", "factors"}`` of the config the server will
    run). Returns the matching hash; raises :class:`PreflightError` naming the first factor and field that differ
    when no hash folder matches."""
    want = expected.get("hash")
    if any(k.hash == want for k in manifest.keys):
        return want  # type: ignore[return-value]  # baseline (issue 46)
    with_factors = [k for k in manifest.keys if k.factors is not None]
    if not with_factors:
        raise PreflightError(
            f"preflight: bundle cannot hit here: it holds cache(s) "
            f"{', '.join(k.hash for k in manifest.keys) or '(none)'}, this config needs {want}"
        )
    k = with_factors[0]
    ours = Factors.parse(expected.get("factors")) or Factors({})
    for name in FACTOR_NAMES:  # the first factor present on both sides that differs
        if k.factors.values(name) is None or ours.values(name) is None:
            continue
        diffs = compare_factors(k.factors, ours, only=(name,))
        if diffs:
            raise factor_refusal(diffs, f"{name} factor field", "this config", f" (cache {k.hash} vs {want})", 3)
    raise PreflightError(f"preflight: bundle cannot hit here: cache {k.hash} differs from this config's {want}")


class NativeKeyCheck:
    """Pull's key question for a native server: which of a bundle's key folders it will look up. Predicted from
    the bundle's own factors with no trace (``predictor``: :class:`compiler.key_prediction.ServerKeyPredictor`),
    or a key computed beforehand (``expected``: ``{"hash", "factors"}``, e.g. :func:`traced_key`'s)."""

    def __init__(self, *, predictor: Any = None, expected: dict | None = None, compiles_nothing: str | None = None):
        self.predictor, self.expected = predictor, expected
        self.compiles_nothing = compiles_nothing  # why this server compiles nothing (compilation mode 0), else None

    def expected_for(self, manifest: Any) -> str:
        return check_expected_key(manifest, self.expected if self.expected is not None else self._predict(manifest))

    def describe(self) -> str | None:
        return None

    def _predict(self, manifest: Any) -> dict:
        from compiler.key_prediction import KeyMiss

        candidates = [cache_key.CacheKey(k.hash, k.factors.raw) for k in manifest.keys if k.factors is not None]
        if not candidates:
            raise PreflightError(
                f"preflight: bundle cannot hit here: it records no hash factors for "
                f"{', '.join(k.hash for k in manifest.keys) or 'its caches'}"
            )
        try:
            with compiler_errors_mapped():  # a model or config the compiler refuses: its kind's cachetool error
                key = self.predictor.predict(candidates)
        except KeyMiss as miss:
            raise PreflightError(f"preflight: bundle cannot hit here: {miss.reason}") from None
        except (RuntimeError, AssertionError) as exc:  # torch cannot describe the device
            raise factors_unavailable(getattr(self.predictor, "device", "?"), exc) from None
        return key.to_json()


def server_key_check(
    model: str | None,
    *,
    config: Any = None,
    overrides: tuple[str, ...] = (),
    device: str = "cpu",
    tensor_parallel_size: int = 1,
) -> NativeKeyCheck | None:
    """The key check for a server running ``model`` (None without a model): predicted from the bundle's own
    factors, no trace. The model argument and config are checked here, before anything is fetched."""
    from cachetool.engines.native.start import compilation_config

    if model is None:
        if config is not None or overrides:
            raise UsageError("a compilation config on pull needs the server's model")
        return None
    from compiler.key_prediction import ServerKeyPredictor
    from compiler.models.llama_config import read_config

    if tensor_parallel_size < 1:
        raise UsageError(f"--tensor-parallel-size must be >= 1, got {tensor_parallel_size}")
    with compiler_errors_mapped():
        read_config(model)
        cfg = compilation_config(config, overrides)
        predictor = ServerKeyPredictor(model, cfg, device.split(":")[0], tensor_parallel_size)
    eager = "compilation mode 0: the server runs the model without compiling" if int(cfg.mode) == 0 else None
    return NativeKeyCheck(predictor=predictor, compiles_nothing=eager)


def traced_key(model: str, *, device: str = "cpu", config: Any = None, rank: int = 0, dp_rank: int = 0) -> dict:
    """The cache key (``{"hash", "factors"}``) a server running ``model`` with ``config`` (a ``CompilationConfig``)
    looks up, from a Dynamo trace without compiling or writing anything."""
    from cachetool.engines.native.start import check_model
    from compiler.runner import compute_cache_key

    check_model(model)
    with compiler_errors_mapped():  # weights that do not fit the config, a guard the trace refused
        key, _layout = compute_cache_key(model, device, config, rank=rank, dp_rank=dp_rank)
    return {"hash": key.hash, "factors": key.factors.to_json()}


# ------------------------------------------------------------------------------- this machine's factors
def check_machine_factors(manifest: Any, device: str) -> list[str]:
    """The bundle's ``compiler`` and ``env`` factors against this machine's (``device``: the one it really has);
    raises :class:`PreflightError` naming the first difference; returns what was checked. Compiler factors are
    taken without importing torch where the bundle's evidence matches this machine; only a difference is confirmed
    with the exact values, so a message names a real difference."""
    with_factors = [
        k
        for k in manifest.keys
        if k.factors is not None and (k.factors.values("compiler") is not None or k.factors.values("env") is not None)
    ]
    if not with_factors:
        return []
    local_env = cache_key.local_env_factors()
    for k in with_factors:
        for name, local in (("compiler", _local_compiler_values(device, k.factors)), ("env", local_env)):
            values = k.factors.values(name)
            # values against values, no hashes: a difference is named field by field
            diff = (
                compare_factors(Factors({name: {"values": values}}), Factors({name: {"values": local}}), only=(name,))
                if values is not None
                else []
            )
            if diff:
                raise factor_refusal(diff, f"{name} factor", "this machine", "", 5, of=f" of cache {k.hash}")
    return ["compiler factors", "env factors"]


def _local_compiler_values(device: str, factors: Factors) -> dict:
    """This machine's compiler factor values for a bundle key, "cheap, else exact" as the hot start takes them
    (:func:`compiler.key_prediction.compiler_factors_for`): from the bundle's evidence when it matches (no torch
    import), else computed, so a refusal names a real difference."""
    from compiler.key_prediction import compiler_factors_for

    def exact() -> dict:
        try:
            with compiler_errors_mapped():
                return cache_key.local_compiler_factors(device)
        except (RuntimeError, AssertionError) as exc:  # torch cannot describe the device
            raise factors_unavailable(device, exc) from None

    return compiler_factors_for(device, cache_key.Factors.parse(factors.raw).factor("compiler"), exact)[0]  # type: ignore[union-attr]  # baseline (issue 46)


def local_factors(device: str) -> Factors:
    """This machine's ``env`` and ``compiler`` factors (no model: ``config`` and ``code`` are unknown)."""
    env, comp = cache_key.local_env_factors(), cache_key.local_compiler_factors(device)
    return Factors(
        {
            "env": cache_key.Factor(cache_key.factor_hash(env), env).to_json(),
            "compiler": cache_key.Factor(cache_key.factor_hash(comp), comp).to_json(),
        }
    )


def factors_unavailable(device: str, exc: BaseException) -> PreflightError:
    first = clip((str(exc).splitlines() or [type(exc).__name__])[0], 160)
    return PreflightError(f"preflight: cannot compute this machine's compiler factors for {device!r}: {first}")
