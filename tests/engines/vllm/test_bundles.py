"""vLLM trees as bundles, without vLLM: the AOT tree's shared folders, vLLM's facts in the fingerprint and the
platform key, and the comparison of recorded key inputs (tests/engines/vllm/real runs the same against real vLLM)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from cachetool.bundle.manifest import platform_key
from cachetool.engines.layouts import scan
from cachetool.engines.vllm import install_facts, key
from cachetool.layouts.factors import UNSET, Factors
from tests.cache_trees import AOT, make_aot_tree

# a pull or diff compares the bundle's vLLM with this machine's: without vLLM here it is (rightly) another machine
needs_vllm = pytest.mark.skipif(
    install_facts.vllm_version() is None, reason="vLLM is not installed (scripts/install.sh --vllm)"
)


def _w(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def test_shared_folders_are_units_of_their_own_so_each_rank_installs_alone(tmp_path, cli, keys):
    src = make_aot_tree(tmp_path / "src")
    s = scan(src)
    units = {u.path: u.rank for u in s.units}
    assert units == {
        f"{AOT}/rank_0_0": "rank_0_0",
        f"{AOT}/rank_1_0": "rank_1_0",
        f"{AOT}/inductor_cache": None,
        "modelinfos": None,
    }
    ctb = tmp_path / "tp.ctb"
    assert cli("pack", src, "-o", ctb, "--sign-key", keys["priv"]).rc == 0
    root = tmp_path / "root"
    for rank in ("0", "1"):  # two init-containers, one rank each, into one root
        r = cli("install", ctb, "--cache-root", root, "--trust", keys["pub"], "--ranks", rank, "--no-preflight")
        assert r.rc == 0, r
    got = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert got == {str(p.relative_to(src)) for p in src.rglob("*") if p.is_file()}


def test_one_rank_folder_packed_alone_keeps_the_shared_folders(tmp_path):
    src = make_aot_tree(tmp_path / "src")
    s = scan(src / AOT / "rank_1_0")
    assert {u.path for u in s.units} == {f"{AOT}/rank_1_0", f"{AOT}/inductor_cache", "modelinfos"}


def test_a_vllm_bundles_platform_names_vllm_and_the_cpu_isa():
    fp = {"device": "cpu", "arch": "x86_64", "torch": "2.13.0+cpu", "vllm": "0.32.0", "cpu_isa": "avx2"}
    assert platform_key(fp) == "vllm0.32.0-cpu-x86_64-avx2-torch2.13.0+cpu"
    assert platform_key({k: v for k, v in fp.items() if k not in ("vllm", "cpu_isa")}) == "cpu-x86_64-torch2.13.0+cpu"


def _inputs(model="/models/a", max_len=256, env_bind="auto", vllm="0.32.0"):
    return {
        "env": {"hash": f"env-{env_bind}", "values": {"VLLM_CPU_OMP_THREADS_BIND": env_bind}},
        "config": {
            "hash": f"cfg-{model}-{max_len}",
            "values": {
                "model_config": {
                    "hash": f"m-{model}-{max_len}",
                    "model": model,
                    "tokenizer": model,
                    "max_model_len": max_len,
                },
                "cache_config": {"hash": "c", "block_size": 128, "gpu_memory_utilization": 0.2},
            },
        },
        "compiler": {"hash": None, "values": {"vllm": vllm, "torch": "2.13.0+cpu", "mega_aot_artifact": True}},
        "model": model,
    }


def _recorded(**kw):
    return key.recorded_factors(
        _inputs(**kw),
        {"vllm/model_executor/models/llama.py": "d" * 64},
        {"cpu_isa": "avx2"},
        ["--max-model-len", "256"],
        1,
    )


def test_equal_key_inputs_differ_in_nothing():
    assert key.differences(Factors(_recorded()), _inputs(), {"vllm/model_executor/models/llama.py": "d" * 64}) == []


def test_each_kind_of_difference_is_named_once():
    names = lambda diffs: [(d.category, d.name) for d in diffs]  # noqa: E731
    assert names(key.differences(Factors(_recorded()), _inputs(model="/models/b"))) == [("config", "model")]
    assert names(key.differences(Factors(_recorded()), _inputs(max_len=128))) == [
        ("config", "model_config.max_model_len")
    ]
    assert names(key.differences(Factors(_recorded()), _inputs(env_bind="0|1"))) == [
        ("env", "VLLM_CPU_OMP_THREADS_BIND")
    ]
    assert names(key.differences(Factors(_recorded()), _inputs(vllm="0.33.0"))) == [("compiler", "vllm")]
    traced = key.differences(Factors(_recorded()), _inputs(), {"vllm/model_executor/models/llama.py": None})
    assert [(d.category, d.name, d.b) for d in traced] == [("code", "vllm/model_executor/models/llama.py", UNSET)]


def test_the_recorded_factors_file_is_what_the_layout_reads(tmp_path):
    src = make_aot_tree(tmp_path / "src", ranks=("rank_0_0",))
    doc = {"schema": key.SCHEMA, "engine": "vllm", "hash": "ab" * 32, "factors": _recorded()}
    (src / AOT / "rank_0_0" / key.FACTORS_FILE).write_text(json.dumps(doc))
    (k,) = scan(src).keys
    assert k.kind == "aot" and k.factors.values("serve")["model"] == "/models/a"


@needs_vllm
def test_diff_of_a_vllm_bundle_with_local_compares_vllms_facts_not_native_factors(tmp_path, cli, keys):
    from cachetool.engines.vllm import install_facts

    src = make_aot_tree(tmp_path / "src", ranks=("rank_0_0",))
    recorded = key.recorded_factors(
        _inputs(vllm=install_facts.vllm_version() or "0.32.0"),
        {},
        {"cpu_isa": install_facts.cpu_isa(), "device": "cpu"},
        [],
        1,
    )
    doc = {"schema": key.SCHEMA, "engine": "vllm", "hash": "ab" * 32, "factors": recorded}
    (src / AOT / "rank_0_0" / key.FACTORS_FILE).write_text(json.dumps(doc))
    ctb = tmp_path / "v.ctb"
    assert cli("pack", src, "-o", ctb, "--sign-key", keys["priv"]).rc == 0
    out = json.loads(cli("diff", ctb, "local", "--json").out)
    # the bundle's vLLM env/config factors are not the native compiler's: only vLLM's facts are compared
    assert all(d["category"] == "fingerprint" for d in out["differences"]), out
    assert out["differences"] == [], out


def test_diff_of_a_native_and_a_vllm_bundle_says_they_are_different_engines(tmp_path, cli, keys):
    """It listed every factor of each side as unset in the other (1,380 lines for two real warms) and exited 0:
    now one line says which engine's server reads which, and --exit-code exits `differs`."""
    from tests.cache_trees import make_native_tree

    vllm = make_aot_tree(tmp_path / "vllm", ranks=("rank_0_0",))
    doc = {"schema": key.SCHEMA, "engine": "vllm", "hash": "ab" * 32, "factors": _recorded()}
    (vllm / AOT / "rank_0_0" / key.FACTORS_FILE).write_text(json.dumps(doc))
    native = make_native_tree(tmp_path / "native", ranks=("rank_0_0",), layers=2)
    for src in (native, vllm):
        assert cli("pack", src, "-o", tmp_path / f"{src.name}.ctb", "--sign-key", keys["priv"]).rc == 0
    for a, b in (("native", "vllm"), ("vllm", "native")):
        args = ("diff", tmp_path / f"{a}.ctb", tmp_path / f"{b}.ctb")
        r = cli(*args, "--exit-code", "--json")
        assert r.rc == 10, r
        out = json.loads(r.out)
        assert [(d["category"], d["a"], d["b"]) for d in out["differences"]] == [("engine", a, b)], out
        assert "different engines" in out["message"], out
        text = cli(*args)
        assert text.rc == 0, text  # without --exit-code diff only reports, as for any difference
        (line,) = [ln for ln in text.out.splitlines() if "different engines" in ln]
        assert f"A is a {a} cache" in line and "CACHETOOL_CACHE_ROOT" in line and "VLLM_CACHE_ROOT" in line, line
        assert len(text.out.splitlines()) == 2 and "<unset>" not in text.out, text.out


