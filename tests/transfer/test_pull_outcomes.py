"""`cachetool pull` as an init-container meets it: every outcome has its exit code, its `outcome=` line on stderr
and exactly one JSON object on stdout with --json; with --on-miss continue every outcome that leaves nothing
installed because the cache is unavailable or unusable exits 0, so a pod never crash-loops on the cache."""

from __future__ import annotations

import json
import re

import pytest

from cachetool.bundle.packing import pack
from cachetool.bundle.signing import generate_keypair, load_private_key
from cachetool.transfer.push import push
from tests.cache_trees import CUDA_FP, isolate_environment, make_native_tree
from tests.servers import free_port


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """No keys, AWS or docker configuration of the machine leaks in; a dead store fails after one attempt."""
    isolate_environment(monkeypatch, tmp_path, store_attempts=1)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A folder store with `llama:v1` (this machine's platform, signed) and `llama:gpu` (an H200 bundle only),
    and the signer's public key plus an unrelated one."""
    d = tmp_path_factory.mktemp("outcomes")
    priv, pub, _ = generate_keypair(d / "signer")
    _, other_pub, _ = generate_keypair(d / "other")
    tree = make_native_tree(d / "tree", ranks=("rank_0_0",), layers=3)
    url = f"file://{d}/store"
    key = load_private_key(priv)
    with pack(tree, sign_key=key) as b:
        push(b, f"{url}/llama:v1")
    with pack(tree, sign_key=key, fingerprint=dict(CUDA_FP)) as b:
        push(b, f"{url}/llama:gpu")
    return {"url": url, "pub": str(pub), "other_pub": str(other_pub)}


def _dead_oci_ref() -> str:
    return f"oci://127.0.0.1:{free_port()}/ml/llama:v1"  # nothing listens there: connection refused


# name -> (ref, extra args, outcome, exit code without --on-miss continue)
CASES = {
    "miss": (lambda s: f"{s['url']}/llama:gpu", [], "miss", 4),
    "not-found": (lambda s: f"{s['url']}/llama:nope", [], "not-found", 5),
    "store-unreachable": (lambda s: _dead_oci_ref(), [], "store-error", 6),
    "timeout": (lambda s: f"{s['url']}/llama:v1", ["--timeout", "1e-9"], "timeout", 7),
    "verification-refused": (lambda s: f"{s['url']}/llama:v1", ["--trust", "OTHER"], "refused", 3),
}


def _args(store, case, tmp_path, on_miss):
    ref_of, extra, _, _ = CASES[case]
    trust = ["--trust", store["pub"]] if "--trust" not in extra else []
    extra = [store["other_pub"] if a == "OTHER" else a for a in extra]
    return ["pull", ref_of(store), "--cache-root", tmp_path / "root", *trust, *extra, "--on-miss", on_miss, "--json"]


def _one_json(out: str) -> dict:
    """stdout is exactly one JSON object (json.loads refuses trailing text)."""
    return json.loads(out)


def _outcome_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("pull: outcome=")]
    assert len(lines) == 1, err
    return lines[0]


def _nothing_installed(tmp_path) -> bool:
    root = tmp_path / "root"
    return not root.exists() or not any(p.name == "torch_compile_cache" for p in root.iterdir())


