"""Capture: the ``@support_torch_compile`` class decorator (vLLM's), Dynamo once, dynamic token dims, guards.

A decorated ``nn.Module`` runs eagerly until :meth:`enable_compile` is called with a
:class:`~compiler.compile_context.CompileContext`. The first call then marks the token dimension of the forward
inputs dynamic (``dynamic_arg_dims``) according to ``dynamic_shapes_config.type``, and compiles once:

- ``backed``: ``mark_dynamic``; guards are dropped afterwards (``guard_filter_fn``), so that a 1-token batch,
  which backed shapes would specialise (0/1 specialisation), runs the same graph instead of recompiling;
- ``unbacked``: ``mark_unbacked``: no 0/1 specialisation at all;
- ``backed_size_oblivious``: ``mark_dynamic`` with ``backed_size_oblivious`` reasoning during the trace.

With ``evaluate_guards`` the guards are kept and evaluated, a recompile becomes an error (stance
``fail_on_recompile``) and any guard added on a dynamic dim while tracing fails the compile.
``transformed_code.py`` (Dynamo's bytecode, decompiled where ``depyf`` is installed) is written beside
``computation_graph.py``.
"""

from __future__ import annotations

import dataclasses
import dis
import inspect
import io
import logging
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any, TypeVar

import torch
from torch import nn

from compiler import envs, progress, torch_compat
from compiler.compile_context import CompileContext
from compiler.config import CompilationMode, DynamicShapesType
from compiler.counters import CompileInStrictMode, counters, is_strict
from compiler.errors import GUARDS, STRICT_MODE, CompilerError
from compiler.key_prediction import NO_CACHE_YET
from compiler.layout import TRANSFORMED_CODE

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=type)


class RecompileError(CompilerError):
    """A call would have recompiled although guards are evaluated (``evaluate_guards``, kind ``guards``) or strict
    mode is on (kind ``strict-mode``)."""

    kind = GUARDS


def _decompile(code: CodeType) -> str:
    try:
        import depyf

        return depyf.decompile(code)
    except Exception:
        buf = io.StringIO()
        dis.dis(code, file=buf)
        return '"""Disassembly (install depyf to get decompiled Python)."""\n' + "\n".join(
            "# " + line for line in buf.getvalue().splitlines()
        )


@dataclass
class StartupPhases:
    """Seconds of the first call, by phase; each name means one thing (docs/compiler.md, "Timing names"):

    - ``key``: predicting the cache key without a trace (AOT path);
    - ``trace``: the Dynamo path's first call less its compiles and loads (Dynamo's capture, the key, the split,
      the fake-tensor pass, and any wait for the imports started in the background; with stock ``torch.compile``,
      mode 1, the whole first call: its compiles are torch's);
    - ``compile``: Inductor compiling pieces;
    - ``load``: loading the AOT entry and artifacts (or, on the Dynamo path, each piece's artifact); on the AOT
      path with the wait for the loader's imports started in the background;
    - ``save``: writing the AOT entry after a compile (a warm).

    ``counted_load`` is the part of ``load`` that ``counters.artifact_load_seconds`` also holds (not a phase)."""

    key: float = 0.0
    trace: float = 0.0
    compile: float = 0.0
    load: float = 0.0
    save: float = 0.0
    counted_load: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in dataclasses.asdict(self).items() if k != "counted_load"}


