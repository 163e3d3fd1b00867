"""scripts/*.sh: they install into a virtual environment (never the system Python, which Debian marks externally
managed), run everything from it, and name the step that failed.

The real install (venv, torch, the project) is what scripts/demo.sh and CI run; here the interpreters are stand-ins
that log their calls, so the wiring is checked in milliseconds."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def announced(stdout: str, script: str) -> list[str]:
    """The steps a script announced, in order (lib.sh's `step`: `== SCRIPT: STEP` on stdout)."""
    return [ln.split(": ", 1)[1] for ln in stdout.splitlines() if ln.startswith(f"== {script}: ")]


# A stand-in for a Python >= 3.11 whose every call is logged; `-m venv DIR` makes a stand-in venv in DIR.
FAKE_PYTHON = """#!/bin/bash
echo "$0 $*" >> "$LOG"
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  [ -n "$FAIL_VENV" ] && exit 1
  mkdir -p "$3/bin"
  cp "$0" "$3/bin/python"
  printf '#!/bin/bash\\necho "$0 $*" >> "$LOG"\\n[ "$1" = "$FAIL_CT" ] && exit 3\\nexit 0\\n' > "$3/bin/cachetool"
  chmod +x "$3/bin/cachetool"
  exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ] && [ "$(basename "$(dirname "$(dirname "$0")")")" != "venv" ]; then
  echo "pip outside the venv" >&2; exit 9
fi
here=$(dirname "$0")
# FAIL_PIP / SLOW_PIP: a pip install whose arguments hold that text fails as pip does (an ERROR: line), or lasts 2.5 s
if [ -n "$FAIL_PIP" ] && [[ "$*" == *"pip install"*"$FAIL_PIP"* ]]; then
  echo "ERROR: No matching distribution found for $FAIL_PIP" >&2; exit 1
fi
if [ -n "$SLOW_PIP" ] && [[ "$*" == *"pip install"*"$SLOW_PIP"* ]]; then sleep 2.5; fi
case "$*" in
  "-c import torch") [ -f "$here/../torch" ] || exit 1 ;;  # torch is there once pip installed it
  *"pip install"*"torch=="*)
    # NO_LOCAL_TORCH: the pip configuration's indexes lack the build (as PyPI lacks +cpu builds)
    if [ -n "$NO_LOCAL_TORCH" ] && [[ "$*" != *--extra-index-url* ]]; then exit 1; fi
    touch "$here/../torch" ;;
  *"print(f"*) echo 3.11 ;;
  *"torch.__version__"*) echo "torch 2.13.0+cpu" ;;
  "-m pytest"*) echo "PATH=$PATH" >> "$LOG"; sleep 0.3 ;;  # a run lasts: /proc/stat's ticks move on
esac
exit 0
"""


@pytest.fixture
def fake(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    py = bindir / "python3"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    log = tmp_path / "log"
    log.touch()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "LOG": str(log),
        "PYTHON": str(py),
        "CACHETOOL_VENV": str(tmp_path / "venv"),
        "DEMO_DIR": str(tmp_path / "demo"),
    }

    def run(script: str, *args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(ROOT / "scripts" / script), *args],
            capture_output=True,
            text=True,
            env={**env, **extra},
            timeout=120,
            cwd=tmp_path,
        )

    run.log = log
    run.venv = tmp_path / "venv"
    return run


