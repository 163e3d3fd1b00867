"""The native engine's start: the pipeline run the way a server starts, for ``warm`` and ``check``.

``warm`` runs the compile pipeline for a model and config the way a server starts (compile or load on a
dummy batch, then prefill/decode batches), leaving a populated cache tree under the cache root. ``check``
does the same start and reports whether anything compiled; with ``require_hit`` any compilation raises
:class:`cachetool.errors.CompileInStrictModeError` before it runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cachetool.cache_root import CacheRoot
from cachetool.engines.native.error_mapping import compiler_errors_mapped
from cachetool.engines.native.start_root import kept_clean
from cachetool.errors import CompilationConfigError, CompileInStrictModeError, DeviceError, UsageError


@dataclass
class CompileRunResult:
    """What one warm/check run did. ``graphs_*`` count Inductor graphs (pieces) in this run."""

    command: str
    model: str
    device: str
    cache_root: str
    cache_dir: str | None  # the rank/prefix folder holding the artifacts (None: cache disabled or mode < 3)
    rank_dir: str | None
    cache_key: str | None  # hash10
    graphs_compiled: int
    graphs_loaded: int
    graphs_reused: int
    pieces: int
    unique_pieces: int
    dynamo_compiles: int
    seconds: float  # whole run: build, compile/load, workload
    startup_seconds: float  # model built -> warm-up batches done (what a server waits for): the sum of the
    # start-up phases (docs/compiler.md, "Timing names")
    compile_seconds: float  # Inductor compiling pieces: phases["compile"] (0 on a hit)
    workload: dict[str, Any] = field(default_factory=dict)
    dynamo_traces: int = 0  # frames Dynamo traced in this process (0 on the AOT hot path)
    hot_path: str | None = None  # "aot" (the AOT entry loaded, no trace) or "dynamo" (traced; compiled or loaded)
    aot_fallback_reason: str | None = None  # why the AOT entry was not used (None on the AOT path)
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds, each name one thing (docs/compiler.md, "Timing names"): ``import`` (exec → run), ``build``
    (model), then the start-up: ``key`` (predicting the cache key, AOT path), ``trace`` (Dynamo's capture, the
    Dynamo path, with the wait for its imports), ``compile`` (Inductor compiling), ``load`` (AOT entry and
    artifacts, and on that path the wait for the loader's imports), ``save`` (writing the AOT entry), ``cudagraph_capture``, ``first_forward`` (the warm-up
    batches themselves); then ``workload`` (prefill/decode batches) and ``exit`` (releasing caches and
    workers). ``startup_seconds`` = key + trace + compile + load + save + cudagraph_capture + first_forward;
    ``seconds`` = build + startup_seconds + workload."""
    key_source: str | None = None  # AOT path: "evidence" (compiler factors from the build evidence) or "computed"
    compilation_config: dict[str, Any] = field(default_factory=dict)
    tensor_parallel_size: int = 1
    ranks: list[dict[str, Any]] = field(default_factory=list)
    """Tensor-parallel runs: one result per rank (``graphs_*`` above are their sums; ``cache_dir`` is rank 0's)."""

    @property
    def hit(self) -> bool:
        return self.graphs_compiled == 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["hit"] = self.hit
        return d

    def pack_folder(self) -> Path:
        """What a warm's push packs: the ``torch_compile_cache/{hash10}`` folder it wrote (all its ranks)."""
        if not self.rank_dir:
            raise UsageError("nothing to push: the compile cache is disabled or the mode does not use it")
        return Path(self.rank_dir).parent

    def lines(self) -> list[str]:
        """The start as a few lines for a terminal (the JSON object is :meth:`to_json`'s)."""
        out = [
            f"{self.command}: model {self.model} on {self.device}",
            f"  cache dir      {self.cache_dir or '(cache disabled)'}",
            f"  cache key      {self.cache_key}",
            f"  pieces         {self.pieces} ({self.unique_pieces} unique)",
            f"  graphs         compiled {self.graphs_compiled}, loaded {self.graphs_loaded}, "
            f"reused {self.graphs_reused}",
        ]
        ph = self.phases  # the sum rules of docs/compiler.md, "Timing names", written out
        parts = [f"{k} {ph[k]:.2f}" for k in STARTUP_PHASES if ph.get(k)]
        out.append(f"  start-up       {self.startup_seconds:.2f} s" + (" = " + " + ".join(parts) if parts else ""))
        outer = (
            [(k, ph[k]) for k in ("import", "build") if k in ph]
            + [("start-up", self.startup_seconds)]
            + [(k, ph[k]) for k in ("workload", "exit") if k in ph]
        )
        out.append(
            f"  total          {sum(v for _, v in outer):.2f} s = " + " + ".join(f"{k} {v:.2f}" for k, v in outer)
        )
        path = self.hot_path or "-"
        if self.hot_path == "aot" and self.key_source:
            path += f" (key from {'the build evidence' if self.key_source == 'evidence' else 'computed factors'})"
        if self.aot_fallback_reason and self.hot_path != "aot":
            path += f" (no AOT entry used: {self.aot_fallback_reason})"
        out.append(f"  hot path       {path}, Dynamo traces {self.dynamo_traces}")
        for r in self.ranks:
            out.append(
                f"  rank {r['rank']}         compiled {r['graphs_compiled']}, loaded {r['graphs_loaded']}, "
                f"reused {r['graphs_reused']}  {r['rank_dir']}"
            )
        out.append(
            "  result         " + ("HIT: nothing compiled" if self.hit else f"compiled {self.graphs_compiled} graph(s)")
        )
        return out


