"""The piecewise Dynamo backend (mode 3): key the cache, split at attention, compile or load each piece.

Flow inside :class:`PiecewiseBackend` (called by Dynamo once per captured graph):

1. collect the traced files and compute the cache key (:mod:`compiler.cache_key`); choose the rank folder
   (:mod:`compiler.layout`) and write ``cache_key_factors.json`` and ``computation_graph.py``;
2. split the graph at ``splitting_ops`` (:mod:`compiler.split`);
3. run the split graph on fake inputs; each compiled piece goes by its canonical graph hash to the
   :class:`~compiler.artifact_manager.ArtifactManager`, which loads its artifact if ``compile_index.json`` has it,
   else compiles it with the adaptor (:mod:`compiler.compiler_interface`) and saves it; identical pieces are
   compiled/loaded once per process;
4. replace each piece by a :class:`PiecewiseRunnable`, the seam for CUDA graphs and per-size compiles.

A warm also saves the AOT entry (:mod:`compiler.aot_entry`): :func:`entry_backend` is the backend of a second,
AOT capture that reuses the pieces compiled in this process. A hot start loads that entry through
:class:`HotStartBackend`, which loads each distinct artifact once (through an artifact manager of its own) and
skips Dynamo, the split and the fake-tensor pass. Neither path writes into a cache folder that already holds what
it would write.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from compiler import aot_entry, build_identity, cache_key, envs, progress, torch_compat
from compiler.artifact_manager import ArtifactManager, Piece
from compiler.compile_context import CompileContext
from compiler.compiler_interface import CompilerInterface, InductorStandaloneAdaptor
from compiler.counters import check_not_strict, counters, strict_mode
from compiler.errors import GUARDS, CompilerError
from compiler.layout import (
    COMPUTATION_GRAPH,
    CacheLayout,
    read_only_compiler_caches,
    redirect_compiler_caches,
    resolve_root,
)
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

    def __init__(
        self,
        index: int,
        submod_name: str,
        graph: fx.GraphModule | None,
        returns_tuple: bool,
        general: Callable[..., Any],
        sym_shape_indices: list[int],
        graph_hash: str,
        backend: PiecewiseBackend | None,
        compile_sizes: list[int],
        sized: dict[int, Callable[..., Any]] | None = None,
    ) -> None:
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
                        self.index, self.graph, list(args), shape, self.graph_hash + f"@{shape}"
                    )
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
        # One manager for the backend's life: a recompile reuses what an earlier call compiled or loaded.
        self.artifacts = ArtifactManager(
            adaptor or InductorStandaloneAdaptor(), device=ctx.device, save_format=self.config.compile_cache_save_format
        )
        self.layout: CacheLayout | None = None
        self.key: cache_key.CacheKey | None = None
        self.split_gm: fx.GraphModule | None = None
        self.items: list[SplitItem] = []
        self.pieces_info: dict[str, PieceInfo] = {}
        self.traced_files: list[str] = []
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
            self.layout = CacheLayout(
                resolve_root(self.config.cache_dir), self.key.hash, self.ctx.rank, self.ctx.dp_rank, self.ctx.prefix
            )
            counters.compile_seconds += time.perf_counter() - t0
            return gm.forward
        if envs.disable_compile_cache():
            logger.info("Compile cache disabled (CACHETOOL_DISABLE_COMPILE_CACHE=1): nothing read or written")
            self.layout = None
        else:
            self.layout = CacheLayout(
                resolve_root(self.config.cache_dir), self.key.hash, self.ctx.rank, self.ctx.dp_rank, self.ctx.prefix
            )
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
            path.write_text(
                "# Dynamo graph split at "
                + ", ".join(self.config.resolved_splitting_ops)
                + "\n"
                + split_gm.print_readable(print_output=False)
                + "\n\n# original graph\n"
                + gm.print_readable(print_output=False)
            )
            logger.debug("Computation graph saved to %s", path)
        self.artifacts.open(self.layout, self.key.hash)
        compile_names = [it.submod_name for it in items if not it.is_splitting_graph]
        counters.pieces += len(compile_names)
        self._piece_total = len(compile_names)
        progress.emit(
            progress.KEY,
            f"cache key {self.key.hash}: {len(compile_names)} pieces to compile or load",
            key=self.key.hash,
            pieces=len(compile_names),
        )
        with redirect_compiler_caches(self.layout, persist=self.artifacts.persist_env):
            _PieceInterpreter(split_gm, compile_names, self).run(*example_inputs)
        self.artifacts.save_index()
        counters.unique_pieces += self.artifacts.unique_pieces
        elapsed = time.perf_counter() - t0
        counters.compile_seconds += elapsed
        logger.info(
            "Compiling/loading %d pieces (%d unique) for dynamic shape took %.2f s",
            len(compile_names),
            self.artifacts.unique_pieces,
            elapsed,
        )
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
                "evaluate_guards: tracing added guards on dynamic shapes: " + "; ".join(bad[:5])
            )

    # ------------------------------------------------------------------ pieces
    def compile_or_load(
        self, index: int, graph: fx.GraphModule, args: list[Any], runtime_shape: int | None, ghash: str
    ) -> Callable[..., Any]:
        """Return a callable for one piece: reuse (same process), load (index hit) or compile
        (:meth:`~compiler.artifact_manager.ArtifactManager.load_or_compile`)."""
        return self.artifacts.load_or_compile(Piece(index, ghash, runtime_shape, self._piece_total), graph, args)


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
        fake_args = [
            a if not isinstance(a, torch.Tensor) or torch_compat.is_fake_tensor(a) else fake_mode.from_tensor(a)
            for a in args
        ]
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
            runnable = PiecewiseRunnable(
                index,
                target,
                submod,
                returns_tuple,
                fn,
                sym_shape_indices,
                ghash,
                self.backend,
                self.backend.config.resolved_compile_sizes,
            )
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
            with strict_mode(True), redirect_compiler_caches(backend.layout, persist=backend.artifacts.persist_env):
                _PieceInterpreter(split_gm, names, backend).run(*example_inputs)
            infos = backend.pieces_info
        finally:
            backend.pieces_info = previous
            counters.__dict__.update(saved_counters.__dict__)
            counters.dynamo_traces += 1
        refs = {}
        for name in names:
            info = infos[name]
            ref = backend.artifacts.lookup(info.graph_hash, None)
            if ref is None:
                raise aot_entry.AotEntryError(f"piece {info.index} has no saved artifact")
            refs[name] = aot_entry.PieceRef(
                info.index, info.graph_hash, info.returns_tuple, info.sym_shape_indices, ref
            )
        return aot_entry.SplitGraphFunction(split_gm, aot_entry.portable_split_graph(split_gm, refs), names)

    return compile_entry


# ---------------------------------------------------------------------- the AOT entry: load (hot start)


class HotStartBackend:
    """Stands where :class:`PiecewiseBackend` stands after a compile (``layout``, ``key``, ``split_gm``,
    ``items``), for a model whose forward was loaded from its AOT entry."""

    def __init__(
        self,
        ctx: CompileContext,
        layout: CacheLayout,
        key: cache_key.CacheKey,
        adaptor: CompilerInterface | None = None,
    ) -> None:
        self.ctx = ctx
        self.config = ctx.compilation_config
        self.layout = layout
        self.key = key
        self.artifacts = ArtifactManager(
            adaptor or InductorStandaloneAdaptor(), device=ctx.device, save_format=self.config.compile_cache_save_format
        )
        self.split_gm: fx.GraphModule | None = None
        self.items: list[SplitItem] = []

    @property
    def graphs_loaded(self) -> int:
        """Distinct artifacts loaded for the entry."""
        return self.artifacts.tally.loaded

    def _runnable(self, name: str, ref: aot_entry.PieceRef) -> PiecewiseRunnable:
        general = self.artifacts.load(ref.general, Piece(ref.index, ref.graph_hash))
        sizes = self.config.resolved_compile_sizes
        sized = {}
        for size in sizes:
            entry = self.artifacts.recorded(ref.index, size)
            if entry is None or entry.graph_hash != ref.graph_hash + f"@{size}":
                raise aot_entry.AotEntryError(f"piece {ref.index} has no artifact for compile size {size}")
            sized[size] = self.artifacts.load(aot_entry.ArtifactRef.of(entry), Piece(ref.index, entry.graph_hash, size))
        return PiecewiseRunnable(
            ref.index,
            name,
            None,
            ref.returns_tuple,
            general,
            ref.sym_shape_indices,
            ref.graph_hash,
            None,
            sizes,
            sized=sized,
        )

    def load(self) -> tuple[Callable[..., Any], float]:
        """Load the entry and its artifacts; returns ``(fn, seconds)``, ``fn(module, *args)``. The counters learn
        what was loaded only once all of it has (a failure falls back to tracing, which counts its own)."""
        self.artifacts.open(self.layout, self.key.hash)
        with read_only_compiler_caches(self.layout, persist=self.artifacts.persist_env):
            fn, split_fn, seconds = aot_entry.load_entry(self.layout.dir, self._runnable)
        self.split_gm = split_fn.split_gm
        compiled = set(split_fn.compiled_names)
        self.items = [
            SplitItem(name, int(name.replace("submod_", "")), name not in compiled, module)  # type: ignore[arg-type]  # baseline (issue 46)
            for name, module in self.split_gm.named_children()
        ]
        self.items.sort(key=lambda it: it.graph_id)
        counters.pieces += len(compiled)
        counters.unique_pieces += self.artifacts.unique_pieces
        counters.graphs_loaded += self.artifacts.tally.loaded
        counters.graphs_reused += self.artifacts.tally.reused
        return fn, seconds