class _Compiled:
    """Per-instance compile state."""

    def __init__(self, module: nn.Module, ctx: CompileContext, dynamic_arg_dims: dict[str, int]) -> None:
        self.module = module
        self.ctx = ctx
        self.cfg = ctx.compilation_config
        self.dynamic_arg_dims = dynamic_arg_dims
        self.sig = inspect.signature(type(module).forward)
        self.compiled_fn: Callable[..., Any] | None = None
        self.backend: Any = None
        self.first_compile_seconds: float | None = None
        self.hot_path: str | None = None  # "aot" or "dynamo" once the first call ran
        self.aot_fallback_reason: str | None = None
        self.key_source: str | None = None  # AOT path: "evidence" (build evidence matched) or "computed"
        self.phases = StartupPhases()
        self._compiled_here = 0
        self._import_wait = 0.0
        # (already running when the model runner started it: the AOT check would wait for it, losing the overlap)
        if not torch_compat.prefetch_running() and self._aot_usable():
            torch_compat.prefetch_artifact_loader()  # overlaps the loader's imports with the model build

    # ---------------------------------------------------------------- dynamic dims
    def _mark(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        bound = self.sig.bind(self.module, *args, **kwargs)
        dyn = self.cfg.dynamic_shapes_config.type
        for name, dim in self.dynamic_arg_dims.items():
            t = bound.arguments.get(name)
            if not isinstance(t, torch.Tensor):
                continue
            d = dim if dim >= 0 else t.ndim + dim
            if dyn == DynamicShapesType.UNBACKED:
                torch_compat.mark_unbacked(t, d)
            else:
                torch_compat.mark_dynamic(t, d)

    def _fresh_forward(self) -> Callable[..., Any]:
        """``forward`` bound to this instance, on a private copy of its code object: Dynamo keeps compiled code
        per code object, so without a copy every further instance (another runner, a test) would pile a cache
        entry onto the same code (different backend) until the recompile limit."""
        fn = type(self.module).forward
        fn = getattr(fn, "__func__", fn)
        clone = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        clone.__kwdefaults__ = fn.__kwdefaults__
        clone.__qualname__ = fn.__qualname__
        clone.__module__ = fn.__module__
        return types.MethodType(clone, self.module)

    def _build(self) -> Callable[..., Any]:
        mode = self.cfg.mode
        keep_guards = self.cfg.dynamic_shapes_config.evaluate_guards
        forward = self._fresh_forward()
        if mode == CompilationMode.STOCK_TORCH_COMPILE:
            return torch.compile(forward, fullgraph=True)
        options = None if keep_guards else {"guard_filter_fn": torch_compat.skip_all_guards()}
        if mode == CompilationMode.DYNAMO_TRACE_ONCE:

            def eager_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
                counters.dynamo_compiles += 1
                counters.dynamo_traces += 1
                return gm.forward

            self.backend = eager_backend
        else:
            from compiler.piecewise_backend import PiecewiseBackend

            self.backend = PiecewiseBackend(self.ctx)
        return torch.compile(forward, fullgraph=True, backend=self.backend, options=options)  # type: ignore[arg-type]  # baseline (issue 46)

    # ---------------------------------------------------------------- calls
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.compiled_fn is None:
            return self._first_call(args, kwargs)
        before = counters.dynamo_compiles
        if self.cfg.dynamic_shapes_config.evaluate_guards or is_strict():
            try:
                with torch_compat.fail_on_recompile():
                    return self.compiled_fn(*args, **kwargs)
            except RuntimeError as exc:
                if torch_compat.is_recompile_refusal(exc):
                    why = "strict mode" if is_strict() else "evaluate_guards"
                    refusal = RecompileError(
                        f"recompilation refused ({why}): {str(exc).splitlines()[0]}",
                        kind=STRICT_MODE if is_strict() else GUARDS,
                    )
                    raise refusal from None
                raise
        out = self.compiled_fn(*args, **kwargs)
        if counters.dynamo_compiles != before:
            logger.warning("Dynamo recompiled %s after the first compile", type(self.module).__name__)
        return out

    def _first_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        t0 = time.perf_counter()
        torch_compat.wait_for_prefetch()  # Inductor's modules are then imported by one thread only
        self._import_wait = time.perf_counter() - t0  # counted in the load phase: the loader's imports
        try:
            if self._aot_usable():
                out = self._try_aot_start(args, kwargs)
                if out is not _NO_ENTRY:
                    return out
            return self._compile_first_call(args, kwargs)
        except BaseException:
            # A half-built state would skip the dynamic marks on a retry and compile a static shape that
            # dropped guards then reuse for every size.
            self.compiled_fn = None
            self.backend = None
            raise

    # ---------------------------------------------------------------- the AOT entry
    def _aot_usable(self) -> bool:
        """The AOT entry serves piecewise mode with dropped guards and a cache that is read."""
        return (
            self.cfg.mode == CompilationMode.PIECEWISE
            and not self.ctx.key_only
            and not self.cfg.dynamic_shapes_config.evaluate_guards
            and not envs.disable_compile_cache()
            and torch_compat.aot_supported()
        )

    def _try_aot_start(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Hot start: predict the key, load the entry, run. ``_NO_ENTRY`` (and one log line why) if it can't."""
        from compiler.aot_entry import AotEntryError
        from compiler.key_prediction import HotStartFactors, KeyMiss, predict_layout
        from compiler.layout import resolve_root
        from compiler.piecewise_backend import HotStartBackend

        t0 = time.perf_counter()
        loaded_before = counters.artifact_load_seconds
        local = HotStartFactors(self.cfg, self.ctx.model_config, self.ctx.device)
        try:
            key, layout = predict_layout(
                resolve_root(self.cfg.cache_dir),
                local,
                rank=self.ctx.rank,
                dp_rank=self.ctx.dp_rank,
                prefix=self.ctx.prefix,
            )
            self.key_source = local.source
            if local.source == "evidence":  # Inductor then need not hash torch's (or Triton's) sources
                values = key.factors.values("compiler") or {}
                torch_compat.preset_torch_key(values["torch_key"])
                if isinstance(values.get("triton_key"), str):
                    torch_compat.preset_triton_key(values["triton_key"])
            t_key = time.perf_counter()
            backend = HotStartBackend(self.ctx, layout, key)
            fn, _ = backend.load()
        except (KeyMiss, AotEntryError, OSError) as exc:
            self.aot_fallback_reason = getattr(exc, "reason", None) or str(exc)
            if self.aot_fallback_reason == NO_CACHE_YET:
                logger.info("No cache for this model and config under the root yet: compiling")
            else:
                logger.info("No AOT hot start (%s); tracing with Dynamo", self.aot_fallback_reason)
            return _NO_ENTRY
        t_load = time.perf_counter()
        module = self.module
        self.compiled_fn = lambda *a, **k: fn(module, *a, **k)
        self.backend = backend
        self.hot_path = "aot"
        logger.info(
            "Loaded the AOT-compiled forward from %s (%d artifacts) in %.2f s; no Dynamo trace",
            layout.dir,
            backend.graphs_loaded,
            t_load - t0,
        )
        self.phases = StartupPhases(
            key=t_key - t0,
            load=t_load - t_key + self._import_wait,
            counted_load=counters.artifact_load_seconds - loaded_before,
        )
        self.first_compile_seconds = t_load - t0
        return self.compiled_fn(*args, **kwargs)

    def _write_aot_entry(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """After a compiling first call: capture ``forward`` once more with Dynamo's AOT API, serving every piece
        from what was just compiled, and save it beside the artifacts. A failure costs only the entry. Returns
        whether it tried (the ``save`` phase)."""
        from compiler.aot_entry import write_entry
        from compiler.piecewise_backend import entry_backend

        layout = getattr(self.backend, "layout", None)
        wanted = self.ctx.save_aot_entry if self.ctx.save_aot_entry is not None else self._compiled_here > 0
        if layout is None or not wanted or not self._aot_usable():
            return False
        t0 = time.perf_counter()
        progress.emit(progress.SAVE, "saving the AOT entry (a second Dynamo capture, nothing compiles)")
        fn = type(self.module).forward
        try:
            with torch_compat.size_oblivious(self._size_oblivious()), progress.during(progress.SAVE):
                compiled = torch_compat.aot_compile_fullgraph(
                    getattr(fn, "__func__", fn), (self.module, *args), kwargs, entry_backend(self.backend)
                )
            path = write_entry(layout.dir, compiled)
        except Exception as exc:  # the Dynamo path still serves; the next start traces
            logger.warning(
                "AOT entry not written (%s: %s); hot starts will trace with Dynamo",
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
            )
            return True
        logger.info("AOT entry saved to %s (%.2f s)", path, time.perf_counter() - t0)
        return True

    def _size_oblivious(self) -> bool:
        return self.cfg.dynamic_shapes_config.type == DynamicShapesType.BACKED_SIZE_OBLIVIOUS

    # ---------------------------------------------------------------- the Dynamo path
    def _compile_first_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        code = type(self.module).forward.__code__
        logger.info("Start compiling function %s", code)
        progress.emit(progress.TRACE, f"tracing {type(self.module).__name__}.forward with Dynamo")
        t0 = time.perf_counter()
        before = counters.snapshot()
        self._mark(args, kwargs)
        self.compiled_fn = self._build()
        hooks: list[tuple[CodeType, CodeType]] = []
        handle = torch_compat.register_bytecode_hook(lambda old, new: hooks.append((old, new)))
        try:
            with torch_compat.size_oblivious(self._size_oblivious()):
                out = self.compiled_fn(*args, **kwargs)
        except torch_compat.BackendCompilerFailed as exc:
            inner = getattr(exc, "inner_exception", None)
            if isinstance(inner, (CompileInStrictMode, RuntimeError, ValueError)):
                raise inner from None
            raise
        finally:
            if handle is not None:
                handle.remove()
        self.first_compile_seconds = time.perf_counter() - t0
        self.hot_path = "dynamo"
        done = counters.delta(before)
        self.phases = StartupPhases(  # the wait for the background imports (Dynamo's) is the trace's here
            trace=max(0.0, self.first_compile_seconds - done.inductor_compile_seconds - done.artifact_load_seconds)
            + self._import_wait,
            compile=done.inductor_compile_seconds,
            load=done.artifact_load_seconds,
            counted_load=done.artifact_load_seconds,
        )
        self._compiled_here = done.graphs_compiled
        layout = getattr(self.backend, "layout", None)
        if (
            layout is not None
            and hooks
            and not self.ctx.key_only
            and Path(layout.dir).is_dir()
            and not (Path(layout.dir) / TRANSFORMED_CODE).exists()
        ):
            path = Path(layout.dir) / TRANSFORMED_CODE
            path.write_text(
                "\n\n".join(
                    f"# transformed code of {old.co_name} ({old.co_filename}:{old.co_firstlineno})\n" + _decompile(new)
                    for old, new in hooks
                )
                + "\n"
            )
            logger.debug("Transformed code saved to %s", path)
        logger.info("torch.compile takes %.2f s in total", self.first_compile_seconds)
        t_save = time.perf_counter()
        if self._write_aot_entry(args, kwargs):
            self.phases.save = time.perf_counter() - t_save
        return out


_NO_ENTRY = object()


def support_torch_compile(cls: T | None = None, *, dynamic_arg_dims: dict[str, int] | None = None) -> Any:
    """Class decorator for ``nn.Module``\\ s whose ``forward`` is compiled once with dynamic token dims.

    Adds ``enable_compile(ctx)`` and ``compile_state``; calls go to the compiled function once enabled.
    """

    def wrap(klass: T) -> T:
        dims = dict(dynamic_arg_dims or {})

        def enable_compile(self: nn.Module, ctx: CompileContext) -> None:
            if ctx.compilation_config.mode == CompilationMode.NONE:
                self.__dict__["_compile_state"] = None
                return
            self.__dict__["_compile_state"] = _Compiled(self, ctx, dims)

        def compile_state(self: nn.Module) -> _Compiled | None:
            return self.__dict__.get("_compile_state")

        orig_call = klass.__call__

        def __call__(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            state = self.__dict__.get("_compile_state")
            if state is None:
                return orig_call(self, *args, **kwargs)
            return state(*args, **kwargs)

        klass.enable_compile = enable_compile  # type: ignore[attr-defined]
        klass.compile_state = property(compile_state)  # type: ignore[attr-defined]
        klass.__call__ = __call__  # type: ignore[method-assign]
        return klass

    if cls is not None:
        return wrap(cls)
    return wrap