def test_inspect_names_what_a_vllm_key_folder_serves_in_its_engines_words(tmp_path, cli, keys):
    """The lines of a vLLM key folder (the server's model and flags, what built it) are the engine's to write
    (Engine.key_lines); the CLI spelled vLLM's factor names itself."""
    src = make_aot_tree(tmp_path / "src", ranks=("rank_0_0",))
    recorded = key.recorded_factors(_inputs(), {}, {"cpu_isa": "avx2", "device": "cpu"}, ["--max-model-len", "256"], 1)
    doc = {"schema": key.SCHEMA, "engine": "vllm", "hash": "ab" * 32, "factors": recorded}
    (src / AOT / "rank_0_0" / key.FACTORS_FILE).write_text(json.dumps(doc))
    ctb = tmp_path / "v.ctb"
    assert cli("pack", src, "-o", ctb, "--sign-key", keys["priv"]).rc == 0
    lines = cli("inspect", ctb).out.splitlines()
    assert "  serves    model /models/a  flags --max-model-len 256  tp 1" in lines, lines
    assert any(ln.startswith("  built by  vllm 0.32.0") and "cpu_isa avx2" in ln for ln in lines), lines
    info = json.loads(cli("inspect", ctb, "--json").out)
    assert info["key_lines"]["ab" * 32][0].startswith("serves    model /models/a"), info


