"""One run of the user's program (``--engine torch``), with Inductor's and Triton's caches in the root and the probe
(:mod:`.probe`) in every Python process it starts.

The program runs in a process group of its own (so that its workers stop with it), dies with cachetool (Linux
``PR_SET_PDEATHSIG``), and writes its output to a log file the result names. A command runs to its end; a server
(:class:`~.command.ProgramCommand` with a ready URL) runs until the URL answers, then the requests run, then it is
stopped: SIGINT (Python unwinds and writes its report), SIGTERM, SIGKILL. Ctrl-C, SIGTERM to cachetool, a time
limit or a failure stop the whole group before the error goes up; nothing of the probe is left behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from cachetool import process_tree, run_logs
from cachetool.engines.torch import autotune_site
from cachetool.engines.torch.command import ProgramCommand
from cachetool.engines.torch.layout import INDUCTOR, TRITON
from cachetool.errors import EngineFailedError, WaitTimeoutError

__all__ = ["ProgramRun", "cache_variables", "program_env", "run_program"]

PROBE = Path(__file__).with_name("probe.py")
PROBE_CONFIG = "cachetool_torch_probe.json"  # the probe's CONFIG
REQUEST_TIMEOUT = 600.0
PROGRESS_EVERY = 5.0  # seconds between looks at the probes' reports while the program runs


@dataclasses.dataclass
class ProgramRun:
    """What one run of the program did, as cachetool saw it from outside and as the probe reported."""

    exit_code: int | None  # None: a server cachetool stopped
    seconds: float  # exec to exit
    phases: dict[str, float]  # run (a command) or ready, requests, stop (a server)
    reports: list[dict]  # one per Python process that imported torch (the probe's)
    requests: list[dict]  # a server's requests: method, url, status, seconds
    log: str  # the program's output


def cache_variables(root: Path) -> dict[str, str]:
    """Where the program's Inductor and Triton caches go: the root's folders (a server started on a pulled root
    needs the same two)."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / INDUCTOR), "TRITON_CACHE_DIR": str(root / TRITON)}


def program_env(root: Path, probe_dir: Path) -> dict[str, str]:
    """This process's environment with the root's cache folders, the probe first on ``PYTHONPATH`` and then the
    root's site folder where it has one (:mod:`.autotune_site`: the server runs with it too)."""
    env = {**os.environ, **cache_variables(root)}
    site = autotune_site.variables(root).get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(probe_dir), site, env.get("PYTHONPATH")) if p)
    return env


@contextlib.contextmanager
def _probe_folder(root: Path) -> Iterator[Path]:
    """The probe as ``sitecustomize.py`` in a folder of its own, with its reports folder; removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="cachetool-torch-probe-"))
    try:
        shutil.copyfile(PROBE, folder / "sitecustomize.py")
        (folder / "reports").mkdir()
        (folder / PROBE_CONFIG).write_text(json.dumps({"reports": str(folder / "reports"), "root": str(root)}))
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _stop_server(proc: subprocess.Popen, grace: float) -> None:
    """SIGINT to the server's group (Python unwinds, the probe writes its report), then, after ``grace`` seconds,
    what is left of the group ends (:func:`cachetool.process_tree.end_group`: SIGTERM, then SIGKILL)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    process_tree.end_group(proc.pid)
    proc.wait()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


class _CompileProgress:
    """The probes' reports read every few seconds while the program runs, and said when they changed: a long
    compile shows it is moving (the probe writes after each of Dynamo's compiles)."""

    def __init__(self, folder: Path, say: Callable[[str], None]):
        self.folder, self.say = folder, say
        self.seen = 0
        self.due = time.monotonic() + PROGRESS_EVERY

    def tick(self) -> None:
        if time.monotonic() < self.due:
            return
        self.due = time.monotonic() + PROGRESS_EVERY
        reports = _reports(self.folder)
        done = sum(int(r.get("compiles") or 0) for r in reports)
        if done > self.seen:
            self.seen = done
            seconds = sum(float(r.get("compile_seconds") or 0) for r in reports)
            self.say(f"{done} compile(s) done so far, {seconds:.0f} s compiling")


