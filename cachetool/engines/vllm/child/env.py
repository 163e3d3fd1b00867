"""The environment the vLLM child runs in, as the server's (:func:`child_env`): this process's, offline, the cache
root, the probe's folder on the path, and on the CPU one core group per tensor parallel rank
(:func:`cpu_binding`)."""

from __future__ import annotations

import os
from pathlib import Path

from cachetool.engines.vllm import jit_caches
from cachetool.errors import UsageError
from cachetool.facts import machine  # the torch-free machine facts, every engine's

# The folder of what runs inside vLLM's processes (child.py, cachetool_vllm_probe.py, cachetool_vllm_hashing.py),
# which vLLM's workers (spawned ones too) import by name: only those modules, so nothing else of cachetool shadows a
# top-level name there.
PROBE_DIR = Path(__file__).with_name("in_vllm")


def child_env(cache_root: Path | None, tp: int) -> dict[str, str]:
    """The child's environment, as the server's: this process's, offline, the cache root (``None``: the child
    makes a scratch root of its own), and, for tensor parallel on the CPU, one core group per rank (vLLM's CPU
    workers need ``VLLM_CPU_OMP_THREADS_BIND``; it is one of vLLM's hashed env factors, so a server must set the
    same value: ``docs/vllm.md``). The engine core runs in its own process, as under ``vllm serve``."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", VLLM_DO_NOT_TRACK="1")
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # vLLM's default (on): the server's process structure
    if cache_root is not None:
        env["VLLM_CACHE_ROOT"] = str(cache_root)
        # the JIT caches vLLM fills at start, outside torch.compile's (its own Triton kernels; on a GPU FlashInfer's
        # and DeepGEMM's builds) land in the root and ship with it; a server reads them with the same variables
        # (docs/vllm.md). None is in vLLM's key.
        gpu = machine.cuda_device(0) is not None
        for name, value in jit_caches.server_environment(Path(cache_root), gpu=gpu).items():
            env.setdefault(name, value)
    else:
        env.pop("VLLM_CACHE_ROOT", None)
    # vLLM's workers import cachetool_vllm_probe by name (spawned workers too): its folder goes on their path
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROBE_DIR), env.get("PYTHONPATH")) if p)
    # only where vLLM runs on the CPU: on a GPU the variable means nothing, but vLLM would still hash it
    if tp > 1 and not env.get("VLLM_CPU_OMP_THREADS_BIND") and machine.cuda_device(0) is None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_binding(tp)
    return env


def cpu_binding(tp: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``tp`` ranks: this process's cores in ``tp`` contiguous groups."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if len(cores) < tp:
        raise UsageError(f"-tp {tp} on the CPU needs {tp} cores, this process may use {len(cores)}")
    size = len(cores) // tp
    groups = [cores[i * size : (i + 1) * size] for i in range(tp)]
    return "|".join(f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]) for g in groups)
