"""Issue 11: the hot start loads the AOT entry (no Dynamo trace), is guarded by the cache key, writes nothing.

Each test starts real processes on the CPU with the tiny model: a warm (compiles, writes the entry) and a check
(the hot start). The workload's checksum covers prefill and decode batches of 7, 64, 2 and 1 tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from compiler.aot_entry import ENTRY_FILE
from tests.cli_calls import REPO, cli_env, run_cli
from tests.compiler.conftest import copy_warmed

pytestmark = pytest.mark.slow

MODES = ("backed", "unbacked", "backed_size_oblivious")


def _json(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)  # --json prints one object


def _tree_state(root: Path) -> dict[str, str]:
    """Every entry under ``root`` with its content digest (files), link target or 'dir', and mtime."""
    state = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            state[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            state[rel] = f"dir:{p.stat().st_mtime_ns}"
        else:
            state[rel] = hashlib.sha256(p.read_bytes()).hexdigest() + f":{p.stat().st_mtime_ns}"
    return state


_STARTUP = ("key", "trace", "compile", "load", "save", "cudagraph_capture", "first_forward")


def _assert_sum_rules(result: dict) -> None:
    """docs/compiler.md, "Timing names": the start-up is the sum of its phases, the run is build + start-up +
    workload, and compile_seconds is the compile phase (3-decimal rounding on each side)."""
    ph = result["phases"]
    assert sum(ph[k] for k in _STARTUP) == pytest.approx(result["startup_seconds"], abs=0.01)
    assert ph["build"] + result["startup_seconds"] + ph["workload"] == pytest.approx(result["seconds"], abs=0.01)
    assert result["compile_seconds"] == ph["compile"]


@pytest.fixture(scope="module")
def warmed_modes(tmp_path_factory: pytest.TempPathFactory, tiny_warm: dict) -> dict[str, tuple[Path, dict]]:
    """One warm per dynamic-shapes mode. The backed one is the default config: a copy of the run's shared cold
    warm (``tiny_warm`` in tests/conftest.py: its own process, a fresh root, DEBUG level), not a warm of its own."""
    out = {}
    for mode in MODES:
        if mode == "backed":
            root, warm = copy_warmed(tiny_warm, tmp_path_factory.mktemp("aot_backed") / "root")
        else:
            root = tmp_path_factory.mktemp(f"aot_{mode}")
            warm = _json(
                run_cli(
                    "warm",
                    "--model",
                    "tiny",
                    "--cache-root",
                    str(root),
                    "--json",
                    f"-cc.dynamic_shapes_config.type={mode}",
                )
            )
        assert warm["graphs_compiled"] == 3 and warm["hot_path"] == "dynamo"
        _assert_sum_rules(warm)  # a cold warm compiled: its time is compile (and trace, save), not load
        assert warm["phases"]["compile"] > warm["phases"]["load"] and warm["phases"]["save"] > 0
        assert (Path(warm["cache_dir"]) / ENTRY_FILE).is_file(), "warm writes the AOT entry"
        out[mode] = (root, warm)
    return out


def test_human_output_reports_the_hot_path(warmed_modes) -> None:
    root, _ = warmed_modes["backed"]
    proc = run_cli("check", "--model", "tiny", "--cache-root", str(root))
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if "hot path" in ln)
    assert "aot (key from the build evidence), Dynamo traces 0" in line
    startup = next(ln for ln in proc.stdout.splitlines() if "start-up" in ln)
    assert "= key" in startup and "load" in startup and "first_forward" in startup


def test_without_the_entry_the_dynamo_path_serves(warmed_modes, tmp_path: Path) -> None:
    root, warm = warmed_modes["backed"]
    copy = tmp_path / "root"
    shutil.copytree(root, copy, symlinks=True)
    (Path(warm["cache_dir"].replace(str(root.resolve()), str(copy.resolve()))) / ENTRY_FILE).unlink()
    proc = run_cli("check", "--model", "tiny", "--cache-root", str(copy), "--require-hit", "--json")
    check = _json(proc)
    assert check["hot_path"] == "dynamo" and check["dynamo_traces"] == 1 and check["graphs_compiled"] == 0
    assert check["workload"]["checksum"] == warm["workload"]["checksum"]
    reasons = [ln for ln in proc.stderr.splitlines() if "No AOT hot start" in ln]
    assert len(reasons) == 1 and f"no AOT entry ({ENTRY_FILE})" in reasons[0], proc.stderr[-2000:]
    assert not list(copy.rglob(ENTRY_FILE)), "a start that compiled nothing writes no entry"


def test_a_corrupt_entry_falls_back_with_one_line(warmed_modes, tmp_path: Path) -> None:
    root, warm = warmed_modes["backed"]
    copy = tmp_path / "root"
    shutil.copytree(root, copy, symlinks=True)
    entry = next(copy.rglob(ENTRY_FILE))
    entry.write_bytes(entry.read_bytes()[:100])
    proc = run_cli("check", "--model", "tiny", "--cache-root", str(copy), "--require-hit", "--json")
    check = _json(proc)
    assert check["hot_path"] == "dynamo" and check["graphs_compiled"] == 0
    assert check["workload"]["checksum"] == warm["workload"]["checksum"]
    reasons = [ln for ln in proc.stderr.splitlines() if "No AOT hot start" in ln]
    assert len(reasons) == 1 and "does not load here" in reasons[0], proc.stderr[-2000:]


def test_an_altered_artifact_is_not_loaded_by_the_entry(warmed_modes, tmp_path: Path) -> None:
    root, _ = warmed_modes["backed"]
    copy = tmp_path / "root"
    shutil.copytree(root, copy, symlinks=True)
    artifact = sorted(copy.rglob("artifact_general_*"))[0]
    artifact.write_bytes(artifact.read_bytes() + b"x")
    # strict: the Dynamo path that follows would compile that piece again (only the refusal is asked here)
    proc = run_cli("check", "--model", "tiny", "--cache-root", str(copy), "--json", "--require-hit")
    assert proc.returncode == 8, proc.stderr[-2000:]
    reasons = [ln for ln in proc.stderr.splitlines() if "No AOT hot start" in ln]
    assert len(reasons) == 1 and f"artifact {artifact.name} does not match" in reasons[0], proc.stderr[-2000:]


def _repo_copy_with_edited_model(dest: Path) -> Path:
    """The project's packages copied to ``dest``, with a comment appended to the traced model file."""
    for pkg in ("compiler", "cachetool"):
        shutil.copytree(REPO / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    llama = dest / "compiler" / "models" / "llama.py"
    llama.write_text(llama.read_text() + "\n# edited after the warm\n")
    return dest


def test_an_edited_traced_file_is_a_miss(warmed_modes, tmp_path: Path) -> None:
    root, _ = warmed_modes["backed"]
    src = _repo_copy_with_edited_model(tmp_path / "src")
    env = cli_env(PYTHONPATH=str(src))
    proc = subprocess.run(
        [os.sys.executable, "-m", "cachetool", "check", "--model", "tiny", "--cache-root", str(root), "--require-hit"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(src),
        timeout=300,
    )
    assert proc.returncode == 8, proc.stderr[-2000:]  # the Dynamo path then needs a compile: refused
    reason = next(ln for ln in proc.stderr.splitlines() if "No AOT hot start" in ln)
    assert "traced file module:compiler.models.llama differs" in reason
    assert "Loaded the AOT-compiled forward" not in proc.stderr


def _with_foreign_evidence(root: Path, dest: Path) -> Path:
    """A copy of ``root`` whose recorded build evidence differs from this machine's (another torch RECORD
    digest); the factor values and the key are left as they are."""
    shutil.copytree(root, dest, symlinks=True)
    for path in dest.rglob("cache_key_factors.json"):
        data = json.loads(path.read_text())
        data["factors"]["compiler"]["evidence"]["torch_record"] = "0" * 64
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return dest


def test_an_evidence_mismatch_computes_the_exact_key_and_still_hits(warmed_modes, tmp_path: Path) -> None:
    """Issue 21: the evidence is only a shortcut; where it differs, the compiler factors are computed (torch_key,
    triton_key, Inductor config) and, being the same, still find the folder."""
    root, warm = warmed_modes["backed"]
    copy = _with_foreign_evidence(root, tmp_path / "root")
    check = _json(run_cli("check", "--model", "tiny", "--cache-root", str(copy), "--require-hit", "--json"))
    assert check["hot_path"] == "aot" and check["key_source"] == "computed"
    assert check["cache_key"] == warm["cache_key"] and check["graphs_compiled"] == 0
    assert check["workload"]["checksum"] == warm["workload"]["checksum"]


def test_an_evidence_mismatch_still_misses_on_an_edited_traced_file(warmed_modes, tmp_path: Path) -> None:
    root, _ = warmed_modes["backed"]
    copy = _with_foreign_evidence(root, tmp_path / "root")
    src = _repo_copy_with_edited_model(tmp_path / "src")
    proc = subprocess.run(
        [os.sys.executable, "-m", "cachetool", "check", "--model", "tiny", "--cache-root", str(copy), "--require-hit"],
        capture_output=True,
        text=True,
        env=cli_env(PYTHONPATH=str(src)),
        cwd=str(src),
        timeout=300,
    )
    assert proc.returncode == 8, proc.stderr[-2000:]
    reason = next(ln for ln in proc.stderr.splitlines() if "No AOT hot start" in ln)
    assert "traced file module:compiler.models.llama differs" in reason


def test_another_config_is_a_miss_naming_the_field(warmed_modes) -> None:
    root, _ = warmed_modes["backed"]
    proc = run_cli("check", "--model", "tiny", "--cache-root", str(root), "--require-hit", "-cc.compile_sizes=[4]")
    assert proc.returncode == 8, proc.stderr[-2000:]
    reason = next(ln for ln in proc.stderr.splitlines() if "No AOT hot start" in ln)
    assert "config factor field 'compilation_config.compile_sizes' differs: cache [], here [4]" in reason


def _read_only_check(root: Path) -> subprocess.CompletedProcess[str]:
    """``check --require-hit`` with ``root`` made read-only: a read-only bind mount in a private mount namespace
    where the kernel allows one (as root, a chmod alone would not stop a write), else ``chmod -R a-w``."""
    args = [
        os.sys.executable,
        "-m",
        "cachetool",
        "check",
        "--model",
        "tiny",
        "--cache-root",
        str(root),
        "--require-hit",
        "--json",
    ]
    probe = (
        subprocess.run(
            ["unshare", "-m", "sh", "-c", f"mount --bind -o ro {root} {root}"], capture_output=True, text=True
        )
        if shutil.which("unshare")
        else None
    )
    if probe is not None and probe.returncode == 0:
        script = 'mount --bind -o ro "$0" "$0" && touch "$0/.probe" 2>/dev/null && exit 97; exec "$@"'
        return subprocess.run(
            ["unshare", "-m", "sh", "-c", script, str(root), *args],
            capture_output=True,
            text=True,
            env=cli_env(),
            cwd=str(REPO),
            timeout=300,
        )
    subprocess.run(["chmod", "-R", "a-w", str(root)], check=True)
    try:
        return subprocess.run(args, capture_output=True, text=True, env=cli_env(), cwd=str(REPO), timeout=300)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(root)], check=True)