def _wait_ready(proc: subprocess.Popen, command: ProgramCommand, log: Path, progress: _CompileProgress) -> None:
    deadline = time.monotonic() + command.ready_timeout
    while not _answers(command.ready_url):  # type: ignore[arg-type]  # baseline (issue 46)
        progress.tick()
        if proc.poll() is not None:
            raise EngineFailedError(
                f"the program exited with code {proc.returncode} before {command.ready_url} "
                f"answered: {last_error(log)} (log: {log})"
            )
        if time.monotonic() > deadline:
            raise WaitTimeoutError(
                f"{command.ready_url} did not answer within {command.ready_timeout:g} s (--ready-timeout; log: {log})"
            )
        time.sleep(0.2)


def _send(command: ProgramCommand, log: Path, say: Callable[[str], None]) -> list[dict]:
    done = []
    for i, req in enumerate(command.requests, 1):
        data = req.body.encode() if req.body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None and req.is_json else {}
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(
                urllib.request.Request(req.url, data=data, method=req.method, headers=headers), timeout=REQUEST_TIMEOUT
            ) as r:
                r.read()
                status = r.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except (urllib.error.URLError, OSError) as exc:
            raise EngineFailedError(f"request {i} ({req.describe()}) failed: {exc} (log: {log})") from None
        if not 200 <= status < 300:
            raise EngineFailedError(f"request {i} ({req.describe()}) answered {status} (log: {log})")
        done.append(
            {"method": req.method, "url": req.url, "status": status, "seconds": round(time.perf_counter() - t0, 3)}
        )
        say(f"request {i}/{len(command.requests)} done: {req.describe()} -> {status}")
    return done


def _reports(folder: Path) -> list[dict]:
    out = []
    for p in sorted(folder.glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            out.append(json.loads(p.read_text()))
    return sorted(out, key=lambda r: (r.get("compiles", 0) == 0, r.get("pid", 0)))  # the compiling ones first


def _drive(
    proc: subprocess.Popen, command: ProgramCommand, log: Path, t0: float, reports: Path, say: Callable[[str], None]
) -> tuple[dict[str, float], list[dict]]:
    """Wait for a command's end, or run a server's ready wait and requests and stop it; the phases' seconds."""
    progress = _CompileProgress(reports, say)
    if command.ready_url is None:
        while proc.poll() is None:
            progress.tick()
            time.sleep(0.2)
        return {"run": round(time.perf_counter() - t0, 3)}, []
    _wait_ready(proc, command, log, progress)
    ready = time.perf_counter()
    say(f"ready after {ready - t0:.1f} s: {command.ready_url}")
    requests = _send(command, log, say)
    sent = time.perf_counter()
    _stop_server(proc, command.stop_timeout)
    return {
        "ready": round(ready - t0, 3),
        "requests": round(sent - ready, 3),
        "stop": round(time.perf_counter() - sent, 3),
    }, requests


def run_program(command: ProgramCommand, root: Path, verb: str, say: Callable[[str], None]) -> ProgramRun:
    """Run ``command`` on ``root`` (see the module docstring); the program's failure is an
    :class:`EngineFailedError` naming its last error line."""
    log = run_logs.new_log(f"torch-{verb}")
    with _probe_folder(root) as probe, open(log, "wb") as out:
        say(f"running {command.text} (log: {log})")
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(
                list(command.argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=program_env(root, probe),
                start_new_session=True,
                preexec_fn=process_tree.die_with_parent,
            )
        except OSError as exc:
            raise EngineFailedError(f"cannot run {command.argv[0]!r}: {exc.strerror or exc}") from None
        try:
            phases, requests = _drive(proc, command, log, t0, probe / "reports", say)
        except BaseException:  # a failure, a time limit, Ctrl-C or SIGTERM: the program's group goes first
            process_tree.end_group(proc.pid)
            proc.wait()
            raise
        seconds = round(time.perf_counter() - t0, 3)
        if command.ready_url is None and proc.returncode != 0:
            raise EngineFailedError(f"the program exited with code {proc.returncode}: {last_error(log)} (log: {log})")
        reports = _reports(probe / "reports")
    return ProgramRun(
        exit_code=proc.returncode if command.ready_url is None else None,
        seconds=seconds,
        phases=phases,
        reports=reports,
        requests=requests,
        log=str(log),
    )


def last_error(log: Path) -> str:
    """The last line of the program's output that names an error, else its last line."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no output)"
    for ln in reversed(lines):
        if re.search(r"(Error|Exception|error:)", ln):
            return ln[-300:]
    return lines[-1][-300:] if lines else "(no output)"