def test_the_cpu_thread_binding_is_set_for_tensor_parallel_on_the_cpu_only(monkeypatch, tmp_path):
    """VLLM_CPU_OMP_THREADS_BIND is one of vLLM's hashed env factors: set on a GPU machine, a warm's key would
    differ from its server's, which never sets it."""
    from cachetool.engines.vllm.child import env as child_env
    from cachetool.facts import devices

    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(devices, "cuda_device", lambda index=0: None)
    assert child_env.child_env(tmp_path, 2).get("VLLM_CPU_OMP_THREADS_BIND")
    assert "VLLM_CPU_OMP_THREADS_BIND" not in child_env.child_env(tmp_path, 1)
    monkeypatch.setattr(devices, "cuda_device", lambda index=0: {"device": "NVIDIA H200", "capability": "9.0"})
    assert "VLLM_CPU_OMP_THREADS_BIND" not in child_env.child_env(tmp_path, 2)


@needs_vllm
def test_pull_for_vllm_without_a_cache_root_installs_where_vllm_reads(tmp_path, cli, keys, monkeypatch):
    """`pull --engine vllm` without --cache-root installed into cachetool's root, where `vllm serve` never looks:
    the server started cold. It now takes vLLM's own root, as warm and check do (VLLM_CACHE_ROOT)."""
    ref = _pushed_vllm_bundle(tmp_path, cli, keys)
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm-root"))
    monkeypatch.setenv("CACHETOOL_CACHE_ROOT", str(tmp_path / "cachetool-root"))
    r = cli("pull", ref, "--engine", "vllm", "--trust", keys["pub"], "--json")
    assert r.rc == 0, r
    assert json.loads(r.out)["install"]["cache_root"] == str(tmp_path / "vllm-root")
    assert (tmp_path / "vllm-root" / AOT / "rank_0_0" / "model").is_file()
    assert not (tmp_path / "cachetool-root").exists()


