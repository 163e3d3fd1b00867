"""Issue 12: preflight without importing torch, refusing every case the full preflight refuses.

A warm records, beside the compiler factor, the evidence its values follow from (the installed torch and Triton
files by RECORD digest, Inductor's settings, Python). Where a bundle's evidence equals this machine's, preflight
takes torch_key, triton_key and the Inductor config hash from the bundle and reads versions and devices from files;
anything that differs is confirmed with the exact values, so the message names the real difference.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cachetool.errors import CacheMissError
from tests.cache_trees import dir_is_empty_or_absent, local_factors, make_native_tree
from tests.cli_calls import one_error_line

# A CPU capability this machine has not (the bundle was "built" on another CPU); AVX2 here is the host's own.
OTHER_CAPABILITY = (
    "DEFAULT" if __import__("compiler.build_identity").build_identity.cpu_capability() != "DEFAULT" else "AVX2"
)

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def _bundle(tmp_path, cli, keys, name="b", **overrides):
    src = make_native_tree(tmp_path / f"src-{name}", layers=3, factors=local_factors(evidence=True, **overrides))
    out = tmp_path / f"{name}.ctb"
    assert cli("pack", src, "-o", out, "--sign-key", keys["priv"]).rc == 0
    return out


def test_a_matching_bundle_preflights_without_importing_torch(tmp_path, cli, keys):
    ctb = _bundle(tmp_path, cli, keys)
    script = (
        "import sys\nfrom cachetool.cli import main\n"
        f"rc = main(['install', {str(ctb)!r}, '--cache-root', {str(tmp_path / 'root')!r}, "
        f"'--trust', {str(keys['pub'])!r}])\n"
        "print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules}))\n"
    ).replace("import sys", "import json, sys")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(REPO))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"rc": 0, "torch": False}, proc.stderr[-2000:]
    assert "preflight: fingerprint, compiler factors, env factors" in proc.stdout


@pytest.mark.parametrize(
    "overrides,named",
    [
        # another torch build: other installed files, another build key
        ({"evidence.torch_record": "0" * 64, "compiler.torch_key": "1" * 64}, "compiler factor 'torch_key'"),
        # another Inductor setting (its evidence and the config hash it gives)
        (
            {"evidence.inductor_env": {"TORCHINDUCTOR_MAX_AUTOTUNE": "1"}, "compiler.inductor_config": "f" * 64},
            "compiler factor 'inductor_config'",
        ),
        # another CPU capability (GPU capabilities are read from NVML the same way)
        ({"compiler.capability": OTHER_CAPABILITY}, "compiler factor 'capability'"),
        ({"compiler.device_type": "cuda"}, "fingerprint 'device'"),
        ({"compiler.torch": "2.11.0+cu130"}, "fingerprint 'torch'"),
        ({"env.ATEN_CPU_CAPABILITY": "avx2"}, "env factor 'ATEN_CPU_CAPABILITY'"),
    ],
)
def test_the_cheap_preflight_refuses_and_names_the_factor(tmp_path, cli, keys, overrides, named):
    b = _bundle(tmp_path, cli, keys, **overrides)
    root = tmp_path / "d"
    r = cli("install", b, "--cache-root", root, "--trust", keys["pub"])
    assert r.rc == CacheMissError.exit_code == 4, r
    line = one_error_line(r.err)
    assert named in line and "preflight" in line, line
    assert dir_is_empty_or_absent(root)


def test_the_fingerprint_reads_torchs_own_version_not_package_metadata(monkeypatch):
    """PyPI's CUDA wheels carry a metadata version without the ``+cu130`` of ``torch.__version__``."""
    import importlib.metadata

    import torch

    from cachetool.bundle.fingerprint import local_fingerprint

    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: torch.__version__.split("+")[0] if name == "torch" else real(name)
    )
    assert local_fingerprint("cpu")["torch"] == torch.__version__


def test_build_identity_agrees_with_torch():
    import torch

    from compiler import build_identity

    assert build_identity.torch_build() == {
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "cuda": torch.version.cuda,
    }
    assert build_identity.cpu_capability() == torch.backends.cpu.get_cpu_capability()
    import torch.nn.modules.linear as linear

    assert (
        build_identity.module_file("torch.nn.modules.linear").resolve()
        == __import__("pathlib").Path(linear.__file__).resolve()
    )


def test_a_forced_cpu_capability_is_read_as_aten_reads_it():
    code = (
        "import json, torch\nfrom compiler import build_identity\n"
        "print(json.dumps([build_identity.cpu_capability(), torch.backends.cpu.get_cpu_capability()]))"
    )
    env = dict(__import__("os").environ, ATEN_CPU_CAPABILITY="avx2")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(REPO))
    ours, aten = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ours == aten == "AVX2"


def test_record_digest_ignores_paths_outside_the_site_folder(monkeypatch):
    from compiler import build_identity

    record = "torch/__init__.py,sha256=abc,10\ntorch/x.py,sha256=def,3\n"

    class Dist:
        def __init__(self, text):
            self.text = text

        def read_text(self, name):
            return self.text

    digests = []
    for extra in ("", "../../../bin/torchrun,sha256=zzz,244\ntorch/__pycache__/x.cpython-311.pyc,,\n"):
        monkeypatch.setattr(build_identity.importlib.metadata, "distribution", lambda n, t=record + extra: Dist(t))
        build_identity.record_digest.cache_clear()
        digests.append(build_identity.record_digest("torch"))
    build_identity.record_digest.cache_clear()
    assert digests[0] == digests[1] is not None
