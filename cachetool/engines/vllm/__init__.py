"""Real vLLM as an engine (``--engine vllm``): warm and check start it headless in a child process
(:mod:`~cachetool.engines.vllm.engine`, :mod:`~cachetool.engines.vllm.child`); its key inputs are recorded and
compared in :mod:`~cachetool.engines.vllm.key`; the facts its caches depend on, read without importing vLLM, are in
:mod:`~cachetool.engines.vllm.facts`. See docs/vllm.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cachetool import envs

__all__ = ["VllmEngine"]


class VllmEngine:
    name = "vllm"
    layout = "vllm"
    cache_root_variable = "VLLM_CACHE_ROOT"

    def default_cache_root(self) -> Path:
        return Path(envs.get("VLLM_CACHE_ROOT") or "~/.cache/vllm").expanduser()

    def warm(self, model: str, *, cache_root: str | Path | None, **options: Any):
        from cachetool.engines.vllm.engine import start

        return start("warm", model, cache_root=cache_root or self.default_cache_root(), **options)

    def check(self, model: str, *, cache_root: str | Path | None, require_hit: bool = False, **options: Any):
        """Start vLLM on ``cache_root``; ``require_hit``: a start that compiled raises :class:`EngineMissError`
        naming why, with the start as its ``start`` (a caller reports what the start did beside the failure)."""
        from cachetool.engines.vllm.engine import require_hit as must_hit, start

        out = start("check", model, cache_root=cache_root or self.default_cache_root(), **options)
        if require_hit:
            must_hit(out)
        return out

    def machine_facts(self, device: str | None) -> dict[str, str | None]:
        from cachetool.engines.vllm.facts import machine_facts

        return machine_facts(device)

    def key_check(self, model: str, *, cache_root: str | Path, flags=(), timeout: float | None = None):
        from cachetool.engines.vllm.key_check import server_key_check

        return server_key_check(model, flags, cache_root, timeout)