def test_a_read_only_root_hits_and_nothing_is_written(warmed_modes, tmp_path: Path) -> None:
    root, warm = warmed_modes["backed"]
    copy = tmp_path / "ro"
    shutil.copytree(root, copy, symlinks=True)
    before = _tree_state(copy)
    check = _json(_read_only_check(copy))
    assert check["hot_path"] == "aot" and check["graphs_compiled"] == 0
    assert check["workload"]["checksum"] == warm["workload"]["checksum"]
    assert _tree_state(copy) == before


def test_a_loading_start_on_a_writable_root_writes_nothing(warmed_modes, tmp_path: Path) -> None:
    """Also the Dynamo path (entry removed): a start that compiles nothing leaves the tree as it was."""
    root, _ = warmed_modes["unbacked"]
    copy = tmp_path / "rw"
    shutil.copytree(root, copy, symlinks=True)
    before = _tree_state(copy)
    _json(
        run_cli(
            "check",
            "--model",
            "tiny",
            "--cache-root",
            str(copy),
            "--require-hit",
            "--json",
            "-cc.dynamic_shapes_config.type=unbacked",
        )
    )
    assert _tree_state(copy) == before
    next(copy.rglob(ENTRY_FILE)).unlink()
    before = _tree_state(copy)
    dyn = _json(
        run_cli(
            "check",
            "--model",
            "tiny",
            "--cache-root",
            str(copy),
            "--require-hit",
            "--json",
            "-cc.dynamic_shapes_config.type=unbacked",
        )
    )
    assert dyn["hot_path"] == "dynamo"
    assert _tree_state(copy) == before


