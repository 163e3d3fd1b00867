"""The report each vLLM worker gives a cachetool start: what this rank compiled and loaded, and where.

vLLM imports this module by name inside its worker processes (``--worker-extension-cls
cachetool_vllm_probe.CachetoolProbe``; the child puts this folder on ``PYTHONPATH``), so it must import nothing
but the standard library, torch and vLLM, and is named to be unique on ``sys.path``. vLLM leaves the extension
class out of its config hash (``ParallelConfig.compute_hash`` ignores ``worker_extension_cls``), so the start
computes the key folder a server without it computes. A method name, not a pickled function, crosses vLLM's RPC:
a function would need ``VLLM_ALLOW_INSECURE_SERIALIZATION``, which vLLM hashes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys


def file_id(path: str) -> str:
    """A traced file's path-independent id: relative to the ``sys.path`` entry that holds it (the same file of
    the same install at another prefix gets the same id), else its absolute path."""
    real = os.path.realpath(path)
    best = None
    for entry in sys.path:
        base = os.path.realpath(entry or ".")
        if real.startswith(base + os.sep) and (best is None or len(base) > len(best)):
            best = base
    return os.path.relpath(real, best) if best else real


def file_digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def mapped_kernels() -> list[str]:
    """The kernel libraries this process mapped from an Inductor cache (Inductor's CPU kernels are ``.so``)."""
    mapped = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if "/inductor_cache/" in path and path.endswith(".so"):
                    mapped.add(path)
    except OSError:
        pass
    return sorted(mapped)


class CachetoolProbe:
    """Mixed into vLLM's worker class; ``collective_rpc("cachetool_report")`` calls it on every rank."""

    def cachetool_report(self) -> dict:
        import torch._dynamo.utils as dynamo_utils
        from vllm.compilation.counter import compilation_counter

        inductor = dict(dynamo_utils.counters.get("inductor", {}))
        stats = dict(dynamo_utils.counters.get("stats", {}))
        aot = []
        model = getattr(getattr(self, "model_runner", None), "model", None)
        if model is not None:
            for m in model.modules():
                path = getattr(m, "_aot_compilation_path", None)
                if path:
                    aot.append(str(path))
        config = getattr(self, "vllm_config", None)
        traced = sorted(config.compilation_config.traced_files) if config is not None else []
        return {
            "rank": getattr(self, "rank", 0),
            "pid": os.getpid(),
            "aot_paths": sorted(set(aot)),
            "mapped_kernels": mapped_kernels(),
            "inductor": {k: int(v) for k, v in inductor.items()},
            "dynamo_unique_graphs": int(stats.get("unique_graphs", 0)),
            "vllm_counters": dataclasses.asdict(compilation_counter),
            "traced_files": {file_id(p): file_digest(p) for p in traced},
        }
