"""``check --require-hit`` where the root holds no cache (issue 45, item 6): refused before any compile work.

Before, the native engine built the model and began a Dynamo trace ("No cache for this model and config under the root
yet: compiling", "Start compiling function ...") before strict mode refused the first piece. Now a root with no key
folder for the rank is refused at once: exit 8, one ``error:`` line naming the root, no compile log line, nothing
written."""

from __future__ import annotations

import pytest

from tests.cli_calls import one_error_line, run_cli


@pytest.mark.parametrize("there", [False, True], ids=["missing-root", "empty-root"])
def test_require_hit_on_a_root_without_a_cache_refuses_before_compiling(tmp_path, there):
    root = tmp_path / "root"
    if there:
        root.mkdir()
    r = run_cli("check", "--model", "tiny", "--device", "cpu", "--cache-root", str(root), "--require-hit")
    assert r.returncode == 8, r.stderr[-3000:]
    line = one_error_line(r.stderr)
    assert "strict mode" in line and str(root) in line and "nothing was built or compiled" in line, line
    assert "compiling" not in r.stderr.replace(line, ""), r.stderr  # no log line of compile work before it
    assert root.exists() is there and (not there or list(root.iterdir()) == [])