def _pushed_vllm_bundle(tmp_path, cli, keys, *, triton: bool = False, modelinfos: bool = True) -> str:
    """A CPU vLLM bundle of this machine's facts, the only bundle of a file-store tag: its ref (``triton``: with a
    Triton kernel in ``triton_cache/``; without ``modelinfos``: key folders alone)."""
    from cachetool.engines.vllm import install_facts

    src = make_aot_tree(tmp_path / "src", ranks=("rank_0_0",))
    if triton:
        _w(src / "triton_cache" / "KHASH" / "kernel.json", b'{"name": "k"}')
    if not modelinfos:
        shutil.rmtree(src / "modelinfos")
    recorded = key.recorded_factors(
        _inputs(vllm=install_facts.vllm_version() or "0.32.0"),
        {},
        {"cpu_isa": install_facts.cpu_isa(), "device": "cpu"},
        [],
        1,
    )
    doc = {"schema": key.SCHEMA, "engine": "vllm", "hash": "ab" * 32, "factors": recorded}
    (src / AOT / "rank_0_0" / key.FACTORS_FILE).write_text(json.dumps(doc))
    ref = f"file://{tmp_path}/store/tiny:v1"
    assert cli("push", src, ref, "--sign-key", keys["priv"]).rc == 0
    return ref


EAGER = [["--enforce-eager"], ["-O0"], ["-cc.mode=0"], ["--compilation-config", '{"mode": "none"}']]


@pytest.mark.parametrize("eager", EAGER)
def test_pull_for_an_eager_server_takes_only_the_folders_it_reads(eager, tmp_path, cli, keys):
    """An eager server reads no key folder, but vLLM's Triton kernels and model inspection serve it too (on the
    H200 its engine init took 2.6 s with a compiling warm's triton_cache/ and 20.7 s without): the pull compares no
    key (the server's flags differ from the warm's) and installs just those folders."""
    from cachetool.engines.vllm import install_facts
    from tests.vllm_oracle.tiny import CPU_FLAGS, write_model

    if install_facts.vllm_version() is None:
        pytest.skip("vLLM is not installed")
    ref = _pushed_vllm_bundle(tmp_path, cli, keys, triton=True)
    root = tmp_path / "root"
    r = cli(
        "pull",
        ref,
        "--cache-root",
        root,
        "--trust",
        keys["pub"],
        "--engine",
        "vllm",
        "--json",
        "--",
        write_model(tmp_path / "m"),
        *CPU_FLAGS,
        *eager,
    )
    assert r.rc == 0, r
    doc = json.loads(r.out)
    assert doc["outcome"] == "installed" and doc["compiles_nothing"], doc
    assert sorted(doc["install"]["units_installed"]) == ["modelinfos", "triton_cache"], doc
    assert any(p.startswith("cache key: none needed") for p in doc["install"]["preflight"]), doc
    assert not (root / "torch_compile_cache").exists()


def test_pull_for_an_eager_server_of_a_bundle_with_nothing_it_reads_is_not_needed(tmp_path, cli, keys):
    from cachetool.engines.vllm import install_facts
    from tests.vllm_oracle.tiny import CPU_FLAGS, write_model

    if install_facts.vllm_version() is None:
        pytest.skip("vLLM is not installed")
    ref = _pushed_vllm_bundle(tmp_path, cli, keys, modelinfos=False)
    root = tmp_path / "root"
    r = cli(
        "pull",
        ref,
        "--cache-root",
        root,
        "--trust",
        keys["pub"],
        "--engine",
        "vllm",
        "--json",
        "--",
        write_model(tmp_path / "m"),
        *CPU_FLAGS,
        "--enforce-eager",
    )
    assert r.rc == 0, r
    doc = json.loads(r.out)
    assert doc["outcome"] == "not-needed" and doc["installed"] is False and "--enforce-eager" in doc["reason"], doc
    assert "pull: outcome=not-needed " in r.err and not root.exists()


@needs_vllm
def test_the_default_engine_does_not_take_a_vllm_only_tag(tmp_path, cli, keys):
    """`pull REF` without --engine (the native server's) installed a tag's only bundle, vLLM's, and exited 0: a
    cache no native server reads, the server started cold. It is a miss naming the engine; --engine vllm takes it."""
    ref = _pushed_vllm_bundle(tmp_path, cli, keys)
    root = tmp_path / "root"
    r = cli("pull", ref, "--cache-root", root, "--trust", keys["pub"])
    assert r.rc == 4, r
    line = r.error_line()
    assert "vllm bundle" in line and "native server" in line and "--engine vllm" in line, line
    assert not root.exists()
    r = cli("pull", ref, "--cache-root", root, "--trust", keys["pub"], "--engine", "vllm")
    assert r.rc == 0 and "[vllm" in r.out, r


