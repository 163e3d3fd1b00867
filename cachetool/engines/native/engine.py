"""This project's pipeline (:mod:`compiler`) as an engine: a start's options parse into one
:class:`~cachetool.engines.native.start.NativeStartRequest`, which warm and check run in this process (or N rank
processes, :mod:`.start`); pull's key question parses into a :class:`NativeKeyRequest`, answered by predicting the key
from the bundle's own factors without a trace (:mod:`.key`); its facts and its layout are the compiler's
(:mod:`.machine`, :mod:`.layout`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cachetool import envs
from cachetool.cache_root import CacheRoot
from cachetool.engines.base import EngineBase, listener, own_options
from cachetool.errors import UsageError
from cachetool.layouts.factors import Factors

__all__ = ["NativeEngine", "NativeKeyRequest"]

# What a start and a pull's key question take of the callers' options (engines.base.START_OPTIONS): everything
# but the vLLM engine's (flags after --, --load-weights).
START_TAKES = ("device", "config", "overrides", "rank", "dp_rank", "tensor_parallel_size", "share_ranks", "require_hit")
KEY_TAKES = ("model", "config", "overrides", "tensor_parallel_size")


@dataclasses.dataclass(frozen=True, kw_only=True)
class NativeKeyRequest:
    """Pull's key question for a native server: its model and compilation config (parsed when it is asked)."""

    cache_root: CacheRoot
    device: str = "cpu"
    model: str | None = None
    config: Any = None
    overrides: tuple[str, ...] = ()
    tensor_parallel_size: int = 1


class NativeEngine(EngineBase):
    name = "native"
    layout = "native"
    key_kinds = ("piecewise",)
    cache_root_variable = "CACHETOOL_CACHE_ROOT"
    cache_root_default = envs.default(cache_root_variable)  # the registry's, which the pipeline's matches
    summary = "this project's pipeline (compiler/): --model and its compilation config"
    loggers = ("compiler",)  # the pipeline's log lines

    @staticmethod
    def layout_rules():
        from cachetool.engines.native import layout

        return layout

    def server_environment(self, root: Path) -> dict[str, str]:
        return {self.cache_root_variable: str(root)}  # Inductor's and Triton's caches live inside the key folders

    # ------------------------------------------------------------------------------------------ starts
    def start_request(self, command: str, model: str | None, cache_root: str | Path | None, options: Mapping[str, Any]):
        """The options parsed once into a :class:`~.start.NativeStartRequest`: the compilation config parsed here
        (the start reads it as it is) and put on the cache root (``cache_root``, else the config's ``cache_dir``,
        else the variable's, else the default)."""
        from cachetool.engines.native import start

        _refuse_flags(tuple(options.get("engine_flags") or ()))
        own = own_options(options, START_TAKES, _refused)
        config = start.compilation_config(own.pop("config", None), own.pop("overrides", ()))  # parsed once, here
        root = CacheRoot.of(cache_root, self, config.cache_dir or None)  # type: ignore[arg-type]  # baseline (issue 46)
        if not model:  # vLLM's may come after -- as in `vllm serve M`; this engine's only from --model
            from cachetool.engines.native.machine import model_presets

            raise UsageError(
                f"{command} needs --model: a preset ({', '.join(model_presets())}), a config.json or a model folder"
            )
        return start.NativeStartRequest(
            command=command,
            model=model,
            cache_root=root,
            config=start.config_on_root(config, root),
            on_progress=listener(options, "on_progress"),
            **own,
        )

    def start(self, request):
        from cachetool.engines.native import start

        return start.start(request)

    # ------------------------------------------------------------------------------------------ keys
    def key_request(
        self, cache_root: CacheRoot, device: str, timeout: float | None, options: Mapping[str, Any]
    ) -> NativeKeyRequest | None:
        _refuse_flags(tuple(options.get("engine_flags") or ()))
        own = own_options({k: v for k, v in options.items() if k != "engine_flags"}, KEY_TAKES, _refused)
        if "overrides" in own:
            own["overrides"] = tuple(own["overrides"])
        return NativeKeyRequest(cache_root=cache_root, device=device, **own) if own else None

    def key_check(self, request: NativeKeyRequest):
        """What pull's preflight asks for the key of a server running ``request.model`` (None without a model):
        the key predicted from the bundle's own factors, no trace; the model and config are checked now."""
        from cachetool.engines.native.key import server_key_check

        return server_key_check(
            request.model,
            config=request.config,
            overrides=request.overrides,
            device=request.device or "cpu",
            tensor_parallel_size=request.tensor_parallel_size,
        )

    # ------------------------------------------------------------------------------------------ its own API
    # (what cachetool.api offers of this engine alone, asked through the registry: the API imports no engine)
    @staticmethod
    def compilation_config(
        config: Any = None, overrides: tuple[str, ...] | list[str] = (), cache_root: str | Path | None = None
    ):
        """``config`` (a CompilationConfig, a dict, JSON, or None) with the ``-cc.KEY=VALUE`` ``overrides``;
        ``cache_root`` sets its ``cache_dir``."""
        from cachetool.engines.native.start import compilation_config

        return compilation_config(config, overrides, cache_root)

    @staticmethod
    def traced_key(model: str, *, device: str, config: Any, rank: int, dp_rank: int) -> dict:
        """The cache key a server of ``model`` will look up, by a Dynamo trace (nothing compiled or written)."""
        from cachetool.engines.native.key import traced_key

        return traced_key(model, device=device, config=config, rank=rank, dp_rank=dp_rank)

    @staticmethod
    def expected_key_check(expected: str):
        """An install's key check that accepts only the cache key ``expected``."""
        from cachetool.engines.native.key import NativeKeyCheck

        return NativeKeyCheck(expected=expected)  # type: ignore[arg-type]  # baseline (issue 46)

    # ------------------------------------------------------------------------------------------ facts
    def machine_facts(self, device: str | None) -> dict[str, str | None]:
        return {}  # the common fingerprint fields say all (cachetool.bundle.fingerprint)

    def recognizes(self, fingerprint: dict) -> bool:
        return True  # the registry's last resort: a bundle no other engine claims is ours

    def check_factors(self, manifest, device: str) -> list[str]:
        from cachetool.engines.native.key import check_machine_factors

        return check_machine_factors(manifest, device)

    def local_factors(self, device: str) -> Factors | None:
        from cachetool.engines.native.key import local_factors

        return local_factors(device)

    def server_differences(self, keys, model, flags, scratch):
        raise UsageError("--model and flags after -- on diff are for --engine vllm")


def _refused(name: str, flag: str) -> str:
    if name == "load_weights":
        return "--load-weights is for --engine vllm (the native engine builds weights itself)"
    return f"{flag} is another engine's option: the native engine takes --model and its compilation config"


def _refuse_flags(flags: tuple[str, ...]) -> None:
    """Flags after ``--`` are a vLLM server's: the native engine takes none."""
    if flags:
        raise UsageError(f"unexpected argument(s) {' '.join(flags)!r}: flags after -- are vLLM's, for --engine vllm")
