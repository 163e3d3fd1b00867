"""The real OpenAI server, ``vllm serve``, started once on a cache root: the oracle for cachetool's verdicts.

:func:`serve_once` runs ``python -m vllm.entrypoints.cli.main serve MODEL FLAGS`` (what the ``vllm`` command runs:
the API server, the engine core in its own process) with ``VLLM_CACHE_ROOT`` = the root and the server environment
``pull`` prints (every JIT cache into the root: as docs/vllm.md starts a server), waits for ``/health``, sends one
completion, asks every worker what it compiled and loaded, stops the server (its process group: SIGTERM, or SIGKILL
when it was stopped while compiling) and reports what it did to the root: the key folders it added (a new folder is
a key cachetool did not predict), the kernel binaries it wrote (what it compiled), and vLLM's own facts (the AOT key
folder, AOT artifact loaded, piecewise graphs loaded or compiled: :mod:`~cachetool.engines.vllm.worker_facts`), read
through the server's development endpoint ``POST /collective_rpc`` from the worker extension
:mod:`cachetool_vllm_probe`: ``VLLM_SERVER_DEV_MODE=1`` and ``--worker-extension-cls``, which vLLM leaves out of its
key (env factors; ``ParallelConfig.compute_hash``). Two things only its log has: the engine-init seconds (``init
engine (profile, create kv cache, warmup model) took N s``: measured in the engine-core process, reported nowhere
else) and vLLM's reason when it did not load its AOT artifact. The tests and the benchmarks (``bench_vllm.py``,
``vllm_matrix.py``) judge pull, check and diff by it."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from cachetool import run_logs
from cachetool.cache_root import CacheRoot
from cachetool.engines.vllm import install_facts, releases, worker_facts
from cachetool.engines.vllm.child.env import PROBE_DIR
from cachetool.engines.vllm.engine import VllmEngine
from cachetool.engines.vllm.prerequisites import python
from cachetool.engines.vllm.root_files import RootWatch
from cachetool.process_tree import end_group

# vLLM's engine-init seconds, in its log only (printed by every tested release: docs/vllm.md, "Tested vLLM releases")
ENGINE_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
PROBE = ["--worker-extension-cls", "cachetool_vllm_probe.CachetoolProbe"]
STOP_GRACE = 30.0  # SIGTERM -> SIGKILL for a server that came up


@dataclasses.dataclass
class ServerRun:
    """What one real server start did on a cache root."""

    command: list[str]
    ready_seconds: float  # exec to /health answering
    engine_init_seconds: float | None  # vLLM's "init engine ... took N s"
    compile_seconds: float | None  # vLLM's "torch.compile took N s in total"
    completion: dict | None  # the completion's JSON (None: it failed)
    new_key_folders: list[str]  # AOT key folders the server added to the root
    new_kernels: int  # kernel binaries the server wrote under the root
    cache_key: str | None  # the AOT key folder the server used (vLLM's facts; None: not asked)
    aot_loaded: bool
    aot_error: str | None
    graphs_compiled: int  # graphs Inductor lowered in the workers (worker_facts.graphs_compiled)
    evidence: list[str]  # what it compiled or wrote (worker_facts.compiled_evidence)
    facts: bool  # the workers answered (else only the root's files judge)
    log: str
    vllm_counters: dict[str, int] = dataclasses.field(default_factory=dict)  # vLLM's own, summed
    reports: list[dict] = dataclasses.field(default_factory=list)  # the workers' reports (worker_facts.recorded)
    written_outside: dict[str, int] = dataclasses.field(default_factory=dict)  # JIT files written outside the root

    @property
    def compiled(self) -> bool:
        """The server compiled something: a key folder cachetool did not have, a kernel, a graph Inductor lowered,
        or an AOT artifact saved where the release loads it (the one rule of :func:`worker_facts.compiled_evidence`)."""
        return bool(self.new_key_folders or self.evidence)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except (urllib.error.URLError, OSError):
        return 0


def _complete(port: int, model: str, api_key: str | None) -> dict | None:
    body = json.dumps({"model": model, "prompt": [1, 5, 7, 11], "max_tokens": 4}).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _workers(port: int, api_key: str | None) -> list[dict] | None:
    """Every worker's ``cachetool_report`` through the server's ``/collective_rpc`` (None: no answer)."""
    body = json.dumps({"method": "cachetool_report", "timeout": 120}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/collective_rpc", data=body, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=180) as r:
            results = json.loads(r.read()).get("results")
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None
    return results if isinstance(results, list) and all(isinstance(w, dict) for w in results) else None


def _stop(proc: subprocess.Popen, compiling: bool) -> None:
    """End the server's process group (API server, engine core, workers). A server that answered gets SIGTERM and
    :data:`STOP_GRACE` s to shut down as a user's would; one stopped while it compiles is killed outright: vLLM
    defers SIGTERM during its start (the API server waited the whole grace for its engine core every time), and
    nothing it leaves on its throwaway root is read."""
    end_group(proc.pid, grace=0 if compiling else STOP_GRACE)
    proc.wait()


def serve_once(
    model: str,
    cache_root: CacheRoot | str | Path,
    flags: list[str],
    *,
    env: dict[str, str] | None = None,
    api_key: str | None = None,
    timeout: float = 900,
    stop_when_compiling: bool = False,
) -> ServerRun:
    """Start ``vllm serve MODEL FLAGS`` on ``cache_root`` (host 127.0.0.1, a free port, ``api_key`` if given),
    send one completion (to the first ``--served-model-name``, else the model), stop it; see the module docstring.
    ``env`` adds to this process's environment. ``stop_when_compiling``: stop the server as soon as it shows that
    it compiles (a key folder the root did not have, a kernel written under the root): its verdict is known then,
    and the rest of its compile would only cost time (the run then has no completion)."""
    root = CacheRoot.given(cache_root).resolved
    watch = RootWatch.of(root)
    port = free_port()
    cmd = [
        python(),
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        model,
        *flags,
        *PROBE,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *(["--api-key", api_key] if api_key else []),
    ]
    # started as docs/vllm.md says: with the server environment pull prints (the root's JIT caches through their
    # variables; ``env`` may say otherwise)
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        **VllmEngine().server_environment(root),
        **(env or {}),
        "VLLM_CACHE_ROOT": str(root),
        "VLLM_SERVER_DEV_MODE": "1",
    }
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROBE_DIR), full_env.get("PYTHONPATH")) if p)
    log_path = run_logs.new_log("vllm-serve")
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
        )
        try:
            ready, compiling = None, False
            while time.perf_counter() - t0 < timeout and proc.poll() is None:
                if _get(f"http://127.0.0.1:{port}/health") == 200:
                    ready = time.perf_counter() - t0
                    break
                compiling = stop_when_compiling and bool(watch.new_key_folders() or watch.new_kernels())
                if compiling:
                    break
                time.sleep(0.5)
            completion = _complete(port, served_name(model, flags), api_key) if ready is not None else None
            workers = _workers(port, api_key) if ready is not None else None
        finally:
            _stop(proc, compiling)
    text = log_path.read_text(errors="replace")
    done = worker_facts.from_workers(workers) if workers else None
    new_kernels = len(watch.new_kernels())
    aot_expected = releases.aot_loads(install_facts.vllm_version(), releases.device_here())
    init = ENGINE_INIT.findall(text)
    return ServerRun(
        command=cmd,
        ready_seconds=round(ready, 3) if ready is not None else -1.0,
        engine_init_seconds=float(init[-1]) if init else None,
        compile_seconds=done.compilation_seconds if done else None,
        completion=completion,
        new_key_folders=sorted(watch.new_key_folders()),
        new_kernels=new_kernels,
        cache_key=done.cache_key if done else None,
        aot_loaded=bool(done and done.aot_loaded),
        aot_error=None if done and done.aot_loaded else worker_facts.aot_failure(log_path),
        graphs_compiled=done.graphs_compiled if done else 0,
        evidence=worker_facts.compiled_evidence(done, new_kernels=new_kernels, aot_expected=aot_expected),
        facts=done is not None,
        log=str(log_path),
        vllm_counters=done.vllm_counters if done else {},
        reports=[worker_facts.recorded(w) for w in workers or []],
        written_outside=watch.written_outside(),
    )


def served_name(model: str, flags: list[str]) -> str:
    """The name the server answers to: its first ``--served-model-name``, else the model."""
    for i, flag in enumerate(flags):
        name, eq, value = flag.partition("=")
        if name in ("--served-model-name", "--served_model_name"):
            return value if eq else (flags[i + 1] if i + 1 < len(flags) else model)
    return model
