"""The report each vLLM worker gives a cachetool start: what this rank compiled and loaded, and where.

vLLM imports this module by name inside its worker processes (``--worker-extension-cls
cachetool_vllm_probe.CachetoolProbe``; the child puts this folder on ``PYTHONPATH``), so it must import nothing
but the standard library, torch and vLLM, and is named to be unique on ``sys.path``. vLLM leaves the extension
class out of its config hash (``ParallelConfig.compute_hash`` ignores ``worker_extension_cls``), so the start
computes the key folder a server without it computes. A method name, not a pickled function, crosses vLLM's RPC:
a function would need ``VLLM_ALLOW_INSECURE_SERIALIZATION``, which vLLM hashes. The real ``vllm serve`` is asked
the same through its development endpoint ``POST /collective_rpc`` (``VLLM_SERVER_DEV_MODE=1``, which vLLM leaves
out of its env factors): the oracle in ``tests/vllm_oracle/server.py``.

Everything here is read from vLLM itself, never from its log: the AOT key folder and whether the artifact was loaded
(the path vLLM's decorator tried to load, watched from the moment vLLM imports this module; the compiled model's own
attributes; else vLLM's key function over this worker's config), vLLM's compilation counters, the files Dynamo
traced (the config's ``traced_files``), the seconds vLLM's compile monitor added up (``compilation_time``), the
kernel libraries this process mapped.
"""

from __future__ import annotations

import contextlib
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


AOT_DIR = os.path.join("torch_compile_cache", "torch_aot_compile")


def compiled_models(model) -> list:
    """The modules vLLM's ``support_torch_compile`` compiled (each carries vLLM's AOT attributes)."""
    if model is None:
        return []
    return [m for m in model.modules() if hasattr(m, "was_aot_compile_fn_loaded_from_disk")]


# The attribute a compiled module gets when vLLM tries to load its AOT artifact: the path it read names the key
# folder vLLM computed. Computing that key again after the start is not always the same: an FP8 MoE model's config
# changes after vLLM hashed it (on the H100 a check named folder 839748fb... while vLLM had loaded 1bb29a02...).
AOT_TRIED = "cachetool_aot_tried"


def watch_aot_loads() -> None:
    """Record on each compiled module the AOT load vLLM's ``support_torch_compile`` tries
    (``decorators._try_load_aot_compiled_fn``, looked up by name at each call; the child's ``LAYOUT`` requires it);
    a release without it is left as it is. Watched once per process, whichever copy of this module came first."""
    try:
        from vllm.compilation import decorators
    except ImportError:
        return
    tried = getattr(decorators, "_try_load_aot_compiled_fn", None)
    if tried is None or getattr(tried, "cachetool_watched", False):
        return

    def watched(model, aot_compilation_path, *args, **kwargs):
        loaded = tried(model, aot_compilation_path, *args, **kwargs)
        with contextlib.suppress(AttributeError, TypeError):  # a module that takes no attribute: not recorded
            setattr(model, AOT_TRIED, {"path": str(aot_compilation_path), "loaded": loaded is not None})
        return loaded

    watched.cachetool_watched = True  # type: ignore[attr-defined]
    decorators._try_load_aot_compiled_fn = watched


def vllm_aot_key(module) -> str | None:
    """The AOT key folder vLLM computes for ``module`` (its ``aot_compile_hash_factors`` over this worker's config
    plus the forward's identity, as its decorator does), or None: AOT compilation off, or a release without that
    function."""
    import vllm.envs as envs

    try:
        from vllm.compilation.caching import aot_compile_hash_factors
        from vllm.compilation.decorators import _model_hash_key
    except ImportError:
        return None
    if not envs.VLLM_USE_AOT_COMPILE:
        return None
    factors = aot_compile_hash_factors(module.vllm_config)
    factors.append(_model_hash_key(module.forward))
    return hashlib.sha256(str(factors).encode()).hexdigest()


def aot_report(module) -> dict:
    """One compiled module's AOT artifact: the key folder (where vLLM saved it in this process, else the folder it
    tried to load from, else vLLM's key function), whether it was loaded from disk (vLLM's own flag), and the file
    (``{key}/rank_{r}_{dp}/model``, as vLLM's decorator names it)."""
    parallel = module.vllm_config.parallel_config
    rank_folder = f"rank_{parallel.rank}_{getattr(parallel, 'data_parallel_index', 0)}"
    saved_in = getattr(module, "_aot_cache_dir", None)  # set by vLLM when this process compiled and saved
    tried = (getattr(module, AOT_TRIED, None) or {}).get("path")  # {key}/rank_{r}_{dp}/model
    computed = vllm_aot_key(module)
    if saved_in:
        key = os.path.basename(os.path.dirname(saved_in))
    elif tried:
        key = os.path.basename(os.path.dirname(os.path.dirname(tried)))
    else:
        key = computed
    from vllm.envs import VLLM_CACHE_ROOT

    path = os.path.join(VLLM_CACHE_ROOT, AOT_DIR, key, rank_folder, "model") if key else None
    return {
        "key": key,
        "computed_key": computed,
        "path": path,
        "loaded": bool(module.was_aot_compile_fn_loaded_from_disk),
    }


class CachetoolProbe:
    """Mixed into vLLM's worker class; ``collective_rpc("cachetool_report")`` calls it on every rank."""

    def cachetool_report(self) -> dict:
        import torch._dynamo.utils as dynamo_utils
        from vllm.compilation.counter import compilation_counter

        inductor = dict(dynamo_utils.counters.get("inductor", {}))
        stats = dict(dynamo_utils.counters.get("stats", {}))
        model = getattr(getattr(self, "model_runner", None), "model", None)
        config = getattr(self, "vllm_config", None)
        aot = [aot_report(m) for m in compiled_models(model)]
        compilation = config.compilation_config if config is not None else None
        traced = sorted(compilation.traced_files) if compilation is not None else []
        return {
            "rank": getattr(self, "rank", 0),
            "pid": os.getpid(),
            "aot": aot,
            "aot_paths": sorted({a["path"] for a in aot if a["path"]}),
            "mapped_kernels": mapped_kernels(),
            "inductor": {k: int(v) for k, v in inductor.items()},
            "dynamo_unique_graphs": int(stats.get("unique_graphs", 0)),
            "vllm_counters": dataclasses.asdict(compilation_counter),
            # the seconds vLLM's compile monitor added up in this worker (its "torch.compile took" figure)
            "compilation_seconds": float(getattr(compilation, "compilation_time", 0.0) or 0.0),
            "traced_files": {file_id(p): file_digest(p) for p in traced},
        }


watch_aot_loads()  # vLLM imports this module in each worker before it builds and compiles the model
