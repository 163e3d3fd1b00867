"""Predict the cache key without a Dynamo trace.

Three of the four factors (env, config, compiler) are known before anything runs. The fourth, ``code``, hashes
the files Dynamo traced, which only a trace reveals. But a cache written for this model lists them in its
``cache_key_factors.json`` (by path-independent id): re-hashing *those* files on this machine gives the code
factor this machine would compute, as long as the model traces the same files, which holds while the traced
code is unchanged (an edited traced file changes its hash: a miss, never a wrong hit).

Used by the hot start (:mod:`compiler.capture`), which looks for a matching folder under the cache root, and by
``cachetool pull --model``, which checks the bundle's factors before downloading.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler import build_identity, cache_key
from compiler.layout import CACHE_SUBDIR, CacheLayout

logger = logging.getLogger(__name__)


NO_CACHE_YET = "no cache folder for this rank"  # a first warm's reason: nothing under the root to match


class KeyMiss(LookupError):
    """No candidate key fits this machine and model; ``reason`` names the closest candidate's first difference."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class LocalFactors:
    """The env, config and compiler factor values of this machine, model and config."""

    env: dict[str, Any]
    config: dict[str, Any]
    compiler: dict[str, Any]

    @classmethod
    def compute(cls, compilation_config: Any, model_config: dict[str, Any], device: str) -> LocalFactors:
        return cls(
            env=cache_key.local_env_factors(),
            config=cache_key.config_factors(compilation_config, model_config),
            compiler=cache_key.local_compiler_factors(device),
        )

    def values(self, name: str) -> dict[str, Any]:
        return getattr(self, name)


def compiler_factors_for(
    device: str, recorded: cache_key.Factor | None, exact: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], str]:
    """``(values, source)``: this machine's compiler factor values to match a cache's ``recorded`` compiler factor
    (its values and build evidence) with. From the recorded build evidence where it equals this machine's
    (``source`` ``"evidence"``: no torch or Triton source hashing, no Inductor import), else ``exact()``
    (``"computed"``): any mismatch, in the evidence or in the values that follow from it, takes the exact
    computation, so a real difference is named by real values. The one home of "cheap, else exact": the hot
    start, the server key predictor and the install preflight all ask here."""
    cheap = cache_key.cheap_compiler_factors(device, recorded) if recorded is not None else None
    if cheap is not None and cheap == recorded.values:  # type: ignore[union-attr]  # baseline (issue 46)
        return cheap, "evidence"
    return exact(), "computed"


class HotStartFactors:
    """The local factors a hot start matches each candidate folder with (:func:`compiler_factors_for`); the
    exact compiler values are computed at most once. ``source`` is how the last candidate's were had."""

    def __init__(self, compilation_config: Any, model_config: dict[str, Any], device: str) -> None:
        self.env = cache_key.local_env_factors()
        self.config = cache_key.config_factors(compilation_config, model_config)
        self.device = device
        self.source: str | None = None
        self._exact: dict[str, Any] | None = None

    def exact(self) -> dict[str, Any]:
        if self._exact is None:
            self._exact = cache_key.local_compiler_factors(self.device)
        return self._exact

    def __call__(self, candidate: cache_key.CacheKey) -> LocalFactors:
        compiler, self.source = compiler_factors_for(self.device, candidate.factors.factor("compiler"), self.exact)
        return LocalFactors(env=self.env, config=self.config, compiler=compiler)


# ---------------------------------------------------------------------- traced files by id


def resolve_file_id(file_id: str) -> Path | None:
    """This machine's file for a path-independent id (:func:`compiler.cache_key.file_id`), or ``None``."""
    kind, _, name = file_id.partition(":")
    if kind == "module":
        mod = sys.modules.get(name)
        origin = getattr(mod, "__file__", None) if mod is not None else None
        if origin and os.path.isfile(origin):
            return Path(origin)
        return build_identity.module_file(name)  # by path: resolving must not import (torch, in a preflight)
    if kind == "path":
        for root in sys.path:
            candidate = Path(root or ".") / name
            if candidate.is_file():
                return candidate
        return None
    if kind == "file":  # a file outside every import root: known by its absolute path only
        return Path(name) if os.path.isabs(name) and os.path.isfile(name) else None
    return None


