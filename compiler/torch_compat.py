"""The one place where the compiler touches torch's private APIs, guarded for the versions we support.

Supported: torch 2.11 (the H200 image) and 2.13 (the CPU box). Each function names the private API it wraps and
what it does on a version that lacks it. Nothing else in ``compiler/`` imports from ``torch._*``; a new private
API goes here, with a fallback or a clear error.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

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

    with fx_config.patch(backed_size_oblivious=True):
        yield


def register_bytecode_hook(hook: Callable[[Any, Any], None]) -> Any:
    """Dynamo's bytecode hook (original code, transformed code); ``None`` where torch has none."""
    try:
        from torch._dynamo.convert_frame import register_bytecode_hook as register
    except ImportError:  # pragma: no cover
        return None
    return register(hook)


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
    try:
        from torch._dynamo.aot_compile import aot_compile_fullgraph  # noqa: F401
    except ImportError:  # pragma: no cover
        return False
    return hasattr(torch.compiler, "load_compiled_function") and serializable_callable_base() is not object


def aot_compile_fullgraph(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                          backend: Callable[..., Any], *, keep_guards: bool = False) -> Any:
    """Capture ``fn(*args, **kwargs)`` with Dynamo once and compile it with ``backend`` (whose result must be a
    :func:`serializable_callable_base` instance); returns torch's AOT-compiled function (``save_compiled_function``).
    Guards are dropped (``skip_all_guards_unsafe``) unless ``keep_guards``."""
    from torch._dynamo.aot_compile import aot_compile_fullgraph as capture
    from torch._dynamo.hooks import Hooks

    hooks = Hooks() if keep_guards else Hooks(guard_filter_fn=skip_all_guards())
    return capture(fn, (args, kwargs), hooks=hooks, backend=backend)


_prefetch: Any = None  # the thread, once started

# What loading and first running an AOT entry imports (read off a hot start's new sys.modules on 2.11 and 2.13):
# Dynamo and its AOT loader, AOTAutograd's cache and runtime wrappers, Inductor's code cache and the runtime its
# generated code uses. Never compile_fx, lowering or select_algorithm (tests/compiler/test_aot_hot_start.py).
_PREFETCHED = (
    "torch._dynamo", "torch._dynamo.aot_compile", "torch._dynamo.package",
    "torch._functorch._aot_autograd.autograd_cache", "torch._functorch._aot_autograd.subclass_codegen",
    "torch._functorch._activation_checkpointing.graph_info_provider",
    "torch._inductor.async_compile", "torch._inductor.debug", "torch._inductor.codecache",
    "torch._inductor.standalone_compile", "torch._inductor.output_code", "torch._inductor.inductor_prims",
    "torch._inductor.hooks", "torch._inductor.codegen.memory_planning", "torch._inductor.codegen.wrapper",
    "torch._inductor.runtime.autotune_cache", "torch._inductor.runtime.triton_heuristics",
    "torch._inductor.runtime.triton_helpers", "torch._inductor.runtime.static_cuda_launcher",
    "torch._inductor.runtime.static_triton_launcher", "torch.utils.cpp_extension",
)


def prefetch_artifact_loader() -> None:
    """Import, in a background thread, the modules that loading an artifact needs (Dynamo and its AOT loader,
    AOTAutograd's cache, Inductor's code cache), so that a hot start overlaps them with what the server does
    meanwhile (weights, CUDA context: :class:`compiler.runner.ModelRunner` starts it before building the model). Not ``compile_fx`` and what it pulls in (lowering, templates, autotuning):
    a hit never needs them (:func:`load_compiled_artifact`). Once per process; errors are left to the load."""
    global _prefetch
    if _prefetch is not None:
        return

    def run() -> None:
        import importlib

        for name in _PREFETCHED:
            try:
                importlib.import_module(name)
            except Exception:  # a module this torch lacks or names otherwise: the load imports what it needs
                logger.debug("prefetch of %s failed", name, exc_info=True)

    import threading

    _prefetch = threading.Thread(target=run, name="cachetool-prefetch", daemon=True)
    _prefetch.start()


