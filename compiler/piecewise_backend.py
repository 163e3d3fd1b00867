"""The piecewise Dynamo backend (mode 3): key the cache, split at attention, compile or load each piece.

Flow inside :class:`PiecewiseBackend` (called by Dynamo once per captured graph):

1. collect the traced files and compute the cache key (:mod:`compiler.cache_key`); choose the rank folder
   (:mod:`compiler.layout`) and write ``cache_key_factors.json`` and ``computation_graph.py``;
2. split the graph at ``splitting_ops`` (:mod:`compiler.split`);
3. run the split graph on fake inputs; at each compiled piece, look its canonical graph hash up in
   ``compile_index.json``: load the artifact if present, else compile it with the adaptor
   (:mod:`compiler.compiler_interface`) and save it; identical pieces are compiled/loaded once per process;
4. replace each piece by a :class:`PiecewiseRunnable`, the seam for CUDA graphs and per-size compiles.

A warm also saves the AOT entry (:mod:`compiler.aot_entry`): :func:`entry_backend` is the backend of a second,
AOT capture that reuses the pieces compiled in this process. A hot start loads that entry through
:class:`HotStartBackend`, which loads each distinct artifact once and skips Dynamo, the split and the fake-tensor
pass. Neither path writes into a cache folder that already holds what it would write.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from compiler import aot_entry, build_identity, cache_key, envs, progress, torch_compat
from compiler.artifacts import CompileIndex, IndexEntry
from compiler.compile_context import CompileContext
from compiler.errors import GUARDS, CompilerError
from compiler.compiler_interface import CompilerInterface, InductorStandaloneAdaptor, artifact_digest
from compiler.counters import check_not_strict, counters, strict_mode
from compiler.layout import (COMPUTATION_GRAPH, CacheLayout, read_only_compiler_caches, redirect_compiler_caches,
                             resolve_root)
from compiler.split import SplitItem, graph_hash, split_graph

logger = logging.getLogger(__name__)


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

    def __init__(self, index: int, submod_name: str, graph: fx.GraphModule | None, returns_tuple: bool,
                 general: Callable[..., Any], sym_shape_indices: list[int], graph_hash: str,
                 backend: PiecewiseBackend | None, compile_sizes: list[int],
                 sized: dict[int, Callable[..., Any]] | None = None) -> None:
        self.index = index
        self.submod_name = submod_name
        self.graph = graph
        self.returns_tuple = returns_tuple
        self.general = general
        self.sym_shape_indices = sym_shape_indices
        self.graph_hash = graph_hash
        self.backend = backend
        self.compile_sizes = set(compile_sizes)
        self.sized: dict[int, Callable[..., Any]] = dict(sized or {})

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
                if fn is None and self.backend is not None and self.graph is not None:
                    fn = self.sized[shape] = self.backend.compile_or_load(
                        self.index, self.graph, list(args), shape, self.graph_hash + f"@{shape}")
                if fn is not None:
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
        self.pieces_info: dict[str, PieceInfo] = {}
        self.traced_files: list[str] = []
        self._persist_env = ctx.device.startswith("cuda")
        self._piece_total = 0

    # ------------------------------------------------------------------ Dynamo entry
    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        t0 = time.perf_counter()
        counters.dynamo_compiles += 1
        counters.dynamo_traces += 1
        self.traced_files = cache_key.traced_files(torch_compat.traced_code())
        logger.debug("Traced files (to be considered for compilation cache):\n%s", "\n".join(self.traced_files))
        self.key = cache_key.CacheKey.from_values(
            env=cache_key.local_env_factors(),
            config=cache_key.config_factors(self.config, self.ctx.model_config),
            code=cache_key.code_factors(self.traced_files),
            compiler=cache_key.local_compiler_factors(self.ctx.device),
            evidence=build_identity.evidence(),
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
            if not self.layout.index_file.exists():  # nothing compiled for this key here: a hit-only start
                # stops before anything is written
                check_not_strict(f"piece 0 (nothing is compiled for cache {self.key.hash} in {self.layout.dir})")
            self.layout.ensure()
            self.key.write_if_changed(self.layout.dir)  # a hit writes nothing (read-only volumes)
            logger.info("Using cache directory: %s for cachetool's torch.compile", self.layout.dir)
        self._check_guards(example_inputs)

        split_gm, items = split_graph(gm, self.config.resolved_splitting_ops)
        self.split_gm, self.items = split_gm, items
        if self.layout is not None and not (self.layout.dir / COMPUTATION_GRAPH).exists():
            path = self.layout.dir / COMPUTATION_GRAPH
            path.write_text("# Dynamo graph split at " + ", ".join(self.config.resolved_splitting_ops) + "\n"
                            + split_gm.print_readable(print_output=False) + "\n\n# original graph\n"
                            + gm.print_readable(print_output=False))
            logger.debug("Computation graph saved to %s", path)
        self.index = CompileIndex.open(self.layout.index_file if self.layout else None, self.key.hash)
        compile_names = [it.submod_name for it in items if not it.is_splitting_graph]
        counters.pieces += len(compile_names)
        self._piece_total = len(compile_names)
        progress.emit(progress.KEY, f"cache key {self.key.hash}: {len(compile_names)} pieces to compile or load",
                      key=self.key.hash, pieces=len(compile_names))
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
        fake_mode = torch_compat.detect_fake_mode(example_inputs)
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
        what = (f"piece {index + 1}/{self._piece_total}" if runtime_shape is None
                else f"compile size {runtime_shape}: piece {index + 1}/{self._piece_total}")
        if memo in self._by_hash:
            counters.graphs_reused += 1
            progress.emit(progress.PIECE, f"{what} reused (identical to one done)", index=index,
                          total=self._piece_total, action="reused", shape=runtime_shape, seconds=0.0)
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
                aot_entry.check_artifact(self.layout.dir, aot_entry.ArtifactRef.of(entry))  # the recorded digest
                with read_only_compiler_caches(self.layout):  # a load writes nothing into the rank folder
                    fn = self.adaptor.load((ghash, entry.artifact), graph, args, runtime_shape, self.layout.dir,
                                           entry.format)
            except Exception as exc:  # a corrupt or foreign artifact: fall back to compiling
                logger.warning("Could not load %s (%s: %s); compiling instead", entry.artifact,
                               type(exc).__name__, exc)
                fn = None
            finally:
                counters.artifact_load_seconds += time.perf_counter() - t
            if fn is not None:
                counters.graphs_loaded += 1
                progress.emit(progress.PIECE, f"{what} loaded", index=index, total=self._piece_total,
                              action="loaded", shape=runtime_shape, seconds=time.perf_counter() - t)
                logger.debug("Directly load the %s-th graph for shape %s from %s via handle %s (%.2f s)",
                             index, shape_txt, self.adaptor.name, (ghash[:16], str(self.layout.dir / entry.artifact)),
                             time.perf_counter() - t)
                self.index.record(index, runtime_shape, entry)
                self._entries[memo] = entry
        if fn is None:
            check_not_strict(f"piece {index} (shape {shape_txt}, graph {ghash[:12]})")
            tuned = runtime_shape is not None and self.ctx.device.startswith("cuda")  # compiler.autotune
            progress.emit(progress.AUTOTUNE if tuned else progress.PIECE_START,
                          f"{what}: compiling" + (" with max-autotune" if tuned else ""), index=index,
                          total=self._piece_total, shape=runtime_shape)
            t = time.perf_counter()
            directory = self.layout.dir if self.layout is not None else None
            fmt = self.config.compile_cache_save_format
            with redirect_compiler_caches(self.layout, persist=self._persist_env):
                fn, handle = self.adaptor.compile(graph, args, runtime_shape, ghash, directory, fmt)
            counters.inductor_compile_seconds += time.perf_counter() - t
            counters.graphs_compiled += 1
            progress.emit(progress.PIECE, f"{what} compiled in {time.perf_counter() - t:.1f} s", index=index,
                          total=self._piece_total, action="compiled", shape=runtime_shape,
                          seconds=time.perf_counter() - t)
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


class DynamicShapeGuardError(CompilerError):
    """``evaluate_guards`` is on and tracing added a guard on a dynamic dimension."""

    kind = GUARDS


class _PieceInterpreter(fx.Interpreter):
    """Runs the split graph on fake inputs so that each piece gets fake example inputs with symbolic sizes."""

    def __init__(self, module: fx.GraphModule, compile_names: list[str], backend: PiecewiseBackend) -> None:
        super().__init__(module)
        self.compile_names = compile_names
        self.backend = backend
        self.fake_mode = torch_compat.detect_fake_mode()

    def run(self, *args: Any) -> Any:  # type: ignore[override]
        fake_mode = self.fake_mode or torch_compat.detect_fake_mode(args)
        self.fake_mode = fake_mode
        fake_args = [a if not isinstance(a, torch.Tensor) or torch_compat.is_fake_tensor(a) else fake_mode.from_tensor(a)
                     for a in args]
        with fake_mode, torch_compat.python_dispatcher():
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
            self.backend.pieces_info[target] = PieceInfo(index, ghash, returns_tuple, sym_shape_indices)
            runnable = PiecewiseRunnable(index, target, submod, returns_tuple, fn, sym_shape_indices, ghash,
                                         self.backend, self.backend.config.resolved_compile_sizes)
            self.module.__dict__[target] = runnable
        return output


@dataclass(frozen=True)
class PieceInfo:
    """What the AOT entry records of a compiled piece besides its artifact."""

    index: int
    graph_hash: str
    returns_tuple: bool
    sym_shape_indices: list[int]


# ---------------------------------------------------------------------- the AOT entry: write (warm)

def entry_backend(backend: PiecewiseBackend) -> Callable[[fx.GraphModule, list[Any]], Any]:
    """The backend of the AOT capture that a warm runs after its first compile: split the graph as
    ``backend`` did and serve every piece from what ``backend`` compiled or loaded in this process (strict: a
    piece it does not know fails the capture instead of compiling). Returns a
    :class:`~compiler.aot_entry.SplitGraphFunction` whose pieces refer to their artifacts."""

    def compile_entry(gm: fx.GraphModule, example_inputs: list[Any]) -> aot_entry.SplitGraphFunction:
        split_gm, items = split_graph(gm, backend.config.resolved_splitting_ops)
        names = [it.submod_name for it in items if not it.is_splitting_graph]
        saved_counters = counters.snapshot()
        previous = backend.pieces_info
        backend.pieces_info = {}
        try:
            with strict_mode(True), redirect_compiler_caches(backend.layout, persist=backend._persist_env):
                _PieceInterpreter(split_gm, names, backend).run(*example_inputs)
            infos = backend.pieces_info
        finally:
            backend.pieces_info = previous
            counters.__dict__.update(saved_counters.__dict__)
            counters.dynamo_traces += 1
        refs = {}
        for name in names:
            info = infos[name]
            entry = backend._entries.get((info.graph_hash, None))
            if entry is None:
                raise aot_entry.AotEntryError(f"piece {info.index} has no saved artifact")
            refs[name] = aot_entry.PieceRef(info.index, info.graph_hash, info.returns_tuple, info.sym_shape_indices,
                                            aot_entry.ArtifactRef.of(entry))
        return aot_entry.SplitGraphFunction(split_gm, aot_entry.portable_split_graph(split_gm, refs), names)

    return compile_entry


# ---------------------------------------------------------------------- the AOT entry: load (hot start)

class HotStartBackend:
    """Stands where :class:`PiecewiseBackend` stands after a compile (``layout``, ``key``, ``split_gm``,
    ``items``), for a model whose forward was loaded from its AOT entry."""

    def __init__(self, ctx: CompileContext, layout: CacheLayout, key: cache_key.CacheKey,
                 adaptor: CompilerInterface | None = None) -> None:
        self.ctx = ctx
        self.config = ctx.compilation_config
        self.layout = layout
        self.key = key
        self.adaptor = adaptor or InductorStandaloneAdaptor()
        self.split_gm: fx.GraphModule | None = None
        self.items: list[SplitItem] = []
        self._loaded: dict[str, Callable[..., Any]] = {}
        self.graphs_loaded = 0
        self.pieces_reused = 0

    def _load_artifact(self, ref: aot_entry.ArtifactRef, index: int, shape: int | None,
                       ghash: str) -> Callable[..., Any]:
        fn = self._loaded.get(ref.name)
        if fn is not None:
            self.pieces_reused += shape is None  # an identical piece served by one loaded artifact
            return fn
        path = aot_entry.check_artifact(self.layout.dir, ref)
        t = time.perf_counter()
        fn = self.adaptor.load((ghash, ref.name), None, [], shape, self.layout.dir, ref.format)
        counters.artifact_load_seconds += time.perf_counter() - t
        logger.debug("Directly load the %s-th graph for shape %s from %s via handle %s (%.2f s)", index, shape,
                     self.adaptor.name, (ghash[:16], str(path)), time.perf_counter() - t)
        self._loaded[ref.name] = fn
        self.graphs_loaded += 1
        return fn

    def _runnable(self, index: CompileIndex, name: str, ref: aot_entry.PieceRef) -> PiecewiseRunnable:
        general = self._load_artifact(ref.general, ref.index, None, ref.graph_hash)
        sizes = self.config.resolved_compile_sizes
        sized = {}
        for size in sizes:
            entry = index.pieces.get(f"{ref.index}@{size}")
            if entry is None or entry.graph_hash != ref.graph_hash + f"@{size}":
                raise aot_entry.AotEntryError(f"piece {ref.index} has no artifact for compile size {size}")
            sized[size] = self._load_artifact(aot_entry.ArtifactRef.of(entry), ref.index, size, entry.graph_hash)
        return PiecewiseRunnable(ref.index, name, None, ref.returns_tuple, general, ref.sym_shape_indices,
                                 ref.graph_hash, None, sizes, sized=sized)

    def load(self) -> tuple[Callable[..., Any], float]:
        """Load the entry and its artifacts; returns ``(fn, seconds)``, ``fn(module, *args)``."""
        index = CompileIndex.open(self.layout.index_file, self.key.hash)
        with read_only_compiler_caches(self.layout, persist=self.ctx.device.startswith("cuda")):
            fn, split_fn, seconds = aot_entry.load_entry(self.layout.dir,
                                                         lambda name, ref: self._runnable(index, name, ref))
        self.split_gm = split_fn.split_gm
        compiled = set(split_fn.compiled_names)
        self.items = [SplitItem(name, int(name.replace("submod_", "")), name not in compiled, module)
                      for name, module in self.split_gm.named_children()]
        self.items.sort(key=lambda it: it.graph_id)
        counters.pieces += len(compiled)
        counters.unique_pieces += len({r.graph_hash for r in self.split_gm.children()
                                       if isinstance(r, aot_entry.PieceRef)})
        counters.graphs_loaded += self.graphs_loaded
        counters.graphs_reused += self.pieces_reused
        return fn, seconds
