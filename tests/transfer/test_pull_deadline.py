"""A ``--timeout`` bound is one outcome, on time, whatever phase runs at it (issue 45, item 1).

A new user's ``install.sh --vllm`` replaced Triton after the bundle was warmed: the machine's build evidence no longer
matched the bundle's, so the preflight imported torch to compute the compiler factors (0.2 s became 4-6 s). A
``pull --timeout 1`` then ended in exit 7 or exit 4 from run to run after 3.6-12.3 s: the hard bound's alarm fired
inside torch's import, which recorded "<unknown: torch_key: WaitTimeoutError>" and reported it as a difference, and
the reason said "the store stopped answering" of a folder store. Now the pull ends at the bound in exit 7, naming the
phase that was running and what differs in the build.

The bundle here is one warmed where Triton 3.6.0 was installed: its fingerprint says so, its evidence records other
Triton files; every compiler factor value is this machine's (a CPU cache's values record no Triton)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachetool.bundle.fingerprint import local_fingerprint
from cachetool.bundle.packing import pack
from cachetool.transfer.push import push
from tests.cache_trees import local_factors, make_native_tree

REPO = Path(__file__).resolve().parents[2]

# `cachetool` that notes when the pull starts (the bound counts from there), then runs as it is.
LAUNCHER = """
import os, sys, time
import cachetool.transfer.pull as pull_module
real_pull = pull_module.pull

def timed_pull(*args, **kwargs):
    with open(os.environ["PULL_STARTED"], "w") as f:
        f.write(repr(time.time()))
    return real_pull(*args, **kwargs)

pull_module.pull = timed_pull
from cachetool.cli import entry
sys.argv[0] = "cachetool"
entry()
"""


@pytest.fixture(scope="module")
def other_triton(tmp_path_factory, keys):
    """A file store holding a bundle warmed under Triton 3.6.0 (this machine's factors otherwise)."""
    d = tmp_path_factory.mktemp("other-triton")
    factors = local_factors(evidence=True, **{"evidence.triton_record": "0" * 64})
    tree = make_native_tree(d / "tree", ranks=("rank_0_0",), layers=2, factors=factors)
    with pack(tree, sign_key=keys["key"], fingerprint=dict(local_fingerprint("cpu"), triton="3.6.0")) as b:
        push(b, f"file://{d}/store/tiny:v1")
    return f"file://{d}/store/tiny:v1"


def _pull(ref: str, root: Path, pub, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    """``cachetool pull`` in a fresh process (torch not imported yet); the result and the seconds since the pull
    started."""
    started = root.parent / "pull-started"
    env = dict(os.environ, PYTHONPATH=str(REPO), PULL_STARTED=str(started))
    r = subprocess.run(
        [sys.executable, "-c", LAUNCHER, "pull", ref, "--cache-root", str(root), "--trust", str(pub), "--json", *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return r, time.time() - float(started.read_text())


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_timeout_in_the_preflight_ends_the_pull_at_the_bound(other_triton, tmp_path, keys):
    root = tmp_path / "root"
    r, seconds = _pull(other_triton, root, keys["pub"], "--timeout", "1")
    assert r.returncode == 7, r.stderr
    assert seconds < 1 + 1.0, (seconds, r.stderr)
    doc = json.loads(r.stdout)
    assert doc["outcome"] == "timeout" and doc["exit_code"] == 7, doc
    line = _error_line(r.stderr)
    # the phase the time went to, and what differs in the build; no store was slow
    assert "preflight" in line and "triton 3.6.0" in line and "store" not in line, line
    assert not (root / "torch_compile_cache").exists()  # nothing installed


def test_a_build_that_differs_is_said_and_the_pull_installs(other_triton, tmp_path, keys, cli):
    """Without a bound the same pull installs (the factors computed here match), and says why it took seconds."""
    r = cli("pull", other_triton, "--cache-root", tmp_path / "root", "--trust", keys["pub"], "--json")
    assert r.rc == 0, r
    preflight = json.loads(r.out)["install"]["preflight"]
    assert any("triton 3.6.0" in step for step in preflight), preflight