def test_demo_installs_into_the_venv_and_runs_the_tool_from_it(fake):
    r = fake("demo.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    calls = fake.log.read_text().splitlines()
    venv = str(fake.venv)
    assert any(c.endswith(f"-m venv {venv}") for c in calls), calls
    pip = [c for c in calls if " -m pip install" in c]
    assert pip and all(c.startswith(f"{venv}/bin/python ") for c in pip), pip
    assert any("torch==2.13.0+cpu" in c for c in pip) and any(c.endswith("-e .") for c in pip), pip
    tool = [c.split()[1] for c in calls if c.startswith(f"{venv}/bin/cachetool ")]
    assert tool == ["keygen", "warm", "pull", "check"], calls
    # the last line is the success line README's quick start tells a user to look for
    last = r.stdout.splitlines()[-1]
    assert last.startswith("== demo.sh: ") and f"`{last}`" in (ROOT / "README.md").read_text(), last


def _torch_installs(fake) -> list[str]:
    return [c for c in fake.log.read_text().splitlines() if " -m pip install" in c and "torch==" in c]


def test_install_asks_for_torchs_cpu_build_by_name(fake):
    """A bare torch==2.13.0 resolves to the CUDA build on PyPI (it came out CPU here only through this machine's
    pip configuration); the script asks for +cpu, from the configured indexes first, then PyTorch's CPU index."""
    r = fake("install.sh")
    assert r.returncode == 0, r.stderr
    assert [c.split()[-1] for c in _torch_installs(fake)] == ["torch==2.13.0+cpu"]
    # the torch install is a step of its own, named by the requirement it installs (a failure there names it)
    assert any("torch==2.13.0+cpu" in s for s in announced(r.stdout, "install.sh")), r.stdout
    # the last line names the venv's tool and the torch the venv's Python imports (the stand-in answers 2.13.0+cpu)
    last = r.stdout.splitlines()[-1]
    assert f"{fake.venv}/bin/cachetool" in last and "2.13.0+cpu" in last, last


def test_install_falls_back_to_pytorchs_index_and_takes_an_override(fake):
    r = fake("install.sh", NO_LOCAL_TORCH="1", TORCH_BUILD="cu128", TORCH_VERSION="2.11.0")
    assert r.returncode == 0, r.stderr
    first, second = _torch_installs(fake)
    assert first.endswith("torch==2.11.0+cu128") and "--extra-index-url" not in first
    assert "--extra-index-url https://download.pytorch.org/whl/cu128 torch==2.11.0+cu128" in second


def test_install_keeps_a_torch_already_in_the_venv(fake):
    assert fake("install.sh").returncode == 0
    fake.log.write_text("")
    r = fake("install.sh")
    assert r.returncode == 0 and not _torch_installs(fake), fake.log.read_text()
    # the step that keeps it says which torch it kept, in which venv
    assert any(str(fake.venv) in s and "2.13.0+cpu" in s for s in announced(r.stdout, "install.sh")), r.stdout


def test_the_venv_is_reused(fake):
    assert fake("demo.sh").returncode == 0
    fake.log.write_text("")
    assert fake("demo.sh").returncode == 0
    assert not any(" -m venv " in c for c in fake.log.read_text().splitlines())


@pytest.mark.parametrize(
    "env, script, about",
    [
        ({"PYTHON": "/nonexistent/python3"}, "install.sh", "/nonexistent/python3"),
        ({"FAIL_VENV": "1"}, "install.sh", "{venv}"),
        ({"FAIL_CT": "warm"}, "demo.sh", "warm"),
    ],
)
def test_a_failing_step_is_named(fake, env, script, about):
    """The failure line names the step that was running, the innermost script first: the last step that script
    announced, which is the one about the failing command (the interpreter, the venv, the tool's verb)."""
    r = fake("demo.sh", **env)
    assert r.returncode != 0
    failed = [ln for ln in r.stderr.splitlines() if "FAILED at step: " in ln]
    assert failed and failed[0].startswith(f"{script}: "), r.stderr
    step = announced(r.stdout, script)[-1]
    assert f"FAILED at step: {step}" in failed[0], (step, failed[0])
    assert about.format(venv=fake.venv) in step, step


def test_an_old_python_is_refused_by_name(fake, tmp_path):
    old = tmp_path / "python3.9"
    old.write_text(
        "#!/bin/bash\ncase \"$*\" in *version_info*'< (3, 11)'*) exit 1;; --version) echo Python 3.9.2;; esac\n"
    )
    old.chmod(0o755)
    r = fake("install.sh", PYTHON=str(old))
    assert r.returncode != 0 and "Python 3.9.2 is too old" in r.stderr, r.stderr


@pytest.mark.skipif(
    not all(
        shutil.which(b)
        for b in ("radosgw", "ceph-mon", "ceph-osd", "ceph-mgr", "radosgw-admin", "docker-registry", "skopeo")
    ),
    reason="the test servers are not installed (install.sh --test would apt-get them)",
)
def test_test_sh_runs_pytest_from_the_venv_with_durations(fake):
    r = fake("test.sh", "tests/deploy")
    assert r.returncode == 0, r.stdout + r.stderr
    runs = [c for c in fake.log.read_text().splitlines() if " -m pytest " in c]
    assert runs == [f"{fake.venv}/bin/python -m pytest -n 3 --dist loadgroup tests/deploy"], runs
    assert "the suite took" in r.stdout
    # how busy the cores were over the run: the suite is bound by its CPU work on a small box (docs/benchmarks.md)
    busy = re.search(r"the machine's (\d+) cores were (\d+)% busy \((\d+) CPU-seconds", r.stdout)
    assert busy and int(busy[1]) == os.cpu_count() and 0 <= int(busy[2]) <= 100, r.stdout
    # tests that run `cachetool` by name find the venv's first (Debian's PATH has none), as activation does
    paths = [c for c in fake.log.read_text().splitlines() if c.startswith("PATH=")]
    assert paths and paths[0].split("=", 1)[1].split(":")[0] == f"{fake.venv}/bin", paths
    if shutil.which("ccache"):  # then the C++ kernels are built through tests/toolchain/g++, right after the venv
        assert paths[0].split("=", 1)[1].split(":")[1] == str(ROOT / "tests" / "toolchain"), paths
        assert "C++ kernel builds through ccache:" in r.stdout


def test_the_demo_removes_its_temporary_folder_and_keeps_demo_dir(fake, tmp_path):
    """DEMO_DIR keeps the demo's files there; without it the demo leaves nothing behind (it once left a
    /tmp/cachetool-demo.* at every run)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = fake("demo.sh", DEMO_DIR="", TMPDIR=str(tmp))
    assert r.returncode == 0, r.stderr
    assert "== demo folder: " + str(tmp) in r.stdout and list(tmp.iterdir()) == []
    r = fake("demo.sh")
    assert r.returncode == 0 and (tmp_path / "demo" / "store").parent.is_dir()


def test_an_unreachable_torch_index_is_named_with_its_cause(tmp_path):
    """With real Python and pip, in a throwaway venv (never the repository's .venv): an index that refuses
    connections was reported as pip's "ResolutionImpossible" (with a constraints file) or "No matching
    distribution", the refusal itself hidden by the quiet install; now the failure line names the index and why."""
    from tests.servers import free_port

    empty = tmp_path / "empty-index"
    empty.mkdir()
    index = f"http://127.0.0.1:{free_port()}/whl/cpu"  # nothing listens there
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),
        "CACHETOOL_VENV": str(tmp_path / "venv"),
        "TORCH_INDEX_URL": index,
        # no pip configuration of this machine (its wheel folders hold torch): the configured index is empty
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": empty.as_uri(),
        "PIP_RETRIES": "0",
    }
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode != 0, r.stdout + r.stderr
    failed = [ln for ln in r.stderr.splitlines() if "FAILED at step: " in ln]
    assert len(failed) == 1, r.stderr
    # the step (the torch requirement), the index that failed and the system's own reason, in the one line
    assert "torch==2.13.0+cpu" in failed[0] and index in failed[0], failed
    assert "[Errno 111] Connection refused" in failed[0], failed
    assert "ResolutionImpossible" not in r.stderr and "No matching distribution" not in r.stderr, r.stderr
    assert not list(tmp_path.glob("cachetool-torch.*")), "the pip log was left behind"