def rehash_code_factor(listed: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``(values, problems)``: the sha256 of this machine's file for each listed id, and one line for each id
    that is missing here or whose content differs."""
    values: dict[str, str] = {}
    problems: list[str] = []
    for fid, digest in sorted(listed.items()):
        path = resolve_file_id(fid)
        if path is None:
            problems.append(f"traced file {fid} is not on this machine")
            continue
        values[fid] = cache_key.file_digest(path)
        if values[fid] != digest:
            problems.append(f"traced file {fid} differs ({path})")
    return values, problems


# ---------------------------------------------------------------------- candidates


def first_difference(name: str, theirs: Any, ours: Any) -> str:
    """``<name> factor field 'a.b' differs: cache X, here Y`` for the most telling dotted field where two values
    differ (:func:`compiler.cache_key.field_differences`, the fields a user sets first)."""
    first = (
        cache_key.most_telling_first(cache_key.field_differences(theirs, ours))
        or [cache_key.FieldDifference("(all)", theirs, ours)]
    )[0]
    return (
        f"{name} factor field {first.field!r} differs: cache {cache_key.short_repr(first.a)}, "
        f"here {cache_key.short_repr(first.b)}"
    )


def match_candidate(candidate: cache_key.CacheKey, local: LocalFactors) -> cache_key.CacheKey:
    """The key this machine computes for ``candidate``'s traced files; :class:`KeyMiss` naming the first
    differing factor if it is not ``candidate``."""
    for name in ("env", "config", "compiler"):
        ours = local.values(name)
        if candidate.factors.hash_of(name) != cache_key.factor_hash(ours):
            raise KeyMiss(first_difference(name, candidate.factors.values(name) or {}, ours))
    listed = candidate.factors.values("code") or {}
    code, problems = rehash_code_factor(listed)
    if problems:
        raise KeyMiss(problems[0])
    key = cache_key.CacheKey.from_values(env=local.env, config=local.config, code=code, compiler=local.compiler)
    if key.hash != candidate.hash:
        raise KeyMiss(f"cache key {key.hash} is not the candidate's {candidate.hash}")
    return key


def predict(
    candidates: Iterable[cache_key.CacheKey], local: LocalFactors | Callable[[cache_key.CacheKey], LocalFactors]
) -> cache_key.CacheKey:
    """The first candidate this machine would compute exactly; else :class:`KeyMiss` with each one's reason.
    ``local``: the factors, or a function giving them per candidate (:class:`HotStartFactors`)."""
    local_for = local if callable(local) else (lambda _c: local)
    reasons = []
    for candidate in candidates:
        try:
            return match_candidate(candidate, local_for(candidate))
        except KeyMiss as miss:
            reasons.append(f"{candidate.hash}: {miss.reason}")
    if not reasons:
        raise KeyMiss(NO_CACHE_YET)
    raise KeyMiss("; ".join(reasons))


def candidates_on_disk(root: Path, rank: int, dp_rank: int, prefix: str) -> list[cache_key.CacheKey]:
    """The keys of the cache folders under ``root`` for this rank, read-only; unreadable folders are skipped."""
    base = Path(root) / CACHE_SUBDIR
    found = []
    try:
        folders = sorted(p for p in base.iterdir() if p.is_dir())
    except OSError:
        return []
    for folder in folders:
        path = CacheLayout(Path(root), folder.name, rank, dp_rank, prefix).dir / cache_key.FACTORS_FILE
        try:
            key = cache_key.CacheKey.read(path)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if key.hash == folder.name:
            found.append(key)
    return found


def predict_layout(
    root: Path,
    local: LocalFactors | Callable[[cache_key.CacheKey], LocalFactors],
    *,
    rank: int = 0,
    dp_rank: int = 0,
    prefix: str,
) -> tuple[cache_key.CacheKey, CacheLayout]:
    """The key and folder a trace would choose under ``root``, if one is there; else :class:`KeyMiss`."""
    key = predict(candidates_on_disk(root, rank, dp_rank, prefix), local)
    return key, CacheLayout(Path(root), key.hash, rank, dp_rank, prefix)


# ---------------------------------------------------------------------- a server's key, before it starts


@dataclass(frozen=True)
class ServerKeyPredictor:
    """The cache key a server will compute for ``model`` (preset, ``config.json`` or folder) with this compilation
    config, device and tensor-parallel size, predicted without torch where the candidates' evidence allows
    (:func:`compiler.cache_key.cheap_compiler_factors`), else with it."""

    model: str
    compilation_config: Any
    device: str = "cpu"
    tensor_parallel_size: int = 1

    def model_config(self) -> dict[str, Any]:
        from compiler.distributed.parallel_config import DEFAULT_ALL_REDUCE, parallel_config_values
        from compiler.models.llama_config import config_values, default_dtype, read_config

        cfg, _ = read_config(self.model)
        parallel = parallel_config_values(self.tensor_parallel_size, DEFAULT_ALL_REDUCE)  # a server's default
        return config_values(cfg, default_dtype(self.device), parallel)

    def local_factors(self, candidate: cache_key.CacheKey) -> LocalFactors:
        compiler, _ = compiler_factors_for(
            self.device, candidate.factors.factor("compiler"), lambda: cache_key.local_compiler_factors(self.device)
        )
        return LocalFactors(
            env=cache_key.local_env_factors(),
            config=cache_key.config_factors(self.compilation_config, self.model_config()),
            compiler=compiler,
        )

    def predict(self, candidates: list[cache_key.CacheKey]) -> cache_key.CacheKey:
        """The candidate this server would compute exactly; :class:`KeyMiss` naming why not."""
        reasons = []
        for candidate in candidates:
            try:
                return match_candidate(candidate, self.local_factors(candidate))
            except KeyMiss as miss:
                reasons.append(miss.reason if len(candidates) == 1 else f"{candidate.hash}: {miss.reason}")
        raise KeyMiss("; ".join(reasons) or "the bundle holds no cache key")