def test_the_entry_is_signed_with_the_bundle(warmed_modes, tmp_path: Path) -> None:
    """pack (signed) → install into a fresh root: the manifest lists the entry with its digest, so the signature
    covers it, and the install writes it."""
    root, warm = warmed_modes["backed"]
    key = tmp_path / "k.key"
    assert run_cli("keygen", "-o", str(key)).returncode == 0
    ctb = tmp_path / "b.ctb"
    proc = run_cli("pack", str(root), "-o", str(ctb), "--sign-key", str(key))
    assert proc.returncode == 0, proc.stderr[-2000:]
    inspect = run_cli("inspect", str(ctb), "--json", "--files")
    assert inspect.returncode == 0, inspect.stderr[-2000:]
    entry = Path(warm["cache_dir"]) / ENTRY_FILE
    digest = hashlib.sha256(entry.read_bytes()).hexdigest()
    assert ENTRY_FILE in inspect.stdout and digest in inspect.stdout
    fresh = tmp_path / "fresh"
    proc = run_cli("install", str(ctb), "--cache-root", str(fresh), "--trust", str(key) + ".pub")
    assert proc.returncode == 0, proc.stderr[-2000:]
    installed = next(fresh.rglob(ENTRY_FILE))  # (that a signed, pulled root takes the AOT path: the pull test)
    assert hashlib.sha256(installed.read_bytes()).hexdigest() == digest


