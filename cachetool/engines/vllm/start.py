"""One headless start of real vLLM on a cache root (:func:`start`, behind ``warm`` and ``check``), in named phases:

1. ``prerequisites``: vLLM is installed, the model is a folder with ``config.json`` (or a hub id served from the
   local cache), no flag after ``--`` is one cachetool sets itself (:mod:`~cachetool.engines.vllm.prerequisites`,
   :mod:`~cachetool.engines.vllm.headless`);
2. ``snapshot``: the kernel binaries the cache root already holds (:mod:`~cachetool.engines.vllm.root_files`);
3. ``engine``: :mod:`cachetool.engines.vllm.child.in_vllm.child` starts vLLM on ``VLLM_CACHE_ROOT`` offline
   (dummy weights unless ``load_weights``, no tokenizer), sends prefill and decode requests, and every worker
   reports what it compiled, loaded and mapped (:mod:`~cachetool.engines.vllm.child.process`); vLLM's own log goes to a file whose
   path the result names;
4. ``report``: new kernel binaries are what Inductor compiled, mapped kernels that were there before are what it
   loaded; vLLM's log tells whether its AOT artifact loaded (and vLLM's reason when not): a
   :class:`~cachetool.engines.vllm.result.VllmStartResult`;
5. ``record`` (warm only): ``cache_key_factors.json`` in each rank folder of the key folder vLLM used, with the
   key inputs (:mod:`cachetool.engines.vllm.key`) that a pull compares before downloading
   (:mod:`~cachetool.engines.vllm.record`).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable

from cachetool import run_logs
from cachetool.cache_root import CacheRoot
from cachetool.engines.vllm import jit_caches, jit_facts, releases, unfinished, worker_facts
from cachetool.engines.vllm.child.process import run_child
from cachetool.engines.vllm.child.progress import heartbeat
from cachetool.engines.vllm.headless import server_argv, server_model
from cachetool.engines.vllm.prerequisites import check_model, require_vllm
from cachetool.engines.vllm.record import record_key_inputs
from cachetool.engines.vllm.result import VllmStartResult
from cachetool.engines.vllm.root_files import RootWatch

# The first requests of a server: a short and a longer prompt, and a one-token one (decode-sized batches follow).
PROMPTS = ([1, 5, 7, 11], list(range(1, 48)), [3])
MAX_TOKENS = 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class VllmStartRequest:
    """One headless start of real vLLM, the vLLM engine's own request (each default written here alone)."""

    command: str  # "warm" (records the key inputs) or "check"
    cache_root: CacheRoot
    model: str | None = None  # None: named in ``flags`` as the server names it (a tag, ``--model``)
    flags: tuple[str, ...] = ()  # `vllm serve` flags, read by vLLM's own parser
    load_weights: bool = False  # the model's weights instead of dummy ones
    require_hit: bool = False  # check: a start that compiled raises EngineMissError naming why
    messages: Callable[[str], None] | None = None  # its message lines while it runs

    def __post_init__(self) -> None:
        object.__setattr__(self, "flags", tuple(self.flags))


def start(request: VllmStartRequest) -> VllmStartResult:
    """Start real vLLM headless on the request's cache root as ``vllm serve MODEL FLAGS`` would configure and run
    it; see the module docstring for the phases."""
    command, cache_root, load_weights = request.command, request.cache_root, request.load_weights
    say = request.messages or (lambda _m: None)
    version = require_vllm()
    model, rest = server_model(request.model, list(request.flags))
    check_model(model)
    root = cache_root.resolved
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    watch = RootWatch.of(root)
    argv = server_argv(rest, load_weights)
    log_path = run_logs.new_log(f"vllm-{command}")
    say(f"{command}: starting vLLM {version} on {root} (vLLM's log: {log_path})")
    with unfinished.marked(root, command):  # pack refuses the root until this start completes
        t0 = time.perf_counter()
        try:
            with open(log_path, "w+b") as log, heartbeat(log_path, say, command):
                result = run_child(
                    {"mode": command, "model": model, "argv": argv, "prompts": list(PROMPTS), "max_tokens": MAX_TOKENS},
                    root,
                    log,
                )
        except BaseException:
            if created:  # a root this failed start made holds only what the failed start wrote
                shutil.rmtree(root, ignore_errors=True)
            raise
        wall = time.perf_counter() - t0
        say(f"{command}: engine ready in {result['seconds'].get('engine_init', 0):.1f} s")
        if result.get("hashing_error"):
            say(
                f"{command}: what vLLM hashes could not be recorded ({result['hashing_error']}): a pull for "
                "another server command will ask vLLM itself"
            )
        out = _report(command, model, root, rest, version, result, watch, log_path, wall)
        for folder, n in out.written_outside.items():
            say(
                f"{command}: vLLM wrote {n} file(s) outside the cache root, in {folder}: they do not ship, and every "
                "fresh pod builds them again"
            )
        if command == "warm":
            record_key_inputs(out, result, model, rest)
            jit_facts.record(root)  # what each JIT folder is valid under: an install compares it before download
            jit_caches.record_mtimes(root)  # FlashInfer's ninja reads them (jit_caches.restore_mtimes)
    return out


def _report(command, model, root, flags, version, result, watch, log_path, wall) -> VllmStartResult:
    workers = sorted(result["workers"], key=lambda w: w["rank"])
    done = worker_facts.from_workers(workers)
    new_kernels = len(watch.new_kernels())
    aot_expected = releases.aot_loads(version, releases.device_here())
    ranks = [worker_facts.recorded(w) for w in workers]
    return VllmStartResult(
        command=command,
        model=model,
        cache_root=str(root),
        flags=list(flags),
        vllm_version=version,
        cache_key=done.cache_key,
        cache_keys=done.cache_keys,
        key_existed=bool(done.cache_keys) and set(done.cache_keys) <= watch.keys,
        inductor_compiled=new_kernels,
        inductor_loaded=len(done.mapped_kernels & watch.kernels),
        dynamo_traces=done.dynamo_traces,
        aot_loaded=done.aot_loaded,
        aot_saved=done.aot_saved,
        aot_error=None if done.aot_loaded else worker_facts.aot_failure(log_path),
        aot_artifacts_loaded=done.aot_artifacts_loaded,
        compiled_artifacts_loaded=done.compiled_artifacts_loaded,
        inductor_graphs_compiled=done.graphs_compiled,
        inductor_graphs_loaded=done.graphs_loaded,
        compiled=worker_facts.compiled_evidence(done, new_kernels=new_kernels, aot_expected=aot_expected),
        vllm_counters=done.vllm_counters,
        startup_seconds=result["seconds"].get("engine_init", 0.0),
        seconds=round(wall, 3),
        phases=result["seconds"],
        tensor_parallel_size=max(1, len(workers)),
        ranks=ranks,
        log=str(log_path),
        aot_paths=done.aot_paths,
        written_outside=watch.written_outside(),
    )
