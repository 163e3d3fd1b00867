"""This project's pipeline (:mod:`compiler`) as an engine: warm and check run it in this process (or N rank
processes); pull's key check predicts the key from the bundle's own factors without a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cachetool.errors import UsageError
from cachetool import envs


class NativeEngine:
    name = "native"
    layout = "native"
    cache_root_variable = "CACHETOOL_CACHE_ROOT"

    def default_cache_root(self) -> Path:
        return envs.cache_root()

    def warm(self, model: str, *, cache_root: str | Path | None, **options: Any):
        from cachetool import warmup

        return warmup.warm(model, cache_root=cache_root, **options)

    def check(self, model: str, *, cache_root: str | Path | None, require_hit: bool = False, **options: Any):
        from cachetool import warmup

        return warmup.check(model, cache_root=cache_root, require_hit=require_hit, **options)

    def machine_facts(self, device: str | None) -> dict[str, str | None]:
        return {}  # the common fingerprint fields say all (cachetool.fingerprint)

    def key_check(self, model: str | None, *, cache_root: str | Path | None = None, config: Any = None,
                  overrides: list[str] | tuple[str, ...] = (), device: str = "cpu", tensor_parallel_size: int = 1):
        """What pull's preflight asks for the key of a server running ``model`` (None without a model): the key
        predicted from the bundle's own factors, no trace. The model argument and config are checked here,
        before anything is fetched."""
        from cachetool.warmup import compilation_config, compiler_errors_mapped

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
            return ServerKeyPredictor(model, compilation_config(config, overrides), device.split(":")[0],
                                      tensor_parallel_size)

    def traced_key(self, model: str, *, device: str = "cpu", config: Any = None, rank: int = 0,
                   dp_rank: int = 0) -> dict:
        """The cache key (``{"hash", "factors"}``) a server running ``model`` with ``config`` (a
        ``CompilationConfig``) looks up, from a Dynamo trace without compiling or writing anything."""
        from cachetool.warmup import check_model, compiler_errors_mapped
        from compiler.runner import compute_cache_key

        check_model(model)
        with compiler_errors_mapped():  # weights that do not fit the config, a guard the trace refused
            key, _layout = compute_cache_key(model, device, config, rank=rank, dp_rank=dp_rank)
        return {"hash": key.hash, "factors": key.factors.to_json()}
