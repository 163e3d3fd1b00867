"""The one place where the compiler touches torch's private APIs, guarded for the versions we support.

Supported: torch 2.11 (the H200 image) and 2.13 (the CPU box). Two modules: this one, and ``hot_start.py``
(loading an AOT entry and its artifacts with Inductor's runtime only). Each function names the private API it
wraps and what it does on a version that lacks it. Nothing else in ``compiler/`` imports from ``torch._*``; a new private
API goes here, with a fallback or a clear error.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

# The hot start's loading side lives in hot_start.py (this package's second module); its names are ours too.
from compiler.torch_compat.hot_start import (
    STAND_INS,
    hot_load_report,
    load_compiled_artifact,
    load_compiled_function,
    prefetch_artifact_loader,
    prefetch_running,
    runtime_stand_ins,
    torch_extern_kernel,
    wait_for_prefetch,
)

__all__ = [
    "TORCH_VERSION",
    # Dynamo: marks, guards, stances (BackendCompilerFailed is looked up on first use: Dynamo is not imported here)
    "mark_dynamic",
    "mark_unbacked",
    "skip_all_guards",
    "fail_on_recompile",
    "is_recompile_refusal",
    "BackendCompilerFailed",
    "size_oblivious",
    "register_bytecode_hook",
    "tracing_context",
    "traced_code",
    # FX, fake tensors, ops
    "detect_fake_mode",
    "is_fake_tensor",
    "python_dispatcher",
    "is_op_overload",
    "is_op_overload_packet",
    "serializable_callable_base",
    # AOT compile, Inductor, the compiler's keys
    "aot_supported",
    "aot_compile_fullgraph",
    "standalone_compile",
    "inductor_config",
    "inductor_config_portable",
    "compute_torch_key",
    "preset_torch_key",
    "preset_triton_key",
    "triton_key",
    "autotune_hooks",
    "shutdown_compile_workers",
    "cancel_compile_jobs",
    "dynamo_counters",
    # CUDA graphs, tensor parallelism
    "storage_from_data_pointer",
    "process_group_name",
    "resolve_process_group",
    "functional_all_reduce",
    # the hot start's loading side (hot_start.py)
    "STAND_INS",
    "hot_load_report",
    "load_compiled_artifact",
    "load_compiled_function",
    "prefetch_artifact_loader",
    "prefetch_running",
    "runtime_stand_ins",
    "torch_extern_kernel",
    "wait_for_prefetch",
]

logger = logging.getLogger(__name__)

TORCH_VERSION = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


# ---------------------------------------------------------------------- Dynamo: marks, guards, stances


def mark_dynamic(t: torch.Tensor, dim: int) -> None:
    torch._dynamo.mark_dynamic(t, dim)


def mark_unbacked(t: torch.Tensor, dim: int) -> None:
    mark = getattr(torch._dynamo.decorators, "mark_unbacked", None) or torch._dynamo.mark_unbacked  # type: ignore[attr-defined]
    mark(t, dim)


def _skip_all_guards(entries: Any) -> list[bool]:
    return [False for _ in entries]


def skip_all_guards() -> Callable[..., Any]:
    """``torch.compiler.skip_all_guards_unsafe`` (a guard filter that drops every guard), or our own twin."""
    fn = getattr(torch.compiler, "skip_all_guards_unsafe", None)
    return fn if fn is not None else _skip_all_guards


def fail_on_recompile() -> Any:
    """A context in which a Dynamo recompile raises (``set_stance("fail_on_recompile")``)."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is not None:
        return set_stance("fail_on_recompile")
    return torch._dynamo.config.patch(error_on_recompile=True)  # pragma: no cover - older torch


def is_recompile_refusal(exc: BaseException) -> bool:
    text = str(exc)
    return "fail_on_recompile" in text or ("ecompil" in text and "stance" in text) or "error_on_recompile" in text


def __getattr__(name: str) -> Any:
    # Dynamo is imported where it is first needed (in the background by prefetch_artifact_loader, or by a trace),
    # not with this module: seconds of imports that can overlap the model build.
    if name == "BackendCompilerFailed":
        return torch._dynamo.exc.BackendCompilerFailed
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextlib.contextmanager
def size_oblivious(enabled: bool) -> Iterator[None]:
    """``backed_size_oblivious`` reasoning for symbolic shapes while tracing (``torch.fx.experimental._config``)."""
    if not enabled:
        yield
        return
    import torch.fx.experimental._config as fx_config

    with fx_config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]  # baseline (issue 46)
        yield


def register_bytecode_hook(hook: Callable[[Any, Any], None]) -> Any:
    """Dynamo's bytecode hook (original code, transformed code); ``None`` where torch has none."""
    try:
        from torch._dynamo.convert_frame import register_bytecode_hook as register
    except ImportError:  # pragma: no cover
        return None
    return register(hook)  # type: ignore[arg-type]  # baseline (issue 46)