def wait_for_prefetch() -> None:
    """Block until :func:`prefetch_artifact_loader`'s imports are done (no-op if it never started): two threads
    importing Inductor's circularly dependent modules at once could deadlock the import system."""
    if _prefetch is not None:
        _prefetch.join()


class _DroppedGuards:
    """Stands for the guard manager of an AOT entry saved with every guard dropped: nothing to check."""

    def check(self, f_locals: Any) -> bool:
        return True

    def check_verbose(self, f_locals: Any) -> str:  # pragma: no cover - check never fails
        return "all guards were dropped when the entry was saved"


# What the last :func:`load_compiled_function` / :func:`load_compiled_artifact` did (the benchmark prints it):
# "guards": "skipped" or "built"; "artifacts": how many took the runtime path vs torch's CompiledArtifact.load.
hot_load_report: dict[str, Any] = {"guards": None, "runtime_loads": 0, "standalone_loads": 0}


@contextlib.contextmanager
def _no_guard_build(guards_dropped: Callable[[], bool] | None) -> Iterator[None]:
    """While loading an entry whose guards were all dropped, skip unpickling its guards state and building
    Dynamo's guard tree (``torch._dynamo.package.load_guards_state`` / ``load_guard_manager``, which
    ``AOTCompiledFunction.__post_init__`` calls after the backend's bytes are deserialized): the tree would hold
    no guard, and building it costs ~0.6 s on the H200. ``guards_dropped()`` is asked at that point (the entry's
    own record); where it says no, or torch lacks those functions, the guards are built as usual."""
    package = None
    if guards_dropped is not None:
        try:
            import torch._dynamo.package as package
        except ImportError:  # pragma: no cover
            package = None
    names = ("load_guards_state", "load_guard_manager")
    if package is None or not all(hasattr(package, n) for n in names):
        hot_load_report["guards"] = "built"
        yield
        return
    saved = {n: getattr(package, n) for n in names}
    assert guards_dropped is not None

    def load_state(state: bytes) -> Any:
        return None if guards_dropped() else saved["load_guards_state"](state)

    def load_manager(state: Any, code: Any, scope: Any) -> Any:
        if state is None and guards_dropped():
            hot_load_report["guards"] = "skipped"
            return _DroppedGuards()
        hot_load_report["guards"] = "built"
        return saved["load_guard_manager"](state, code, scope)

    package.load_guards_state, package.load_guard_manager = load_state, load_manager
    try:
        yield
    finally:
        for n, fn in saved.items():
            setattr(package, n, fn)


def load_compiled_function(data: bytes, *, guards_dropped: Callable[[], bool] | None = None) -> Any:
    """``torch.compiler.load_compiled_function`` over bytes; the result is called as ``fn(module, *args)``.
    ``guards_dropped()`` (asked once the backend's bytes are read) says the entry was saved with every guard
    dropped: then no guard tree is built and no guard is checked per call."""
    import io

    hot_load_report["guards"] = None
    with _no_guard_build(guards_dropped):
        fn = torch.compiler.load_compiled_function(io.BytesIO(data))
    if hot_load_report["guards"] == "skipped" and hasattr(fn, "disable_guard_check"):
        fn.disable_guard_check()
    return fn


# ---------------------------------------------------------------------- Inductor

def standalone_compile(graph: Any, example_inputs: list[Any], *, dynamic_shapes: str,
                       config_patches: dict[str, Any]) -> Any:
    from torch._inductor import standalone_compile as compile_

    return compile_(graph, example_inputs, dynamic_shapes=dynamic_shapes, options={"config_patches": config_patches})


def load_compiled_artifact(path: str, save_format: str) -> Any:
    """Load a saved Inductor artifact; the result is called with the piece's arguments.

    A binary artifact takes :func:`_load_binary_at_runtime` (what ``CompiledArtifact.load`` does, minus its import
    of ``compile_fx``, which drags in lowering, templates and autotuning: seconds of imports a hit never uses);
    anything else, or a format that path does not know, goes through ``CompiledArtifact.load``."""
    if save_format == "binary":
        fn = _load_binary_at_runtime(path)
        if fn is not None:
            hot_load_report["runtime_loads"] += 1
            return fn
    from torch._inductor import CompiledArtifact

    hot_load_report["standalone_loads"] += 1
    return CompiledArtifact.load(path=path, format=save_format)