@pytest.mark.parametrize("case", sorted(CASES))
def test_on_miss_continue_exits_zero_with_its_outcome_and_json(case, store, tmp_path, cli):
    _, _, outcome, code = CASES[case]
    r = cli(*_args(store, case, tmp_path, "continue"))
    assert r.rc == 0, r
    line = _outcome_line(r.err)
    assert f"outcome={outcome} " in line and f"code={code} " in line and "exit=0 " in line, line
    assert re.search(r"reason=\S", line), line
    doc = _one_json(r.out)
    assert doc["outcome"] == outcome and doc["exit_code"] == 0 and doc["error_exit_code"] == code, doc
    assert doc["continued"] is True and doc["installed"] is False and doc["message"], doc
    assert "the server will compile" in r.err
    assert _nothing_installed(tmp_path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_on_miss_fail_exits_with_the_code_and_still_prints_json(case, store, tmp_path, cli):
    _, _, outcome, code = CASES[case]
    r = cli(*_args(store, case, tmp_path, "fail"))
    assert r.rc == code, r
    assert r.error_line()
    assert f"outcome={outcome} " in _outcome_line(r.err)
    doc = _one_json(r.out)
    assert doc["outcome"] == outcome and doc["exit_code"] == code and doc["continued"] is False, doc
    assert doc["message"] in r.error_line(), (doc, r.err)
    assert _nothing_installed(tmp_path)


def test_installed_and_already_installed_are_outcomes_too(store, tmp_path, cli):
    args = [
        "pull",
        f"{store['url']}/llama:v1",
        "--cache-root",
        tmp_path / "root",
        "--trust",
        store["pub"],
        "--on-miss",
        "continue",
        "--json",
    ]
    first, second = cli(*args), cli(*args)
    assert first.rc == 0 and _one_json(first.out)["outcome"] == "installed", first
    assert second.rc == 0 and _one_json(second.out)["outcome"] == "already-installed", second
    for r in (first, second):
        doc = _one_json(r.out)
        assert doc["exit_code"] == 0 and doc["installed"] is True
        assert "exit=0 " in _outcome_line(r.err)


def test_a_usage_error_still_fails_with_on_miss_continue(store, tmp_path, cli):
    """A wrong ref is a deployment bug that no restart fixes: exit 2, said in the JSON too."""
    r = cli(
        "pull",
        "not-a-ref",
        "--cache-root",
        tmp_path / "root",
        "--on-miss",
        "continue",
        "--json",
        "--trust",
        store["pub"],
    )
    assert r.rc == 2, r
    doc = _one_json(r.out)
    assert doc["outcome"] == "usage-error" and doc["exit_code"] == 2 and doc["continued"] is False, doc
    assert "outcome=usage-error " in _outcome_line(r.err)


def test_a_bad_flag_with_json_prints_json(store, tmp_path, cli):
    r = cli("pull", f"{store['url']}/llama:v1", "--cache-root", tmp_path / "root", "--on-miss", "sometimes", "--json")
    assert r.rc == 2, r
    doc = _one_json(r.out)
    assert doc["outcome"] == "usage-error" and doc["exit_code"] == 2 and "sometimes" in doc["message"], doc
    assert doc["ref"] == f"{store['url']}/llama:v1"


@pytest.mark.parametrize("given", [["--on-miss", "continue"], ["--on-miss=continue"], []])
@pytest.mark.parametrize("bad", [["--bogus"], ["--workers", "0"]])
def test_a_flag_click_refuses_reports_the_on_miss_given(store, tmp_path, cli, given, bad):
    """click refuses these before the pull reads --on-miss: the line and the JSON still say the policy asked for."""
    r = cli("pull", f"{store['url']}/llama:v1", "--cache-root", tmp_path / "root", *given, *bad, "--json")
    assert r.rc == 2, r
    on_miss = "continue" if given else "fail"
    assert _one_json(r.out)["on_miss"] == on_miss, r.out
    assert f" on_miss={on_miss} " in _outcome_line(r.err), r.err


@pytest.mark.parametrize("where", ["root is a file", "parent is a file"])
def test_a_root_that_cannot_be_a_folder_is_a_usage_error_even_with_on_miss_continue(store, tmp_path, cli, where):
    """A cache root that cannot be a folder is the pod's bug: exit 2 (a root under a file was 1, a root that is a
    file 2), one line, JSON, and --on-miss continue does not cover it."""
    (tmp_path / "file").write_text("x")
    root = tmp_path / "file" / ("root" if where == "parent is a file" else "")
    r = cli(
        "pull",
        f"{store['url']}/llama:v1",
        "--cache-root",
        root,
        "--trust",
        store["pub"],
        "--on-miss",
        "continue",
        "--json",
    )
    assert r.rc == 2, r
    assert "is a file" in r.error_line(), r
    doc = _one_json(r.out)
    assert doc["outcome"] == "usage-error" and doc["exit_code"] == 2 and doc["continued"] is False, doc
    assert (tmp_path / "file").read_text() == "x"


def test_timeout_bounds_a_store_that_stops_answering(store, tmp_path):
    """A registry that accepts the connection and never answers: --timeout still ends the pull (the store's own
    read timeout and retries would take minutes), and with --on-miss continue the pod starts cold."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(
        os.environ,
        PYTHONPATH=str(root),
        CACHETOOL_CONFIG_DIR=str(tmp_path / "config"),
        DOCKER_CONFIG=str(tmp_path / "docker"),
    )
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections are accepted by the kernel; nothing ever reads or answers
        ref = f"oci://127.0.0.1:{silent.getsockname()[1]}/ml/llama:v1"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "cachetool",
                "pull",
                ref,
                "--cache-root",
                str(tmp_path / "root"),
                "--timeout",
                "1",
                "--on-miss",
                "continue",
                "--json",
                "--trust",
                store["pub"],
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert r.returncode == 0, r
    doc = _one_json(r.stdout)
    assert doc["outcome"] == "timeout" and doc["error_exit_code"] == 7 and doc["continued"] is True, doc
    assert "outcome=timeout " in _outcome_line(r.stderr)
    assert _nothing_installed(tmp_path)


def test_the_pull_progress_bar_ends_at_100_percent(store, tmp_path, cli):
    """The bar's total was the entry's size, manifest included, which no blob download adds to: a finished pull
    stopped at 1.6/1.7 MB. It now ends at what was transferred, 100 %."""
    r = cli(
        "pull", f"{store['url']}/llama:v1", "--cache-root", tmp_path / "root", "--trust", store["pub"], "--progress"
    )
    assert r.rc == 0, r
    sizes = re.findall(r"(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) (bytes|[KMG]iB)", r.err)
    assert sizes, r.err
    done, total, _ = sizes[-1]
    assert done == total, r.err


def test_the_library_applies_the_same_policy_as_the_cli(store, tmp_path):
    """The policy lived only in the CLI: cachetool.pull() users got no outcome, no --on-miss continue. Now
    api.pull_outcome returns the typed outcome the CLI renders."""
    from cachetool.api import pull_outcome

    root = tmp_path / "root"
    miss = pull_outcome(f"{store['url']}/llama:gpu", root, trust=[store["pub"]], on_miss="continue")
    assert (miss.outcome, miss.exit_code, miss.error_exit_code, miss.continued, miss.installed) == (
        "miss",
        0,
        4,
        True,
        False,
    )
    assert "pull: outcome=miss " in miss.line() and miss.to_json()["continued"] is True
    wrong = pull_outcome(f"{store['url']}/llama:v1", root, trust=[str(tmp_path / "missing.pub")], on_miss="continue")
    assert (wrong.outcome, wrong.exit_code, wrong.continued) == ("usage-error", 2, False)
    assert not root.exists()
    ok = pull_outcome(f"{store['url']}/llama:v1", root, trust=[store["pub"]])
    assert (ok.outcome, ok.exit_code, ok.installed) == ("installed", 0, True) and ok.result.install.units_installed
    again = pull_outcome(f"{store['url']}/llama:v1", root, trust=[store["pub"]])
    assert again.outcome == "already-installed"


# The rows --on-miss continue also continues since issue 34: the cache is never the reason a pod does not start.
# name -> (how the failure is made, outcome, its own code)


def _comparison_bug(monkeypatch, tmp_path):
    """A bug in the key comparison (the vLLM comparison once raised ``unhashable type: 'list'``)."""
    from cachetool.install import installer

    def broken(*args, **kwargs):
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr(installer, "run_preflight", broken)
    return tmp_path / "root"


def _full_disk(monkeypatch, tmp_path):
    """A cache root on a real file system too small for the bundle (a 16 KiB tmpfs)."""
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()[:100]}")
    monkeypatch.setattr(_full_disk, "mounted", mnt, raising=False)
    return mnt / "root"


CONTINUED_SINCE_ISSUE_34 = {"error": (_comparison_bug, "error", 1), "disk-full": (_full_disk, "disk-full", 9)}


@pytest.fixture
def unmount():
    yield
    import subprocess

    mnt = getattr(_full_disk, "mounted", None)
    if mnt is not None:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        _full_disk.mounted = None


@pytest.mark.parametrize("on_miss", ["continue", "fail"])
@pytest.mark.parametrize("case", sorted(CONTINUED_SINCE_ISSUE_34))
def test_a_bug_or_a_full_disk_does_not_keep_the_pod_from_starting(
    case, on_miss, store, tmp_path, cli, monkeypatch, unmount
):
    """Both exited with their code under --on-miss continue (1 and 9), so the init-container failed and the pod never
    started; now they are continued like a miss, and still fail with their code under the default --on-miss fail."""
    make, outcome, code = CONTINUED_SINCE_ISSUE_34[case]
    root = make(monkeypatch, tmp_path)
    r = cli(
        "pull",
        f"{store['url']}/llama:v1",
        "--cache-root",
        root,
        "--trust",
        store["pub"],
        "--on-miss",
        on_miss,
        "--json",
    )
    doc = _one_json(r.out)
    want = 0 if on_miss == "continue" else code
    assert r.rc == want and doc["exit_code"] == want, r
    assert doc["outcome"] == outcome and doc["error_exit_code"] == code and doc["installed"] is False, doc
    assert doc["continued"] is (on_miss == "continue"), doc
    line = _outcome_line(r.err)
    assert f"outcome={outcome} " in line and f"exit={want} " in line and f"code={code} " in line, line
    assert not root.exists() or not any(p.name == "torch_compile_cache" for p in root.iterdir())


def test_every_row_of_the_table_has_a_stated_on_miss_continue_policy():
    """The policy per exit code, as README's table shows it: continued but for usage (2) and a stop signal (130);
    8 and 10 are no pull outcomes."""
    from cachetool import exit_codes

    continued = {e.code for e in exit_codes.TABLE if e.continuable}
    assert continued == {1, 3, 4, 5, 6, 7, 9}
    assert not exit_codes.USAGE.continuable and not exit_codes.INTERRUPTED.continuable
