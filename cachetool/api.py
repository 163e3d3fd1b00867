"""The Python API: the operations of the CLI as functions returning typed results.

For servers and pipelines that embed cachetool instead of shelling out::

    import cachetool
    summary = cachetool.warm("llama-3.2-1b", device="cuda", cache_root="/cache",
                             push="s3://bucket/bundles/llama:main", sign_key="/keys/signing.key")
    result = cachetool.pull("s3://bucket/bundles/llama:main", "/cache", trust=["/keys/signing.pub"],
                            model="llama-3.2-1b", device="cuda")

Every failure raises a :class:`cachetool.errors.CachetoolError` subclass; the CLI maps each to its exit code.
torch is imported only by the calls that compile or compute a cache key.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachetool.errors import UsageError
from cachetool.warmup import compilation_config

__all__ = ["WarmSummary", "warm", "check", "push", "pull", "expected_cache_key", "compilation_config"]


@dataclass
class WarmSummary:
    """``warm`` with an optional push: what compiled, what was packed, where it went, and how long each took."""

    compile: Any  # cachetool.warmup.CompileRunResult
    push: Any = None  # cachetool.pushing.PushResult, when pushed
    bytes_raw: int | None = None  # files in the pushed cache folder
    bytes_unique: int | None = None  # after deduplicating identical files
    bytes_compressed: int | None = None  # zstd blobs + manifest, what a store holds
    phases: dict[str, float] = field(default_factory=dict)  # seconds: compile, pack, push

    def to_json(self) -> dict[str, Any]:
        return {
            "compile": self.compile.to_json(),
            "push": self.push.to_dict() if self.push is not None else None,
            "bytes": {"raw": self.bytes_raw, "unique": self.bytes_unique, "compressed": self.bytes_compressed},
            "phases": self.phases,
            # the fields CI scripts read most, at the top level too
            "graphs_compiled": self.compile.graphs_compiled,
            "graphs_loaded": self.compile.graphs_loaded,
            "cache_dir": self.compile.cache_dir,
            "seconds": round(sum(self.phases.values()), 3),
            "ref": self.push.ref if self.push is not None else None,
            "manifest_digest": self.push.manifest_digest if self.push is not None else None,
        }


def _hash_folder(result: Any) -> Path:
    """The ``torch_compile_cache/{hash10}`` folder a warm wrote (all its ranks)."""
    if not result.rank_dir:
        raise UsageError("nothing to push: the compile cache is disabled or the mode does not use it")
    return Path(result.rank_dir).parent


def _push_key(push: str | None, sign_key: Any) -> Any:
    """Check ``push`` and load ``sign_key`` before minutes of compiling, not after; the loaded key."""
    if push is None:
        return sign_key
    from cachetool.refs import parse_ref

    parse_ref(push)
    if sign_key is None:
        raise UsageError("--push needs --sign-key: pulls verify signatures by default")
    if isinstance(sign_key, (str, Path)):
        from cachetool.signing import load_private_key

        sign_key = load_private_key(sign_key)
    return sign_key


def warm(model: str, *, cache_root: str | Path | None = None, device: str = "cpu", config: Any = None,
         overrides: list[str] | tuple[str, ...] = (), push: str | None = None, sign_key: Any = None,
         store_options: dict | None = None, progress: bool | None = False, engine: str = "native",
         engine_flags: list[str] | tuple[str, ...] = (), load_weights: bool = False,
         engine_progress: Any = None, **run_options: Any) -> WarmSummary:
    """Compile ``model`` as a server would, filling ``cache_root``; with ``push``, pack the cache folder (signed
    with ``sign_key``) and push it to that ref. ``run_options`` go to :func:`cachetool.warmup.warm`
    (``rank``, ``dp_rank``, ...). ``engine="vllm"``: real vLLM starts headless with ``engine_flags`` (``vllm
    serve`` flags, read by vLLM's own parser; ``load_weights`` reads the model's weights instead of dummy ones),
    and the key folder it used is packed with vLLM's facts."""
    from cachetool import engines

    chosen = engines.get(engine)
    sign_key = _push_key(push, sign_key)
    t0 = time.perf_counter()
    if chosen.name == "native":
        cfg = compilation_config(config, overrides, cache_root)
        result = chosen.warm(model, cache_root=cache_root, device=device, compilation_config=cfg, **run_options)
        folder = _hash_folder(result) if push is not None else None
    else:
        result = chosen.warm(model, cache_root=cache_root, flags=list(engine_flags), load_weights=load_weights,
                             progress=engine_progress)
        folder = _engine_folder(result)
    summary = WarmSummary(compile=result, phases={"compile": round(time.perf_counter() - t0, 3)})
    if push is None:
        return summary

    from cachetool.bundle import pack
    from cachetool.pushing import push as push_bundle

    t1 = time.perf_counter()
    with pack(folder, sign_key=sign_key) as bundle:
        summary.phases["pack"] = round(time.perf_counter() - t1, 3)
        summary.bytes_raw = bundle.manifest.raw_size
        summary.bytes_unique = bundle.manifest.unique_size
        summary.bytes_compressed = bundle.stored_size
        t2 = time.perf_counter()
        summary.push = push_bundle(bundle, push, store_options=store_options, progress=progress)
        summary.phases["push"] = round(time.perf_counter() - t2, 3)
    return summary


