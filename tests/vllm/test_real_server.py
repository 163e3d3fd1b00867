"""The real OpenAI server is the oracle (issue 27): what pull says before any blob equals what `vllm serve`, started
in its own processes with the server's own flags on the pulled root, then does.

    cachetool warm --engine vllm --push ...                     (tests/vllm/conftest.py's session ``warmed``)
    cachetool pull REF --engine vllm -- MODEL SERVER FLAGS      (the server's command line verbatim)
    vllm serve MODEL SERVER FLAGS                               (cachetool.engines.vllm.server.serve_once)

"Compiled" is judged on the root by the server's own doing: a key folder it added, a kernel library it wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachetool.engines.vllm.server import serve_once
from tests.vllm.conftest import FLAGS, cachetool, files_under, json_out, ok, write_model

pytestmark = [pytest.mark.slow, pytest.mark.servers]

HEADLESS = ["--load-format", "dummy", "--skip-tokenizer-init"]  # the server has no weights and no tokenizer here
API_FLAGS = ["--host", "127.0.0.1", "--port", "8001", "--api-key", "secret", "--uvicorn-log-level", "warning",
             "--enable-log-requests", "--disable-uvicorn-access-log"]


def pull(warmed, root: Path, server_args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return cachetool("pull", warmed["ref"], "--cache-root", root, "--trust", warmed["pub"], "--engine", "vllm",
                     "--json", "--", *server_args, env=env)


def test_pull_with_the_servers_command_line_then_vllm_serve_compiles_nothing(warmed, tmp_path):
    """The init-container copies the server's arguments (a positional model, API and uvicorn flags): the pull
    installs without asking vLLM, and `vllm serve` on the pulled root (another path than the warm's) answers a
    completion, adds no key folder and builds no kernel. A pull given ``--model M -- FLAGS`` instead installs the
    same files (so the same server start judges it too)."""
    root = tmp_path / "server-root"
    server_args = [str(warmed["model"]), *FLAGS, *HEADLESS, *API_FLAGS]
    doc = json_out(ok(pull(warmed, root, server_args)))
    assert doc["outcome"] == "installed", doc
    key = warmed["summary"]["compile"]["cache_key"]
    line = next(p for p in doc["install"]["preflight"] if p.startswith("cache key"))
    assert key in line and "vLLM not asked" in line, line
    assert (root / "modelinfos").is_dir()  # vLLM's model inspection cache comes with the bundle

    other = tmp_path / "model-flag-root"
    by_flag = json_out(ok(cachetool("pull", warmed["ref"], "--cache-root", other, "--trust", warmed["pub"],
                                    "--engine", "vllm", "--model", warmed["model"], "--json", "--", *FLAGS)))
    assert by_flag["outcome"] == "installed"
    assert any(c.startswith(f"cache key {key}") for c in by_flag["install"]["preflight"]), by_flag["install"]
    for sub in ("torch_compile_cache", "modelinfos"):
        assert files_under(other / sub) == files_under(root / sub), sub

    run = serve_once(str(warmed["model"]), root, [*FLAGS, *HEADLESS], api_key="secret")
    assert run.completion and run.completion["usage"]["completion_tokens"] == 4, run.log
    assert run.new_key_folders == [], f"the server computed another key: {run.new_key_folders} ({run.log})"
    assert run.new_kernels == 0, f"the server built {run.new_kernels} kernel(s) ({run.log})"
    assert not run.compiled


# Each case: what is changed on the server's side (its environment, its flags), and the field the pull must name.
# The pull's verdict (installed vs miss) must be what the server then does (loads vs compiles); the first case is
# the one the in-process warm got wrong (vLLM's CPU platform sets TORCHINDUCTOR_CPP_DYNAMIC_THREADS=1 at start).
CASES = {
    "an Inductor variable read at start": ({"TORCHINDUCTOR_SCALAR_ASSERTS": "0"}, [], "inductor.scalar_asserts"),
    "a hashed flag": ({}, ["--max-model-len", "128"], "model_config.max_model_len"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_pulls_verdict_is_what_the_real_server_does(warmed, tmp_path, case):
    env, extra_flags, field = CASES[case]
    model = str(warmed["model"])
    root = tmp_path / "root"
    flags = [*FLAGS, *extra_flags]
    r = pull(warmed, root, [model, *flags, *HEADLESS, *API_FLAGS], env=env)
    doc = json_out(r)
    pull_says_hit = r.returncode == 0 and doc["outcome"] == "installed"
    if not pull_says_hit:
        assert r.returncode == 4 and field in doc["message"], doc["message"]
        assert not root.exists() or not any(root.iterdir()), "a refused pull wrote into the root"
        # the server's judgement on the bundle as it is: install it regardless, then start the server
        ok(cachetool("install", warmed["base"] / "x.ctb", "--cache-root", root, "--trust", warmed["pub"],
                     "--no-preflight"))
    run = serve_once(model, root, [*flags, *HEADLESS], env=env)
    assert run.completion, run.log
    assert pull_says_hit == (not run.compiled), (
        f"pull said {'hit' if pull_says_hit else 'miss'}; the server "
        f"{'compiled' if run.compiled else 'loaded'} (new keys {run.new_key_folders}, "
        f"{run.new_kernels} kernels; log {run.log})")


def test_a_changed_config_json_names_the_field(warmed, tmp_path):
    """Another config.json at the warm's path: the pull names the field the user changed, not a digest."""
    model = Path(warmed["model"])
    original = (model / "config.json").read_text()
    try:
        write_model(model, num_hidden_layers=3)
        r = pull(warmed, tmp_path / "root", [str(model), *FLAGS, *HEADLESS])
    finally:
        (model / "config.json").write_text(original)
    assert r.returncode == 4, r.stdout
    message = json_out(r)["message"]
    assert "hf_config.num_hidden_layers" in message and "bundle 2, this server 3" in message, message


def test_a_killed_pull_leaves_no_vllm_child_behind(warmed, tmp_path):
    """SIGKILL during the key check (vLLM asked: another flag): the child dies with the pull, no folder stays."""
    before = set(Path("/tmp").glob("cachetool-vllm-*"))
    proc = subprocess.Popen([sys.executable, "-m", "cachetool", "pull", warmed["ref"], "--cache-root",
                             tmp_path / "root", "--trust", warmed["pub"], "--engine", "vllm", "--",
                             str(warmed["model"]), *FLAGS, "--max-model-len", "128"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    assert set(Path("/tmp").glob("cachetool-vllm-*")) <= before


def test_inspect_shows_the_model_flags_and_vllms_facts(warmed):
    r = ok(cachetool("inspect", warmed["base"] / "x.ctb"))
    assert "None" not in r.stdout.split("files")[0], r.stdout
    assert str(warmed["model"]) in r.stdout and "--max-model-len 256" in r.stdout
    assert f"vllm {warmed['summary']['compile']['vllm_version']}" in r.stdout