@dataclass(frozen=True, kw_only=True)
class NativeStartRequest:
    """One start of the pipeline (``warm`` or ``check``), the native engine's own request, each option's default
    written here alone: the engine parses a caller's options into it once
    (:meth:`~cachetool.engines.native.engine.NativeEngine.start_request`). ``config`` is the start's own
    ``CompilationConfig``, already parsed and on the cache root (``cache_dir``), which the start reads and no one
    parses or re-roots again; :func:`start` checks the request and dispatches tensor parallelism once."""

    command: str  # "warm" or "check"
    model: str
    cache_root: CacheRoot  # resolved once, when the request was parsed
    config: Any  # compiler.config.CompilationConfig: the start's own copy, on its root
    device: str = "cpu"
    rank: int = 0
    dp_rank: int = 0
    tensor_parallel_size: int = 1
    share_ranks: bool = True  # warm, N > 1: rank folders that compiled what rank 0 did become its copies
    require_hit: bool = False  # check: any compile raises CompileInStrictModeError before it runs
    on_progress: Any = None  # compiler.progress events (one process; not from TP ranks)
    workload: bool = True  # prefill and decode batches after the warm-up (every start runs them)


def parse_compilation_config(
    json_text: str | None = None, overrides: list[str] | tuple[str, ...] = (), cache_root: str | Path | None = None
) -> Any:
    """``--compilation-config`` JSON plus ``-cc.k=v`` overrides → ``CompilationConfig`` (UsageError on error)."""
    from compiler.config import CompilationConfig

    with compiler_errors_mapped():
        cfg = CompilationConfig.from_cli(json_text, list(overrides))
    return config_on_root(cfg, cache_root) if cache_root is not None else cfg


def compilation_config(
    config: Any = None, overrides: list[str] | tuple[str, ...] = (), cache_root: str | Path | None = None
) -> Any:
    """A ``compiler.config.CompilationConfig`` from an instance (copied: the caller's is left as it is), a dict,
    a JSON string or None (the default), plus ``-cc``-style ``overrides`` (``"dynamic_shapes_config.type=unbacked"``
    or ``"-cc.mode=2"``); ``cache_root`` sets ``cache_dir``. A bad key, value or JSON raises
    :class:`cachetool.errors.CompilationConfigError` (a :class:`~cachetool.errors.UsageError`)."""
    import enum

    from compiler.config import CompilationConfig

    def plain(o: Any) -> Any:  # enum members and nested config objects inside a dict
        if isinstance(o, enum.Enum):
            return o.value
        if hasattr(o, "to_dict"):
            return o.to_dict()
        raise TypeError(f"{type(o).__name__} is not JSON serialisable")

    if isinstance(config, CompilationConfig):
        config = config.to_dict()
    if isinstance(config, dict):
        try:
            config = json.dumps(config, default=plain)
        except (TypeError, ValueError) as exc:
            raise CompilationConfigError(f"compilation config: {exc}") from None
    elif config is not None and not isinstance(config, str):
        raise CompilationConfigError(
            "compilation config must be a CompilationConfig, a dict, a JSON string or "
            f"None, got {type(config).__name__}"
        )
    overrides = [o if o.startswith("-") else f"-cc.{o}" for o in overrides]
    return parse_compilation_config(config, overrides, cache_root)