def test_the_triton_cache_ships_as_a_unit_of_its_own_and_installs_where_the_server_reads_it(tmp_path, cli, keys):
    """vLLM's own Triton kernels (TRITON_CACHE_DIR = ROOT/triton_cache in the warm and the server) are an install
    unit without a rank beside the compile cache: a pulled root has them, so a fresh pod JIT-compiles nothing."""
    src = make_aot_tree(tmp_path / "src", ranks=("rank_0_0",))
    _w(src / "triton_cache" / ("cd" * 16) / "triton_.cubin", b"\x7fELF" + b"\1" * 500)
    _w(src / "triton_cache" / ("cd" * 16) / "triton_.json", b'{"name": "triton_"}')
    s = scan(src)
    assert {u.path: u.rank for u in s.units}["triton_cache"] is None
    ctb = tmp_path / "x.ctb"
    assert cli("pack", src, "-o", ctb, "--sign-key", keys["priv"]).rc == 0
    root = tmp_path / "root"
    assert cli("install", ctb, "--cache-root", root, "--trust", keys["pub"], "--no-preflight").rc == 0
    assert (root / "triton_cache" / ("cd" * 16) / "triton_.cubin").read_bytes().startswith(b"\x7fELF")


def test_every_jit_cache_ships_as_a_unit_and_flashinfers_workspace_keeps_its_build_times(tmp_path, cli, keys):
    """On a GPU a start fills FlashInfer's JIT workspace, DeepGEMM's kernels, FlashInfer's autotune results and
    Inductor's early cache under the root (their variables: jit_caches.py): each is an install unit without a rank,
    so a pulled root has them (pack used to drop them without a word). FlashInfer's ninja rebuilds a module whose
    inputs are newer than its recorded build: the warm records the workspace's modification times and the install
    sets them back, so the pulled workspace is as the warm left it (a pull dated every file now)."""
    import os

    from cachetool.engines.vllm import jit_caches

    src = make_aot_tree(tmp_path / "src", ranks=("rank_0_0",))
    ws = src / "flashinfer" / ".cache" / "flashinfer" / "0.6.14" / "90a"
    _w(ws / "cached_ops" / "fp8_gemm" / "fp8_gemm.so", b"\x7fELF" + b"\3" * 300)
    _w(ws / "cached_ops" / "fp8_gemm" / ".ninja_log", b"# ninja log v5\n")
    _w(ws / "generated" / "fp8_gemm.cu", b"// generated")
    _w(src / "deep_gemm" / "cache" / "kernel.gemm.abc" / "kernel.cubin", b"CUBIN" * 50)
    _w(src / "flashinfer_autotune_cache" / "0.6.14" / "90a" / ("ef" * 32) / "autotune_configs.json", b"{}")
    _w(src / "inductor_cache" / "xy" / "kernel.py", b"# kernel")
    built = 1_700_000_000_000_000_000  # the warm's build, long before the pull
    for p in ws.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(built, built))
    assert jit_caches.record_mtimes(src) == [src / "flashinfer" / jit_caches.MTIMES_FILE]
    units = {u.path: u.rank for u in scan(src).units}
    assert {f: units.get(f, "missing") for f in jit_caches.FOLDERS if (src / f).exists()} == {
        "flashinfer": None,
        "deep_gemm": None,
        "flashinfer_autotune_cache": None,
        "inductor_cache": None,
    }
    ctb = tmp_path / "x.ctb"
    assert cli("pack", src, "-o", ctb, "--sign-key", keys["priv"]).rc == 0
    root = tmp_path / "root"
    assert cli("install", ctb, "--cache-root", root, "--trust", keys["pub"], "--no-preflight").rc == 0
    pulled = root / ws.relative_to(src)
    assert (root / "deep_gemm" / "cache" / "kernel.gemm.abc" / "kernel.cubin").is_file()
    assert {p.stat().st_mtime_ns for p in pulled.rglob("*") if p.is_file()} == {built}


