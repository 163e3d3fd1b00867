"""The hot start's side of torch's private APIs (part of :mod:`compiler.torch_compat`): load an AOT entry and its
artifacts with only what running them needs.

- :func:`prefetch_artifact_loader`: the loader's imports in a background thread, overlapping the model build;
- :func:`load_compiled_function`: torch's AOT entry, without building a guard tree for an entry whose guards were
  all dropped;
- :func:`load_compiled_artifact`: a binary Inductor artifact through AOTAutograd's cache, without
  ``compile_fx`` (lowering, templates, autotuning) and with small stand-ins (:data:`STAND_INS`) for the few names a
  hit reads from Inductor's compile-time modules.

Guarded for torch 2.11 and 2.13: where a piece is missing or shaped otherwise, torch's own path runs.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

logger = logging.getLogger(__name__)


def _inductor_config() -> Any:
    import torch._inductor.config as config

    return config


_prefetch: Any = None  # the thread, once started

# What loading and first running an AOT entry imports (read off a hot start's new sys.modules on 2.11 and 2.13):
# Dynamo and its AOT loader, AOTAutograd's cache and runtime wrappers, Inductor's code cache and the runtime its
# generated code uses. Never compile_fx, lowering or select_algorithm (tests/compiler/test_aot_hot_start.py).
_PREFETCHED = (
    "torch._dynamo",
    "torch._dynamo.aot_compile",
    "torch._dynamo.package",
    "torch._functorch._aot_autograd.autograd_cache",
    "torch._functorch._aot_autograd.subclass_codegen",
    "torch._functorch._activation_checkpointing.graph_info_provider",
    "torch._inductor.async_compile",
    "torch._inductor.debug",
    "torch._inductor.codecache",
    "torch._inductor.standalone_compile",
    "torch._inductor.output_code",
    "torch._inductor.inductor_prims",
    "torch._inductor.hooks",
    "torch._inductor.codegen.memory_planning",
    "torch._inductor.codegen.wrapper",
    "torch._inductor.runtime.autotune_cache",
    "torch._inductor.runtime.triton_heuristics",
    "torch._inductor.runtime.triton_helpers",
    "torch._inductor.runtime.static_cuda_launcher",
    "torch._inductor.runtime.static_triton_launcher",
    "torch.utils.cpp_extension",
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

        # Some torch versions start Inductor's compile-worker pool when async_compile is imported (2.13 only
        # from torch.compile's backend): sixteen processes a hit never uses, competing with the start and shut
        # down at exit (seconds on the H200). compile_threads=1 while importing skips that warm-up; a compile
        # still gets its pool, made at its first kernel.
        with _inductor_config().patch(compile_threads=1):
            for name in _PREFETCHED:
                try:
                    importlib.import_module(name)
                except Exception:  # a module this torch lacks or names otherwise: the load imports what it needs
                    logger.debug("prefetch of %s failed", name, exc_info=True)

    import threading

    # Not a daemon: the interpreter joins it before it exits. A daemon thread still importing torch's C++-backed
    # modules while the interpreter finalizes can abort the process ("terminate called without an active
    # exception", exit -6: seen in a suite run), so a start that ends early (a miss, an error) would lose its exit
    # code; waiting out the imports costs at most their few seconds.
    _prefetch = threading.Thread(target=run, name="cachetool-prefetch", daemon=False)
    _prefetch.start()


def prefetch_running() -> bool:
    """Whether :func:`prefetch_artifact_loader`'s thread is still importing."""
    return _prefetch is not None and _prefetch.is_alive()


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
            import torch._dynamo.package as package  # type: ignore[assignment]  # baseline (issue 46)
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
    return CompiledArtifact.load(path=path, format=save_format)  # type: ignore[arg-type]  # baseline (issue 46)


def _load_binary_at_runtime(path: str) -> Any:
    """``CacheCompiledArtifact`` binary load (torch 2.11 and 2.13: header, ``torch_key``, AOTAutograd key,
    Mega-Cache bytes): unpack the bytes into the (redirected) caches, look the AOTAutograd entry up and wrap it for
    running. ``None`` where the file or this torch is not of that shape (then torch's own loader runs)."""
    try:
        import importlib

        import torch._inductor.async_compile
        import torch._inductor.debug
        from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
        from torch._inductor import config as inductor_cfg

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
    # compile_threads=1: the saved kernels load in this process from the redirected caches, not through
    # Inductor's worker pool (which a load would start, and exit would shut down).
    with runtime_stand_ins(), inductor_cfg.patch(unsafe_skip_cache_dynamic_shape_guards=True, compile_threads=1):
        torch.compiler.load_cache_artifacts(artifact_bytes)
        try:
            with torch._functorch.config.patch(strict_autograd_cache=True):
                result = AOTAutogradCache._lookup(
                    key, local=True, remote=False, args=[], cache_info={}, aot_config=None
                )
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
            compiled_fn = entry.wrap_post_compile([], entry.sanitized_aot_config, fx_config)  # type: ignore[arg-type]  # baseline (issue 46)
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