# ---------------------------------------------------------------------- issue 12: pull --model predicts the key


def _pushed(root: Path, tmp_path: Path) -> tuple[str, Path]:
    """``root`` pushed (signed) to a file store; returns (ref, public key)."""
    key = tmp_path / "k.key"
    assert run_cli("keygen", "-o", str(key)).returncode == 0
    ref = f"file://{tmp_path / 'store'}/tiny:v1"
    proc = run_cli("push", str(root), ref, "--sign-key", str(key))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return ref, Path(str(key) + ".pub")


_HIT_IMPORTS = ("torch._inductor.compile_fx", "torch._inductor.lowering", "torch._inductor.select_algorithm")


def _check_in_a_fresh_process(root: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str], dict, list[str]]:
    """``check --require-hit --json`` on ``root`` in a fresh process at DEBUG level: (process, its --json object,
    which of :data:`_HIT_IMPORTS` the process imported)."""
    args = ["check", "--model", "tiny", "--cache-root", str(root), "--require-hit", "--json", *flags]
    script = (
        "import json, sys\nfrom cachetool.cli import main\n"
        f"rc = main({args!r})\n"
        f"print(json.dumps({{'rc': rc, 'imported': [m for m in {_HIT_IMPORTS!r} if m in sys.modules]}}))\n"
    )
    proc = subprocess.run(
        [os.sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=cli_env(CACHETOOL_LOGGING_LEVEL="DEBUG"),
        cwd=str(REPO),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    *check_lines, last = proc.stdout.strip().splitlines()
    report = json.loads(last)
    assert report["rc"] == 0, proc.stderr[-3000:]
    return proc, json.loads("\n".join(check_lines)), report["imported"]


@pytest.mark.parametrize("mode", MODES)
def test_pull_model_then_a_second_process_takes_the_aot_path(warmed_modes, tmp_path: Path, mode: str) -> None:
    """Issue 12: ``pull --model`` predicts the key the check then uses; issue 11: that second process (on the
    pulled root, another path than the warm's) loads the AOT entry, traces nothing and gives the warm's outputs;
    issue 21: from the build evidence, with Inductor's runtime only (none of compile_fx, lowering,
    select_algorithm imported)."""
    root, warm = warmed_modes[mode]
    ref, pub = _pushed(root, tmp_path)
    fresh = tmp_path / "fresh"
    proc = run_cli(
        "pull",
        ref,
        "--cache-root",
        str(fresh),
        "--trust",
        str(pub),
        "--model",
        "tiny",
        f"-cc.dynamic_shapes_config.type={mode}",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    pull = json.loads(proc.stdout)
    assert f"cache key {warm['cache_key']}" in pull["install"]["preflight"]
    proc, check, imported = _check_in_a_fresh_process(fresh, f"-cc.dynamic_shapes_config.type={mode}")
    assert imported == []
    assert check["hot_path"] == "aot" and check["dynamo_traces"] == 0
    assert check["graphs_compiled"] == 0 and check["graphs_loaded"] == 3 and check["graphs_reused"] == 2
    assert check["cache_key"] == warm["cache_key"]
    assert check["workload"]["token_counts"] == warm["workload"]["token_counts"]
    assert {1, 2, 7, 64} <= set(check["workload"]["token_counts"])
    assert check["workload"]["checksum"] == warm["workload"]["checksum"]
    assert "Start compiling function" not in proc.stderr
    assert set(check["phases"]) == {
        "import",
        "build",
        "key",
        "trace",
        "compile",
        "load",
        "save",
        "cudagraph_capture",
        "first_forward",
        "workload",
        "exit",
    }
    assert check["phases"]["load"] > 0 and check["phases"]["compile"] == check["phases"]["trace"] == 0
    assert check["key_source"] == "evidence"  # the build evidence matched: no torch/Triton source hashing
    _assert_sum_rules(check)


def test_pull_model_refuses_another_config_field_before_any_blob(warmed_modes, tmp_path: Path) -> None:
    root, _ = warmed_modes["backed"]
    ref, pub = _pushed(root, tmp_path)
    fresh = tmp_path / "fresh"
    proc = run_cli(
        "pull", ref, "--cache-root", str(fresh), "--trust", str(pub), "--model", "tiny", "-cc.compile_sizes=[4]"
    )
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert "config factor field 'compilation_config.compile_sizes' differs" in proc.stderr
    assert not fresh.exists() or not any(fresh.rglob("*"))


def test_pull_model_refuses_an_edited_traced_file(warmed_modes, tmp_path: Path) -> None:
    root, _ = warmed_modes["backed"]
    ref, pub = _pushed(root, tmp_path)
    src = _repo_copy_with_edited_model(tmp_path / "src")
    fresh = tmp_path / "fresh"
    proc = subprocess.run(
        [
            os.sys.executable,
            "-m",
            "cachetool",
            "pull",
            ref,
            "--cache-root",
            str(fresh),
            "--trust",
            str(pub),
            "--model",
            "tiny",
        ],
        capture_output=True,
        text=True,
        env=cli_env(PYTHONPATH=str(src)),
        cwd=str(src),
        timeout=300,
    )
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert "traced file module:compiler.models.llama differs" in proc.stderr
    assert not fresh.exists() or not any(fresh.rglob("*"))


def test_pull_waits_for_a_held_install_lock_no_longer_than_its_timeout(warmed_modes, tmp_path: Path) -> None:
    import fcntl

    root, _ = warmed_modes["backed"]
    ref, pub = _pushed(root, tmp_path)
    fresh = tmp_path / "locked"
    fresh.mkdir()
    fd = os.open(fresh, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another install holds the root
        proc = run_cli("pull", ref, "--cache-root", str(fresh), "--trust", str(pub), "--timeout", "1.5")
    finally:
        os.close(fd)
    assert proc.returncode == 7, proc.stderr[-2000:]
    assert "install lock" in proc.stderr.strip().splitlines()[-1]
    assert not any(fresh.rglob("*"))


def test_the_dynamo_path_checks_the_recorded_artifact_digest(warmed_modes, tmp_path: Path) -> None:
    """Issue 13 item 10: compile_index.json's sha256 is checked before a load (not only by the AOT entry)."""
    root, _ = warmed_modes["backed"]
    copy = tmp_path / "root"
    shutil.copytree(root, copy, symlinks=True)
    next(copy.rglob(ENTRY_FILE)).unlink()
    artifact = sorted(copy.rglob("artifact_general_*"))[0]
    artifact.write_bytes(artifact.read_bytes() + b"x")
    proc = run_cli("check", "--model", "tiny", "--cache-root", str(copy), "--require-hit")
    assert proc.returncode == 8, proc.stderr[-2000:]
    assert (
        f"Could not load {artifact.name} (AotEntryError: artifact {artifact.name} does not match its recorded "
        "digest)" in proc.stderr
    )


def test_pull_model_imports_no_torch(warmed_modes, tmp_path: Path) -> None:
    """The init-container's pull, --model included, answers from files: torch is never imported."""
    root, warm = warmed_modes["backed"]
    ref, pub = _pushed(root, tmp_path)
    script = (
        "import json, sys\nfrom cachetool.cli import main\n"
        f"rc = main(['pull', {ref!r}, '--cache-root', {str(tmp_path / 'fresh')!r}, '--trust', {str(pub)!r}, "
        "'--model', 'tiny'])\nprint(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules}))\n"
    )
    proc = subprocess.run(
        [os.sys.executable, "-c", script], capture_output=True, text=True, env=cli_env(), cwd=str(REPO), timeout=120
    )
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"rc": 0, "torch": False}, proc.stderr[-2000:]
    assert f"cache key {warm['cache_key']}" in proc.stdout + proc.stderr