def test_a_jit_cache_that_cannot_be_valid_here_is_skipped_before_download_and_named(tmp_path, cli, keys):
    """Each JIT folder records what it is valid under (jit_facts.py); the manifest lists those facts as key folders
    of kind jit, and an install compares them with this machine before any blob: FlashInfer's modules built in a
    root at another path are rebuilt anyway (ninja's commands hold the path), so that unit is skipped and named;
    a unit whose facts hold here (or cannot be read here) is installed."""
    from cachetool.bundle.ctb import open_ctb
    from cachetool.engines.vllm import jit_facts

    src = make_aot_tree(tmp_path / "src", ranks=("rank_0_0",))
    _w(src / "flashinfer" / ".cache" / "flashinfer" / "0.6.14" / "90a" / "cached_ops" / "m" / "m.so", b"\x7fELF")
    _w(src / "deep_gemm" / "cache" / "kernel.abc" / "kernel.cubin", b"CUBIN")
    (src / "flashinfer" / jit_facts.FACTS_FILE).write_text(
        json.dumps({"flashinfer": "0.6.14", "nvcc": "13.0.88", "capability": "9.0", "root": "/vllm-cache"})
    )
    (src / "deep_gemm" / jit_facts.FACTS_FILE).write_text(
        json.dumps({"deep_gemm_headers": None, "nvcc": "13.0.88", "capability": "9.0"})
    )
    ctb = tmp_path / "x.ctb"
    assert cli("pack", src, "-o", ctb, "--sign-key", keys["priv"]).rc == 0
    with open_ctb(ctb) as b:
        kinds = {k.hash: k.kind for k in b.manifest.keys}
    assert kinds["jit.flashinfer"] == kinds["jit.deep_gemm"] == "jit"
    root = tmp_path / "root"
    r = cli("install", ctb, "--cache-root", root, "--trust", keys["pub"], "--json")
    assert r.rc == 0, r
    doc = json.loads(r.out)
    skipped = doc["units_skipped"]
    assert set(skipped) == {"flashinfer"} and "root /vllm-cache in the bundle" in skipped["flashinfer"], skipped
    assert "not relocatable" in skipped["flashinfer"] and "skipped flashinfer" in r.err
    assert not (root / "flashinfer").exists() and (root / "deep_gemm" / "cache" / "kernel.abc").is_dir()


def test_a_native_preset_is_refused_for_vllm_in_one_line():
    import pytest

    from cachetool.engines.vllm.prerequisites import check_model
    from cachetool.errors import UsageError

    with pytest.raises(UsageError, match="a preset of the native engine; --engine vllm --model takes a model folder"):
        check_model("tiny")


def test_the_servers_command_line_gives_its_model_and_flags():
    from cachetool.engines.vllm import launch, server_command

    assert server_command.split_model(["/m", "--max-model-len", "8"], None) == ("/m", ["--max-model-len", "8"])
    assert server_command.split_model(["--model=/m", "-tp", "2"], None) == ("/m", ["-tp", "2"])
    assert server_command.split_model(["-tp", "2"], "/x") == ("/x", ["-tp", "2"])
    server_only = {"--port": True, "--disable-uvicorn-access-log": False}
    flags = ["-tp", "2", "--port", "8000", "--disable-uvicorn-access-log", "--load-format", "dummy"]
    assert launch.strip_options(flags, {**server_only, **launch.UNHASHED_ENGINE_OPTIONS}) == ["-tp", "2"]


