"""This project's pipeline (:mod:`compiler`) as an engine: warm and check run it in this process (or N rank
processes, :mod:`.run`); pull's key check predicts the key from the bundle's own factors without a trace
(:mod:`.keys`); its facts and its layout are the compiler's (:mod:`.machine`, :mod:`.layout`)."""

from __future__ import annotations

from pathlib import Path

from cachetool import envs
from cachetool.engines.base import KeyCheckRequest, StartConfig, StartRequest
from cachetool.errors import UsageError
from cachetool.layouts.factors import Difference, Factors

class NativeEngine:
    name = "native"
    layout = "native"
    key_kinds = ("piecewise",)
    cache_root_variable = "CACHETOOL_CACHE_ROOT"
    variables = ()  # its own are in cachetool.envs.VARIABLES
    cache_root_default = envs.default(cache_root_variable)  # the registry's, which the pipeline's matches
    fingerprint_fields: tuple[str, ...] = ()
    recorded_fields: tuple[str, ...] = ()
    platform_fields: tuple[str, ...] = ()
    local_by_server = False
    summary = "this project's pipeline (compiler/): --model and its compilation config"

    @staticmethod
    def layout_rules():
        from cachetool.engines.native import layout

        return layout

    # ------------------------------------------------------------------------------------------ starts
    def server_environment(self, root: Path) -> dict[str, str]:
        return {self.cache_root_variable: str(root)}  # Inductor's and Triton's caches live inside the key folders

    def start_config(self, config, overrides: tuple[str, ...]) -> StartConfig:
        """The compilation config parsed once (the start reads it as it is), and the root its cache_dir names."""
        from cachetool.engines.native import run

        parsed = run.compilation_config(config, overrides)
        return StartConfig(parsed, parsed.cache_dir or None)

    def warm(self, request: StartRequest):
        from cachetool.engines.native import run

        return run.start(self._run(request))

    def check(self, request: StartRequest):
        from cachetool.engines.native import run

        return run.start(self._run(request))

    @staticmethod
    def _run(request: StartRequest):
        """The start as one :class:`~cachetool.engines.native.run.NativeRun`, once another engine's options are
        refused: its compilation config (parsed once, by :meth:`start_config`) on the request's cache root."""
        from cachetool.engines.native import run

        _refuse_flags(request.flags)
        if request.load_weights:
            raise UsageError("--load-weights is for --engine vllm (the native engine builds weights itself)")
        if not request.model:  # vLLM's may come after -- as in `vllm serve M`; this engine's only from --model
            from cachetool.engines.native.machine import model_presets

            raise UsageError(f"{request.command} needs --model: a preset ({', '.join(model_presets())}), a "
                             "config.json or a model folder")
        return run.NativeRun(command=request.command, model=request.model,
                             config=run.config_on_root(request.config, request.cache_root),  # parsed: start_config
                             device=request.device, rank=request.rank, dp_rank=request.dp_rank,
                             tensor_parallel_size=request.tensor_parallel_size, share_ranks=request.share_ranks,
                             require_hit=request.require_hit, on_progress=request.events)

    # ------------------------------------------------------------------------------------------ facts
    def machine_facts(self, device: str | None) -> dict[str, str | None]:
        return {}  # the common fingerprint fields say all (cachetool.bundle.fingerprint)

    def notice(self) -> str | None:
        return None  # the pipeline is this package's own: nothing untested to warn of

    def recognizes(self, fingerprint: dict) -> bool:
        return True  # the registry's last resort: a bundle no other engine claims is ours

    def platform_prefix(self, fingerprint: dict) -> str | None:
        return None  # cpu-x86_64-torch2.13.0+cpu, cuda-sm90-torch2.11.0+cu130: the platform alone

    # ------------------------------------------------------------------------------------------ keys
    def key_check(self, request: KeyCheckRequest):
        """What pull's preflight asks for the key of a server running ``request.model`` (None without a model):
        the key predicted from the bundle's own factors, no trace; the model and config are checked now."""
        from cachetool.engines.native.keys import server_key_check

        _refuse_flags(request.flags)
        return server_key_check(request.model, config=request.config, overrides=tuple(request.overrides),
                                device=request.device or "cpu", tensor_parallel_size=request.tensor_parallel_size)

    def check_factors(self, manifest, device: str) -> list[str]:
        from cachetool.engines.native.keys import check_machine_factors

        return check_machine_factors(manifest, device)

    def compare_keys(self, a: Factors | None, b: Factors | None, *, only: tuple[str, ...] | None = None,
                     cache: str = "") -> list[Difference]:
        from cachetool.facts.factor_compare import compare_keys

        return compare_keys(a, b, only=only, cache=cache)

    def key_lines(self, factors: Factors) -> list[str]:
        return []  # its factor hashes (env, config, code, compiler) say all

    def local_factors(self, device: str) -> Factors | None:
        from cachetool.engines.native.keys import local_factors

        return local_factors(device)

    def server_differences(self, keys: list[tuple[str, Factors | None]], model: str, flags: list[str],
                           scratch: Path) -> list[Difference]:
        raise UsageError("--model and flags after -- on diff are for --engine vllm")


def _refuse_flags(flags: tuple[str, ...]) -> None:
    """Flags after ``--`` are a vLLM server's: the native engine takes none."""
    if flags:
        raise UsageError(f"unexpected argument(s) {' '.join(flags)!r}: flags after -- are vLLM's, for --engine vllm")
