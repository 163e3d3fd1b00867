"""The vLLM engine (``--engine vllm``): :class:`VllmEngine`, the :class:`~cachetool.engines.base.Engine` real vLLM
is: its declarations, its warm and check (a headless start, :mod:`~cachetool.engines.vllm.start`, after the key
question), its answers to the registry's questions. See docs/vllm.md."""

from __future__ import annotations

import logging
from pathlib import Path

from cachetool.cache_root import CacheRoot
from cachetool.engines.base import KeyCheckRequest, StartConfig, StartRequest
from cachetool.engines.vllm import jit_caches
from cachetool.engines.vllm.variables import VARIABLES
from cachetool.errors import UsageError
from cachetool.layouts.factors import Difference, Factors

__all__ = ["VllmEngine"]

# Options of the native engine, as a caller names them: with --engine vllm the same things are vLLM flags after --.
NATIVE_ONLY = {"device": "--device", "config": "--compilation-config", "overrides": "-cc.*", "rank": "--rank",
               "dp_rank": "--dp-rank", "tensor_parallel_size": "--tensor-parallel-size"}


class VllmEngine:
    name = "vllm"
    layout = "vllm"
    # torch_compile_cache/{hash}, torch_compile_cache/torch_aot_compile/{hash}; a JIT folder's facts (jit_facts.py)
    key_kinds = ("piecewise", "aot", "jit")
    cache_root_variable = "VLLM_CACHE_ROOT"
    variables = VARIABLES  # its own, beside cachetool.envs.VARIABLES
    cache_root_default = "~/.cache/vllm"
    fingerprint_fields = ("vllm", "cpu_isa")
    recorded_fields = ("gpu_driver",)
    platform_fields = ("cpu_isa",)  # vllm0.32.0-cpu-x86_64-avx2-torch2.13.0+cpu: vLLM's CPU kernels are the ISA's
    local_by_server = True
    summary = "real vLLM, headless, with vLLM's own flags after -- (e.g. -- -tp 2 --max-model-len 256)"

    @staticmethod
    def layout_rules():
        from cachetool.engines.vllm import layout

        return layout

    # ------------------------------------------------------------------------------------------ starts
    def server_environment(self, root: Path) -> dict[str, str]:
        """vLLM reads its compile cache from ``VLLM_CACHE_ROOT``; every JIT cache a start fills beside it (Triton's
        kernels of vLLM's own ops; on a GPU also FlashInfer's and DeepGEMM's JIT builds and Inductor's early
        compiles) only from its own variable: without them a fresh pod builds them all again
        (:mod:`~cachetool.engines.vllm.jit_caches`)."""
        from cachetool.facts import machine

        gpu = machine.cuda_device(0) is not None
        return {self.cache_root_variable: str(root), **jit_caches.server_environment(Path(root), gpu=gpu)}

    def start_config(self, config, overrides: tuple[str, ...]) -> StartConfig:
        return StartConfig(config)  # vLLM's root is VLLM_CACHE_ROOT's (a -cc is refused as a native option)

    def warm(self, request: StartRequest):
        from cachetool.engines.vllm.start import start
        from cachetool.engines.vllm.key_check import server_key_check

        self._refuse_native(request)
        self._announce()
        check = server_key_check(request.model, list(request.flags), request.cache_root)
        if check.compiles_nothing:
            raise UsageError(f"nothing to warm for this command: {check.compiles_nothing}; warm the server's compiling "
                             "command instead: its bundle's Triton kernels and model inspection serve an eager server "
                             "too (a pull for one installs just those)")
        return start("warm", request.model, cache_root=request.cache_root, flags=list(request.flags),
                     load_weights=request.load_weights, progress=request.messages)

    def check(self, request: StartRequest):
        """The key question first (:func:`~cachetool.engines.vllm.check_verdict.before_starting`): a server that
        compiles nothing, or a root without this server's key folder, is answered without starting vLLM; else
        vLLM starts on the cache root. ``require_hit``: a start that compiled (or a root that cannot hit) raises
        :class:`EngineMissError` naming why, with the result as its ``start`` (a caller reports it beside the
        failure)."""
        from cachetool.engines.vllm.check_verdict import before_starting
        from cachetool.engines.vllm.start import start
        from cachetool.engines.vllm.result import require_hit as must_hit
        from cachetool.engines.vllm.key_check import server_key_check

        self._refuse_native(request)
        self._announce()
        check = server_key_check(request.model, list(request.flags), request.cache_root)
        out = before_starting(check, check.cache_root, check.model, check.flags)
        if out is None:
            from cachetool.engines.vllm.root_writable import require_writable_for_vllm
            from cachetool.engines.vllm.server_env import environment_notes

            require_writable_for_vllm(request.cache_root, "check")  # before vLLM would die on a read-only root
            out = start("check", request.model, cache_root=request.cache_root, flags=list(request.flags),
                        load_weights=request.load_weights, progress=request.messages)
            out.environment_notes = environment_notes(check.cache_root, self.server_environment(check.cache_root),
                                                      CacheRoot.of(None, self))
        if request.require_hit:
            must_hit(out)
        return out

    def _announce(self) -> None:
        """The release notice (:meth:`notice`), first: a warm or check goes on."""
        if line := self.notice():
            logging.getLogger("cachetool.vllm").warning(line)

    def _refuse_native(self, request: StartRequest) -> None:
        given = [flag for name, flag in NATIVE_ONLY.items() if request.was_given(name)]
        if given or request.overrides or request.config is not None:
            raise UsageError(f"{(given or ['-cc.*'])[0]} is a native-engine option: with --engine {self.name} pass "
                             "vLLM's own flags after -- (e.g. -- -tp 2 -cc.mode=0)")

    # ------------------------------------------------------------------------------------------ facts
    def machine_facts(self, device: str | None) -> dict[str, str | None]:
        from cachetool.engines.vllm.facts import machine_facts

        return machine_facts(device)

    def notice(self) -> str | None:
        """The installed vLLM outside the tested releases (:mod:`~cachetool.engines.vllm.releases`), in a line."""
        from cachetool.engines.vllm.releases import notice_here

        return notice_here()

    def recognizes(self, fingerprint: dict) -> bool:
        return bool((fingerprint or {}).get("vllm"))  # a real vLLM tree records vLLM's version

    def platform_prefix(self, fingerprint: dict) -> str | None:
        version = (fingerprint or {}).get("vllm")
        return f"vllm{version}" if version else None

    # ------------------------------------------------------------------------------------------ keys
    def key_check(self, request: KeyCheckRequest):
        """The server's own command line after ``--`` (its model as ``--model``, ``vllm serve M``'s tag or
        ``--model M``) checked now; vLLM's verdict at preflight. None without a model or flags."""
        from cachetool.engines.vllm.key_check import server_key_check

        if request.config is not None or request.overrides or request.tensor_parallel_size != 1:
            raise UsageError("--compilation-config/-cc/--tensor-parallel-size are native-engine options: with "
                             "--engine vllm pass vLLM's own flags after -- (e.g. -- -tp 2)")
        if not (request.model or request.flags):
            return None
        return server_key_check(request.model, list(request.flags), request.cache_root, request.timeout)

    def check_factors(self, manifest, device: str) -> list[str]:
        return []  # the native compiler's factors do not describe vLLM's caches: its key check does

    def compare_keys(self, a: Factors | None, b: Factors | None, *, only: tuple[str, ...] | None = None,
                     cache: str = "") -> list[Difference]:
        from cachetool.facts.factor_compare import compare_keys

        return compare_keys(a, b, only=only, cache=cache)  # the one comparison of recorded factors

    def key_lines(self, factors: Factors) -> list[str]:
        """What the server must be started with to use the key folder, and what built it."""
        serve = factors.values("serve")
        if not serve:
            return []
        compiler = factors.values("compiler") or {}
        built = " ".join(f"{n} {compiler[n]}" for n in ("vllm", "torch", "device", "cpu_isa", "gpu", "capability")
                         if compiler.get(n) is not None)
        return [f"serves    model {serve.get('model')}  flags {' '.join(serve.get('flags') or []) or '-'}"
                f"  tp {serve.get('tensor_parallel_size', 1)}", f"built by  {built}"]

    def local_factors(self, device: str) -> Factors | None:
        return None  # vLLM computes its key from the server's flags: see server_differences

    def server_differences(self, keys: list[tuple[str, Factors | None]], model: str, flags: list[str],
                           scratch: Path) -> list[Difference]:
        from cachetool.layouts.entries import KeyFolder
        from cachetool.engines.vllm.key_check import server_key_check

        check = server_key_check(model, list(flags), CacheRoot.given(scratch))
        _key, diffs = check.closest([KeyFolder(h, "aot", f) for h, f in keys])  # a server's key is an AOT folder
        return diffs
