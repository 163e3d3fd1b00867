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

import contextlib
import dis
import inspect
import io
import logging
import time
import types
from collections.abc import Callable
from pathlib import Path
from types import CodeType
from typing import Any, TypeVar

import torch
from torch import nn

from compiler.compile_context import CompileContext
from compiler.config import CompilationMode, DynamicShapesType
from compiler.counters import CompileInStrictMode, counters, is_strict
from compiler.layout import TRANSFORMED_CODE

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=type)


class RecompileError(RuntimeError):
    """A call would have recompiled although guards are evaluated (``evaluate_guards``) or strict mode is on."""


def _skip_all_guards(entries: Any) -> list[bool]:
    return [False for _ in entries]


def _guard_filter_fn() -> Callable[..., Any]:
    fn = getattr(torch.compiler, "skip_all_guards_unsafe", None)
    return fn if fn is not None else _skip_all_guards


@contextlib.contextmanager
def _size_oblivious(enabled: bool):  # noqa: ANN202
    if not enabled:
        yield
        return
    import torch.fx.experimental._config as fx_config

    with fx_config.patch(backed_size_oblivious=True):
        yield


def _mark_unbacked(t: torch.Tensor, dim: int) -> None:
    mark = getattr(torch._dynamo.decorators, "mark_unbacked", None) or torch._dynamo.mark_unbacked  # type: ignore[attr-defined]
    mark(t, dim)


def _fail_on_recompile() -> Any:
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is not None:
        return set_stance("fail_on_recompile")
    return torch._dynamo.config.patch(error_on_recompile=True)  # pragma: no cover - older torch


def _decompile(code: CodeType) -> str:
    try:
        import depyf  # type: ignore[import-not-found]

        return depyf.decompile(code)
    except Exception:
        buf = io.StringIO()
        dis.dis(code, file=buf)
        return '"""Disassembly (install depyf to get decompiled Python)."""\n' + "\n".join(
            "# " + line for line in buf.getvalue().splitlines())


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
                _mark_unbacked(t, d)
            else:
                torch._dynamo.mark_dynamic(t, d)

    def _fresh_forward(self) -> Callable[..., Any]:
        """``forward`` bound to this instance, on a private copy of its code object: Dynamo keeps compiled code
        per code object, so without a copy every further instance (another runner, a test) would pile a cache
        entry onto the same code (different backend) until the recompile limit."""
        fn = type(self.module).forward
        fn = getattr(fn, "__func__", fn)
        clone = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__,
                                   fn.__closure__)
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
        options = None if keep_guards else {"guard_filter_fn": _guard_filter_fn()}
        if mode == CompilationMode.DYNAMO_TRACE_ONCE:
            def eager_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
                counters.dynamo_compiles += 1
                return gm.forward

            self.backend = eager_backend
        else:
            from compiler.piecewise_backend import PiecewiseBackend

            self.backend = PiecewiseBackend(self.ctx)
        return torch.compile(forward, fullgraph=True, backend=self.backend, options=options)

    # ---------------------------------------------------------------- calls
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.compiled_fn is None:
            return self._first_call(args, kwargs)
        before = counters.dynamo_compiles
        if self.cfg.dynamic_shapes_config.evaluate_guards or is_strict():
            try:
                with _fail_on_recompile():
                    return self.compiled_fn(*args, **kwargs)
            except RuntimeError as exc:
                if "fail_on_recompile" in str(exc) or "ecompil" in str(exc) and "stance" in str(exc) \
                        or "error_on_recompile" in str(exc):
                    raise RecompileError(f"recompilation refused ({'strict mode' if is_strict() else 'evaluate_guards'}): "
                                         f"{str(exc).splitlines()[0]}") from None
                raise
        out = self.compiled_fn(*args, **kwargs)
        if counters.dynamo_compiles != before:
            logger.warning("Dynamo recompiled %s after the first compile", type(self.module).__name__)
        return out

    def _first_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        code = type(self.module).forward.__code__
        logger.info("Start compiling function %s", code)
        t0 = time.perf_counter()
        self._mark(args, kwargs)
        self.compiled_fn = self._build()
        hooks: list[tuple[CodeType, CodeType]] = []
        handle = None
        try:
            from torch._dynamo.convert_frame import register_bytecode_hook

            handle = register_bytecode_hook(lambda old, new: hooks.append((old, new)))
        except Exception:  # pragma: no cover
            handle = None
        size_oblivious = self.cfg.dynamic_shapes_config.type == DynamicShapesType.BACKED_SIZE_OBLIVIOUS
        try:
            with _size_oblivious(size_oblivious):
                out = self.compiled_fn(*args, **kwargs)
        except torch._dynamo.exc.BackendCompilerFailed as exc:
            self.compiled_fn = None
            inner = getattr(exc, "inner_exception", None)
            if isinstance(inner, (CompileInStrictMode, RuntimeError, ValueError)):
                raise inner from None
            raise
        except CompileInStrictMode:
            self.compiled_fn = None
            raise
        finally:
            if handle is not None:
                handle.remove()
        self.first_compile_seconds = time.perf_counter() - t0
        layout = getattr(self.backend, "layout", None)
        if layout is not None and hooks and not self.ctx.key_only and Path(layout.dir).is_dir():
            path = Path(layout.dir) / TRANSFORMED_CODE
            path.write_text("\n\n".join(f"# transformed code of {old.co_name} ({old.co_filename}:{old.co_firstlineno})\n"
                                        + _decompile(new) for old, new in hooks) + "\n")
            logger.debug("Transformed code saved to %s", path)
        logger.info("torch.compile takes %.2f s in total", self.first_compile_seconds)
        return out


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
