"""Pull's question for a vLLM server, asked before any blob is fetched: will the bundle's key folder be the one
``vllm serve`` with these flags, this environment and this installation looks up? (See :class:`ServerKeyCheck`.)"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from cachetool.engines.vllm import key, launch
from cachetool.engines.vllm.engine import (check_model, child_env, python, require_vllm, run_child, server_argv,
                                           server_model, short_key, tensor_parallel_size)
from cachetool.errors import PreflightError
from cachetool.bundle.factors import short_repr


@dataclasses.dataclass
class ServerKeyCheck:
    """Pull's question for a vLLM server (``pull --engine vllm [--model M] -- SERVER FLAGS``): will the bundle's
    key folder be the one this server looks up? First without vLLM: the server's launch inputs (its model,
    ``config.json``, flags without the server-only ones, environment, vLLM and torch) equal to those the warm
    recorded, and the traced files unchanged, mean the warm's folder (milliseconds). Otherwise vLLM itself is
    asked (a ``key`` child: vLLM's parser and config, no engine), which names the field that differs or finds
    that the difference does not reach the key. Before any blob is fetched."""

    model: str
    flags: list[str]
    cache_root: Path
    timeout: float | None = None
    seconds: float = 0.0        # what the check cost
    asked_vllm: bool = False    # the launch inputs differed, so vLLM itself was asked

    def closest(self, keys: Any) -> tuple[Any, list]:
        """The bundle key (``manifest.KeyFolder``) this server will use with no difference, or the first one and
        its differences (model path, config fields, env variables, Inductor config, versions, traced files)."""
        candidates = [k for k in keys if k.factors is not None and k.factors.values("serve") is not None]
        if not candidates:
            raise PreflightError("preflight: bundle cannot hit here: it records no vLLM key inputs (warm it with "
                                 "cachetool warm --engine vllm)")
        t0 = time.perf_counter()
        try:
            # the traced files as this installation has them, read once for both paths (no vLLM needed)
            ids = sorted({fid for k in candidates for fid in k.factors.values("code") or {}})
            traced = launch.traced_digests(ids, python())
            for k in candidates:
                if self.same_launch(k.factors, traced):
                    return k, []
            self.asked_vllm = True
            local = self.local_inputs()
            first = None
            for k in candidates:
                diffs = key.differences(k.factors, local["key_inputs"], traced)
                if not diffs:
                    return k, []
                first = first or (k, diffs)
            return first
        finally:
            self.seconds = round(time.perf_counter() - t0, 3)

    def same_launch(self, factors: Any, traced: dict[str, str | None]) -> bool:
        """The fast path: equal launch inputs and traced files (``traced``: as read here; no vLLM, no torch)."""
        recorded = factors.values("launch")
        if not recorded:
            return False
        server_only = recorded.get("server_only_options") or {}
        tp = tensor_parallel_size(self.flags)
        here = launch.LaunchInputs.of(self.model, self.flags, child_env(None, tp), server_only)
        if here.differences(recorded):
            return False
        code = factors.values("code") or {}
        return all(traced.get(fid) == digest for fid, digest in code.items())

    def expected_for(self, manifest: Any) -> str:
        """The hash of the bundle's key folder this server will use, or :class:`PreflightError` naming the first
        difference."""
        k, diffs = self.closest(manifest.keys)
        if not diffs:
            return k.hash
        d = diffs[0]
        more = f" (also: {', '.join(x.name for x in diffs[1:4])}{', ...' if len(diffs) > 4 else ''})" \
            if len(diffs) > 1 else ""
        what = {"compiler": "version", "config": "config field", "env": "env factor", "code": "traced file",
                "inductor": "Inductor setting"}
        raise PreflightError(f"preflight: bundle cannot hit here: {what.get(d.category, d.category)} {d.name!r} "
                             f"differs: bundle {short_repr(d.a, 160)}, this server {short_repr(d.b, 160)}{more} "
                             f"(cache {short_key(k.hash)})")

    def describe(self) -> str:
        """How the verdict was reached, for the preflight line."""
        how = "vLLM asked" if self.asked_vllm else "launch inputs equal, vLLM not asked"
        return f"{how}: {self.seconds:.1f} s"

    def local_inputs(self) -> dict:
        require_vllm()
        # vLLM writes its model-inspection cache under VLLM_CACHE_ROOT (not hashed): the child's own scratch root
        # keeps the pull's root untouched until the install, and its log an unlinked file.
        with tempfile.TemporaryFile() as log:
            return run_child({"mode": "key", "model": self.model, "argv": server_argv(self.flags)}, None, log,
                             timeout=self.timeout)


def server_key_check(model: str | None, flags: list[str] | tuple[str, ...], cache_root: str | Path,
                     timeout: float | None = None) -> ServerKeyCheck:
    """The arguments checked now (before anything is fetched), the question asked at preflight. The model may
    be cachetool's ``--model`` or named in the server's flags."""
    require_vllm()
    model, rest = server_model(model, list(flags))
    check_model(model)
    return ServerKeyCheck(model, rest, Path(cache_root).expanduser().resolve(), timeout)