def _engine_folder(result: Any) -> Path:
    """What a warm of another engine packs: the one key folder it used, else its whole cache root."""
    if len(result.cache_keys) == 1 and result.cache_dir:
        return Path(result.cache_dir)
    return Path(result.cache_root)


def check(model: str, *, cache_root: str | Path | None = None, device: str = "cpu", config: Any = None,
          overrides: list[str] | tuple[str, ...] = (), require_hit: bool = False, engine: str = "native",
          engine_flags: list[str] | tuple[str, ...] = (), load_weights: bool = False, engine_progress: Any = None,
          **run_options: Any) -> Any:
    """Start ``model`` as a server would and report compiled vs loaded graphs (``CompileRunResult``);
    ``require_hit``: raise :class:`cachetool.errors.CompileInStrictModeError` before anything compiles.
    ``engine="vllm"``: real vLLM starts on ``cache_root`` with ``engine_flags`` and reports what Inductor
    compiled and loaded and whether vLLM loaded its AOT artifact (``VllmStartResult``); ``require_hit`` then
    raises :class:`cachetool.errors.EngineMissError` (exit 4) naming why, after the start."""
    from cachetool import engines

    chosen = engines.get(engine)
    if chosen.name != "native":
        return chosen.check(model, cache_root=cache_root, require_hit=require_hit, flags=list(engine_flags),
                            load_weights=load_weights, progress=engine_progress)
    cfg = compilation_config(config, overrides, cache_root)
    return chosen.check(model, cache_root=cache_root, device=device, compilation_config=cfg,
                        require_hit=require_hit, **run_options)


def expected_cache_key(model: str, *, device: str = "cpu", config: Any = None,
                       overrides: list[str] | tuple[str, ...] = (), rank: int = 0, dp_rank: int = 0) -> dict:
    """The cache key (``{"hash", "factors"}``) a server running ``model`` with this config will look up, computed
    by a Dynamo trace without compiling or writing anything. Pull uses it to refuse, before any download, a bundle
    whose config or code factors differ, naming the field."""
    from cachetool.warmup import ModelError, check_model
    from compiler.models.llama import ModelSpecError
    from compiler.runner import compute_cache_key

    check_model(model)
    cfg = compilation_config(config, overrides)
    try:
        key, _layout = compute_cache_key(model, device, cfg, rank=rank, dp_rank=dp_rank)
    except ModelSpecError as exc:  # weights that do not fit the config
        raise ModelError(str(exc)) from None
    return {"hash": key.hash, "factors": key.factors}


def push(source: Any, ref: str, *, sign_key: Any = None, **options: Any) -> Any:
    """Push a ``.ctb`` file, a packed bundle or a cache folder (packed and signed on the way) to ``ref``;
    returns :class:`cachetool.pushing.PushResult` (blobs uploaded vs already in the store)."""
    from cachetool.pushing import push as push_bundle

    return push_bundle(source, ref, sign_key=sign_key, **options)


def pull(ref: str, cache_root: str | Path, *, trust: Any = None, model: str | None = None, config: Any = None,
         overrides: list[str] | tuple[str, ...] = (), device: str | None = None, tensor_parallel_size: int = 1,
         engine: str | None = None, engine_flags: list[str] | tuple[str, ...] = (), **options: Any) -> Any:
    """Pull ``ref`` into ``cache_root``: signature checked against the pinned keys, then preflight, then blobs,
    each verified, installed atomically. With ``model`` (and ``config``, ``tensor_parallel_size``), preflight also
    compares the cache key this server will need — predicted from the bundle's own factors without a trace,
    re-hashing here the traced files it lists — naming a differing config field or traced file. Returns
    :class:`cachetool.pulling.PullResult`."""
    from cachetool.engines.native import NativeEngine
    from cachetool.pulling import pull as pull_bundle

    options.pop("rank", None), options.pop("dp_rank", None)  # every rank of a server computes one key
    if engine not in (None, "native"):
        from cachetool import engines

        if config is not None or overrides:
            raise UsageError("--compilation-config/-cc are native-engine options: with --engine vllm pass vLLM's "
                             "own flags after --")
        check = engines.get(engine).key_check(model, cache_root=cache_root, flags=list(engine_flags),
                                              timeout=options.get("timeout")) if model else None
        if engine_flags and model is None:
            raise UsageError("vLLM flags after -- on pull need --model (the server's model)")
        return pull_bundle(ref, cache_root, trust=trust, device=device, engine=engine, expected_key=check, **options)
    return pull_bundle(ref, cache_root, trust=trust, device=device, engine=engine, **options,
                       expected_key=NativeEngine().key_check(model, config=config, overrides=overrides,
                                                         device=device or "cpu",
                                                         tensor_parallel_size=tensor_parallel_size))


def pull_outcome(ref: str, cache_root: str | Path, *, on_miss: str = "fail", timeout: float | None = None,
                 **options: Any) -> Any:
    """:func:`pull` under the init-container policy (:mod:`cachetool.pull_policy`): returns a
    :class:`cachetool.pull_policy.PullOutcome` whatever happens (``installed``, ``already-installed``, or the
    failure's outcome and exit code; ``on_miss="continue"`` gives exit 0 for a cache that is missing, stale,
    unreachable, slow or refused), with the read-only-root temporary folder and the hard ``timeout`` applied."""
    from cachetool.pull_policy import pull_with_policy

    return pull_with_policy(pull, ref, cache_root, on_miss=on_miss, timeout=timeout, **options)
