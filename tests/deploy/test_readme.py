"""README as a user follows it: its Python snippet runs as written (a fresh interpreter, this checkout, nothing
prepared), every `cachetool` command of its shell blocks is a verb `cachetool --help` lists with options that verb's
`--help` lists, and its two set-up commands are the scripts CI and a user run."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_python_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Python: embed it in a server") :]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, "README has no ```python block under 'Python: embed it in a server'"
    return m.group(1)


def test_readme_block_is_the_api_example():
    code = readme_python_block()
    for call in ("cachetool.warm(", "cachetool.pull(", "cachetool.check("):
        assert call in code


@pytest.mark.slow
def test_readme_python_snippet_runs_as_written(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path), CACHETOOL_CONFIG_DIR=str(tmp_path / "cfg"))
    env.pop("CACHETOOL_TRUSTED_KEYS", None)
    r = subprocess.run(
        [sys.executable, "-c", readme_python_block()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sha256:" in r.stdout  # the print() line: graphs compiled, the manifest digest, the phases


def readme_commands() -> list[list[str]]:
    """Every command line of README's ```bash blocks (continuations joined, comments dropped), split as a shell
    would."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                commands.append(argv)
    return commands


def _help(capsys, *argv: str) -> str:
    from cachetool.cli import main

    capsys.readouterr()
    assert main([*argv, "--help"]) == 0
    return capsys.readouterr().out


def test_every_cachetool_command_in_the_readme_is_one_the_cli_lists(capsys):
    """A verb or option README shows that the CLI does not have (renamed, dropped) fails here, not in a user's
    shell. Options are read up to `--` (after it come the server's own flags); `-cc.KEY=VALUE` is `-cc`'s form."""
    top = _help(capsys)
    verbs = set(re.findall(r"^  ([a-z][a-z-]*)  ", top[top.index("Commands:") :], re.M))
    calls = [argv[1:] for argv in readme_commands() if argv[0] == "cachetool"]
    assert {"warm", "push", "pull", "check"} <= {c[0] for c in calls}, calls  # the core commands are shown
    unknown = []
    for verb, *args in calls:
        if verb not in verbs:
            unknown.append(verb)
            continue
        listed = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", _help(capsys, verb)))
        for arg in args[: args.index("--")] if "--" in args else args:
            if arg.startswith("-"):
                name = "-cc" if arg.startswith("-cc.") else arg.split("=", 1)[0]
                if name not in listed:
                    unknown.append(f"{verb} {name}")
    assert unknown == []


def test_the_set_up_commands_are_the_scripts_ci_and_a_user_run():
    """README's quick start names scripts/demo.sh and scripts/test.sh; CI (.ci/run) runs that same test script."""
    quick = [argv[0] for argv in readme_commands() if argv[0].startswith("scripts/")]
    assert "scripts/demo.sh" in quick and "scripts/test.sh" in quick, quick
    for script in quick:
        assert (ROOT / script).is_file(), script
    ci = [shlex.split(ln, comments=True) for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert any("scripts/test.sh" in argv for argv in ci), ci
