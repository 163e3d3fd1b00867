"""Warm and check orchestration: the library API behind ``cachetool warm`` and ``cachetool check``.

``warm`` runs the compile pipeline for a model and config the way a server starts (compile or load on a
dummy batch, then prefill/decode batches), leaving a populated cache tree under the cache root. ``check``
does the same start and reports whether anything compiled; with ``require_hit`` any compilation raises
:class:`cachetool.errors.CompileInStrictModeError` before it runs.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cachetool.errors import CompileInStrictModeError, UsageError


class CompilationConfigError(UsageError):
    """A bad ``--compilation-config`` / ``-cc`` value (unknown key, bad JSON, bad value)."""


class ModelError(UsageError):
    """The ``--model`` argument is not a preset, config.json or model folder."""


class DeviceError(UsageError):
    """The requested device is not available (``--device cuda`` without a GPU)."""


@dataclass
class CompileRunResult:
    """What one warm/check run did. ``graphs_*`` count Inductor graphs (pieces) in this run."""

    command: str
    model: str
    device: str
    cache_root: str
    cache_dir: str | None        # the rank/prefix folder holding the artifacts (None: cache disabled or mode < 3)
    rank_dir: str | None
    cache_key: str | None        # hash10
    graphs_compiled: int
    graphs_loaded: int
    graphs_reused: int
    pieces: int
    unique_pieces: int
    dynamo_compiles: int
    seconds: float               # whole run: build, compile/load, workload
    startup_seconds: float       # compile or load on the dummy batch (what a server waits for)
    compile_seconds: float       # inside the backend (split, compile or load)
    workload: dict[str, Any] = field(default_factory=dict)
    compilation_config: dict[str, Any] = field(default_factory=dict)

    @property
    def hit(self) -> bool:
        return self.graphs_compiled == 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["hit"] = self.hit
        return d


WarmResult = CompileRunResult
CheckResult = CompileRunResult


def parse_compilation_config(json_text: str | None = None, overrides: list[str] | tuple[str, ...] = (),
                             cache_root: str | Path | None = None) -> Any:
    """``--compilation-config`` JSON plus ``-cc.k=v`` overrides → ``CompilationConfig`` (UsageError on error)."""
    from compiler.config import CompilationConfig, ConfigError

    try:
        cfg = CompilationConfig.from_cli(json_text, list(overrides))
    except ConfigError as exc:
        raise CompilationConfigError(str(exc)) from None
    if cache_root is not None:
        cfg.cache_dir = str(Path(cache_root).expanduser().resolve())
    return cfg


def _check_device(device: str) -> None:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DeviceError("--device cuda: no CUDA device is available (torch %s)" % torch.__version__)
    if not (device == "cpu" or device.startswith("cuda")):
        raise DeviceError(f"unsupported device {device!r} (cpu or cuda)")


def _run(command: str, model: str, *, cache_root: str | Path | None, device: str, compilation_config: Any,
         rank: int, dp_rank: int, require_hit: bool, workload: bool) -> CompileRunResult:
    from compiler.capture import RecompileError
    from compiler.config import CompilationConfig
    from compiler.counters import CompileInStrictMode, counters, strict_mode
    from compiler.piecewise_backend import DynamicShapeGuardError
    from compiler.layout import resolve_root
    from compiler.models.llama import ModelSpecError, resolve_model
    from compiler.runner import ModelRunner

    cfg = compilation_config if compilation_config is not None else CompilationConfig()
    if cache_root is not None:
        cfg.cache_dir = str(Path(cache_root).expanduser().resolve())
    _check_device(device)
    try:
        resolve_model(model)
    except ModelSpecError as exc:
        raise ModelError(str(exc)) from None
    t0 = time.perf_counter()
    before = counters.snapshot()
    guard = strict_mode(True) if require_hit else contextlib.nullcontext()
    try:
        with guard:
            runner = ModelRunner(model, device, cfg, rank=rank, dp_rank=dp_rank)
            startup = runner.warmup()
            wl = runner.run_workload().as_dict() if workload else {}
    except CompileInStrictMode as exc:
        raise CompileInStrictModeError(f"{command}: {str(exc).splitlines()[0]}") from None
    except (RecompileError, DynamicShapeGuardError) as exc:
        if "strict mode" in str(exc):
            raise CompileInStrictModeError(f"{command}: {str(exc).splitlines()[0]}") from None
        # evaluate_guards refused a batch the workload needs (e.g. 1 token with backed shapes)
        raise CompilationConfigError(f"{command}: {str(exc).splitlines()[0]}") from None
    except RuntimeError as exc:
        # Dynamo wraps backend errors; a strict-mode refusal must keep its class.
        if "strict mode" in str(exc) or "recompilation refused (strict" in str(exc):
            raise CompileInStrictModeError(f"{command}: {str(exc).splitlines()[0]}") from None
        raise
    delta = counters.delta(before)
    backend = runner.backend
    layout = getattr(backend, "layout", None)
    key = getattr(backend, "key", None)
    return CompileRunResult(
        command=command, model=model, device=str(runner.device), cache_root=str(resolve_root(cfg.cache_dir)),
        cache_dir=str(layout.dir) if layout is not None else None,
        rank_dir=str(layout.rank_dir) if layout is not None else None,
        cache_key=key.hash if key is not None else None,
        graphs_compiled=delta.graphs_compiled, graphs_loaded=delta.graphs_loaded, graphs_reused=delta.graphs_reused,
        pieces=delta.pieces, unique_pieces=delta.unique_pieces, dynamo_compiles=delta.dynamo_compiles,
        seconds=round(time.perf_counter() - t0, 3), startup_seconds=round(startup, 3),
        compile_seconds=round(delta.compile_seconds, 3), workload=wl, compilation_config=cfg.to_dict(),
    )


def warm(model: str, *, cache_root: str | Path | None = None, device: str = "cpu", compilation_config: Any = None,
         rank: int = 0, dp_rank: int = 0) -> CompileRunResult:
    """Populate the compile cache for ``model`` (compiles what is missing, loads the rest)."""
    return _run("warm", model, cache_root=cache_root, device=device, compilation_config=compilation_config,
                rank=rank, dp_rank=dp_rank, require_hit=False, workload=True)


def check(model: str, *, cache_root: str | Path | None = None, device: str = "cpu", compilation_config: Any = None,
          rank: int = 0, dp_rank: int = 0, require_hit: bool = False) -> CompileRunResult:
    """Start the model as a server would and report compiled vs loaded graphs; ``require_hit``: any compile
    raises :class:`CompileInStrictModeError` (exit code 8) before it runs."""
    return _run("check", model, cache_root=cache_root, device=device, compilation_config=compilation_config,
                rank=rank, dp_rank=dp_rank, require_hit=require_hit, workload=True)
