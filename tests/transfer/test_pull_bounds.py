"""What ends a pull before it is done, as an init-container meets it (issue 28, items 8 and 9): a real ``cachetool
pull`` process against a file store whose blobs stream slowly but steadily (64 KiB every 50 ms).

- ``--timeout`` is a bound: it ended a pull of a store streaming at 100-180 MB/s after 7.5 s of a 1.5 s timeout,
  saying "the store stopped answering". Now the download stops at the bound: exit 7, ``outcome=timeout``.
- SIGTERM (how Kubernetes stops an init-container) killed the pull at once, silently, leaving
  ``.cachetool-staging-*`` behind; SIGINT printed ``{"message": "aborted", ...}`` without the outcome fields, and
  no ``pull: outcome=`` line. Now either stops the pull within a second: staging removed, the outcome line, one
  JSON object with the outcome fields, exit 130 (``interrupted``), the partial download kept for a rerun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachetool.bundle.packing import pack
from cachetool.bundle.signing import generate_keypair, load_private_key
from cachetool.transfer.push import push
from tests.cache_trees import isolate_environment, local_factors, make_native_tree

REPO = Path(__file__).resolve().parents[2]

# `cachetool` with the file store's blob reads slowed to a steady stream; marks the pull's start and the stream.
LAUNCHER = """
import os, sys, time
from pathlib import Path
import cachetool.transfer.pull, cachetool.stores.file as file_store
delay, marks = float(os.environ["SLOW_CHUNK_SECONDS"]), Path(os.environ["MARKS"])
real_write, real_pull = file_store.write_bounded, cachetool.transfer.pull.pull

def steady(chunks):
    for chunk in chunks:
        for i in range(0, len(chunk), 64 << 10):
            (marks / "streaming").touch()
            time.sleep(delay)
            yield chunk[i:i + (64 << 10)]

def slow_write(chunks, *args, **kwargs):
    return real_write(steady(chunks), *args, **kwargs)

def timed_pull(*args, **kwargs):
    (marks / "pull-started").write_text(repr(time.time()))
    return real_pull(*args, **kwargs)

file_store.write_bounded, cachetool.transfer.pull.pull = slow_write, timed_pull
if os.environ.get("SLOW_PREFLIGHT_SECONDS"):  # a preflight that takes its time (vLLM's key check takes seconds)
    import cachetool.install.installer as installer
    real_preflight = installer.run_preflight

    def slow_preflight(*args, **kwargs):
        (marks / "preflight").touch()
        time.sleep(float(os.environ["SLOW_PREFLIGHT_SECONDS"]))
        return real_preflight(*args, **kwargs)

    installer.run_preflight = slow_preflight
