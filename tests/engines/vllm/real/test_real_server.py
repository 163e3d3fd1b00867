"""The real OpenAI server is the oracle (issue 27): what pull says before any blob equals what `vllm serve`, started
in its own processes with the server's own flags on the pulled root, then does.

    cachetool warm --engine vllm --push ...                     (conftest.py's session ``warmed``)
    cachetool pull REF --engine vllm -- MODEL SERVER FLAGS      (the server's command line verbatim)
    vllm serve MODEL SERVER FLAGS                               (tests.vllm_oracle.server.serve_once)

"Compiled" is judged on the root by the server's own doing: a key folder it added, a kernel library it wrote.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachetool.engines.vllm import install_facts
from tests.engines.vllm.real.conftest import FLAGS, cachetool, files_under, json_out, ok, the_warm_model
from tests.vllm_oracle.server import ServerRun, serve_once
from tests.vllm_oracle.verdict_table import TABLE, model_for

pytestmark = [pytest.mark.slow, pytest.mark.servers]

HEADLESS = ["--load-format", "dummy", "--skip-tokenizer-init"]  # the server has no weights and no tokenizer here
API_FLAGS = [
    "--host",
    "127.0.0.1",
    "--port",
    "8001",
    "--api-key",
    "secret",
    "--uvicorn-log-level",
    "warning",
    "--enable-log-requests",
    "--disable-uvicorn-access-log",
]


def pull(warmed, root: Path, server_args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """``cachetool pull --engine vllm -- SERVER ARGS`` (the init-container's form) with the server's environment."""
    return cachetool(
        "pull",
        warmed["ref"],
        "--cache-root",
        root,
        "--trust",
        warmed["pub"],
        "--engine",
        "vllm",
        "--json",
        "--",
        *server_args,
        env=env,
    )


@dataclasses.dataclass(frozen=True)
class Judged:
    """One row of the table: the pull's verdict and JSON, the real server that judged it, the root pulled into."""

    verdict: str
    doc: dict
    run: ServerRun | None
    root: Path


def pulled_verdict(warmed, root: Path, model: Path, row) -> tuple[str, dict]:
    r = pull(warmed, root, [str(model), *FLAGS, *row.flags, *HEADLESS, *API_FLAGS], env=row.env)
    doc = json_out(r)
    verdict = {"installed": "hit", "miss": "miss", "not-needed": "eager"}.get(doc["outcome"], doc["outcome"])
    if doc.get("compiles_nothing"):  # an eager server: only the folders that belong to no key were installed
        verdict = "eager"
    assert verdict in ("hit", "miss", "eager") and r.returncode == {"miss": 4}.get(verdict, 0), r.stderr
    return verdict, doc


def table_parts(rows: list[str], misses_per_part: int = 3) -> dict[str, list[str]]:
    """The table in parts that xdist may judge on different workers at once (each part is a unit of work: a
    module fixture and its tests): the rows a pull should call a hit or eager in one part (one server judges
    all its hits together), the misses (a server each) a few to a part. A row's verdict is still whatever its pull
    says; the parts only spread the ~13 server starts over the workers."""
    others = [name for name in rows if not TABLE[name].named]
    misses = [name for name in rows if TABLE[name].named]
    count = -(-len(misses) // misses_per_part)
    return {f"verdicts-{i}": part for i, part in enumerate([others, *(misses[i::count] for i in range(count))])}


PARTS = table_parts(list(TABLE))
HITS = "verdicts-0"  # the part whose hits one server judges


@pytest.fixture(scope="module")
def table(warmed, tmp_path_factory, request):
    """Each row of the part (``request.param``) pulled into its own root (the pull's verdict, before any blob),
    then judged by the real server: the rows the pull called a hit by one `vllm serve` with all their differences
    at once on a pulled root (it must compile nothing and answer), each miss by a server on the bundle's root
    installed regardless (it must compile: stopped at its first key folder or kernel), each eager one by a server on
    the root its pull left (it must compile nothing). Returns {row: :class:`Judged`}."""
    base = tmp_path_factory.mktemp("verdicts")
    out = {}
    for name in PARTS[request.param]:
        i, row = list(TABLE).index(name), TABLE[name]
        with (
            the_warm_model(warmed, edits=row.model == "3 layers"),
            model_for(row, Path(warmed["model"]), base / f"m{i}") as model,
        ):
            verdict, doc = pulled_verdict(warmed, base / f"root{i}", model, row)
            run = None
            if verdict == "miss":
                root = base / f"root{i}"
                ok(
                    cachetool(
                        "install",
                        warmed["base"] / "x.ctb",
                        "--cache-root",
                        root,
                        "--trust",
                        warmed["pub"],
                        "--no-preflight",
                    )
                )
                run = serve_once(
                    str(model), root, [*FLAGS, *row.flags, *HEADLESS], env=row.env, stop_when_compiling=True
                )
            elif verdict == "eager":
                run = serve_once(str(model), base / f"root{i}", [*FLAGS, *row.flags, *HEADLESS], env=row.env)
        out[name] = Judged(verdict, doc, run, base / f"root{i}")
    hits = [name for name, judged in out.items() if judged.verdict == "hit" and TABLE[name].model == "same"]
    if hits:
        env = {k: v for name in hits for k, v in TABLE[name].env.items()}
        flags = [f for name in hits for f in TABLE[name].flags if f not in ("--api-key", "k")]
        with the_warm_model(warmed):
            together = serve_once(
                str(warmed["model"]), out[hits[0]].root, [*FLAGS, *flags, *HEADLESS], env=env, api_key="k"
            )
        for name in hits:
            out[name] = dataclasses.replace(out[name], run=together)
    return out


def _rows():
    for part, names in PARTS.items():
        for name in names:
            yield pytest.param(part, name, id=name, marks=pytest.mark.xdist_group(part))


@pytest.mark.parametrize("table,name", list(_rows()), indirect=["table"], scope="module")
def test_the_pulls_verdict_is_what_the_real_server_does(table, name):
    row = TABLE[name].on(install_facts.vllm_version())
    verdict, doc, run = table[name].verdict, table[name].doc, table[name].run
    assert run is not None, f"{name}: no server judged the pull's {verdict}"
    compiled = f"{run.new_key_folders} new key folder(s), {run.new_kernels} kernel(s); log {run.log}"
    if verdict == "miss":
        assert run.compiled, f"{name}: pull said miss, the server compiled nothing ({compiled})"
        assert row.named in doc["message"], doc["message"]
    elif verdict == "eager":
        # the eager server came up (its engine initialized) on the root the pull left (the folders that belong to no
        # key) without compiling anything; its first request is not asked for: vLLM's eager CPU path dies with
        # SIGILL on some of these boxes' CPUs
        assert not run.compiled, f"{name}: pull said {verdict}, the server compiled ({compiled})"
        assert run.ready_seconds > 0, f"{name}: the eager server did not come up ({run.log})"
    else:
        assert not run.compiled, f"{name}: pull said {verdict}, the server compiled ({compiled})"
        assert run.completion, f"{name}: the server did not answer ({run.log})"
    how = (
        doc["message"]
        if verdict == "miss"
        else next((p for p in doc.get("install", {}).get("preflight", []) if p.startswith("cache key")), "")
    )
    if verdict != "eager":
        assert ("vLLM asked" in how) == row.asks_vllm, how


@pytest.mark.xdist_group(HITS)
@pytest.mark.parametrize("table", [HITS], indirect=True, scope="module")
def test_pull_with_the_servers_command_line_then_vllm_serve_compiles_nothing(table, warmed, tmp_path):
    """The init-container copies the server's arguments (a positional model, API and uvicorn flags): the pull
    installs without asking vLLM, and `vllm serve` on the pulled root (another path than the warm's) answers a
    completion, adds no key folder, builds no kernel and uses the warm's key by vLLM's own facts (the table's
    server of the hits: the first hit row's root, every hit row's flags at once). A pull given ``--model M --
    FLAGS`` instead installs the same files (so the same server start judges it too), and check agrees on the
    root the server started from (the matrix row of this release, as CI runs it)."""
    first = next(name for name in PARTS[HITS] if table[name].verdict == "hit" and TABLE[name].model == "same")
    pulled, key = table[first], warmed["summary"]["compile"]["cache_key"]
    assert pulled.doc["outcome"] == "installed", pulled.doc
    line = next(p for p in pulled.doc["install"]["preflight"] if p.startswith("cache key"))
    assert key in line and "vLLM not asked" in line, line
    assert (pulled.root / "modelinfos").is_dir()  # vLLM's model inspection cache comes with the bundle

    # the two forms of the pull install the same files (compared on fresh roots: the server has since written
    # into the table's root: vLLM 0.32 on the CPU saves its AOT artifact again at every start)
    by_args, by_flag = tmp_path / "server-args-root", tmp_path / "model-flag-root"
    with the_warm_model(warmed):
        ok(pull(warmed, by_args, [str(warmed["model"]), *FLAGS, *HEADLESS, *API_FLAGS]))
        doc = json_out(
            ok(
                cachetool(
                    "pull",
                    warmed["ref"],
                    "--cache-root",
                    by_flag,
                    "--trust",
                    warmed["pub"],
                    "--engine",
                    "vllm",
                    "--model",
                    warmed["model"],
                    "--json",
                    "--",
                    *FLAGS,
                )
            )
        )
    assert doc["outcome"] == "installed"
    assert any(c.startswith(f"cache key {key}") for c in doc["install"]["preflight"]), doc["install"]
    for sub in ("torch_compile_cache", "modelinfos"):
        assert files_under(by_flag / sub) == files_under(by_args / sub), sub

    run = pulled.run
    assert run.completion and run.completion["usage"]["completion_tokens"] == 4, run.log
    assert run.new_key_folders == [], f"the server computed another key: {run.new_key_folders} ({run.log})"
    assert run.new_kernels == 0, f"the server built {run.new_kernels} kernel(s) ({run.log})"
    assert not run.compiled and run.facts and run.cache_key == key, run  # vLLM's own facts, through its endpoint
    with the_warm_model(warmed):
        doc = json_out(
            ok(
                cachetool(
                    "check",
                    "--engine",
                    "vllm",
                    "--model",
                    warmed["model"],
                    "--cache-root",
                    pulled.root,
                    "--require-hit",
                    "--json",
                    "--",
                    *FLAGS,
                )
            )
        )
    assert doc["hit"] and doc["cache_key"] == key, doc


@pytest.mark.usefixtures("reading_the_warm_model")
def test_check_on_a_root_warmed_for_another_command_is_a_miss_without_starting_vllm(warmed, tmp_path):
    """check asks the key question of the root's recorded key folder first: a hashed flag is a miss in a second,
    nothing compiled and nothing written (it compiled for 98 s on the H200 before it said miss)."""
    root = tmp_path / "root"
    ok(pull(warmed, root, [str(warmed["model"]), *FLAGS]))
    before = files_under(root)
    r = cachetool(
        "check",
        "--engine",
        "vllm",
        "--cache-root",
        root,
        "--require-hit",
        "--json",
        "--",
        str(warmed["model"]),
        *FLAGS,
        "--max-model-len",
        "128",
    )
    assert r.returncode == 4, r.stderr
    doc = json_out(r)
    assert doc["started"] is False and "model_config.max_model_len" in doc["message"], doc
    assert files_under(root) == before


@pytest.mark.usefixtures("reading_the_warm_model")
def test_a_killed_pull_leaves_no_vllm_child_behind(warmed, tmp_path):
    """SIGKILL during the key check (vLLM asked: a variable only it can judge): the child dies with the pull, no
    folder stays (in a temporary folder of the pull's own: the other workers' vLLM starts write theirs in /tmp)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cachetool",
            "pull",
            warmed["ref"],
            "--cache-root",
            tmp_path / "root",
            "--trust",
            warmed["pub"],
            "--engine",
            "vllm",
            "--",
            str(warmed["model"]),
            *FLAGS,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "2", "TMPDIR": str(scratch)},
    )
    child = None
    deadline = time.time() + 60
    while child is None and time.time() < deadline and proc.poll() is None:
        out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        child = int(out[0]) if out else None
        time.sleep(0.2)
    assert child is not None, "the key check started no child"
    proc.kill()
    proc.wait()
    for _ in range(100):
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        pytest.fail("the vLLM key child outlived its pull")
    time.sleep(0.5)
    assert list(scratch.glob("cachetool-vllm-*")) == []


def test_inspect_shows_the_model_flags_and_vllms_facts(warmed):
    r = ok(cachetool("inspect", warmed["base"] / "x.ctb"))
    assert "None" not in r.stdout.split("files")[0], r.stdout
    assert str(warmed["model"]) in r.stdout and "--max-model-len 256" in r.stdout
    assert f"vllm {warmed['summary']['compile']['vllm_version']}" in r.stdout