def _load_binary_at_runtime(path: str) -> Any:
    """``CacheCompiledArtifact`` binary load (torch 2.11 and 2.13: header, ``torch_key``, AOTAutograd key,
    Mega-Cache bytes): unpack the bytes into the (redirected) caches, look the AOTAutograd entry up and wrap it for
    running. ``None`` where the file or this torch is not of that shape (then torch's own loader runs)."""
    try:
        from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
        from torch._inductor import config as inductor_cfg
        import importlib

        import torch._inductor.async_compile  # noqa: F401 - loading an entry clears its kernel cache
        import torch._inductor.debug  # noqa: F401 - read by every call of a loaded graph
        sc = importlib.import_module("torch._inductor.standalone_compile")  # the package's attribute is a function
        from torch._inductor.codecache import torch_key
        from torch._inductor.cudagraph_utils import BoxedDeviceIndex
        from torch._inductor.utils import BoxedBool
        from torch._subclasses import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        from torch.utils._appending_byte_serializer import BytesReader

        header = getattr(getattr(sc, "CacheCompiledArtifact", None), "CACHE_HEADER", None)
        with open(path, "rb") as f:
            reader = BytesReader(f.read())
        first = reader.read_bytes()
        if header is not None:  # a header names the artifact kind; torch_key follows
            if first != header:
                return None  # an AOTCompiledArtifact: torch's own loader
            first = reader.read_bytes()
        if first != torch_key():
            return None  # another build's artifact: torch's loader refuses it in its own words
        key = reader.read_str()
        artifact_bytes = reader.read_bytes()
    except (ImportError, AttributeError, AssertionError):
        return None
    with runtime_stand_ins(), inductor_cfg.patch(unsafe_skip_cache_dynamic_shape_guards=True):
        torch.compiler.load_cache_artifacts(artifact_bytes)
        try:
            with torch._functorch.config.patch(strict_autograd_cache=True):
                result = AOTAutogradCache._lookup(key, local=True, remote=False, args=[], cache_info={},
                                                  aot_config=None)
        except (TypeError, AttributeError):  # another torch's lookup signature: its own loader then
            logger.debug("AOTAutogradCache lookup of %s not as expected; torch's loader takes it", path, exc_info=True)
            return None
        if result is None:
            raise RuntimeError(f"{path}: its AOTAutograd entry {key} is not in the cache it unpacked")
        entry, _ = result
        # compile_fx's _CompileFxKwargs is a TypedDict: a plain dict, without importing compile_fx
        fx_config = {"cudagraphs": BoxedBool(False), "boxed_forward_device_index": BoxedDeviceIndex(0)}
        context = torch._guards.TracingContext(FakeTensorMode(shape_env=ShapeEnv()))
        with torch._guards.tracing(context):
            compiled_fn = entry.wrap_post_compile([], entry.sanitized_aot_config, fx_config)
    return lambda *args: compiled_fn(list(args))


def torch_extern_kernel(name: str) -> Any:
    """The registered extern kernel ``name`` where it is the torch function of that name (``ExternKernelChoice``
    registers ``kernel.__name__``: ``mm`` is ``torch.mm``, ``addmm`` is ``torch.addmm``); ``None`` otherwise
    (renamed or custom kernels such as ``mm_dtype`` or ``bias_addmm`` come from Inductor's own registry).
    tests/compiler/test_hot_path_imports.py checks this against every kernel Inductor registers."""
    fn = getattr(torch, name, None)
    return fn if callable(fn) and getattr(fn, "__name__", None) == name else None


