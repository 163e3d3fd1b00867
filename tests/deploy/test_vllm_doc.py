"""docs/vllm.md's CPU example, pasted as is by a new user: it used `python` and `cachetool` without the venv, a key
it never made, no TRITON_CACHE_DIR for the server, no request and no `check`. Here the block runs in bash with the
venv's commands replaced by stand-ins that record their arguments (python runs for real), and each recorded
command is read by the parser that will read it: cachetool's (click) and, where vLLM is installed, `vllm serve`'s."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# .venv/bin/activate of the dry run: every command the block uses, recorded one per line (fields split by \x1f)
STAND_INS = """
record() { local IFS=$'\\x1f'; printf '%s\\n' "$*" >> "$RECORD"; }
cachetool() { record cachetool "$@"; }
vllm() { record vllm "VLLM_CACHE_ROOT=${VLLM_CACHE_ROOT:-}" "TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-}" "$@"; exec sleep 60; }
# health answers once the server is up (its stand-in recorded its start): the block's `&` must not race its kill
curl() { case "$*" in *health*) grep -q '^vllm' "$RECORD" 2>/dev/null || return 7;; esac; record curl "$@"; }
python() { PYTHONPATH="$REPO" "$PYTHON" "$@"; }
"""


def cpu_block() -> str:
    text = (ROOT / "docs" / "vllm.md").read_text()
    section = text[text.index("On a small CPU machine") :]
    m = re.search(r"```bash\n(.*?)```", section, re.S)
    assert m, "docs/vllm.md has no bash block under 'On a small CPU machine'"
    return m.group(1)


@pytest.fixture(scope="module")
def calls(tmp_path_factory) -> dict[str, list[list[str]]]:
    """The block's commands as it runs them, by program (cachetool's by verb)."""
    here = tmp_path_factory.mktemp("doc")
    (here / ".venv" / "bin").mkdir(parents=True)
    (here / ".venv" / "bin" / "activate").write_text(STAND_INS)
    record = here / "record"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(here),
        "TMPDIR": str(here),
        "RECORD": str(record),
        "REPO": str(ROOT),
        "PYTHON": sys.executable,
    }
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", cpu_block()], cwd=here, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    out: dict[str, list[list[str]]] = {}
    for line in record.read_text().splitlines():
        argv = line.split("\x1f")
        out.setdefault(argv[1] if argv[0] == "cachetool" else argv[0], []).append(argv)
    return out


def _after_dashes(argv: list[str]) -> list[str]:
    return argv[argv.index("--") + 1 :]


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_every_cachetool_command_parses_as_the_cli_takes_it(calls):
    from cachetool.cli import bundle_cmds, cli, compile_cmds, store_cmds  # noqa: F401 - they add the commands

    assert sorted(calls) == ["check", "curl", "keygen", "pull", "vllm", "warm"], calls
    for verb in ("keygen", "warm", "pull", "check"):
        (argv,) = calls[verb]
        with cli.make_context("cachetool", argv[1:], resilient_parsing=False) as ctx:
            command = cli.get_command(ctx, verb)
            command.make_context(verb, argv[2:], parent=ctx)  # raises on a flag the command does not take


def test_the_key_the_root_and_the_server_command_line_are_the_same_throughout(calls):
    (keygen,), (warm,), (pull,), (check,) = (calls[v] for v in ("keygen", "warm", "pull", "check"))
    key = _option(keygen, "-o")
    assert _option(warm, "--sign-key") == key and _option(pull, "--trust") == key + ".pub"
    assert _option(warm, "--push") == pull[2]
    (serve,) = calls["vllm"]
    root = _option(pull, "--cache-root")
    assert serve[1:3] == [f"VLLM_CACHE_ROOT={root}", f"TRITON_CACHE_DIR={root}/triton_cache"], serve
    assert serve[3] == "serve" and serve[4:] == _after_dashes(pull), (serve, pull)  # pull takes it verbatim
    assert _option(check, "--cache-root") == root and _after_dashes(check) == _after_dashes(warm)
    assert Path(_after_dashes(warm)[0], "config.json").is_file()  # the python line wrote the model


def test_a_request_reaches_the_server_with_token_ids(calls):
    (serve,) = calls["vllm"]
    port = _option(serve, "--port")
    health, completion = calls["curl"]
    assert f"localhost:{port}/health" in health
    assert f"localhost:{port}/v1/completions" in completion
    body = json.loads(_option(completion, "-d"))
    assert body["model"] == serve[4] and all(isinstance(t, int) for t in body["prompt"]), body  # no tokenizer
    assert "--skip-tokenizer-init" in serve


def test_the_server_command_line_parses_as_vllm_serve_takes_it(calls):
    pytest.importorskip("vllm")
    from cachetool.engines.vllm.child.in_vllm.child import server_parser

    (serve,) = calls["vllm"]
    args = server_parser().parse_args(serve[4:])
    assert args.model_tag == serve[4] and args.skip_tokenizer_init and args.load_format == "dummy", shlex.join(serve)


def test_the_kv_cache_is_sized_in_bytes_not_as_a_share_of_the_machines_ram(calls):
    """On the CPU `--gpu-memory-utilization` is a share of the NUMA node's RAM less what the worker already holds:
    0.06 started on a 24 GiB node and refused on a 12 GiB one (0.06 x 11.5 GiB < the worker's 0.67 GiB), so every
    real-vLLM test failed there. The doc's flags are the tests' (tiny.CPU_FLAGS) and give the size in bytes."""
    pytest.importorskip("vllm")
    from cachetool.engines.vllm.child.in_vllm.child import server_parser
    from tests.vllm_oracle.tiny import CPU_FLAGS

    (warm,) = calls["warm"]
    assert _after_dashes(warm)[1:] == CPU_FLAGS
    args = server_parser().parse_args(["m", *CPU_FLAGS])
    assert args.kv_cache_memory_bytes == 64 * 2**20
