"""Real vLLM end to end, each step its own process as CI, the deploy pipeline and the init-container run it:

    cachetool warm --engine vllm --push oci://...   (CI: real vLLM, headless, dummy weights)
    cachetool pull --engine vllm --model M -- FLAGS  (init-container: vLLM's key checked before any blob)
    cachetool check --engine vllm --require-hit      (the server start: real vLLM on the pulled root)

One warm for the session (tests/engines/vllm/real/conftest.py's ``warmed``); the refusals use its root, its bundle, or
edited and re-signed copies of it. A pulled root's hit is judged by the real server in test_real_server.py (both pull
forms, the server's command line and ``--model M -- FLAGS``) and by ``check`` in test_tensor_parallel.py (each real vLLM
start costs 10-60 s on the 2 CI cores).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from cachetool.engines.vllm.install_facts import cpu_isa
from tests.engines.vllm.real.conftest import FLAGS, cachetool, error_line, json_out, ok, write_model

pytestmark = [pytest.mark.slow, pytest.mark.servers]


def test_warm_records_vllms_facts_and_key_inputs(warmed):
    s = warmed["summary"]
    comp = s["compile"]
    assert comp["engine"] == "vllm" and comp["inductor_compiled"] > 0 and not comp["key_existed"]
    assert s["ref"] == warmed["ref"] and s["manifest_digest"].startswith("sha256:")
    key_dir = Path(comp["cache_dir"])
    assert key_dir.parent.name == "torch_aot_compile" and (key_dir / "rank_0_0" / "model").is_file()
    recorded = json.loads((key_dir / "rank_0_0" / "cache_key_factors.json").read_text())
    assert recorded["hash"] == key_dir.name == comp["cache_key"]
    f = recorded["factors"]
    assert f["serve"]["values"]["model"] == str(warmed["model"]) and f["serve"]["values"]["flags"] == FLAGS
    assert f["compiler"]["values"]["vllm"] and f["compiler"]["values"]["cpu_isa"]
    assert f["env"]["values"] and f["config"]["values"]["model_config"]["max_model_len"] == 256
    assert any(fid.startswith("vllm/model_executor/models/llama.py") for fid in f["code"]["values"])

    doc = json_out(ok(cachetool("inspect", warmed["base"] / "x.ctb", "--json")))
    fp = doc["fingerprint"]
    assert doc["layout"] == "vllm" and fp["vllm"] == f["compiler"]["values"]["vllm"] and fp["cpu_isa"]
    assert doc["platform"].startswith(f"vllm{fp['vllm']}-cpu-")


def test_server_model_path_unlike_the_warms_is_refused_before_any_blob(warmed, tmp_path):
    other = write_model(tmp_path / "models" / "tiny-llama")  # the same config.json at another path
    root = tmp_path / "root"
    r = cachetool(
        "pull",
        warmed["ref"],
        "--cache-root",
        root,
        "--trust",
        warmed["pub"],
        "--engine",
        "vllm",
        "--model",
        other,
        "--",
        *FLAGS,
    )
    assert r.returncode == 4, r
    line = error_line(r)
    assert "'model_config.model' differs" in line and str(other) in line and str(warmed["model"]) in line, line
    assert not root.exists()


def _edited_bundle(warmed, tmp_path, **fingerprint) -> Path:
    """The warm's key folder packed, its fingerprint edited and the manifest signed again with the trusted key
    (a signer that made a bundle for another vLLM or CPU): a .ctb."""
    from cachetool.bundle.ctb import write_ctb
    from cachetool.bundle.manifest import Manifest
    from cachetool.bundle.packing import DirPackedBundle, pack
    from cachetool.bundle.signing import load_private_key, sign_manifest

    with pack(warmed["summary"]["compile"]["cache_dir"], workdir=tmp_path / "work") as b:
        m = dataclasses.replace(b.manifest, fingerprint={**b.manifest.fingerprint, **fingerprint})
        mbytes = Manifest.to_bytes(m)
        edited = DirPackedBundle(
            mbytes, sign_manifest(mbytes, load_private_key(warmed["key"])), "edited", tmp_path / "work" / "blobs", None
        )
        return write_ctb(edited, tmp_path / "edited.ctb")


# A CPU ISA this machine has not ("built" on another CPU): amx, unless this CPU has AMX tiles.
OTHER_CPU_ISA = "avx2" if cpu_isa() == "amx" else "amx"


@pytest.mark.parametrize("field,value", [("vllm", "0.31.0"), ("cpu_isa", OTHER_CPU_ISA)])
def test_a_bundle_for_another_vllm_or_cpu_is_refused_before_any_blob(warmed, tmp_path, field, value):
    ctb = _edited_bundle(warmed, tmp_path, **{field: value})
    root = tmp_path / "root"
    r = cachetool("install", ctb, "--cache-root", root, "--trust", warmed["pub"])
    assert r.returncode == 4, r
    line = error_line(r)
    assert f"fingerprint {field!r} differs" in line and value in line, line
    assert not root.exists()
    # through a store, without --model: the platform choice names it, reading no blob (the store has none)
    store = tmp_path / "store"
    ok(cachetool("push", ctb, f"file://{store}/tiny:edited"))
    shutil.rmtree(store / "blobs")
    r = cachetool(
        "pull", f"file://{store}/tiny:edited", "--cache-root", root, "--trust", warmed["pub"], "--engine", "vllm"
    )
    assert r.returncode == 4, r
    assert field in error_line(r) and value in error_line(r)
    assert not root.exists()


def test_without_model_the_preflight_imports_neither_torch_nor_vllm(warmed, tmp_path):
    """An init-container without --model: vLLM version, torch build and CPU ISA compared from files only."""
    import subprocess
    import sys

    store = tmp_path / "store"
    ok(cachetool("push", warmed["base"] / "x.ctb", f"file://{store}/tiny:main"))
    script = (
        "import json, sys\nfrom cachetool.cli import main\n"
        f"rc = main(['pull', 'file://{store}/tiny:main', '--cache-root', {str(tmp_path / 'root')!r}, "
        f"'--trust', {str(warmed['pub'])!r}, '--engine', 'vllm'])\n"
        "print(json.dumps({'rc': rc, 'loaded': sorted(m for m in ('torch', 'vllm') if m in sys.modules)}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"rc": 0, "loaded": []}, proc.stderr[-2000:]
    assert "preflight: fingerprint" in proc.stdout
    assert (tmp_path / "root" / "modelinfos").is_dir()


def test_a_corrupted_blob_is_refused_and_nothing_is_installed(warmed, tmp_path):
    store = tmp_path / "store"
    ok(cachetool("push", warmed["base"] / "x.ctb", f"file://{store}/tiny:main"))
    blob = max((p for p in (store / "blobs").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    root = tmp_path / "root"
    r = cachetool(
        "pull", f"file://{store}/tiny:main", "--cache-root", root, "--trust", warmed["pub"], "--engine", "vllm"
    )
    assert r.returncode == 3, r
    error_line(r)
    assert not root.exists() or not any(p.is_file() for p in root.rglob("*") if ".cachetool" not in str(p))


def test_diff_against_this_machine_names_vllms_facts(warmed, tmp_path):
    """diff --engine vllm without --model: the fingerprint with vLLM's facts, importing nothing heavy (the key
    inputs with --model take the same ServerKeyCheck as pull, shown by the refusal above)."""
    same = json_out(ok(cachetool("diff", warmed["base"] / "x.ctb", "local", "--engine", "vllm", "--json")))
    assert {k: same[k] for k in ("a", "b", "differs", "differences", "ok", "exit_code")} == {
        "a": str(warmed["base"] / "x.ctb"),
        "b": "local",
        "differs": False,
        "differences": [],
        "ok": True,
        "exit_code": 0,
    }
    # without --engine: a vLLM bundle is still compared with vLLM's facts, not the native compiler's factors
    assert json_out(ok(cachetool("diff", warmed["base"] / "x.ctb", "local", "--json")))["differences"] == []
    edited = _edited_bundle(warmed, tmp_path, cpu_isa=OTHER_CPU_ISA)
    doc = json_out(cachetool("diff", edited, "local", "--engine", "vllm", "--json"))
    assert [(d["category"], d["name"], d["a"]) for d in doc["differences"]] == [
        ("fingerprint", "cpu_isa", OTHER_CPU_ISA)
    ]


# ---------------------------------------------------------------------------------------------- bad input


def test_vllm_not_installed_names_the_install_script(tmp_path, tiny_model):
    import venv

    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    r = cachetool(
        "warm",
        "--engine",
        "vllm",
        "--model",
        tiny_model,
        "--cache-root",
        tmp_path / "root",
        env={"CACHETOOL_VLLM_PYTHON": str(tmp_path / "bare" / "bin" / "python")},
    )
    assert r.returncode == 2, r
    assert "scripts/install.sh --vllm" in error_line(r)
    assert not (tmp_path / "root").exists()


def test_a_model_folder_without_config_json_is_a_usage_error(tmp_path):
    (tmp_path / "empty-model").mkdir()
    r = cachetool("warm", "--engine", "vllm", "--model", tmp_path / "empty-model", "--cache-root", tmp_path / "root")
    assert r.returncode == 2, r
    assert "config.json" in error_line(r)
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("verb", ["warm", "check"])
def test_the_model_may_be_named_after_the_double_dash_as_vllm_serve_takes_it(tmp_path, verb):
    """`warm --engine vllm --cache-root R -- M FLAGS` was refused ("Missing option '--model'") although `vllm serve
    M` takes it so: M is now the model (this folder lacks config.json, which is what the refusal names); a real
    start of that form is the session's warm (conftest.py's `warmed`). The native engine still needs --model."""
    (tmp_path / "m").mkdir()
    r = cachetool(
        verb, "--engine", "vllm", "--cache-root", tmp_path / "root", "--", tmp_path / "m", "--max-model-len", "256"
    )
    assert r.returncode == 2 and f"{tmp_path / 'm'}: the folder has no config.json" in error_line(r), r
    r = cachetool(verb, "--engine", "vllm", "--cache-root", tmp_path / "root", "--", "--max-model-len", "256")
    assert r.returncode == 2 and "M after -- as in `vllm serve M`" in error_line(r), r
    r = cachetool(verb, "--cache-root", tmp_path / "root")
    assert r.returncode == 2 and f"{verb} needs --model: a preset (tiny," in error_line(r), r
    assert not (tmp_path / "root").exists()


def test_flags_vllm_refuses_are_one_line_and_nothing_is_pushed(tmp_path, tiny_model, signing_key):
    store = tmp_path / "store"
    r = cachetool(
        "warm",
        "--engine",
        "vllm",
        "--model",
        tiny_model,
        "--cache-root",
        tmp_path / "root",
        "--push",
        f"file://{store}/tiny:x",
        "--sign-key",
        signing_key,
        "--",
        "--no-such-flag",
    )
    assert r.returncode == 2, r
    assert "--no-such-flag" in error_line(r) and "vLLM refused the flags" in error_line(r)
    assert not store.exists() and not (tmp_path / "root").exists()


def test_a_model_vllm_refuses_is_its_own_last_error_and_nothing_is_pushed(tmp_path, signing_key):
    bad = write_model(tmp_path / "bad-model", architectures=["NoSuchModelForCausalLM"])
    store = tmp_path / "store"
    r = cachetool(
        "warm",
        "--engine",
        "vllm",
        "--model",
        bad,
        "--cache-root",
        tmp_path / "root",
        "--push",
        f"file://{store}/tiny:x",
        "--sign-key",
        signing_key,
        "--",
        *FLAGS,
    )
    assert r.returncode == 1, r
    line = error_line(r)
    assert "NoSuchModelForCausalLM" in line and "log:" in line, line
    assert not store.exists() and not (tmp_path / "root").exists()


def test_native_options_with_the_vllm_engine_are_refused(tmp_path, tiny_model):
    r = cachetool("check", "--engine", "vllm", "--model", tiny_model, "-tp", "2", "--cache-root", tmp_path)
    assert r.returncode == 2 and "-- -tp 2" in error_line(r), r
    r = cachetool("warm", "--model", "tiny", "--cache-root", tmp_path, "--", "-tp", "2")
    assert r.returncode == 2 and "--engine vllm" in error_line(r), r
    assert os.listdir(tmp_path) == []


def test_check_on_a_read_only_root_says_so_in_one_line_before_vllm_starts(warmed, reading_the_warm_model, tmp_path):
    """A pulled root mounted read-only (a read-only PVC, an image volume): vLLM writes under its root at every start
    and dies there with EROFS (vLLM 0.26 on the H200), so check refuses in one line naming the root, the cause and
    the fix, with exit 2, and starts nothing (no vLLM log). The mount is real: a private mount namespace in which a
    copy of the warm's root is bind-mounted read-only; skipped where the kernel refuses one."""
    import subprocess
    import sys

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a read-only bind mount")
    root = tmp_path / "root"
    shutil.copytree(warmed["root"], root, symlinks=True)
    logs = tmp_path / "logs"
    logs.mkdir()
    script = 'mount --bind "$ROOT" "$ROOT" && mount -o remount,bind,ro "$ROOT" && exec "$@"'
    env = {**os.environ, "ROOT": str(root), "XDG_STATE_HOME": str(logs)}
    r = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "bash",
            "-c",
            script,
            "bash",
            sys.executable,
            "-m",
            "cachetool",
            "check",
            "--engine",
            "vllm",
            "--cache-root",
            str(root),
            "--require-hit",
            "--",
            str(warmed["model"]),
            *FLAGS,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if "mount" in r.stderr and r.returncode == 32:
        pytest.skip(f"no read-only bind mount here: {r.stderr.strip()[-200:]}")
    line = error_line(r)
    assert r.returncode == 2, r.stderr
    assert f"cache root {root} is not writable" in line and "vLLM writes under its cache root" in line, line
    assert f"cp -a {root} DIR" in line, line
    assert not list(logs.rglob("*.log")), "vLLM was started"