from cachetool.cli import entry
sys.argv[0] = "cachetool"
entry()
"""
BIG = 12 << 20  # one incompressible artifact: ~10 s at 64 KiB per 50 ms


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    isolate_environment(monkeypatch, tmp_path, store_attempts=1)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    d = tmp_path_factory.mktemp("big")
    priv, pub, _ = generate_keypair(d / "signer")
    # with the build evidence a warm records: the preflight reads torch's key from it instead of importing torch
    tree = make_native_tree(d / "tree", ranks=("rank_0_0",), layers=2, factors=local_factors(evidence=True))
    next(tree.rglob("artifact_0")).write_bytes(os.urandom(BIG))
    with pack(tree, sign_key=load_private_key(priv)) as b:
        push(b, f"file://{d}/store/big:v1")
    return {"ref": f"file://{d}/store/big:v1", "pub": str(pub)}


def _start(big, tmp_path, *extra: str, delay: float = 0.05, preflight: float = 0) -> tuple[subprocess.Popen, Path]:
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    for m in marks.iterdir():
        m.unlink()
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        SLOW_CHUNK_SECONDS=str(delay),
        MARKS=str(marks),
        SLOW_PREFLIGHT_SECONDS=str(preflight or ""),
    )
    argv = [
        sys.executable,
        "-c",
        LAUNCHER,
        "pull",
        big["ref"],
        "--cache-root",
        str(tmp_path / "root"),
        "--trust",
        big["pub"],
        "--json",
        *extra,
    ]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env), marks


def _wait_for(path: Path, seconds: float = 60) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path.name} never came"
        time.sleep(0.02)


def _outcome_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("pull: outcome=")]
    assert len(lines) == 1, err
    return lines[0]


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _no_staging(root: Path) -> None:
    assert not [p.name for p in root.iterdir() if p.name.startswith(".cachetool-staging")], list(root.iterdir())


def test_timeout_ends_a_steady_download_at_the_bound(big, tmp_path):
    p, marks = _start(big, tmp_path, "--timeout", "1.5")
    out, err = p.communicate(timeout=120)
    ended = time.time()
    seconds = ended - float((marks / "pull-started").read_text())
    assert p.returncode == 7, err
    assert seconds < 1.5 + 1.0, (seconds, err)
    doc = json.loads(out)
    assert doc["outcome"] == "timeout" and doc["exit_code"] == 7 and doc["error"] == "timeout", doc
    line = _error_line(err)
    assert "--timeout 1.5 s" in line and "stopped answering" not in line, line
    assert "outcome=timeout " in _outcome_line(err)
    _no_staging(tmp_path / "root")


@pytest.mark.parametrize(
    "sig, extra", [(signal.SIGTERM, ("--on-miss", "continue")), (signal.SIGINT, ())], ids=["SIGTERM", "SIGINT"]
)
def test_a_stop_signal_ends_the_pull_cleanly_and_a_rerun_resumes(big, tmp_path, sig, extra):
    p, marks = _start(big, tmp_path, *extra)
    _wait_for(marks / "streaming")
    time.sleep(0.5)  # well into the big blob
    t0 = time.monotonic()
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    seconds = time.monotonic() - t0
    assert p.returncode == 130, (p.returncode, err)  # interrupted, whatever --on-miss says
    assert seconds < 1.5, (seconds, err)
    doc = json.loads(out)
    assert doc["outcome"] == "interrupted" and doc["exit_code"] == 130 and doc["error"] == "interrupted", doc
    assert doc["continued"] is False and doc["installed"] is False and "on_miss" in doc, doc
    line = _error_line(err)
    assert sig.name in line and "rerun" in line and ".cachetool-partial" in line, line
    assert "outcome=interrupted " in _outcome_line(err)
    root = tmp_path / "root"
    _no_staging(root)
    assert [p.stat().st_size for p in (root / ".cachetool-partial").iterdir()], "the partial download was not kept"

    p, _ = _start(big, tmp_path, delay=0)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert json.loads(out)["blobs_resumed"] == 1, out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_in_the_preflight_says_nothing_was_downloaded(big, tmp_path, sig):
    """Stopped before any blob: the message said "a rerun resumes the partial downloads" when there were none."""
    p, marks = _start(big, tmp_path, preflight=60)
    _wait_for(marks / "preflight")
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (p.returncode, err)
    assert json.loads(out)["outcome"] == "interrupted", out
    line = _error_line(err)
    assert sig.name in line and "before any blob was downloaded" in line, line
    assert "resumes" not in line and ".cachetool-partial" not in line, line
    assert not (marks / "streaming").exists()
    assert not (tmp_path / "root" / ".cachetool-partial").exists()


def test_a_stop_signal_says_how_many_partial_downloads_a_rerun_resumes(big, tmp_path):
    p, marks = _start(big, tmp_path)
    _wait_for(marks / "streaming")
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (p.returncode, err)
    kept = list((tmp_path / "root" / ".cachetool-partial").iterdir())
    assert kept, err
    line = _error_line(err)
    assert f"resumes the {len(kept)} partial download" in line and ".cachetool-partial" in line, line