def check_model(model: str) -> None:
    """``model`` is a preset, a Llama ``config.json`` or a folder with one (and readable safetensors headers);
    else :class:`~cachetool.errors.ModelError`. Reads no weights."""
    from compiler.models.llama import resolve_model

    with compiler_errors_mapped():
        resolve_model(model)


def config_on_root(config: Any, cache_root: CacheRoot | str | Path | None) -> Any:
    """A run's own copy of a parsed config (the caller's is left as it is; None: the default), on ``cache_root``
    (None: where the config names): the one place a config is put on a root."""
    import copy

    from compiler.config import CompilationConfig

    cfg = copy.deepcopy(config) if config is not None else CompilationConfig()
    if cache_root is not None:
        cfg.cache_dir = str(CacheRoot.given(cache_root).resolved)
    return cfg


def start(run: NativeStartRequest) -> CompileRunResult:
    """Run ``run``: its device and model checked before anything is built or written, then one process, or one per
    tensor-parallel rank (:func:`_run_parallel`), on a root kept clean of what a failed start made
    (:mod:`.start_root`)."""
    from compiler.layout import resolve_root

    _check_device(run.device)
    check_model(run.model)
    with kept_clean(resolve_root(run.config.cache_dir), run.command):
        return _run_parallel(run) if run.tensor_parallel_size != 1 else _run(run)


def _refuse_uncached(run: NativeStartRequest, root: Path) -> None:
    """``require_hit`` where the root holds no key folder for this process's rank: every piece would compile, so the
    start is refused before the model is built or traced (piecewise mode, the one that reads the root; the compile
    cache not disabled)."""
    from cachetool.engines.native.layout import has_key_folder
    from compiler import envs as compiler_envs
    from compiler.config import CompilationMode

    if not run.require_hit or run.config.mode != CompilationMode.PIECEWISE or compiler_envs.disable_compile_cache():
        return
    if not has_key_folder(root, run.rank, run.dp_rank):
        rank = f"rank_{run.rank}_{run.dp_rank}"
        where = f"{root} holds no cache for {rank}" if root.is_dir() else f"{root} does not exist"
        raise CompileInStrictModeError(
            f"{run.command}: strict mode: {where}: every piece would compile (cache "
            "miss); nothing was built or compiled: warm this root first"
        )


def _check_device(device: str) -> None:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DeviceError(f"--device cuda: no CUDA device is available (torch {torch.__version__})")
    if not (device == "cpu" or device.startswith("cuda")):
        raise DeviceError(f"unsupported device {device!r} (cpu or cuda)")


def _run(run: NativeStartRequest) -> CompileRunResult:
    """One process of ``run`` (the only one, or one rank's): build, warm up, the workload."""
    from compiler import progress
    from compiler.counters import counters, strict_mode
    from compiler.layout import resolve_root
    from compiler.runner import ModelRunner, compile_jobs_dropped_on_interrupt

    command, cfg = run.command, run.config
    _refuse_uncached(run, resolve_root(cfg.cache_dir))
    t0 = time.perf_counter()
    imported = process_age_seconds()
    before = counters.snapshot()
    guard = strict_mode(True) if run.require_hit else contextlib.nullcontext()
    # The pipeline's errors by kind: a strict-mode refusal keeps its class, a guard refusal is the config's, weights
    # that do not fit the config the model's (caught before anything is written). The first progress event comes
    # once the model is built: a bad model stays one error line. An interrupt drops the queued compile jobs.
    with (
        compiler_errors_mapped(f"{command}: "),
        guard,
        progress.listening(run.on_progress),
        compile_jobs_dropped_on_interrupt(),
    ):
        runner = ModelRunner(
            run.model,
            run.device,
            cfg,
            rank=run.rank,
            dp_rank=run.dp_rank,
            save_aot_entry=True if command == "warm" else None,
        )
        built = time.perf_counter() - t0
        at_warmup = counters.snapshot()
        startup = runner.warmup()
        during = counters.delta(at_warmup)
        if run.workload:
            progress.emit(progress.STEP, f"{command}: prefill and decode batches")
        wl = runner.run_workload().as_dict() if run.workload else {}
    delta = counters.delta(before)
    report = runner.start_report()
    seconds = time.perf_counter() - t0
    phases = startup_phases(imported, built, startup, report.phases, runner.graphs.capture_seconds, during)
    phases["workload"] = round(max(0.0, seconds - built - startup), 3)
    t_exit = time.perf_counter()
    runner.close()
    phases["exit"] = round(time.perf_counter() - t_exit, 3)
    return _one_result(run, runner, report, delta, wl, seconds, startup, phases)


