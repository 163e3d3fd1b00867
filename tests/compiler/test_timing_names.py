"""Issue 20 item 4: timing names that mean one thing each, their sum rules (docs/compiler.md, "Timing names"),
and the progress a person sees while ``warm`` compiles.

The sum rules on real runs (a cold warm and a hot check) are checked in test_aot_hot_start.py, which warms once
per mode; here the rules of :func:`cachetool.engines.native.start.startup_phases` on given parts, and the progress events and
their rendering. The compiling starts here use the eager adaptor (the pipeline's plumbing, no Inductor) with the
compile cache disabled: they write nothing.
"""

from __future__ import annotations

import io
import json
import os
import subprocess

import pytest

from cachetool.cli.progress import LineProgress, RichProgress, progress_renderer
from cachetool.engines.native.start import STARTUP_PHASES, startup_phases
from compiler import progress
from compiler.capture import StartupPhases
from compiler.counters import CompileCounters
from tests.cli_calls import REPO, cli_env


def _startup_sum(phases: dict) -> float:
    return sum(phases[k] for k in STARTUP_PHASES)


def test_a_cold_start_reports_compile_not_load() -> None:
    """The Dynamo path's first call: 14 s of Inductor compiling and 0.5 s of loads within 16 s; a compile size
    compiled later (2 s) is compile too. Old names: load 16.0 (all of it), compile_seconds unrelated."""
    first = StartupPhases(trace=1.5, compile=14.0, load=0.5, save=1.2, counted_load=0.5)
    during = CompileCounters(inductor_compile_seconds=16.0, artifact_load_seconds=0.5)
    phases = startup_phases(2.0, 0.3, 20.0, first, 0.0, during)
    assert phases["compile"] == 16.0 and phases["load"] == 0.5 and phases["trace"] == 1.5
    assert phases["save"] == 1.2 and phases["first_forward"] == pytest.approx(0.8)
    assert _startup_sum(phases) == pytest.approx(20.0)
    assert "import" in phases and "build" in phases  # outside the start-up, not in its sum


def test_a_hot_start_is_key_load_and_first_forward() -> None:
    """The AOT path: key, then the entry and artifacts (one of them counted by the counters too), then the
    batches. Later loads (compile sizes) add to load; nothing is counted twice."""
    first = StartupPhases(key=0.05, load=0.9, counted_load=0.4)
    during = CompileCounters(artifact_load_seconds=0.6)  # 0.4 inside the entry, 0.2 afterwards
    phases = startup_phases(3.0, 0.2, 1.5, first, 0.1, during)
    assert phases["compile"] == 0 and phases["trace"] == 0
    assert phases["load"] == pytest.approx(1.1)
    assert phases["first_forward"] == pytest.approx(1.5 - 0.05 - 1.1 - 0.1)
    assert _startup_sum(phases) == pytest.approx(1.5)


def test_import_is_never_inside_the_start_up() -> None:
    """check once said `import 1.63 s` + `load 1.89 s` beside `start-up 1.91 s`: the import phase is before the
    model is built and no start-up phase holds it."""
    phases = startup_phases(1.63, 0.2, 1.91, StartupPhases(key=0.02, load=1.6), 0.0, CompileCounters())
    assert _startup_sum(phases) == pytest.approx(1.91)
    assert phases["import"] == 1.63 and "import" not in STARTUP_PHASES


# ---------------------------------------------------------------------- progress


def _eager_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    from compiler import compiler_interface, piecewise_backend

    monkeypatch.setattr(piecewise_backend, "InductorStandaloneAdaptor", compiler_interface.EagerAdaptor)
    monkeypatch.setenv("CACHETOOL_DISABLE_COMPILE_CACHE", "1")


