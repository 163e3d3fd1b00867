"""Issue 28 item 12, "Messages and help": what a user reads is true, one line, and names what they can act on
(no internals: ``ref=None``, builtin exception class names, temporary file names)."""

from __future__ import annotations

import json

from tests.bundles.fixtures import local_factors, make_native_tree


def _bundle(tmp_path, cli, keys, name="b", **overrides):
    src = make_native_tree(tmp_path / f"src-{name}", layers=3, factors=local_factors(**overrides))
    out = tmp_path / f"{name}.ctb"
    assert cli("pack", src, "-o", out, "--sign-key", keys["priv"]).rc == 0
    return out


def test_diff_exit_code_json_carries_error_differs_and_a_complete_message(tmp_path, cli, keys):
    """`diff --exit-code --json` with differences exited 10 with no `error` field and a message ending in `:`."""
    a = _bundle(tmp_path, cli, keys, "a")
    b = _bundle(tmp_path, cli, keys, "b", **{"config.model_config.num_hidden_layers": 32})
    r = cli("diff", a, b, "--exit-code", "--json")
    doc = json.loads(r.out)
    assert r.rc == 10 and doc["exit_code"] == 10 and doc["ok"] is False
    assert doc["error"] == "differs", doc
    msg = doc["message"]
    assert "\n" not in msg and not msg.endswith(":") and "num_hidden_layers" in msg, msg
    # without --exit-code the same differences are a success (exit 0): no error field
    doc = json.loads(cli("diff", a, b, "--json").out)
    assert doc["ok"] is True and "error" not in doc