def test_launch_inputs_name_what_differs_and_keep_secrets_out(tmp_path):
    from cachetool.engines.vllm import launch

    model = str(write_tiny(tmp_path / "m"))
    env = {
        "VLLM_API_KEY": "secret",
        "VLLM_FOO": "1",
        "TORCHINDUCTOR_X": "0",
        "HOME": "/root",
        "HF_TOKEN": "t",
        "VLLM_CACHE_ROOT": "/somewhere",
    }
    a = launch.LaunchInputs.of(model, ["--port", "1", "-tp", "1"], env, {"--port": True})
    assert a.env == {"VLLM_FOO": "1", "TORCHINDUCTOR_X": "0"} and a.flags == ("-tp", "1")
    recorded = a.to_values({"--port": True})
    assert a.differences(recorded) == []
    b = launch.LaunchInputs.of(model, ["-tp", "1", "--port", "2"], {**env, "TORCHINDUCTOR_X": "1"}, {"--port": True})
    assert b.differences(recorded) == ["env.TORCHINDUCTOR_X"]
    c = launch.LaunchInputs.of(model, ["-tp", "1", "--config", "f.yaml"], env, {"--port": True})
    assert c.differences(recorded) == ["flags (--config)"]
    (Path(model) / "config.json").write_text("{}")
    assert launch.LaunchInputs.of(model, ["-tp", "1"], env, {}).differences(recorded) == ["model_config"]


def write_tiny(folder: Path) -> Path:
    from tests.vllm_oracle.tiny import write_model

    return write_model(folder)


def test_diff_of_two_vllm_bundles_names_inductor_and_never_says_nothing_for_two_keys():
    """Two warms whose key folders differ only by an Inductor setting (the server's TORCHINDUCTOR_* variable) or
    by nothing recorded at all: diff names the Inductor field and the launch variable, or at least the two keys;
    "no differences" (exit 0 under --exit-code) for two folders a server tells apart was a lie."""
    from cachetool.diff import Side, diff_sides

    def factors(scalar_asserts: bool, env: dict) -> Factors:
        return Factors(
            {
                "env": {"hash": "e", "values": {}},
                "config": {"hash": "c", "values": {}},
                "compiler": {"hash": None, "values": {"vllm": "0.32.0"}},
                "inductor": {"hash": str(scalar_asserts), "values": {"inductor.scalar_asserts": scalar_asserts}},
                "launch": {"hash": None, "values": {"env": env}},
            }
        )

    fp = {"device": "cpu", "engine": "vllm"}
    a = Side("a", [("aa" * 32, factors(True, {}))], fp, layout="vllm")
    b = Side("b", [("bb" * 32, factors(False, {"TORCHINDUCTOR_SCALAR_ASSERTS": "0"}))], fp, layout="vllm")
    names = [(d.category, d.name) for d in diff_sides(a, b)]
    assert ("inductor", "inductor.scalar_asserts") in names and ("launch", "env.TORCHINDUCTOR_SCALAR_ASSERTS") in names
    same = Side("c", [("cc" * 32, factors(True, {}))], fp, layout="vllm")
    assert [(d.category, d.name) for d in diff_sides(a, same)] == [("keys", "cache key")]


START_APART = 120  # seconds between two starts' entries in these trees (34 to 37 s on this CPU, ~70 s on a GPU)


def _aot_with_starts(root: Path, n: int, per_start: int = 1) -> list[Path]:
    """An AOT key folder after ``n`` starts of torch 2.13 (vLLM on the CPU): ``per_start`` new AOTAutograd entries
    each (written a second apart, as one start compiles its pieces), the starts :data:`START_APART` seconds apart,
    oldest first."""
    make_aot_tree(root, ranks=("rank_0_0",))
    shutil.rmtree(root / AOT / "inductor_cache" / "aotautograd")
    entries = []
    for i in range(n):
        for j in range(per_start):
            name = f"start{i}" if per_start == 1 else f"start{i}-{j}"
            e = root / AOT / "inductor_cache" / "aotautograd" / name
            _w(e / "entry", f"start {i} piece {j}".encode() * 100)
            t = 1_000_000 + i * START_APART + j
            os.utime(e, (t, t))
            entries.append(e)
    return entries


