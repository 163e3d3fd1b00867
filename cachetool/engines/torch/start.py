"""One ``--engine torch`` start (``warm`` or ``check``), in named phases:

1. ``command``: the arguments after ``--`` read (:mod:`.command`); another engine's options refused;
2. ``snapshot``: the root marked for this start (:mod:`.unfinished`: a start that fails or is stopped removes the
   kernels it built, which it may have cut short), and what it holds of built code (C++ kernel libraries, Triton
   kernels, autotuning results);
3. ``run``: the program runs with the root's caches and the probe (:mod:`.run`);
4. ``report``: the probes' counters summed, the code built counted from what the root gained, the facts of the
   process that compiled taken (:mod:`.key`) and, where the root held no warm with them, the closest difference;
5. ``record`` (warm only): ``facts/{key}/cache_key_factors.json``.

A warm into a root it created removes the root again when the program fails; a warm whose program compiled nothing
with torch.compile is refused (there would be nothing to ship).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cachetool.cache_root import CacheRoot
from cachetool.engines.base import listener, own_options
from cachetool.engines.torch import key, layout, unfinished
from cachetool.engines.torch.command import ProgramCommand, parse
from cachetool.engines.torch.layout import FACTS, kernel_files
from cachetool.engines.torch.result import TorchStartResult, counted
from cachetool.engines.torch.run import ProgramRun, run_program
from cachetool.errors import EngineFailedError, EngineMissError, UsageError

__all__ = ["TorchStartRequest", "request_of", "start"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TorchStartRequest:
    """One ``--engine torch`` start, the torch engine's own request (each default written here alone): the
    program's command after ``--``, read once (:func:`request_of`)."""

    command: str  # "warm" or "check"
    cache_root: CacheRoot
    program: ProgramCommand
    require_hit: bool = False  # check: a start that compiled raises EngineMissError naming why
    messages: Callable[[str], None] | None = None  # its message lines while it runs


def _refused(name: str, flag: str) -> str:
    return (
        f"{flag} is another engine's option: --engine torch runs the program you give after -- (e.g. -- python "
        "serve.py) and compiles what it compiles"
    )


def request_of(command: str, model: str | None, cache_root: CacheRoot, options: Mapping[str, Any]) -> TorchStartRequest:
    """A start's options parsed (step 1, ``command``): another engine's option, ``--model`` first, refused in one
    line; the arguments after ``--`` read (:mod:`.command`)."""
    if model:
        raise UsageError(_refused("model", "--model"))
    own = own_options(options, ("engine_flags", "require_hit"), _refused)
    program = parse(tuple(own.pop("engine_flags", ())))
    return TorchStartRequest(
        command=command, cache_root=cache_root, program=program, messages=listener(options, "engine_progress"), **own
    )


def _main_report(reports: list[dict]) -> dict | None:
    """The report of the process that compiled (the first that did; else the first that imported torch)."""
    return next((r for r in reports if r.get("compiles")), reports[0] if reports else None)


def _processes(reports: list[dict]) -> list[dict]:
    return [
        {
            "pid": r.get("pid"),
            "argv": r.get("argv"),
            "device": r.get("device"),
            "compiles": r.get("compiles", 0),
            "compile_seconds": r.get("compile_seconds", 0.0),
            **counted([r]),
        }
        for r in reports
    ]


def _result(
    verb: str,
    command: ProgramCommand,
    root: Path,
    run: ProgramRun,
    before: dict[str, set[str]],
    facts: dict | None,
    existed: bool,
) -> TorchStartResult:
    after = kernel_files(root)
    built = {kind: len(after[kind] - before[kind]) for kind in after}
    counts = counted(run.reports)
    mapped = {p for r in run.reports for p in r.get("mapped_kernels") or []}
    differences = key.closest_differences(facts, root) if facts is not None and not existed else []
    return TorchStartResult(
        command=verb,
        model=command.text,
        argv=list(command.argv),
        program_exit=run.exit_code,
        cache_root=str(root),
        cache_key=key.key_of(facts) if facts is not None else None,
        key_existed=existed,
        cpp_kernels_built=built["cpp"],
        triton_kernels_built=built["triton"],
        autotune_results_written=built["autotune"],
        kernels_loaded=len(mapped & before["cpp"]),
        compile_seconds=round(sum(float(r.get("compile_seconds") or 0) for r in run.reports), 3),
        startup_seconds=run.phases.get("ready", run.seconds),
        seconds=run.seconds,
        phases=run.phases,
        processes=_processes(run.reports),
        requests=run.requests,
        log=run.log,
        differences=[d.to_json() for d in differences],
        **counts,  # type: ignore[arg-type]  # baseline (issue 46)
    )


def start(request: TorchStartRequest) -> TorchStartResult:
    """Run the program after ``--`` on the request's cache root (see the module docstring)."""
    verb, command = request.command, request.program
    say = request.messages or (lambda _m: None)
    root = request.cache_root.resolved
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    mark = unfinished.begin(root)  # settles what a killed start left; marks this one
    before = kernel_files(root)
    try:
        layout.settle(root)  # the site folder as this install writes it, before the program puts it on its path
        run = run_program(command, root, verb, lambda m: say(f"{verb}: {m}"))
    except BaseException:
        unfinished.end(root, mark, completed=False)  # what it built may be cut short
        if created:  # a root this failed start made holds only what the failed start wrote
            shutil.rmtree(root, ignore_errors=True)
        raise
    unfinished.end(root, mark, completed=True)
    main = _main_report(run.reports)
    facts = key.recorded_factors(main, command.to_values()) if main is not None else None
    existed = facts is not None and (root / FACTS / key.key_of(facts)).is_dir()
    result = _result(verb, command, root, run, before, facts, existed)
    say(
        f"{verb}: the program ended after {run.seconds:.1f} s: {result.fx_graph_hits} graph(s) loaded, "
        f"{result.graphs_compiled} compiled"
    )
    if verb == "warm":
        if facts is None or result.fx_graph_hits + result.graphs_compiled == 0:
            if created:
                shutil.rmtree(root, ignore_errors=True)
            raise EngineFailedError(
                f"warm: {command.text} compiled nothing with torch.compile (no FX graph was "
                f"looked up in its {len(run.reports)} process(es) with torch): nothing to warm "
                f"(log: {run.log})"
            )
        key.write_facts(root, facts)
        layout.settle(root)  # a kept root's next start uses the tuning this one did
    elif request.require_hit and not result.hit:
        raise EngineMissError(f"check: not a hit: {result.miss_reason()}", start=result)
    return result
