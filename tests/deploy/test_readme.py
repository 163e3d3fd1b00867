"""README's Python snippet runs as written (a fresh interpreter, this checkout, nothing prepared)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_python_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Python: embed it in a server"):]
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
    r = subprocess.run([sys.executable, "-c", readme_python_block()], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sha256:" in r.stdout  # the print() line: graphs compiled, the manifest digest, the phases