def test_pack_ships_only_the_newest_aotautograd_entry_of_a_key_folder(tmp_path):
    """vLLM adds an AOTAutograd entry per start that no later start reads: a bundle packed after restarts carries
    one, not all of them."""
    _aot_with_starts(tmp_path / "root", 3)
    files = {f.rel for f in scan(tmp_path / "root").files}
    assert {r for r in files if "/aotautograd/" in r} == {f"{AOT}/inductor_cache/aotautograd/start2/entry"}
    assert f"{AOT}/inductor_cache/ab/cab.so" in files and f"{AOT}/rank_0_0/model" in files


def test_pack_ships_every_aotautograd_entry_of_the_last_start_that_wrote_several(tmp_path):
    """On the H100 (torch 2.11, vLLM 0.26 CUDA, an FP8 model) a start writes an entry per compiled piece, three
    within a second, and the next start on the root reads them (it wrote none). The pack shipped the newest one
    only, so a pulled root's first start wrote the other two again. The last start's entries all travel; the
    earlier starts' do not."""
    entries = _aot_with_starts(tmp_path / "root", 3, per_start=3)
    files = {f.rel for f in scan(tmp_path / "root").files}
    shipped = {r.split("/aotautograd/")[1].split("/")[0] for r in files if "/aotautograd/" in r}
    assert shipped == {e.name for e in entries[-3:]} == {"start2-0", "start2-1", "start2-2"}


def test_prune_removes_old_aotautograd_entries_but_the_newest_and_the_young(tmp_path, cli):
    root = tmp_path / "root"
    entries = _aot_with_starts(root, 3)
    now = time.time()
    then = now - START_APART  # young, of the start before the newest: kept by --older-than
    os.utime(entries[1], (then, then))
    os.utime(entries[2], (now, now))
    r = cli("prune", "--cache-root", root, "--dry-run", "--json")
    assert r.rc == 0 and all(e.exists() for e in entries)
    r = cli("prune", "--cache-root", root, "--json")
    assert r.rc == 0, r
    assert not entries[0].exists() and entries[1].exists() and entries[2].exists()
    assert (root / "modelinfos").is_dir() and (root / AOT / "rank_0_0" / "model").is_file()
    assert not list((root / AOT / "inductor_cache" / "aotautograd").glob(".cachetool-prune-*"))
    assert cli("prune", "--cache-root", tmp_path / "none").rc == 2


def test_prune_refuses_a_folder_that_is_not_a_cache_root(tmp_path, cli):
    """A folder of other things (a home folder, a root's own torch_compile_cache/) said "removed 0 entries", exit 0,
    as if it were a clean cache root: now a usage error naming what a cache root holds; an empty root is fine."""
    other = tmp_path / "home"
    _w(other / "notes.txt", b"mine")
    (other / "projects").mkdir()
    root = tmp_path / "root"
    _aot_with_starts(root, 2)
    for folder, hint in ((other, "torch_compile_cache/"), (root / "torch_compile_cache", "its parent")):
        r = cli("prune", "--cache-root", folder, "--json")
        assert r.rc == 2, r
        line = r.error_line()
        assert "not a cache root" in line and hint in line and "empty" in line, line
        assert json.loads(r.out)["error"] == "usage-error", r.out
    assert (other / "notes.txt").read_bytes() == b"mine" and (other / "projects").is_dir()
    assert len(list((root / AOT / "inductor_cache" / "aotautograd").iterdir())) == 2
    (tmp_path / "empty").mkdir()
    r = cli("prune", "--cache-root", tmp_path / "empty")
    assert r.rc == 0 and "removed 0 entries" in r.out, r


def test_a_tensor_parallel_key_folder_keeps_one_aotautograd_entry_per_rank(tmp_path):
    """With -tp 2 each rank writes its own entry per start: the last start's two are what a pack keeps."""
    root = tmp_path / "root"
    _aot_with_starts(root, 4, per_start=2)  # a start's two entries: one a rank
    _w(root / AOT / "rank_1_0" / "model", b"AOT-rank_1_0" * 500)
    files = {f.rel for f in scan(root).files}
    kept = {r.split("/aotautograd/")[1].split("/")[0] for r in files if "/aotautograd/" in r}
    assert kept == {"start3-0", "start3-1"}