def _one_result(
    run: NativeStartRequest,
    runner: Any,
    report: Any,
    delta: Any,
    wl: dict,
    seconds: float,
    startup: float,
    phases: dict[str, float],
) -> CompileRunResult:
    """One process's start as a result: what the runner reports of its key and hot path, the counters' change."""
    from compiler.layout import resolve_root

    return CompileRunResult(
        command=run.command,
        model=run.model,
        device=str(runner.device),
        cache_root=str(resolve_root(run.config.cache_dir)),
        cache_dir=report.cache_dir,
        rank_dir=report.rank_dir,
        cache_key=report.cache_key,
        graphs_compiled=delta.graphs_compiled,
        graphs_loaded=delta.graphs_loaded,
        graphs_reused=delta.graphs_reused,
        pieces=delta.pieces,
        unique_pieces=delta.unique_pieces,
        dynamo_compiles=delta.dynamo_compiles,
        dynamo_traces=delta.dynamo_traces,
        seconds=round(seconds, 3),
        startup_seconds=round(startup, 3),
        compile_seconds=phases["compile"],
        workload=wl,
        compilation_config=run.config.to_dict(),
        hot_path=report.hot_path,
        aot_fallback_reason=report.aot_fallback_reason,
        phases=phases,
        key_source=report.key_source,
    )


def process_age_seconds() -> float | None:
    """Seconds since this process started (Linux ``/proc/self/stat``), or ``None`` elsewhere."""
    import os

    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat(5), counted after the command name
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


STARTUP_PHASES = ("key", "trace", "compile", "load", "save", "cudagraph_capture", "first_forward")


def startup_phases(
    imported: float | None, built: float, startup: float, first: Any, capture: float, during: Any = None
) -> dict[str, float]:
    """The phases of a start up to the warm-up's end (see :attr:`CompileRunResult.phases`). The first call
    reports its own (``first``: the runner's ``StartReport.phases``); compiles and loads of later warm-up batches
    (``compile_sizes``) come from the counters' change ``during`` the warm-up; ``first_forward`` is what remains of
    ``startup``, so the start-up phases sum to it."""

    def part(name: str) -> float:
        return float(getattr(first, name, 0.0) or 0.0)

    compile_s = max(part("compile"), float(getattr(during, "inductor_compile_seconds", 0.0)))
    later_loads = max(0.0, float(getattr(during, "artifact_load_seconds", 0.0)) - part("counted_load"))
    phases: dict[str, float | None] = {
        "import": imported,
        "build": built,
        "key": part("key"),
        "trace": part("trace"),
        "compile": compile_s,
        "load": part("load") + later_loads,
        "save": part("save"),
        "cudagraph_capture": capture,
    }
    taken = sum(v for k, v in phases.items() if k in STARTUP_PHASES and v is not None)
    phases["first_forward"] = max(0.0, startup - taken)
    return {k: round(v, 3) for k, v in phases.items() if v is not None}


