"""The AOT entry: the model's forward as Dynamo compiled it, saved so that a hot start runs no Dynamo trace.

``{rank dir}/{prefix}/aot_entry.bin`` is written by a warm (a compiling start) beside the artifacts, in torch's
``save_compiled_function`` format: Dynamo's transformed bytecode for ``forward``, its guards (dropped, as on the
Dynamo path) and the bytes of our :class:`SplitGraphFunction`, the backend's serializable result.

Those bytes are a pickle (schema :data:`ENTRY_SCHEMA`) of the split graph in which each compiled piece is a
:class:`PieceRef`: the piece's index and canonical graph hash, how to call it, and for each shape (``general``
and every ``compile_sizes`` entry) the artifact file it runs, by name and sha256. Splitting pieces (attention)
stay small GraphModules, pickled as code. Loading (:func:`load_entry`) unpickles that graph and asks the caller
for a callable in place of each ``PieceRef``: the hot start's loader then has the artifact manager
(:mod:`compiler.artifact_manager`) check each artifact's digest and load every distinct artifact once (identical
layers share one callable), and puts a :class:`~compiler.piecewise_backend.PiecewiseRunnable` there. No fake-tensor
pass, no Inductor compile, and nothing is written into the cache root.

The entry is trusted no more than the artifacts beside it: it sits in the same folder, is listed (with its
sha256) in the bundle manifest and covered by the bundle's signature.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.fx as fx
from torch import nn

from compiler import torch_compat
from compiler.artifacts import IndexEntry
from compiler.errors import AOT_ENTRY, CompilerError

logger = logging.getLogger(__name__)

ENTRY_FILE = "aot_entry.bin"
ENTRY_SCHEMA = 1


class AotEntryError(CompilerError):
    """The AOT entry cannot be used here (missing, foreign schema, an artifact missing or altered)."""

    kind = AOT_ENTRY


@dataclass(frozen=True)
class ArtifactRef:
    """One artifact file in the rank folder, by name and content digest: how the entry names an artifact (it is
    pickled in the entry, so it stays in this module) and what the artifact manager loads."""

    name: str
    sha256: str
    format: str

    @classmethod
    def of(cls, entry: IndexEntry) -> ArtifactRef:
        return cls(entry.artifact, entry.sha256, entry.format)


class PieceRef(nn.Module):
    """Stands for a compiled piece inside the pickled split graph; replaced by a runnable when loaded."""

    def __init__(
        self, index: int, graph_hash: str, returns_tuple: bool, sym_shape_indices: list[int], general: ArtifactRef
    ) -> None:
        super().__init__()
        self.index = index
        self.graph_hash = graph_hash
        self.returns_tuple = returns_tuple
        self.sym_shape_indices = list(sym_shape_indices)
        self.general = general

    def forward(self, *args: Any) -> Any:  # pragma: no cover - a PieceRef never runs
        raise AotEntryError(f"piece {self.index} of the AOT entry was not loaded")


MakeRunnable = Callable[[str, PieceRef], Callable[..., Any]]


@dataclass
class _LoadContext:
    make_runnable: MakeRunnable
    compiled_names: list[str] = field(default_factory=list)
    guards_dropped: bool = False  # the entry's record, read with the split graph


# torch calls deserialize_compile_artifacts(bytes) with nothing else: the folder and the loader come from here.
_loading: contextvars.ContextVar[_LoadContext | None] = contextvars.ContextVar("aot_entry_loading", default=None)


class SplitGraphFunction(torch_compat.serializable_callable_base()):  # type: ignore[misc]
    """The backend result saved in the AOT entry: the split graph, run as is."""

    def __init__(self, split_gm: fx.GraphModule, portable: fx.GraphModule | None, compiled_names: list[str]) -> None:
        self.split_gm = split_gm
        self.portable = portable  # the pickle-ready copy (PieceRefs in place of runnables); warm only
        self.compiled_names = compiled_names

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.split_gm(*args, **kwargs)

    @classmethod
    def serialize_compile_artifacts(cls, fn: SplitGraphFunction) -> bytes:
        if fn.portable is None:
            raise AotEntryError("this split graph was loaded, not built: it cannot be saved again")
        # Every entry is captured with all guards dropped (torch_compat.aot_compile_fullgraph); said so here so that a
        # load can skip building a guard tree that would hold nothing.
        return pickle.dumps(
            {"schema": ENTRY_SCHEMA, "split_gm": fn.portable, "guards": "dropped"}, protocol=pickle.HIGHEST_PROTOCOL
        )

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> SplitGraphFunction:
        ctx = _loading.get()
        if ctx is None:
            raise AotEntryError("an AOT entry is loaded through compiler.aot_entry.load_entry only")
        state = pickle.loads(data)  # noqa: S301 - the entry is as trusted as the artifacts (same signed folder)
        if not isinstance(state, dict) or state.get("schema") != ENTRY_SCHEMA:
            raise AotEntryError(
                f"AOT entry schema {state.get('schema') if isinstance(state, dict) else '?'} is not {ENTRY_SCHEMA}"
            )
        split_gm = state["split_gm"]
        ctx.guards_dropped = state.get("guards", "dropped") == "dropped"  # entries before the field: dropped too
        names = []
        for name, module in list(split_gm.named_children()):
            if isinstance(module, PieceRef):
                split_gm.__dict__[name] = ctx.make_runnable(name, module)
                names.append(name)
        ctx.compiled_names[:] = names
        return cls(split_gm, None, names)


# ---------------------------------------------------------------------- write (warm)


def portable_split_graph(split_gm: fx.GraphModule, refs: dict[str, PieceRef]) -> fx.GraphModule:
    """A copy of ``split_gm`` whose compiled pieces are ``refs`` and whose other pieces are their graphs."""
    root: dict[str, Any] = {}
    for name, module in split_gm.named_children():
        root[name] = refs.get(name, module)
    return fx.GraphModule(root, split_gm.graph, class_name="SplitGraph")


def write_entry(directory: Path, compiled: Any) -> Path:
    """Save torch's AOT-compiled function ``compiled`` (whose backend returned a :class:`SplitGraphFunction`)
    as ``directory/aot_entry.bin``, atomically."""
    path = Path(directory) / ENTRY_FILE
    data = type(compiled).serialize(compiled).serialized_data
    tmp = path.with_name(f".{ENTRY_FILE}.{hashlib.sha256(data).hexdigest()[:12]}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


# ---------------------------------------------------------------------- load (hot start)


@contextlib.contextmanager
def _loading_into(ctx: _LoadContext) -> Iterator[None]:
    token = _loading.set(ctx)
    try:
        yield
    finally:
        _loading.reset(token)


def load_entry(directory: Path, make_runnable: MakeRunnable) -> tuple[Any, SplitGraphFunction, float]:
    """Load ``directory/aot_entry.bin``. ``make_runnable(name, ref)`` turns each :class:`PieceRef` into the
    callable that runs it (the caller loads each distinct artifact once).

    Returns ``(fn, split_function, seconds)``; call ``fn(module, *args)``. Raises :class:`AotEntryError`."""
    path = Path(directory) / ENTRY_FILE
    if not path.is_file():
        raise AotEntryError(f"no AOT entry ({ENTRY_FILE}) in {directory}")
    t0 = time.perf_counter()
    ctx = _LoadContext(make_runnable)
    with _loading_into(ctx):
        try:
            fn = torch_compat.load_compiled_function(path.read_bytes(), guards_dropped=lambda: ctx.guards_dropped)
        except AotEntryError:
            raise
        except Exception as exc:  # a foreign torch build, a truncated file, an unpicklable graph
            raise AotEntryError(
                f"AOT entry {path.name} does not load here ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''})"
            ) from exc
    return fn, _find_split_function(fn), time.perf_counter() - t0


def _find_split_function(fn: Any) -> SplitGraphFunction:
    compiled = getattr(getattr(fn, "_artifacts", None), "compiled_fn", None)
    if not isinstance(compiled, SplitGraphFunction):
        raise AotEntryError("the AOT entry was not written by this pipeline")
    return compiled
