"""The artifact manager: a rank folder's compiled pieces by graph hash and shape (vLLM's ``CompilerManager``).

One owner for what both ways of starting a model do with artifacts:

- the index ``compile_index.json`` of the rank folder (its file format is :mod:`compiler.artifacts`);
- the digest check: an artifact loads only if its content still has the sha256 recorded when it was saved;
- the load: through the compiler adaptor, inside the read-only overlay (a load writes nothing into the rank
  folder), timed into ``counters.artifact_load_seconds``, logged in vLLM's words;
- the compile and save of a piece the index lacks, and its record in the index;
- in-process reuse: identical pieces (same canonical graph hash and shape) get one callable.

Two callers, each with its policy over that one sequence:

- the Dynamo path (:class:`~compiler.piecewise_backend.PiecewiseBackend`): :meth:`ArtifactManager.load_or_compile`
  reuses, else loads (a failed load is logged and compiled instead), else compiles and saves, counting into
  :data:`~compiler.counters.counters` and emitting progress events as it goes;
- the AOT entry's loader (:class:`~compiler.piecewise_backend.HotStartBackend`): :meth:`ArtifactManager.load`
  reuses, else loads, and raises on any failure (the start then traces instead); it only tallies
  (:attr:`ArtifactManager.tally`), which the loader commits to the counters once the whole entry has loaded.

A warm's entry writer (:func:`~compiler.piecewise_backend.entry_backend`) asks :meth:`ArtifactManager.lookup`
which saved artifact serves a piece.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.fx as fx

from compiler import progress
from compiler.aot_entry import AotEntryError, ArtifactRef
from compiler.artifacts import CompileIndex, IndexEntry, shape_key
from compiler.compiler_interface import CompilerInterface, artifact_digest
from compiler.counters import check_not_strict, counters
from compiler.layout import CacheLayout, read_only_compiler_caches, redirect_compiler_caches

logger = logging.getLogger(__name__)

Memo = tuple[str, "int | None"]


@dataclass(frozen=True)
class Piece:
    """Which piece an artifact serves: its index among the compiled pieces (of ``total``, for messages), its
    canonical graph hash (``<hash>@<size>`` for a compile size) and its shape (``None``: the general shape)."""

    index: int
    graph_hash: str
    shape: int | None = None
    total: int = 0

    @property
    def memo(self) -> Memo:
        return (self.graph_hash, self.shape)

    def describe(self) -> str:
        where = f"piece {self.index + 1}/{self.total}"
        return where if self.shape is None else f"compile size {self.shape}: {where}"


@dataclass
class LoadTally:
    """What :meth:`ArtifactManager.load` did, for a caller that counts only once its whole load succeeded."""

    loaded: int = 0  # distinct artifacts loaded
    reused: int = 0  # general-shape pieces served by an artifact loaded for an identical piece


class ArtifactManager:
    """The artifacts of one rank folder, served to one backend. :meth:`open` points it at the folder."""

    def __init__(self, adaptor: CompilerInterface, *, device: str, save_format: str) -> None:
        self.adaptor = adaptor
        self.device = device
        self.save_format = save_format  # of what this process compiles; a load uses the recorded format
        self.layout: CacheLayout | None = None
        self.index = CompileIndex(path=None)
        self.tally = LoadTally()
        self._fns: dict[Memo, Callable[..., Any]] = {}  # every piece compiled or loaded in this process
        self._saved: dict[Memo, IndexEntry] = {}  # those with an artifact in the rank folder

    @property
    def persist_env(self) -> bool:
        """Whether the compiler caches stay pointed into the rank folder after a compile or load: on CUDA, where
        Triton may still compile at the first launch and compile workers inherit the environment."""
        return self.device.startswith("cuda")

    def open(self, layout: CacheLayout | None, cache_hash: str) -> None:
        """Serve ``layout``'s rank folder (``None``: the cache is disabled, nothing is read or written) and read
        its index. What this process already compiled or loaded stays reusable."""
        self.layout = layout
        self.index = CompileIndex.open(layout.index_file if layout is not None else None, cache_hash)

    def save_index(self) -> None:
        self.index.save()

    @property
    def unique_pieces(self) -> int:
        """Distinct general-shape pieces this process holds a callable for."""
        return len({h for (h, shape) in self._fns if shape is None})

    def lookup(self, graph_hash: str, shape: int | None) -> ArtifactRef | None:
        """The saved artifact that serves that graph at that shape in this process (compiled or loaded here)."""
        entry = self._saved.get((graph_hash, shape))
        return ArtifactRef.of(entry) if entry is not None else None

    def recorded(self, piece: int, shape: int | None) -> IndexEntry | None:
        """What the index records for piece ``piece`` at ``shape``."""
        return self.index.get(piece, shape)

    # ------------------------------------------------------------------ the AOT entry's loader
    def load(
        self, ref: ArtifactRef, piece: Piece, graph: fx.GraphModule | None = None, args: Sequence[Any] = ()
    ) -> Callable[..., Any]:
        """``ref``'s callable for ``piece``: the one of an identical piece already loaded, else loaded now.
        Raises :class:`~compiler.aot_entry.AotEntryError` (missing or altered) or the adaptor's error; counts
        into :attr:`tally` only."""
        fn = self._fns.get(piece.memo)
        if fn is not None:
            self.tally.reused += piece.shape is None
            return fn
        fn = self._load_checked(ref, piece, graph, list(args))
        self._fns[piece.memo] = fn
        self._saved[piece.memo] = IndexEntry(piece.graph_hash, shape_key(piece.shape), ref.name, ref.format, ref.sha256)
        self.tally.loaded += 1
        return fn

    # ------------------------------------------------------------------ the Dynamo path
    def load_or_compile(self, piece: Piece, graph: fx.GraphModule, args: list[Any]) -> Callable[..., Any]:
        """Reuse (an identical piece done in this process), load (the index has it), or compile and save.
        A load that fails is logged and compiled instead; strict mode refuses the compile."""
        fn = self._reuse(piece)
        if fn is None:
            fn = self._load_indexed(piece, graph, args)
            if fn is None:
                fn = self._compile(piece, graph, args)
            self._fns[piece.memo] = fn
        if piece.shape is not None:  # compile sizes come one at a time, after the first call saved the index
            self.index.save()
        return fn

    def _reuse(self, piece: Piece) -> Callable[..., Any] | None:
        fn = self._fns.get(piece.memo)
        if fn is None:
            return None
        counters.graphs_reused += 1
        if progress.current_step() == progress.SAVE:  # the AOT entry's capture takes each piece compiled above
            progress.emit(
                progress.PIECE,
                f"{piece.describe()} added to the AOT entry (compiled above; nothing compiles)",
                index=piece.index,
                total=piece.total,
                action="aot_entry",
                shape=piece.shape,
                seconds=0.0,
            )
        else:
            progress.emit(
                progress.PIECE,
                f"{piece.describe()} reused (identical to one done)",
                index=piece.index,
                total=piece.total,
                action="reused",
                shape=piece.shape,
                seconds=0.0,
            )
        known = self._saved.get(piece.memo)
        if known is not None:
            self.index.record(piece.index, piece.shape, known)  # identical piece: same artifact file
        return fn

    def _load_indexed(self, piece: Piece, graph: fx.GraphModule, args: list[Any]) -> Callable[..., Any] | None:
        """The piece's artifact if the index has one and it loads; ``None`` (after a warning) otherwise."""
        entry = self.index.find(piece.graph_hash, piece.shape)
        if entry is None or self.layout is None:
            return None
        t = time.perf_counter()
        try:
            fn = self._load_checked(ArtifactRef.of(entry), piece, graph, args)
        except Exception as exc:  # a corrupt or foreign artifact: fall back to compiling
            logger.warning("Could not load %s (%s: %s); compiling instead", entry.artifact, type(exc).__name__, exc)
            return None
        counters.graphs_loaded += 1
        progress.emit(
            progress.PIECE,
            f"{piece.describe()} loaded",
            index=piece.index,
            total=piece.total,
            action="loaded",
            shape=piece.shape,
            seconds=time.perf_counter() - t,
        )
        self._remember(piece, entry)
        return fn

    def _compile(self, piece: Piece, graph: fx.GraphModule, args: list[Any]) -> Callable[..., Any]:
        check_not_strict(f"piece {piece.index} (shape {piece.shape}, graph {piece.graph_hash[:12]})")
        tuned = piece.shape is not None and self.device.startswith("cuda")  # compiler.autotune
        progress.emit(
            progress.AUTOTUNE if tuned else progress.PIECE_START,
            f"{piece.describe()}: compiling" + (" with max-autotune" if tuned else ""),
            index=piece.index,
            total=piece.total,
            shape=piece.shape,
        )
        t = time.perf_counter()
        directory = self.layout.dir if self.layout is not None else None
        with redirect_compiler_caches(self.layout, persist=self.persist_env):
            fn, handle = self.adaptor.compile(graph, args, piece.shape, piece.graph_hash, directory, self.save_format)  # type: ignore[arg-type]  # baseline (issue 46)
        seconds = time.perf_counter() - t
        counters.inductor_compile_seconds += seconds
        counters.graphs_compiled += 1
        progress.emit(
            progress.PIECE,
            f"{piece.describe()} compiled in {seconds:.1f} s",
            index=piece.index,
            total=piece.total,
            action="compiled",
            shape=piece.shape,
            seconds=seconds,
        )
        if handle is None or self.layout is None:
            logger.debug(
                "compiled the %s-th graph for shape %s (not saved) in %.2f s",
                piece.index,
                piece.shape,
                time.perf_counter() - t,
            )
            return fn
        path = self.layout.dir / handle[1]
        logger.debug(
            "store the %s-th graph for shape %s from %s via handle %s (%.2f s)",
            piece.index,
            piece.shape,
            self.adaptor.name,
            (piece.graph_hash[:16], str(path)),
            time.perf_counter() - t,
        )
        self._remember(
            piece,
            IndexEntry(piece.graph_hash, shape_key(piece.shape), handle[1], self.save_format, artifact_digest(path)),
        )
        return fn

    def _remember(self, piece: Piece, entry: IndexEntry) -> None:
        self.index.record(piece.index, piece.shape, entry)
        self._saved[piece.memo] = entry

    # ------------------------------------------------------------------ the one load sequence
    def _load_checked(
        self, ref: ArtifactRef, piece: Piece, graph: fx.GraphModule | None, args: list[Any]
    ) -> Callable[..., Any]:
        """Check ``ref``'s digest, then load it through the adaptor inside the read-only overlay. The time, from
        the check on, counts as artifact loading even when the load fails (it was spent). Raises on failure."""
        if self.layout is None:
            raise AotEntryError(f"artifact {ref.name}: no cache folder to load it from")
        t = time.perf_counter()
        try:
            path = _checked_path(self.layout.dir, ref)
            with read_only_compiler_caches(self.layout):  # a load writes nothing into the rank folder
                fn = self.adaptor.load(
                    (piece.graph_hash, ref.name),
                    graph,  # type: ignore[arg-type]  # baseline (issue 46)
                    args,
                    piece.shape,
                    self.layout.dir,
                    ref.format,
                )
        finally:
            counters.artifact_load_seconds += time.perf_counter() - t
        logger.debug(
            "Directly load the %s-th graph for shape %s from %s via handle %s (%.2f s)",
            piece.index,
            piece.shape,
            self.adaptor.name,
            (piece.graph_hash[:16], str(path)),
            time.perf_counter() - t,
        )
        return fn


def _checked_path(directory: Path, ref: ArtifactRef) -> Path:
    """The artifact's path, after checking that it is there with the digest recorded when it was saved."""
    path = Path(directory) / ref.name
    if not path.exists():
        raise AotEntryError(f"artifact {ref.name} named by the AOT entry is missing")
    if ref.sha256 and artifact_digest(path) != ref.sha256:
        raise AotEntryError(f"artifact {ref.name} does not match its recorded digest")
    return path
