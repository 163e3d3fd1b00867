"""The top-level command: bad input is one `error:` line and exit 2; --version and --help work."""

import subprocess
import sys

import pytest

from cachetool import __version__


def run(*args):
    return subprocess.run([sys.executable, "-m", "cachetool", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "args, words",
    [
        (["no-such-command"], "No such command 'no-such-command'"),
        (["--no-such-flag"], "No such option '--no-such-flag'"),
        (["pull"], "Missing argument 'REF'"),
        (["warm", "--model", "tiny", "--bogus"], "No such option '--bogus'"),
    ],
)
def test_usage_errors_are_one_line(args, words):
    r = run(*args)
    assert r.returncode == 2
    # one error line (pull adds its outcome line: README promises one for every outcome)
    lines = [x for x in r.stderr.strip().splitlines() if not x.startswith("pull: outcome=usage-error ")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], r.stderr
    assert r.stdout == ""


def test_version_and_help():
    assert run("--version").stdout.strip().endswith(__version__)
    h = run("--help")
    assert h.returncode == 0
    for cmd in ("warm", "check", "pack", "install", "push", "pull", "ls", "rm", "gc", "diff", "keygen", "verify"):
        assert f"  {cmd} " in h.stdout


def test_api_warm_refuses_a_missing_sign_key_before_compiling(tmp_path):
    """README's snippet once failed only after the compile: the key is read before anything is compiled."""
    import cachetool
    from cachetool.errors import KeyFileError

    with pytest.raises(KeyFileError, match="signing key .*missing.key does not exist"):
        cachetool.warm(
            "tiny",
            cache_root=tmp_path / "root",
            push=f"file://{tmp_path}/store/tiny:v1",
            sign_key=str(tmp_path / "missing.key"),
        )
    assert not (tmp_path / "root").exists(), "warm compiled before checking the key"


@pytest.mark.parametrize(
    "args",
    [
        ("pack", "{tmp}", "-o", "{tmp}/x.ctb", "--sign-key", "{tmp}/missing.key"),
        (
            "warm",
            "--model",
            "tiny",
            "--cache-root",
            "{tmp}/root",
            "--push",
            "file://{tmp}/s/t:v",
            "--sign-key",
            "{tmp}/missing.key",
        ),
        ("pull", "file://{tmp}/store/t:v", "--cache-root", "{tmp}/root", "--trust", "{tmp}/missing.pub"),
        (
            "pull",
            "file://{tmp}/store/t:v",
            "--cache-root",
            "{tmp}/root",
            "--trust",
            "{tmp}/missing.pub",
            "--on-miss",
            "continue",
        ),
    ],
)
def test_a_missing_key_file_is_a_usage_error_on_every_verb(cli, tmp_path, args):
    """A key file that is not there is a deployment mistake: exit 2 everywhere (pack said 5 before), and
    --on-miss continue does not turn it into a cold start (it exited 0 before)."""
    r = cli(*(a.format(tmp=tmp_path) for a in args))
    assert r.rc == 2, r
    assert "missing." in r.error_line() and "does not exist" in r.error_line()
    assert not (tmp_path / "root").exists() and not (tmp_path / "x.ctb").exists()


def test_device_cuda_on_a_machine_without_one_is_one_usage_line(cli, tmp_path, keys_for_device):
    """pull --device cuda took the CPU platform of a tag on a CPU-only machine and exited 0; diff ... local
    --device cuda ended in a traceback. Both now say in one line that this machine has no CUDA device."""
    from cachetool.bundle.fingerprint import local_fingerprint

    if local_fingerprint("cuda")["device"] == "cuda":
        pytest.skip("this machine has a CUDA device")
    store, ctb, pub = keys_for_device
    r = cli("pull", f"file://{store}/tiny:cpu", "--cache-root", tmp_path / "root", "--trust", pub, "--device", "cuda")
    assert r.rc == 2 and "no CUDA device" in r.error_line(), r
    assert not (tmp_path / "root").exists()
    r = cli("diff", ctb, "local", "--device", "cuda")
    assert r.rc == 2 and "no CUDA device" in r.error_line() and "Traceback" not in r.err, r


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_install_and_pull_refuse_a_cuda_device_this_machine_lacks_alike(cli, tmp_path, keys_for_device, device):
    """install --device cuda on a machine without CUDA installed the CPU bundle and exited 0 where pull refused the
    same with exit 2: one rule (fingerprint.require_device) for both, before anything is written."""
    from cachetool.bundle.fingerprint import local_fingerprint

    if local_fingerprint("cuda")["device"] == "cuda":
        pytest.skip("this machine has a CUDA device")
    store, ctb, pub = keys_for_device
    for verb, source in (("install", ctb), ("pull", f"file://{store}/tiny:cpu")):
        root = tmp_path / f"root-{verb}"
        r = cli(verb, source, "--cache-root", root, "--trust", pub, "--device", device)
        assert (
            r.rc == 2
            and r.error_line() == f"error: --device {device}: this machine has no CUDA device (NVML and torch see none)"
        ), (verb, r)
        assert not root.exists(), verb


@pytest.fixture
def keys_for_device(cli, tmp_path):
    """A CPU bundle (tests/cache_trees.py's native tree) pushed to a file store: (store, .ctb, public key)."""
    from tests.cache_trees import make_native_tree

    assert cli("keygen", "-o", tmp_path / "k").rc == 0
    ctb = tmp_path / "cpu.ctb"
    assert cli("pack", make_native_tree(tmp_path / "src", layers=3), "-o", ctb, "--sign-key", tmp_path / "k").rc == 0
    assert cli("push", ctb, f"file://{tmp_path}/store/tiny:cpu").rc == 0
    return tmp_path / "store", ctb, tmp_path / "k.pub"
