"""The piecewise Dynamo backend (mode 3): key the cache, split at attention, compile or load each piece.

Flow inside :class:`PiecewiseBackend` (called by Dynamo once per captured graph):

1. collect the traced files and compute the cache key (:mod:`compiler.cache_key`); choose the rank folder
   (:mod:`compiler.layout`) and write ``cache_key_factors.json`` and ``computation_graph.py``;
2. split the graph at ``splitting_ops`` (:mod:`compiler.split`);
3. run the split graph on fake inputs; at each compiled piece, look its canonical graph hash up in
   ``compile_index.json``: load the artifact if present, else compile it with the adaptor
   (:mod:`compiler.compiler_interface`) and save it; identical pieces are compiled/loaded once per process;
4. replace each piece by a :class:`PiecewiseRunnable`, the seam for CUDA graphs and per-size compiles.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from compiler import cache_key, envs
from compiler.artifacts import CompileIndex, IndexEntry
from compiler.compile_context import CompileContext
from compiler.compiler_interface import CompilerInterface, InductorStandaloneAdaptor, artifact_digest
from compiler.counters import check_not_strict, counters
from compiler.layout import COMPUTATION_GRAPH, CacheLayout, redirect_compiler_caches, resolve_root
from compiler.split import SplitItem, graph_hash, split_graph

logger = logging.getLogger(__name__)


def _tracing_context() -> Any:
    tc_cls = torch._guards.TracingContext
    if hasattr(tc_cls, "try_get"):
        return tc_cls.try_get()
    try:  # pragma: no cover - older torch
        return tc_cls.get()
    except Exception:
        return None


def _ensure_tuple_output(gm: fx.GraphModule) -> bool:
    """Make ``gm`` return a tuple (Inductor's artifacts return a list). Returns whether it already did."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    ret = output.args[0]
    if isinstance(ret, (tuple, list)):
        return True
    output.args = ((ret,),)
    gm.recompile()
    return False


class PiecewiseRunnable:
    """One compiled piece: the general-shape callable plus optional per-size callables.

    This is the seam for CUDA graphs: a wrapper can hold a ``PiecewiseRunnable`` and capture/replay it per
    ``runtime_shape`` (the token count, read from the SymInt argument at ``sym_shape_indices[0]``).
    """

    def __init__(self, index: int, submod_name: str, graph: fx.GraphModule, returns_tuple: bool,
                 general: Callable[..., Any], sym_shape_indices: list[int], graph_hash: str,
                 backend: PiecewiseBackend, compile_sizes: list[int]) -> None:
        self.index = index
        self.submod_name = submod_name
        self.graph = graph
        self.returns_tuple = returns_tuple
        self.general = general
        self.sym_shape_indices = sym_shape_indices
        self.graph_hash = graph_hash
        self.backend = backend
        self.compile_sizes = set(compile_sizes)
        self.sized: dict[int, Callable[..., Any]] = {}

    def runtime_shape(self, args: tuple[Any, ...]) -> int | None:
        if not self.sym_shape_indices:
            return None
        v = args[self.sym_shape_indices[0]]
        return int(v) if isinstance(v, int) else None

    def callable_for(self, args: tuple[Any, ...]) -> Callable[..., Any]:
        if self.compile_sizes:
            shape = self.runtime_shape(args)
            if shape in self.compile_sizes:
                fn = self.sized.get(shape)
                if fn is None:
                    fn = self.sized[shape] = self.backend.compile_or_load(
                        self.index, self.graph, list(args), shape, self.graph_hash + f"@{shape}")
                return fn
        return self.general

    def __call__(self, *args: Any) -> Any:
        out = self.callable_for(args)(*args)
        if self.returns_tuple:
            return out
        return out[0]


class PiecewiseBackend:
    """The Dynamo backend of mode 3."""

    def __init__(self, ctx: CompileContext, adaptor: CompilerInterface | None = None) -> None:
        self.ctx = ctx
        self.config = ctx.compilation_config
        self.adaptor = adaptor or InductorStandaloneAdaptor()
        self.layout: CacheLayout | None = None
        self.key: cache_key.CacheKey | None = None
        self.index: CompileIndex | None = None
        self.split_gm: fx.GraphModule | None = None
        self.items: list[SplitItem] = []
        self._by_hash: dict[tuple[str, int | None], Callable[..., Any]] = {}
        self._entries: dict[tuple[str, int | None], IndexEntry] = {}
        self.traced_files: list[str] = []
        self._persist_env = ctx.device.startswith("cuda")

    # ------------------------------------------------------------------ Dynamo entry
    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        t0 = time.perf_counter()
        counters.dynamo_compiles += 1
        tc = _tracing_context()
        codes = list(tc.traced_code) if tc is not None else []
        self.traced_files = cache_key.traced_files(codes)
        logger.debug("Traced files (to be considered for compilation cache):\n%s", "\n".join(self.traced_files))
        self.key = cache_key.CacheKey.from_values(
            env=cache_key.local_env_factors(),
            config=cache_key.config_factors(self.config, self.ctx.model_config),
            code=cache_key.code_factors(self.traced_files),
            compiler=cache_key.local_compiler_factors(self.ctx.device),
        )
        if self.ctx.key_only:
            # Learn the key (and where the cache would be) without compiling or writing anything.
            self.layout = CacheLayout(resolve_root(self.config.cache_dir), self.key.hash, self.ctx.rank,
                                      self.ctx.dp_rank, self.ctx.prefix)
            counters.compile_seconds += time.perf_counter() - t0
            return gm.forward
        if envs.disable_compile_cache():
            logger.info("Compile cache disabled (CACHETOOL_DISABLE_COMPILE_CACHE=1): nothing read or written")
            self.layout = None
        else:
            self.layout = CacheLayout(resolve_root(self.config.cache_dir), self.key.hash, self.ctx.rank,
                                      self.ctx.dp_rank, self.ctx.prefix)
            self.layout.ensure()
            self.key.write(self.layout.dir)
            logger.info("Using cache directory: %s for cachetool's torch.compile", self.layout.dir)
        self._check_guards(example_inputs)

        split_gm, items = split_graph(gm, self.config.resolved_splitting_ops)
        self.split_gm, self.items = split_gm, items
        if self.layout is not None:
            path = self.layout.dir / COMPUTATION_GRAPH
            path.write_text("# Dynamo graph split at " + ", ".join(self.config.resolved_splitting_ops) + "\n"
                            + split_gm.print_readable(print_output=False) + "\n\n# original graph\n"
                            + gm.print_readable(print_output=False))
            logger.debug("Computation graph saved to %s", path)
        self.index = CompileIndex.open(self.layout.index_file if self.layout else None, self.key.hash)
        compile_names = [it.submod_name for it in items if not it.is_splitting_graph]
        counters.pieces += len(compile_names)
        with redirect_compiler_caches(self.layout, persist=self._persist_env):
            _PieceInterpreter(split_gm, compile_names, self).run(*example_inputs)
        self.index.save()
        counters.unique_pieces += len({h for (h, s) in self._by_hash if s is None})
        elapsed = time.perf_counter() - t0
        counters.compile_seconds += elapsed
        logger.info("Compiling/loading %d pieces (%d unique) for dynamic shape took %.2f s",
                    len(compile_names), len({h for (h, s) in self._by_hash if s is None}), elapsed)
        return split_gm

    # ------------------------------------------------------------------ guards
    def _check_guards(self, example_inputs: list[Any]) -> None:
        """``evaluate_guards``: a guard added while tracing on the dynamic token dim is a failure."""
        if not self.config.dynamic_shapes_config.evaluate_guards:
            return
        from torch._guards import detect_fake_mode

        fake_mode = detect_fake_mode(example_inputs)
        shape_env = getattr(fake_mode, "shape_env", None)
        if shape_env is None:
            return
        import sympy

        bad = []
        for g in shape_env.guards:
            expr = g.expr
            if not getattr(expr, "free_symbols", None):
                continue
            # Two dynamic dims that must be equal (input_ids and positions): holds for every valid batch.
            if isinstance(expr, sympy.Eq) and all(isinstance(a, sympy.Symbol) for a in expr.args):
                continue
            bad.append(str(expr))
        if bad:
            raise DynamicShapeGuardError(
                "evaluate_guards: tracing added guards on dynamic shapes: " + "; ".join(bad[:5]))

    # ------------------------------------------------------------------ pieces
    def compile_or_load(self, index: int, graph: fx.GraphModule, args: list[Any], runtime_shape: int | None,
                        ghash: str) -> Callable[..., Any]:
        """Return a callable for one piece: reuse (same process), load (index hit) or compile."""
        memo = (ghash, runtime_shape)
        if memo in self._by_hash:
            counters.graphs_reused += 1
            known = self._entries.get(memo)
            if known is not None and self.index is not None:
                self.index.record(index, runtime_shape, known)  # identical piece: same artifact file
            return self._by_hash[memo]
        shape_txt = None if runtime_shape is None else runtime_shape
        entry = self.index.find(ghash, runtime_shape) if self.index is not None else None
        fn: Callable[..., Any] | None = None
        if entry is not None and self.layout is not None:
            t = time.perf_counter()
            try:
                with redirect_compiler_caches(self.layout, persist=self._persist_env):
                    fn = self.adaptor.load((ghash, entry.artifact), graph, args, runtime_shape, self.layout.dir,
                                           entry.format)
            except Exception as exc:  # a corrupt or foreign artifact: fall back to compiling
                logger.warning("Could not load %s (%s: %s); compiling instead", entry.artifact,
                               type(exc).__name__, exc)
                fn = None
            if fn is not None:
                counters.graphs_loaded += 1
                logger.debug("Directly load the %s-th graph for shape %s from %s via handle %s (%.2f s)",
                             index, shape_txt, self.adaptor.name, (ghash[:16], str(self.layout.dir / entry.artifact)),
                             time.perf_counter() - t)
                self.index.record(index, runtime_shape, entry)
                self._entries[memo] = entry
        if fn is None:
            check_not_strict(f"piece {index} (shape {shape_txt}, graph {ghash[:12]})")
            t = time.perf_counter()
            directory = self.layout.dir if self.layout is not None else None
            fmt = self.config.compile_cache_save_format
            with redirect_compiler_caches(self.layout, persist=self._persist_env):
                fn, handle = self.adaptor.compile(graph, args, runtime_shape, ghash, directory, fmt)
            counters.graphs_compiled += 1
            if handle is not None and self.layout is not None:
                path = self.layout.dir / handle[1]
                logger.debug("store the %s-th graph for shape %s from %s via handle %s (%.2f s)",
                             index, shape_txt, self.adaptor.name, (ghash[:16], str(path)), time.perf_counter() - t)
                entry = IndexEntry(ghash, "general" if runtime_shape is None else runtime_shape, handle[1], fmt,
                                   artifact_digest(path))
                self.index.record(index, runtime_shape, entry)
                self._entries[memo] = entry
            else:
                logger.debug("compiled the %s-th graph for shape %s (not saved) in %.2f s", index, shape_txt,
                             time.perf_counter() - t)
        self._by_hash[memo] = fn
        if runtime_shape is not None and self.index is not None:
            self.index.save()
        return fn


class DynamicShapeGuardError(RuntimeError):
    """``evaluate_guards`` is on and tracing added a guard on a dynamic dimension."""


class _PieceInterpreter(fx.Interpreter):
    """Runs the split graph on fake inputs so that each piece gets fake example inputs with symbolic sizes."""

    def __init__(self, module: fx.GraphModule, compile_names: list[str], backend: PiecewiseBackend) -> None:
        super().__init__(module)
        self.compile_names = compile_names
        self.backend = backend
        from torch._guards import detect_fake_mode

        self.fake_mode = detect_fake_mode()

    def run(self, *args: Any) -> Any:  # type: ignore[override]
        from torch._dynamo.utils import detect_fake_mode
        from torch._subclasses.fake_tensor import FakeTensor

        fake_mode = self.fake_mode or detect_fake_mode(args)
        self.fake_mode = fake_mode
        fake_args = [a if not isinstance(a, torch.Tensor) or isinstance(a, FakeTensor) else fake_mode.from_tensor(a)
                     for a in args]
        from torch._dispatch.python import enable_python_dispatcher

        with fake_mode, enable_python_dispatcher():
            return super().run(*fake_args)

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        output = super().call_module(target, args, kwargs)
        if target in self.compile_names:
            index = self.compile_names.index(target)
            submod = self.fetch_attr(target)
            ghash = graph_hash(submod, list(args))
            returns_tuple = _ensure_tuple_output(submod)
            sym_shape_indices = [i for i, a in enumerate(args) if isinstance(a, torch.SymInt)]
            fn = self.backend.compile_or_load(index, submod, list(args), None, ghash)
            runnable = PiecewiseRunnable(index, target, submod, returns_tuple, fn, sym_shape_indices, ghash,
                                         self.backend, self.backend.config.resolved_compile_sizes)
            self.module.__dict__[target] = runnable
        return output