def test_a_compiling_start_emits_piece_i_of_n(monkeypatch: pytest.MonkeyPatch) -> None:
    from compiler.config import CompilationConfig
    from compiler.runner import ModelRunner

    _eager_backend(monkeypatch)
    events: list[progress.ProgressEvent] = []
    with progress.listening(events.append):
        runner = ModelRunner("tiny", "cpu", CompilationConfig(), max_num_batched_tokens=8)
        runner.warmup()
    kinds = [e.kind for e in events]
    assert kinds[0] == progress.TRACE and progress.KEY in kinds
    pieces = [e for e in events if e.kind == progress.PIECE]
    assert [e.fields["index"] + 1 for e in pieces] == list(range(1, len(pieces) + 1))
    total = pieces[0].fields["total"]
    assert len(pieces) == total and {e.fields["action"] for e in pieces} == {"compiled", "reused"}
    assert pieces[0].message.startswith(f"piece 1/{total} compiled in ")
    assert str(pieces[-1]) == pieces[-1].message  # an event reads as its line (the vLLM callback's shape)
    with progress.listening(events.append):  # outside any warm, nothing is listening: no cost, no events
        pass
    progress.emit(progress.STEP, "nobody hears this")
    assert events[-1].message != "nobody hears this"


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    render = LineProgress(out)
    render(progress.ProgressEvent(progress.PIECE, "piece 2/5 compiled in 3.1 s"))
    render("warm: starting vLLM 0.32.0 on /r")  # the vLLM engine's message lines
    assert out.getvalue().splitlines() == ["warm: piece 2/5 compiled in 3.1 s", "warm: starting vLLM 0.32.0 on /r"]


def test_rich_on_a_terminal_prints_finished_steps() -> None:
    out = io.StringIO()
    render = RichProgress(out)
    render(progress.ProgressEvent(progress.PIECE_START, "piece 1/5: compiling"))
    render(progress.ProgressEvent(progress.PIECE, "piece 1/5 compiled in 2.0 s"))
    render.close()
    assert "piece 1/5 compiled in 2.0 s" in out.getvalue()


def test_nothing_extra_with_json() -> None:
    with progress_renderer(True) as render:
        assert render is None


_WARM_EAGER = (
    "import sys\n"
    "from compiler import compiler_interface, piecewise_backend\n"
    "piecewise_backend.InductorStandaloneAdaptor = compiler_interface.EagerAdaptor\n"
    "from cachetool.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("as_json", [False, True])
def test_warm_shows_each_step_on_stderr_and_nothing_with_json(tmp_path, as_json: bool) -> None:
    args = ["warm", "--model", "tiny", "--cache-root", str(tmp_path / "root")] + (["--json"] if as_json else [])
    proc = subprocess.run(
        [os.sys.executable, "-c", _WARM_EAGER, *args],
        capture_output=True,
        text=True,
        env=cli_env(CACHETOOL_DISABLE_COMPILE_CACHE="1", CACHETOOL_LOGGING_LEVEL="WARNING"),
        cwd=str(REPO),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [ln for ln in proc.stderr.splitlines() if ln.startswith("warm: ")]
    if as_json:
        assert steps == []
        doc = json.loads(proc.stdout)  # stdout is the one object
        # nothing was loaded (the eager pieces compile, the cache is off): no load phase, though the first call
        # waited for Dynamo's background imports (that wait is the trace's)
        assert doc["phases"]["load"] == 0 and doc["phases"]["trace"] > 0
        return
    assert any(ln.startswith("warm: tracing") for ln in steps), proc.stderr[-2000:]
    assert any(ln.startswith("warm: piece 1/") and " compiled in " in ln for ln in steps)
    assert "warm: prefill and decode batches" in steps


def test_a_first_warm_says_it_compiles_not_that_a_hot_start_failed(tmp_path) -> None:
    """Issue 20: the first warm into an empty root opened with 'No AOT hot start (no cache folder for this rank)',
    which reads like a warning; it now says that nothing is cached there yet."""
    proc = subprocess.run(
        [
            os.sys.executable,
            "-c",
            _WARM_EAGER,
            "warm",
            "--model",
            "tiny",
            "--cache-root",
            str(tmp_path / "root"),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=cli_env(CACHETOOL_LOGGING_LEVEL="INFO"),
        cwd=str(REPO),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "No AOT hot start" not in proc.stderr
    assert "No cache for this model and config under the root yet: compiling" in proc.stderr