def _run_parallel(run: NativeStartRequest) -> CompileRunResult:
    """One process per tensor-parallel rank (gloo on the CPU, NCCL on CUDA), each running :func:`_run` into
    its own ``rank_{r}_{dp_rank}`` folder; a failure on any rank (``require_hit``) fails the run. After a warm,
    rank folders that compiled the same pieces as rank 0 become byte copies of it (``share_ranks``), so that a
    bundle stores them once (see :mod:`compiler.distributed.rank_share` and docs/tensor_parallel.md)."""
    import functools

    from compiler.distributed.launch import launch

    command, device, tensor_parallel_size = run.command, run.device, run.tensor_parallel_size
    _check_parallel(run)
    t0 = time.perf_counter()
    fn = functools.partial(_run_rank, dataclasses.replace(run, on_progress=None))  # a listener stays here
    results: list[CompileRunResult] = launch(
        fn, tensor_parallel_size, device=device.split(":")[0], dp_rank=run.dp_rank, log_names=("cachetool",)
    )
    keys = {r.cache_key for r in results}
    if len(keys) != 1:  # pragma: no cover - every rank hashes the same factors
        raise UsageError(f"tensor-parallel ranks disagree on the cache key: {sorted(map(str, keys))}")
    first = results[0]
    shared: dict[str, str] = {}
    if run.share_ranks and command == "warm" and first.rank_dir:
        from compiler.distributed.rank_share import share_rank_folders

        shared = share_rank_folders(Path(first.rank_dir).parent, dp_rank=run.dp_rank)
    return _merged(run, results, shared, time.perf_counter() - t0)


def _check_parallel(run: NativeStartRequest) -> None:
    """What a tensor-parallel start needs before any rank starts: a size, no rank of the caller's, the GPUs."""
    if run.tensor_parallel_size < 1:
        raise UsageError(f"--tensor-parallel-size must be >= 1, got {run.tensor_parallel_size}")
    if run.rank != 0:
        raise UsageError("--rank is chosen by the launcher when --tensor-parallel-size > 1")
    if run.device.startswith("cuda"):
        import torch

        if torch.cuda.device_count() < run.tensor_parallel_size:
            raise DeviceError(
                f"--tensor-parallel-size {run.tensor_parallel_size} needs {run.tensor_parallel_size} GPUs, "
                f"{torch.cuda.device_count()} visible"
            )


def _merged(
    run: NativeStartRequest, results: list[CompileRunResult], shared: dict[str, str], seconds: float
) -> CompileRunResult:
    """The ranks' results as one: counts summed, times the slowest rank's, the rest rank 0's, each rank listed."""
    sums = {
        name: sum(getattr(r, name) for r in results)
        for name in (
            "graphs_compiled",
            "graphs_loaded",
            "graphs_reused",
            "pieces",
            "unique_pieces",
            "dynamo_compiles",
            "dynamo_traces",
        )
    }
    first = results[0]
    return CompileRunResult(
        command=run.command,
        model=run.model,
        device=run.device,
        cache_root=first.cache_root,
        cache_dir=first.cache_dir,
        rank_dir=first.rank_dir,
        cache_key=first.cache_key,
        seconds=round(seconds, 3),
        startup_seconds=max(r.startup_seconds for r in results),
        compile_seconds=max(r.compile_seconds for r in results),
        workload=first.workload,
        compilation_config=first.compilation_config,
        tensor_parallel_size=run.tensor_parallel_size,
        hot_path=first.hot_path if len({r.hot_path for r in results}) == 1 else "mixed",
        aot_fallback_reason=next((r.aot_fallback_reason for r in results if r.aot_fallback_reason), None),
        phases={k: max(r.phases.get(k, 0.0) for r in results) for k in first.phases},
        ranks=[
            {
                "rank": i,
                **{
                    k: v
                    for k, v in r.to_json().items()
                    if k not in ("compilation_config", "ranks", "tensor_parallel_size")
                },
                **({"shared": shared.get(Path(r.rank_dir).name, "")} if r.rank_dir and shared else {}),
            }
            for i, r in enumerate(results)
        ],
        **sums,
    )


def _run_rank(run: NativeStartRequest, *, rank: int, device: str) -> CompileRunResult:
    """One rank's process of a tensor-parallel ``run`` (the launcher names its rank and device)."""
    return _run(dataclasses.replace(run, rank=rank, device=device))
