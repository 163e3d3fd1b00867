"""Pull's question for a vLLM server, asked before any blob is fetched: will the bundle's key folder be the one
``vllm serve`` with these flags, this environment and this installation looks up? (See :class:`ServerKeyCheck`.)"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from cachetool.cache_root import CacheRoot
from cachetool.engines.vllm import install_facts, key, launch, piece_paths, server_command, verdict
from cachetool.engines.vllm.child import process as child_process
from cachetool.engines.vllm.child.env import child_env
from cachetool.engines.vllm.headless import server_argv, server_model, tensor_parallel_size
from cachetool.engines.vllm.prerequisites import check_model, python, require_vllm
from cachetool.engines.vllm.result import short_key
from cachetool.errors import PreflightError
from cachetool.layouts.factors import also_named, short_repr


@dataclasses.dataclass
class ServerKeyCheck:
    """Pull's question for a vLLM server (``pull --engine vllm [--model M] -- SERVER FLAGS``): will the bundle's
    key folder be the one this server looks up? Answered in stages, each only when the one before cannot:

    1. the server's launch inputs (model, ``config.json``, flags without the server-only ones, environment, vLLM
       and torch) equal the warm's and the traced files are unchanged: the warm's folder (milliseconds);
    2. every difference sorted by what the warm recorded of vLLM's hashing (:mod:`~cachetool.engines.vllm.verdict`):
       one vLLM hashes is a miss naming it, none but unhashed ones a hit (milliseconds);
    3. a difference nothing recorded decides: vLLM itself is asked (a ``key`` child: vLLM's parser and config, no
       engine; seconds), which names the field that differs or finds that nothing reaching the key does.

    A server that compiles no graph (``--enforce-eager``, ``-O0``, compilation mode NONE) reads no key folder:
    ``compiles_nothing`` says why, and the pull installs only the folders it still reads (vLLM's Triton kernels
    and model inspection, which an eager start JIT-compiles or computes too). All of it before any blob is
    fetched."""

    model: str
    flags: list[str]
    cache_root: Path
    timeout: float | None = None
    compiles_nothing: str | None = None  # why this server compiles no graph (an eager server), else None
    seconds: float = 0.0  # what the check cost
    stage: str = ""  # how the verdict was reached (describe())
    asked_vllm: bool = False  # a difference only vLLM could judge: it was asked

    def closest(self, keys: Any) -> tuple[Any, list]:
        """The bundle key (``manifest.KeyFolder``) this server will use with no difference, or the first one and
        its differences (model path, config fields, flags, env variables, Inductor config, versions, traced
        files)."""
        candidates = [k for k in keys if k.factors is not None and k.factors.values("serve") is not None]
        if not candidates:
            raise PreflightError(
                "preflight: bundle cannot hit here: it records no vLLM key inputs (warm it with "
                "cachetool warm --engine vllm)"
            )
        t0 = time.perf_counter()
        try:
            # the traced files as this installation has them, read once for every stage (no vLLM needed)
            ids = sorted({fid for k in candidates for fid in k.factors.values("code") or {}})
            traced = launch.traced_digests(ids, python())
            for k in candidates:
                if self.same_launch(k.factors, traced):
                    self.stage = "launch inputs equal, vLLM not asked"
                    return k, []
            judged = [(k, self.judge(k.factors, traced)) for k in candidates]
            for k, v in judged:
                if v.hit:
                    self.stage = f"only unhashed differences ({_listed(v.unhashed)}), vLLM not asked"
                    return k, []
            open_questions = [(k, v) for k, v in judged if not v.decided]
            if not open_questions:
                k, v = judged[0]
                self.stage = "a difference vLLM hashes, vLLM not asked"
                return k, v.misses()
            return self.ask_vllm(open_questions, traced, judged[0])
        finally:
            self.seconds = round(time.perf_counter() - t0, 3)

    def judge(self, factors: Any, traced: dict[str, str | None]) -> verdict.Verdict:
        """Stage 2 for one bundle key: the server's differences from its warm, sorted without vLLM."""
        here = self.launch_inputs(factors)
        return verdict.judge(
            factors,
            model=self.model,
            flags=list(here.flags),
            env=here.env,
            versions={"vllm": here.vllm, "torch": here.torch},
            traced=traced,
        )

    def ask_vllm(self, open_questions: list, traced: dict[str, str | None], first: tuple) -> tuple[Any, list]:
        """Stage 3: vLLM's own key inputs for this server, compared with each key whose verdict was open."""
        self.asked_vllm = True
        self.stage = f"vLLM asked ({_listed(open_questions[0][1].unknown)} not decided by the warm's facts)"
        local = self.local_inputs()
        for k, _v in open_questions:
            diffs = key.differences(k.factors, local["key_inputs"], traced)
            if not diffs:
                return k, []
        k, v = first
        return (k, v.misses()) if v.hashed else (k, key.differences(k.factors, local["key_inputs"], traced))

    def launch_inputs(self, factors: Any) -> launch.LaunchInputs:
        recorded = factors.values("launch") or {}
        server_only = recorded.get("server_only_options")
        server_only = server_only if isinstance(server_only, dict) else {}
        hashed = factors.values("env")  # what the warm's vLLM release hashes, whatever the names
        return launch.LaunchInputs.of(
            self.model,
            self.flags,
            child_env(None, tensor_parallel_size(self.flags)),
            server_only,
            hashed=hashed if isinstance(hashed, dict) else {},
        )

    def same_launch(self, factors: Any, traced: dict[str, str | None]) -> bool:
        """Stage 1: equal launch inputs and traced files (``traced``: as read here; no vLLM, no torch)."""
        recorded = factors.values("launch")
        if not recorded:
            return False
        if self.launch_inputs(factors).differences(recorded):
            return False
        code = factors.values("code") or {}
        return all(traced.get(fid) == digest for fid, digest in code.items())

    def expected_for(self, manifest: Any) -> str:
        """The hash of the bundle's key folder this server will use, or :class:`PreflightError` naming the first
        difference; also where the vLLM that will serve (the installed one, else the bundle's: an init-container's
        image may hold no vLLM) loads compiled pieces from the path the warm saved them at and the cache root is
        elsewhere (:func:`~cachetool.engines.vllm.piece_paths.refuse_elsewhere`: the server would not start)."""
        found = self.key_among(manifest.keys)
        vllm_version = install_facts.vllm_version() or (manifest.fingerprint or {}).get("vllm")
        piece_paths.refuse_elsewhere(manifest, self.cache_root, vllm_version)
        return found

    def key_among(self, keys: Any) -> str:
        """The hash of the key folder (of a bundle, or of a cache root) this server will use, or
        :class:`PreflightError` naming the first difference."""
        k, diffs = self.closest(keys)
        if not diffs:
            return k.hash
        d = diffs[0]
        more = also_named([x.name for x in diffs[1:]])
        what = {
            "compiler": "version",
            "config": "config field",
            "flag": "flag",
            "env": "env factor",
            "code": "traced file",
            "inductor": "Inductor setting",
        }
        raise PreflightError(
            f"preflight: bundle cannot hit here: {what.get(d.category, d.category)} {d.name!r} "
            f"differs: bundle {short_repr(d.a, 160)}, this server {short_repr(d.b, 160)}{more} "
            f"(cache {short_key(k.hash)}; {self.stage})"
        )

    def describe(self) -> str:
        """How the verdict was reached, for the preflight line."""
        return f"{self.stage or 'not asked'}: {self.seconds:.1f} s"

    def local_inputs(self) -> dict:
        require_vllm()
        # vLLM writes its model-inspection cache under VLLM_CACHE_ROOT (not hashed): the child's own scratch root
        # keeps the pull's root untouched until the install, and its log an unlinked file.
        with tempfile.TemporaryFile() as log:
            return child_process.run_child(
                {"mode": "key", "model": self.model, "argv": server_argv(self.flags)}, None, log, timeout=self.timeout
            )


def server_key_check(
    model: str | None, flags: list[str] | tuple[str, ...], cache_root: CacheRoot, timeout: float | None = None
) -> ServerKeyCheck:
    """The arguments checked now (before anything is fetched), the question asked at preflight. The model may
    be cachetool's ``--model`` or named in the server's flags."""
    require_vllm()
    model, rest = server_model(model, list(flags))
    check_model(model)
    eager = server_command.compiles_nothing(rest, child_env(None, tensor_parallel_size(rest)))
    return ServerKeyCheck(model, rest, cache_root.resolved, timeout, compiles_nothing=eager)


def _listed(items: list[str], limit: int = 3) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


@dataclasses.dataclass(frozen=True, kw_only=True)
class VllmKeyRequest:
    """Pull's key question for a vLLM server, the vLLM engine's own request: the server's model and flags after
    ``--``, asked at the start of the pull (:func:`server_key_check`)."""

    cache_root: CacheRoot
    model: str | None = None  # None: named in ``flags`` as the server names it
    flags: tuple[str, ...] = ()
    timeout: float | None = None  # the pull's: a key child that asks vLLM is bounded by it
