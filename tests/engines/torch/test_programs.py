"""Real torch.compile programs through the torch engine, each step its own process as CI, the deploy pipeline and
the init-container run it:

    cachetool warm --engine torch --push file://...  -- python transformer.py   (CI: the program, the probe)
    cachetool pull --engine torch ...                                             (init-container: facts first)
    cachetool check --engine torch --require-hit -- python transformer.py        (the start: nothing compiled)

The programs (tests/engines/torch/programs.py) know nothing of cachetool: the probe reports what they compiled.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.engines.torch.conftest import PY, cachetool, error_line, json_out, ok, printed, warm_and_push

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def transformer(tmp_path_factory, progs, signing_key):
    return warm_and_push(tmp_path_factory, "transformer", signing_key, PY, progs["transformer"])


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory, progs, signing_key):
    return warm_and_push(tmp_path_factory, "dynamic", signing_key, PY, progs["dynamic"], 5, 9, 17)


def _pull(warmed: dict, root, *extra, env: dict | None = None):
    return cachetool(
        "pull",
        warmed["ref"],
        "--cache-root",
        root,
        "--trust",
        warmed["pub"],
        "--engine",
        "torch",
        "--json",
        *extra,
        env=env,
    )


def _check_hit(root, program) -> dict:
    """``check --require-hit --json`` of ``program`` on ``root``, which must pass."""
    return json_out(
        ok(cachetool("check", "--engine", "torch", "--cache-root", root, "--require-hit", "--json", "--", PY, program))
    )


def test_a_transformer_warms_pushes_pulls_and_hot_starts_with_nothing_compiled(transformer, progs, tmp_path):
    comp = transformer["summary"]["compile"]
    assert comp["engine"] == "torch" and comp["fx_graph_misses"] >= 1 and comp["cpp_kernels_built"] > 0
    assert comp["dynamo_traces"] >= 1 and not comp["key_existed"] and comp["cache_key"]
    assert transformer["summary"]["ref"] == transformer["ref"]
    facts = json.loads((transformer["root"] / "facts" / comp["cache_key"] / "cache_key_factors.json").read_text())
    compiler = facts["factors"]["compiler"]["values"]
    assert compiler["torch_engine"] == "1" and compiler["device"] == "cpu" and compiler["cpu_isa"] and compiler["torch"]
    assert facts["factors"]["inductor"]["values"]  # the Inductor settings the program had
    assert facts["factors"]["launch"]["values"]["command"] == [PY, str(progs["transformer"])]

    pulled = tmp_path / "server-root"  # another path than the warm's
    p = json_out(ok(_pull(transformer, pulled)))
    assert p["outcome"] == "installed" and p["platform"].startswith("torch.compile-cpu-"), p
    assert "fingerprint" in p["install"]["preflight"] and "Inductor and Triton variables" in p["install"]["preflight"]

    before = sorted(p.relative_to(pulled) for p in pulled.rglob("*"))
    c = _check_hit(pulled, progs["transformer"])
    assert c["hit"] is True and c["compiled"] == 0, c
    assert c["fx_graph_hits"] >= 1 and c["fx_graph_misses"] == 0 and c["fx_graph_bypasses"] == 0, c
    assert c["cpp_kernels_built"] == 0 and c["kernels_loaded"] > 0 and c["key_existed"], c
    assert c["cache_key"] == comp["cache_key"]
    assert printed(c, "output") == printed(comp, "output") != []  # the loaded kernels compute what the warm's did
    # a root a program restarts on gains nothing but Inductor's lock files (one a kernel, not shipped): nothing
    # per start to prune, and prune agrees
    gained = sorted(set(p.relative_to(pulled) for p in pulled.rglob("*")) - set(before))
    assert all(p.parts[:2] == ("inductor", "locks") for p in gained), gained
    pruned = json_out(ok(cachetool("prune", "--cache-root", pulled, "--older-than", "0", "--json")))
    assert pruned["removed"] == [], pruned


def test_a_check_never_runs_code_planted_at_the_site_folders_name(transformer, progs, tmp_path):
    """``.cachetool-site`` is cachetool's: before a start's program runs, the folder is written again from this
    install where the root needs it, else removed (this root, of a CPU torch 2.13 with no coordinate descent, does
    not). Code someone put there never runs in the program's processes."""
    pulled = tmp_path / "server-root"
    ok(_pull(transformer, pulled))
    marker = tmp_path / "planted-ran"
    planted = pulled / ".cachetool-site"
    planted.mkdir()
    (planted / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")

    c = _check_hit(pulled, progs["transformer"])

    assert c["hit"] is True, c
    assert not marker.exists()
    assert not planted.exists()


def test_check_on_a_read_only_root_says_so_in_one_line_before_the_program_runs(transformer, progs, tmp_path):
    """A torch.compile program writes under its Inductor cache at every start, a hit too (the lock files above; the
    program itself died with EROFS on a read-only root): check refuses a read-only root in one line, exit 2, naming
    the fix, and runs nothing. The mount is real: a read-only bind mount in a private mount namespace."""
    import os
    import subprocess
    import sys

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a read-only bind mount")
    root = tmp_path / "root"
    shutil.copytree(transformer["root"], root, symlinks=True)
    logs = tmp_path / "logs"
    script = 'mount --bind "$ROOT" "$ROOT" && mount -o remount,bind,ro "$ROOT" && exec "$@"'
    r = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "bash",
            "-c",
            script,
            "bash",
            sys.executable,
            "-m",
            "cachetool",
            "check",
            "--engine",
            "torch",
            "--cache-root",
            str(root),
            "--require-hit",
            "--",
            PY,
            str(progs["transformer"]),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ROOT": str(root), "XDG_STATE_HOME": str(logs)},
    )
    line = error_line(r)
    assert r.returncode == 2, r.stderr
    assert f"cache root {root} is not writable" in line and f"cp -a {root} DIR" in line, line
    assert not logs.exists(), "the program was started"