class _ExternKernels:
    """What Inductor's generated code calls ``extern_kernels``, resolved without importing ``select_algorithm``
    (whose last line imports ``lowering`` to fill the registry: ~1.5 s of op registrations a hit never uses):
    a torch function where the kernel is one (:func:`torch_extern_kernel`), else the real registry."""

    def __getattr__(self, name: str) -> Any:
        import importlib

        fn = torch_extern_kernel(name) if not _is_real("torch._inductor.select_algorithm") else None
        if fn is None:
            fn = getattr(importlib.import_module("torch._inductor.select_algorithm").extern_kernels, name)
        setattr(self, name, fn)  # resolved once
        return fn


class _GraphLoweringHooks:
    """The one thing a cache hit reads from ``torch._inductor.graph`` (which imports ``lowering``): the test hook
    ``GraphLowering.save_output_code``, unset unless a test set it on the real class (then that module is
    imported and is used)."""

    save_output_code = None


class _StandIn(types.ModuleType):
    """A small module standing for a heavy Inductor module while loaded artifacts are wired up; anything it does
    not hold is read from the real module, imported then."""

    def __getattr__(self, name: str) -> Any:
        import importlib

        if name.startswith("__"):  # the import system asks for __path__, __spec__, ...: a plain module's answer
            raise AttributeError(name)
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


def _select_decomp_table(*args: Any, **kwargs: Any) -> Any:
    """Pickled by reference in every saved ``CompiledFxGraph``; a hit never calls it, a compile gets the real one."""
    import importlib

    return importlib.import_module("torch._inductor.decomposition").select_decomp_table(*args, **kwargs)


# What a hit takes from Inductor's compile-time modules: generated wrapper code does
# ``from torch._inductor.select_algorithm import extern_kernels``; FxGraphCache's hit path reads
# ``torch._inductor.graph.GraphLowering.save_output_code``; a saved graph's pickle names
# ``torch._inductor.decomposition.select_decomp_table`` (importing that module registers every decomposition).
STAND_INS: dict[str, dict[str, Any]] = {
    "torch._inductor.select_algorithm": {"extern_kernels": _ExternKernels()},
    "torch._inductor.graph": {"GraphLowering": _GraphLoweringHooks},
    "torch._inductor.decomposition": {"select_decomp_table": _select_decomp_table},
}


def _is_real(name: str) -> bool:
    mod = sys.modules.get(name)
    return mod is not None and not isinstance(mod, _StandIn)


@contextlib.contextmanager
def runtime_stand_ins() -> Iterator[None]:
    """While Inductor wires up a loaded artifact: the modules of :data:`STAND_INS` that are not imported yet are
    their small stand-ins. Removed afterwards, so that a later compile imports the real ones."""
    placed = {}
    for name, attrs in STAND_INS.items():
        if name not in sys.modules:
            stand_in = _StandIn(name)
            stand_in.__dict__.update(attrs)
            sys.modules[name] = placed[name] = stand_in
    try:
        yield
    finally:
        for name, stand_in in placed.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


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
        from torch._inductor.runtime.triton_compat import triton_key as key  # type: ignore[attr-defined]

        return str(key())
    except Exception:
        try:
            from triton.compiler.compiler import triton_key as key  # type: ignore[import-not-found]

            return str(key())
        except Exception:
            return None


def autotune_hooks() -> tuple[Any, Any]:
    """``(select_algorithm module, triton_heuristics module or None)`` for counting real autotune runs."""
    from torch._inductor import select_algorithm

    try:
        from torch._inductor.runtime import triton_heuristics
    except Exception:  # pragma: no cover - Triton not installed
        triton_heuristics = None
    return select_algorithm, triton_heuristics


def shutdown_compile_workers() -> None:
    """Stop Inductor's compile worker processes, if this process started any
    (``torch._inductor.async_compile.shutdown_compile_workers``, else done by its atexit hook)."""
    mod = sys.modules.get("torch._inductor.async_compile")
    fn = getattr(mod, "shutdown_compile_workers", None)
    if fn is not None:
        fn()


def dynamo_counters() -> Any:
    from torch._dynamo.utils import counters as dynamo_counters_

    return dynamo_counters_
