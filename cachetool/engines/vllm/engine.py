"""The vLLM engine (``--engine vllm``): :class:`VllmEngine`, the :class:`~cachetool.engines.base.Engine` real vLLM
is: its declarations, its start (a :class:`~cachetool.engines.vllm.start.VllmStartRequest` run headless,
:mod:`~cachetool.engines.vllm.start`, after the key question), its key question
(:class:`~cachetool.engines.vllm.key_check.VllmKeyRequest`), its answers to the registry's questions. See
docs/vllm.md."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cachetool.cache_root import CacheRoot
from cachetool.engines.base import EngineBase, listener, own_options
from cachetool.engines.vllm import jit_caches
from cachetool.engines.vllm.variables import VARIABLES
from cachetool.errors import UsageError
from cachetool.layouts.factors import Difference, Factors

__all__ = ["VllmEngine"]


NATIVE_KEY_OPTIONS = (
    "--compilation-config/-cc/--tensor-parallel-size are native-engine options: with --engine vllm "
    "pass vLLM's own flags after -- (e.g. -- -tp 2)"
)


class VllmEngine(EngineBase):
    name = "vllm"
    layout = "vllm"
    # torch_compile_cache/{hash}, torch_compile_cache/torch_aot_compile/{hash}; a JIT folder's facts (jit_facts.py)
    key_kinds = ("piecewise", "aot", "jit", "pieces")
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

    def start_request(self, command: str, model: str | None, cache_root: str | Path | None, options: Mapping[str, Any]):
        """The options parsed into a :class:`~.start.VllmStartRequest`: the server's flags after ``--`` (its
        ``engine_flags``), ``--load-weights``, ``--require-hit``; the native engine's options refused in one line
        (with --engine vllm the same things are vLLM flags after --). The root: ``cache_root``, else
        ``VLLM_CACHE_ROOT``'s, else vLLM's default."""
        from cachetool.engines.vllm.start import VllmStartRequest

        own = own_options(options, ("engine_flags", "load_weights", "require_hit"), self._refused)
        flags = tuple(own.pop("engine_flags", ()))
        return VllmStartRequest(
            command=command,
            cache_root=CacheRoot.of(cache_root, self),
            model=model,
            flags=flags,
            messages=listener(options, "engine_progress"),
            **own,
        )

    def start(self, request):
        """The key question first: a warm of a server that compiles nothing is refused; a check
        (:func:`~cachetool.engines.vllm.check_verdict.before_starting`) of one, or of a root without this server's
        key folder, is answered without starting vLLM; else vLLM starts on the cache root. ``require_hit``: a start
        that compiled (or a root that cannot hit) raises :class:`EngineMissError` naming why, with the result as
        its ``start`` (a caller reports it beside the failure)."""
        from cachetool.engines.vllm.key_check import server_key_check
        from cachetool.engines.vllm.start import start

        self._announce()
        check = server_key_check(request.model, list(request.flags), request.cache_root)
        if request.command == "warm":
            if check.compiles_nothing:
                raise UsageError(
                    f"nothing to warm for this command: {check.compiles_nothing}; warm the server's "
                    "compiling command instead: its bundle's Triton kernels and model inspection serve "
                    "an eager server too (a pull for one installs just those)"
                )
            return start(request)
        return self._check(request, check)

    def _check(self, request, check):
        from cachetool.engines.vllm.check_verdict import before_starting
        from cachetool.engines.vllm.result import require_hit as must_hit
        from cachetool.engines.vllm.start import start

        out = before_starting(check, check.cache_root, check.model, check.flags)
        if out is None:
            from cachetool.engines.vllm.root_writable import require_writable_for_vllm
            from cachetool.engines.vllm.server_env import environment_notes

            require_writable_for_vllm(request.cache_root, "check")  # before vLLM would die on a read-only root
            out = start(request)
            out.environment_notes = environment_notes(
                check.cache_root, self.server_environment(check.cache_root), CacheRoot.of(None, self)
            )
        if request.require_hit:
            must_hit(out)
        return out

    def _announce(self) -> None:
        """The release notice (:meth:`notice`), first: a warm or check goes on."""
        if line := self.notice():
            logging.getLogger("cachetool.vllm").warning(line)

    def _refused(self, name: str, flag: str) -> str:
        return (
            f"{flag} is a native-engine option: with --engine {self.name} pass vLLM's own flags after -- "
            "(e.g. -- -tp 2 -cc.mode=0)"
        )

    # ------------------------------------------------------------------------------------------ facts
    def machine_facts(self, device: str | None) -> dict[str, str | None]:
        from cachetool.engines.vllm.install_facts import machine_facts

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
    def key_request(self, cache_root: CacheRoot, device: str, timeout: float | None, options: Mapping[str, Any]):
        """The server's own command line after ``--`` (its model as ``--model``, ``vllm serve M``'s tag or
        ``--model M``): a :class:`~.key_check.VllmKeyRequest`, or None without a model or flags."""
        from cachetool.engines.vllm.key_check import VllmKeyRequest

        own = own_options(options, ("model", "engine_flags"), lambda _n, _f: NATIVE_KEY_OPTIONS)
        if not (own.get("model") or own.get("engine_flags")):
            return None
        return VllmKeyRequest(
            cache_root=cache_root, model=own.get("model"), flags=tuple(own.get("engine_flags", ())), timeout=timeout
        )

    def key_check(self, request):
        """The arguments checked now; vLLM's verdict at preflight (:func:`~.key_check.server_key_check`)."""
        from cachetool.engines.vllm.key_check import server_key_check

        return server_key_check(request.model, list(request.flags), request.cache_root, request.timeout)

    def key_lines(self, factors: Factors) -> list[str]:
        """What the server must be started with to use the key folder, and what built it."""
        serve = factors.values("serve")
        if not serve:
            return []
        compiler = factors.values("compiler") or {}
        built = " ".join(
            f"{n} {compiler[n]}"
            for n in ("vllm", "torch", "device", "cpu_isa", "gpu", "capability")
            if compiler.get(n) is not None
        )
        return [
            f"serves    model {serve.get('model')}  flags {' '.join(serve.get('flags') or []) or '-'}"
            f"  tp {serve.get('tensor_parallel_size', 1)}",
            f"built by  {built}",
        ]

    def server_differences(
        self, keys: list[tuple[str, Factors | None]], model: str, flags: list[str], scratch: Path
    ) -> list[Difference]:
        from cachetool.engines.vllm.key_check import server_key_check
        from cachetool.layouts.entries import KeyFolder

        check = server_key_check(model, list(flags), CacheRoot.given(scratch))
        _key, diffs = check.closest([KeyFolder(h, "aot", f) for h, f in keys])  # a server's key is an AOT folder
        return diffs
