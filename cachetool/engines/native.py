"""This project's pipeline (:mod:`compiler`) as an engine: warm and check run it in this process (or N rank
processes); pull's key check predicts the key from the bundle's own factors without a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compiler import envs


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

    def key_check(self, model: str, *, cache_root: str | Path, **options: Any):
        from cachetool.api import server_key_predictor

        return server_key_predictor(model, **options)