# ------------------------------------------------------------------------------ issue 45, item 5: a quiet pip step
def test_a_long_pip_step_says_every_few_seconds_that_it_is_still_at_work(fake):
    """Before: `install.sh --vllm`'s pip step printed nothing for about 2 minutes. Now every step that waits on pip
    says so every CACHETOOL_HEARTBEAT_S seconds (10 by default), naming the step."""
    r = fake("install.sh", SLOW_PIP="-e", CACHETOOL_HEARTBEAT_S="1")
    assert r.returncode == 0, r.stderr
    # while the slow step (the project's pip install) runs, a line every second names that step, the one announced
    # last, and how long it has been at work: 1 s, 2 s, ...
    seconds, running = [], None
    for line in r.stdout.splitlines():
        if line.startswith("== install.sh: "):
            running = line.split(": ", 1)[1]
        elif m := re.search(r"\((\d+) s\)$", line):
            assert running and running in line and "torch" not in running, (running, line)
            seconds.append(int(m[1]))
    assert len(seconds) >= 2 and seconds == list(range(1, len(seconds) + 1)), r.stdout


def _pip_installs(fake) -> list[str]:
    return [c for c in fake.log.read_text().splitlines() if " -m pip install" in c]


def test_install_takes_every_wheel_from_the_folder_cachetool_wheels_names(fake, tmp_path):
    """Before: no documented way to install from a local wheel folder. CACHETOOL_WHEELS=/dir makes every pip install
    (torch, the project, vLLM) take its wheels from that folder alone, and PyTorch's index is never asked."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    r = fake("install.sh", "--vllm", CACHETOOL_WHEELS=str(wheels))
    assert r.returncode == 0, r.stderr
    calls = _pip_installs(fake)
    assert len(calls) == 3 and all(f"--no-index --find-links {wheels} " in c for c in calls), calls
    assert not any("--extra-index-url" in c for c in calls), calls

    fake.log.write_text("")
    shutil.rmtree(fake.venv)
    r = fake("install.sh", CACHETOOL_WHEELS=str(wheels), NO_LOCAL_TORCH="1")
    failed = [ln for ln in r.stderr.splitlines() if "FAILED at step: " in ln]
    assert r.returncode != 0 and len(failed) == 1, r.stderr
    assert "torch==2.13.0+cpu" in failed[0] and f"CACHETOOL_WHEELS={wheels}" in failed[0], failed
    assert not any("--extra-index-url" in c for c in _pip_installs(fake))


def test_a_failed_pip_step_names_pips_error_and_how_to_install_offline(fake):
    r = fake("install.sh", FAIL_PIP="-e")
    failed = [ln for ln in r.stderr.splitlines() if "FAILED at step: " in ln]
    assert r.returncode != 0 and len(failed) == 1, r.stderr
    assert "install cachetool into" in failed[0] and "No matching distribution found for -e" in failed[0], failed
    assert "CACHETOOL_WHEELS=/dir" in failed[0] and "PIP_INDEX_URL" in failed[0], failed


def test_a_wheel_folder_that_is_not_one_is_refused_first(fake, tmp_path):
    r = fake("install.sh", CACHETOOL_WHEELS=str(tmp_path / "nowhere"))
    assert r.returncode == 2 and f"CACHETOOL_WHEELS={tmp_path / 'nowhere'}" in r.stderr, r.stderr
    assert _pip_installs(fake) == []