def test_dynamic_shapes_load_for_lengths_the_warm_never_ran(dynamic, progs, tmp_path):
    """One graph for any length: a pulled root serves lengths the warm did not run, compiling nothing."""
    comp = dynamic["summary"]["compile"]
    assert comp["fx_graph_misses"] == 1 and comp["dynamo_traces"] == 1, comp
    pulled = tmp_path / "root"
    ok(_pull(dynamic, pulled))
    c = json_out(
        ok(
            cachetool(
                "check",
                "--engine",
                "torch",
                "--cache-root",
                pulled,
                "--require-hit",
                "--json",
                "--",
                PY,
                progs["dynamic"],
                6,
                11,
                23,
            )
        )
    )
    assert c["hit"] and c["fx_graph_hits"] == 1 and c["graphs_compiled"] == 0 and c["cpp_kernels_built"] == 0, c
    assert [ln.split()[1] for ln in printed(c, "length")] == ["6", "11", "23"]


def test_a_start_with_another_inductor_setting_compiles_and_check_names_the_setting(dynamic, progs, tmp_path):
    """A miss: the program compiles again, check --require-hit exits 4 with one JSON object saying what compiled
    and which recorded fact differs; the root's own warm is left as it was."""
    root = tmp_path / "root"
    shutil.copytree(dynamic["root"], root)
    r = cachetool(
        "check",
        "--engine",
        "torch",
        "--cache-root",
        root,
        "--require-hit",
        "--json",
        "--",
        PY,
        progs["dynamic"],
        5,
        env={"TORCHINDUCTOR_SCALAR_ASSERTS": "0"},
    )
    assert r.returncode == 4, r.stderr[-2000:]
    out = json_out(r)
    assert out["ok"] is False and out["hit"] is False and out["fx_graph_misses"] >= 1, out
    assert not out["key_existed"] and out["differences"], out
    named = {(d["category"], d["name"]) for d in out["differences"]}
    assert ("env", "TORCHINDUCTOR_SCALAR_ASSERTS") in named and ("inductor", "scalar_asserts") in named, named
    assert "TORCHINDUCTOR_SCALAR_ASSERTS" in out["message"] or "scalar_asserts" in out["message"], out["message"]


def test_a_pull_refuses_another_inductor_variable_before_any_blob(dynamic, tmp_path):
    root = tmp_path / "root"
    r = _pull(dynamic, root, env={"TORCHINDUCTOR_MAX_AUTOTUNE": "1"})
    assert r.returncode == 4
    out = json_out(r)
    assert "variable TORCHINDUCTOR_MAX_AUTOTUNE differs: the warm had it unset, this machine '1'" in out["message"]
    assert not root.exists()  # a refused bundle leaves nothing


def test_a_pull_refuses_another_cpu_isa_naming_it(dynamic, tmp_path):
    """Inductor's CPU kernels are built for the ISA the warm ran on: another one is refused by the fingerprint."""
    root = tmp_path / "root"
    r = cachetool(
        "pull",
        dynamic["ref"],
        "--cache-root",
        root,
        "--trust",
        dynamic["pub"],
        "--engine",
        "torch",
        env={"ATEN_CPU_CAPABILITY": "default"},
    )
    assert r.returncode == 4 and "cpu_isa" in error_line(r) and not root.exists(), r.stderr[-2000:]


def test_diff_names_the_differing_fact(dynamic, transformer):
    same = cachetool("diff", dynamic["ref"], "local", "--exit-code")
    assert same.returncode == 0, same.stdout + same.stderr
    r = cachetool("diff", dynamic["ref"], "local", "--exit-code", "--json", env={"TORCH_COMPILE_NEW_FLAG": "x"})
    assert r.returncode == 10
    assert [(d["category"], d["name"]) for d in json_out(r)["differences"]] == [("env", "TORCH_COMPILE_NEW_FLAG")]
    two = json_out(cachetool("diff", dynamic["ref"], transformer["ref"], "--json"))
    assert ("launch", "command") in {(d["category"], d["name"].split(".")[0]) for d in two["differences"]}, two


def test_inspect_says_what_runs_and_what_built_it(transformer):
    out = ok(cachetool("inspect", transformer["ref"])).stdout
    assert "layout    torch" in out and "(program)" in out and "  runs      " in out and "cpu_isa" in out, out