def tracing_context() -> Any:
    """The active ``torch._guards.TracingContext`` or ``None``."""
    tc_cls = torch._guards.TracingContext
    if hasattr(tc_cls, "try_get"):
        return tc_cls.try_get()
    try:  # pragma: no cover - older torch
        return tc_cls.get()
    except Exception:
        return None


def traced_code() -> list[Any]:
    """Code objects Dynamo traced for the graph being compiled (read inside a backend)."""
    tc = tracing_context()
    return list(getattr(tc, "traced_code", None) or []) if tc is not None else []


def detect_fake_mode(inputs: Any = None) -> Any:
    from torch._guards import detect_fake_mode as detect

    return detect(inputs)


def is_fake_tensor(t: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def python_dispatcher() -> Any:
    from torch._dispatch.python import enable_python_dispatcher

    return enable_python_dispatcher()


def is_op_overload(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload)


def is_op_overload_packet(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverloadPacket)


# ---------------------------------------------------------------------- Dynamo's AOT API (precompile)


def serializable_callable_base() -> type:
    """The ABC a backend's result must subclass to be saved with an AOT-compiled function:
    2.11 ``torch._dynamo.aot_compile.SerializableCallable``, 2.13 ``torch._dynamo.aot_compile_types``.
    ``object`` where torch has neither (then :func:`aot_supported` is false)."""
    for path in ("torch._dynamo.aot_compile_types", "torch._dynamo.aot_compile"):
        try:
            mod = __import__(path, fromlist=["SerializableCallable"])
            return mod.SerializableCallable
        except (ImportError, AttributeError):
            continue
    return object  # pragma: no cover


def aot_supported() -> bool:
    # Dynamo's import is circular with Inductor's: imported here while the background prefetch imports them, one
    # thread can meet a partly initialized torch._dynamo ("has no attribute 'utils'") and the start fails. The
    # prefetch imports this module too, so waiting for it costs only the overlap with what the caller does meanwhile.
    wait_for_prefetch()
    try:
        from torch._dynamo.aot_compile import aot_compile_fullgraph  # noqa: F401
    except ImportError:  # pragma: no cover
        return False
    return hasattr(torch.compiler, "load_compiled_function") and serializable_callable_base() is not object


def aot_compile_fullgraph(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    backend: Callable[..., Any],
    *,
    keep_guards: bool = False,
) -> Any:
    """Capture ``fn(*args, **kwargs)`` with Dynamo once and compile it with ``backend`` (whose result must be a
    :func:`serializable_callable_base` instance); returns torch's AOT-compiled function (``save_compiled_function``).
    Guards are dropped (``skip_all_guards_unsafe``) unless ``keep_guards``."""
    from torch._dynamo.aot_compile import aot_compile_fullgraph as capture
    from torch._dynamo.hooks import Hooks

    hooks = Hooks() if keep_guards else Hooks(guard_filter_fn=skip_all_guards())
    return capture(fn, (args, kwargs), hooks=hooks, backend=backend)


# ---------------------------------------------------------------------- Inductor


def standalone_compile(
    graph: Any, example_inputs: list[Any], *, dynamic_shapes: str, config_patches: dict[str, Any]
) -> Any:
    from torch._inductor import standalone_compile as compile_

    return compile_(graph, example_inputs, dynamic_shapes=dynamic_shapes, options={"config_patches": config_patches})  # type: ignore[arg-type]  # baseline (issue 46)


def inductor_config() -> Any:
    import torch._inductor.config as config

    return config


def inductor_config_portable(patches: dict[str, Any]) -> dict[str, Any]:
    """Inductor's config as a dict (``save_config_portable``), with ``patches`` applied."""
    config = inductor_config()
    with config.patch(patches):
        return dict(config.save_config_portable())


def compute_torch_key() -> str:
    """Inductor's build key (``torch._inductor.codecache.torch_key``): a hash over torch's sources. Costs seconds
    on a cold process; :mod:`compiler.torch_build` caches it per installation."""
    from torch._inductor.codecache import torch_key

    key = torch_key()
    return key.hex() if isinstance(key, bytes) else str(key)


def preset_torch_key(hex_key: str) -> bool:
    """Give Inductor a known ``torch_key`` so that loading a binary artifact does not hash torch's sources again.
    2.13's key is a ``prefetchable_cache`` with ``.set``; on torch without it the module attribute is replaced
    (``CompiledArtifact.load`` looks ``torch_key`` up at call time). Returns whether it took."""
    from torch._inductor import codecache

    value = bytes.fromhex(hex_key)
    fn = codecache.torch_key
    setter = getattr(fn, "set", None)
    if setter is not None:
        try:
            setter(value)
        except RuntimeError:  # already computed in this process: nothing to save
            return fn() == value
        return True
    if hasattr(fn, "cache_info"):  # functools cache: already computed?
        try:
            if fn.cache_info().currsize:
                return fn() == value
        except Exception:  # pragma: no cover
            pass
    codecache.torch_key = functools.lru_cache(None)(lambda: value)
    return True


def preset_triton_key(value: str) -> bool:
    """Give Inductor a known Triton key so that a load does not hash Triton's sources (~0.4 s on the H200:
    ``torch.utils._triton.triton_hash_with_backend`` asks ``torch._inductor.runtime.triton_compat.triton_key``
    at call time). Only with a value this machine computes (the build evidence matched). Returns whether it took."""
    try:
        from torch._inductor.runtime import triton_compat
    except ImportError:  # pragma: no cover
        return False
    fn = getattr(triton_compat, "triton_key", None)
    if fn is None or getattr(fn, "__name__", "") == "_raise_error":  # no Triton here
        return False
    triton_compat.triton_key = functools.lru_cache(None)(lambda: value)
    return True


def triton_key() -> str | None:
    try:
        from torch._inductor.runtime.triton_compat import triton_key as key

        return str(key())
    except Exception:
        try:
            from triton.compiler.compiler import triton_key as key

            return str(key())
        except Exception:
            return None


def autotune_hooks() -> tuple[Any, Any]:
    """``(select_algorithm module, triton_heuristics module or None)`` for counting real autotune runs."""
    from torch._inductor import select_algorithm

    try:
        from torch._inductor.runtime import triton_heuristics
    except Exception:  # pragma: no cover - Triton not installed
        triton_heuristics = None  # type: ignore[assignment]  # baseline (issue 46)
    return select_algorithm, triton_heuristics


def shutdown_compile_workers() -> None:
    """Stop Inductor's compile worker processes, if this process started any
    (``torch._inductor.async_compile.shutdown_compile_workers``, else done by its atexit hook)."""
    mod = sys.modules.get("torch._inductor.async_compile")
    fn = getattr(mod, "shutdown_compile_workers", None)
    if fn is not None:
        fn()


def cancel_compile_jobs() -> None:
    """What an interrupted compile leaves queued is dropped, and the worker processes stop: the jobs Inductor queued
    on its compile thread pool (``AsyncCompile.pool()``, an ``lru_cache``d ``ThreadPoolExecutor``: C++ kernels on
    the CPU) are cancelled and the pool forgotten (a later compile makes a new one), then
    :func:`shutdown_compile_workers`. Jobs already running finish, or fail when their compiler process is ended."""
    mod = sys.modules.get("torch._inductor.async_compile")
    pool = getattr(getattr(mod, "AsyncCompile", None), "pool", None)
    info = getattr(pool, "cache_info", None)
    if info is not None and info().currsize:
        pool().shutdown(wait=False, cancel_futures=True)  # type: ignore[misc]  # baseline (issue 46)
        pool.cache_clear()  # type: ignore[union-attr]  # baseline (issue 46)
    shutdown_compile_workers()


def dynamo_counters() -> Any:
    from torch._dynamo.utils import counters as dynamo_counters_

    return dynamo_counters_


# ---------------------------------------------------------------------- tensors and process groups
def storage_from_data_pointer(data_ptr: int, device: torch.device, nbytes: int) -> Any:
    """An untyped storage over memory it does not own (``torch._C._construct_storage_from_data_pointer``, in
    torch since 2.3; both versions we support have it): CUDA-graph outputs as weak references."""
    return torch._C._construct_storage_from_data_pointer(data_ptr, device, nbytes)


def process_group_name(group: Any) -> str:
    """The registered name of a process group (``group.group_name``; ``distributed_c10d._get_group_name`` on a
    torch without the attribute)."""
    name = getattr(group, "group_name", None)
    if name is None:  # pragma: no cover - very old torch
        from torch.distributed.distributed_c10d import _get_group_name  # type: ignore[attr-defined]

        name = _get_group_name(group)
    return str(name)


def resolve_process_group(name: str) -> Any:
    """The process group registered under ``name`` (``distributed_c10d._resolve_process_group``): how a custom op
    with the group's name as a graph constant finds its group at run time."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(name)  # type: ignore[arg-type]  # baseline (issue 46)


def functional_all_reduce(x: torch.Tensor, group: Any) -> torch.Tensor:
    """Sum over ``group`` as a functional collective Dynamo traces into the graph
    (``torch.distributed._functional_collectives.all_reduce``)."""
    import torch.distributed._functional_collectives as funcol

    return funcol.all_reduce(x, "sum", group)
