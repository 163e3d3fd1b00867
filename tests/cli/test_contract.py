"""The CLI's contract with CI jobs and init-containers, verb by verb: bad input is one ``error:`` line, no traceback,
the exit code of the one table (cachetool/exit_codes.py); ``--json`` prints exactly one JSON object on stdout for
every outcome, failures included; README's exit-code table is the code's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from cachetool import exit_codes

REPO = Path(__file__).resolve().parents[2]

# One failing call per verb (fast: nothing compiles), and the row of the exit-code table it must end in.
BAD_CALLS = {
    "warm": (["--model", "no-such-model", "--cache-root", "{tmp}/root"], exit_codes.USAGE),
    "check": (["--model", "no-such-model", "--cache-root", "{tmp}/root"], exit_codes.USAGE),
    "pack": (["{tmp}/no-such-cache", "-o", "{tmp}/x.ctb"], exit_codes.NOT_FOUND),
    "keygen": (["-o", "{tmp}/k", "--no-such-flag"], exit_codes.USAGE),
    "sign": (["{tmp}/x.ctb", "--sign-key", "{tmp}/missing.key"], exit_codes.USAGE),
    "inspect": (["{tmp}/missing.ctb"], exit_codes.NOT_FOUND),
    "verify": (["file://{tmp}/store/missing:v1"], exit_codes.NOT_FOUND),
    "install": (["{tmp}/missing.ctb", "--cache-root", "{tmp}/root"], exit_codes.NOT_FOUND),
    "diff": (["{tmp}/missing.ctb", "local"], exit_codes.NOT_FOUND),
    "push": (["{tmp}/missing.ctb", "file://{tmp}/store/t:v1"], exit_codes.USAGE),
    "pull": (["not a ref", "--cache-root", "{tmp}/root"], exit_codes.USAGE),
    "ls": (["bogus://store"], exit_codes.USAGE),
    "rm": (["file://{tmp}/no-store/t:v1"], exit_codes.NOT_FOUND),
    "gc": (["file://{tmp}/no-store"], exit_codes.NOT_FOUND),
    "prune": (["--cache-root", "{tmp}/missing-root"], exit_codes.USAGE),
}


def _args(verb: str, tmp: Path) -> list[str]:
    return [verb, *(a.format(tmp=tmp) for a in BAD_CALLS[verb][0])]


def _error_lines(stderr: str) -> list[str]:
    # pull adds its outcome line to every outcome (README promises one); the error itself is one line
    return [x for x in stderr.strip().splitlines() if not x.startswith("pull: outcome=")]


def test_every_verb_has_a_bad_call():
    from cachetool.cli import _load_commands, cli

    _load_commands()
    assert set(cli.commands) == set(BAD_CALLS)


@pytest.mark.parametrize("verb", sorted(BAD_CALLS))
def test_bad_input_is_one_line_no_traceback_and_the_tables_code(verb, tmp_path):
    """In a process of its own, as a user runs it: the whole stderr is the one line."""
    r = subprocess.run(
        [sys.executable, "-m", "cachetool", *_args(verb, tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    expected = BAD_CALLS[verb][1]
    assert r.returncode == expected.code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert r.stdout == ""
    assert not (tmp_path / "root").exists() and not (tmp_path / "x.ctb").exists()
    if verb == "pull":  # README promises an outcome line for every outcome, a flag click refused included
        assert r.stderr.startswith("pull: outcome=usage-error "), r.stderr


@pytest.mark.parametrize("verb", sorted(BAD_CALLS))
def test_json_failure_is_exactly_one_object(verb, tmp_path, cli):
    r = cli(*_args(verb, tmp_path), "--json")
    expected = BAD_CALLS[verb][1]
    doc = json.loads(r.out)  # the whole stdout is one object, on one line
    assert isinstance(doc, dict) and r.out.count("\n") == 1
    assert doc["ok"] is False and doc["exit_code"] == r.rc == expected.code, doc
    assert doc["error"] == expected.name and doc["command"] == verb
    assert doc["message"] and "\n" not in doc["message"] and doc["message"] in r.err


def test_an_unexpected_exception_is_one_line_and_json(cli, tmp_path, monkeypatch):
    """A bug (here a TypeError inside the library) still gives one line, exit 1 and one JSON object."""
    from cachetool.bundle import signing

    def broken(*a, **k):
        raise TypeError("something inside broke\nsecond line")

    monkeypatch.setattr(signing, "generate_keypair", broken)
    r = cli("keygen", "-o", tmp_path / "k", "--json")
    assert r.rc == exit_codes.ERROR.code
    assert _error_lines(r.err) == [
        "error: unexpected TypeError: something inside broke (set CACHETOOL_LOGGING_LEVEL=DEBUG for the traceback)"
    ]
    doc = json.loads(r.out)
    assert doc["ok"] is False and doc["error"] == "error" and doc["exit_code"] == 1


def test_json_success_is_one_object_with_ok(cli, tmp_path):
    r = cli("keygen", "-o", tmp_path / "k", "--json")
    doc = json.loads(r.out)
    assert r.rc == 0 and doc["ok"] is True and doc["exit_code"] == 0 and doc["command"] == "keygen"
    assert len(doc["key_id"]) == 64 and Path(doc["public_key"]).is_file()


@pytest.mark.parametrize("where", ["missing folder", "under a file"])
def test_keygen_into_a_folder_that_is_not_there_is_a_usage_error(cli, tmp_path, where):
    """Was exit 1 with a bare OS error ("keygen: .../k: No such file or directory"): the folder is named, exit 2."""
    (tmp_path / "file").write_text("x")
    folder = tmp_path / ("missing/keys" if where == "missing folder" else "file")
    r = cli("keygen", "-o", folder / "signing.key", "--json")
    assert r.rc == exit_codes.USAGE.code, r
    line = r.error_line()
    assert f"{folder}" in line and ("does not exist" if where == "missing folder" else "not a folder") in line, line
    assert json.loads(r.out)["error"] == "usage-error"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["file"] and (tmp_path / "file").read_text() == "x"


def _table_after(path: Path, heading: str) -> str:
    lines = path.read_text().splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(heading)) + 1
    while not lines[start].startswith("|"):
        start += 1
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[start:end])


def test_readme_exit_code_table_is_the_codes_table():
    assert _table_after(REPO / "README.md", "### Exit codes") == exit_codes.markdown_table()


def test_the_docs_exit_code_tables_are_the_codes_table_or_link_to_it():
    """docs/deploy.md's table and docs/stores.md's list stopped at 7 (no disk-full 9, no compiled 8, no differs 10):
    deploy.md's is now the table, row for row; stores.md links to README's."""
    assert _table_after(REPO / "docs" / "deploy.md", "## Exit codes") == exit_codes.markdown_table()
    stores = (REPO / "docs" / "stores.md").read_text()
    assert "README.md#exit-codes" in stores and "6 store,\n7 timeout." not in stores


_MISSED = ["3 kernel binaries written", "Inductor compiled 2 graph(s)"]  # what the start compiled, in its words


def _missed_start(root):
    """A vLLM check that compiled, as the start reports one (cachetool.engines.vllm.start's result; a stand-in for
    the child process, tests/engines/vllm/real runs real vLLM): its key folder was there, and Inductor compiled."""
    from cachetool.engines.vllm.releases import TESTED_CPU
    from cachetool.engines.vllm.result import VllmStartResult

    return VllmStartResult(
        command="check",
        model="m",
        cache_root=str(root),
        flags=[],
        vllm_version=TESTED_CPU[-1],
        cache_key="abc",
        cache_keys=["abc"],
        key_existed=True,
        inductor_compiled=3,
        inductor_loaded=0,
        dynamo_traces=1,
        aot_loaded=False,
        aot_saved=False,
        aot_error=None,
        aot_artifacts_loaded=0,
        compiled_artifacts_loaded=0,
        inductor_graphs_compiled=2,
        inductor_graphs_loaded=0,
        startup_seconds=1.0,
        seconds=2.0,
        phases={"engine_init": 1.0},
        tensor_parallel_size=1,
        ranks=[],
        log=str(root / "log"),
        compiled=list(_MISSED),
    )


@pytest.fixture
def missed_vllm_start(monkeypatch, tmp_path):
    """vLLM's start stood in for by one that compiled: the engine's own --require-hit rule (VllmEngine.check,
    reached through api.check) decides the miss, as it does for real vLLM. The root holds a key folder a server
    wrote itself (no recorded key inputs), so the check cannot answer without starting vLLM. Returns the
    arguments naming the model and the root."""
    from cachetool.engines.vllm import key_check, start
    from cachetool.engines.vllm.releases import TESTED_CPU
    from tests.vllm_oracle.tiny import write_model

    # the check's key question asks that vLLM is installed first: stood in too, so that these tests of the CLI's
    # rendering need no vLLM (Debian's python3 venv of install.sh --test has none)
    monkeypatch.setattr(key_check, "require_vllm", lambda: TESTED_CPU[-1])
    root = tmp_path / "root"
    (root / "torch_compile_cache" / "torch_aot_compile" / "abc" / "rank_0_0").mkdir(parents=True)
    monkeypatch.setattr(start, "start", lambda *a, **k: _missed_start(root))
    return ["--model", write_model(tmp_path / "m"), "--cache-root", root]


def test_a_vllm_check_that_missed_with_require_hit_is_one_object(cli, missed_vllm_start, tmp_path):
    """The vLLM check printed its result's object and then the failure's: two objects. Now one, exit 4, with the
    start's fields and the miss's error."""
    r = cli("check", "--engine", "vllm", *missed_vllm_start, "--require-hit", "--json")
    assert r.rc == exit_codes.MISS.code, r
    doc = json.loads(r.out)
    assert doc["ok"] is False and doc["error"] == "miss" and doc["inductor_compiled"] == 3
    assert doc["inductor_graphs_compiled"] == 2 and doc["compiled"] == _MISSED
    assert doc["message"].startswith(f"check: not a hit: {', '.join(_MISSED)} in key folder abc")
    assert _error_lines(r.err) == [f"error: {doc['message']}"]


def test_a_vllm_check_that_missed_with_require_hit_shows_the_start_then_one_error(cli, missed_vllm_start, tmp_path):
    r = cli("check", "--engine", "vllm", *missed_vllm_start, "--require-hit")
    assert r.rc == exit_codes.MISS.code, r
    reason = f"{', '.join(_MISSED)} in key folder abc"
    assert "inductor       compiled 2 graph(s), loaded 0; kernels written 3, loaded 0; Dynamo traces 1" in r.out
    assert f"MISS: {reason}" in r.out and "AOT artifact   not loaded" in r.out, r.out
    last = r.err.strip().splitlines()[-1]
    assert last.startswith(f"error: check: not a hit: {reason}") and _error_lines(r.err) == [last], r.err
    r = cli("check", "--engine", "vllm", *missed_vllm_start, "--json")  # without --require-hit: the start, exit 0
    assert r.rc == 0 and json.loads(r.out)["hit"] is False


def test_every_option_is_described_and_shared_options_have_one_wording():
    """--json had five wordings and none on rm, gc and diff; pack --layout had no text."""
    from cachetool.cli import _load_commands, cli

    _load_commands()
    wordings: dict[str, set[str]] = {}
    undescribed = []
    for verb, cmd in cli.commands.items():
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                if not p.help:
                    undescribed.append(f"{verb} {p.opts[0]}")
                wordings.setdefault(p.opts[0], set()).add(p.help)
    assert undescribed == []
    for shared in ("--json", "--trust", "--ranks", "--endpoint-url", "--profile", "--insecure", "--plain-http"):
        assert len(wordings[shared]) == 1, (shared, wordings[shared])
    # --cache-root: one wording where it has a default (prune's is required), and the vLLM root only on verbs that
    # have --engine (install has not)
    assert {w.split(";")[0].rstrip(").") for w in wordings["--cache-root"] if "(required" not in w} == {
        "Cache root (default: CACHETOOL_CACHE_ROOT or ~/.cache/cachetool"
    }, wordings["--cache-root"]
    for verb, cmd in cli.commands.items():
        opts = {p.opts[0]: p for p in cmd.params if isinstance(p, click.Option)}
        if "--cache-root" in opts:
            assert ("--engine" in opts) == ("--engine" in opts["--cache-root"].help), verb
    assert all("--json" in {o for p in cmd.params for o in getattr(p, "opts", ())} for cmd in cli.commands.values())


def test_pull_help_lists_every_outcome_with_the_exit_the_policy_gives_it(cli):
    """The help's hand-written list lacked `interrupted` and `disk-full`, and the exits 9 and 130: it is now the
    outcomes' own list, each with the exit the policy gives it, with and without --on-miss continue."""
    import re

    from cachetool.errors import CachetoolError
    from cachetool.transfer.pull_policy import Outcome, failure_outcome

    r = cli("pull", "--help")
    assert r.rc == 0, r
    listed = {}
    for names, code, continued in re.findall(
        r"^ +([a-z-]+(?:, [a-z-]+)*) +exit (\d+)( \(0 under --on-miss continue\))?$", r.out, re.MULTILINE
    ):
        for name in names.split(", "):
            listed[name] = (int(code), 0 if continued else int(code))
    expected = {}
    for outcome in Outcome:
        row = next((e for e in exit_codes.TABLE if e.name == outcome.value), None)
        if row is None:  # a success: no failure row names it
            expected[outcome.value] = (0, 0)
            continue
        exc = CachetoolError("x")
        exc.exit_code = row.code
        fail, cont = (failure_outcome(None, on_miss, exc) for on_miss in ("fail", "continue"))
        assert fail.outcome is cont.outcome is outcome
        expected[outcome.value] = (fail.exit_code, cont.exit_code)
    assert listed == expected, r.out
    assert listed["interrupted"] == (130, 130) and listed["disk-full"] == (9, 0) and listed["not-needed"] == (0, 0)
