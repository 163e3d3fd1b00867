"""Preflight refuses a bundle that cannot hit here and names the factor; diff names every differing factor; a real
tiny-model cache from `cachetool warm` packs and installs byte for byte."""

from __future__ import annotations

import json

import pytest

from cachetool.errors import CacheMissError, PreflightError
from tests.cache_trees import dir_is_empty_or_absent, local_factors, make_native_tree, make_vllm_tree, tree_snapshot
from tests.cli_calls import one_error_line


def _bundle(tmp_path, cli, keys, name="b", **overrides):
    src = make_native_tree(tmp_path / f"src-{name}", layers=3, factors=local_factors(**overrides))
    out = tmp_path / f"{name}.ctb"
    assert cli("pack", src, "-o", out, "--sign-key", keys["priv"]).rc == 0
    return src, out


def test_preflight_passes_on_matching_machine(tmp_path, cli, keys):
    _, b = _bundle(tmp_path, cli, keys)
    r = cli("install", b, "--cache-root", tmp_path / "d", "--trust", keys["pub"])
    assert r.rc == 0, r
    assert "preflight: fingerprint, compiler factors, env factors" in r.out


# A CPU capability this machine has not (the bundle was "built" on another CPU); AVX2 here is the host's own.
OTHER_CAPABILITY = (
    "DEFAULT" if __import__("compiler.build_identity").build_identity.cpu_capability() != "DEFAULT" else "AVX2"
)


@pytest.mark.parametrize(
    "factor,value,named",
    [
        ("compiler.torch_key", "0" * 64, "compiler factor 'torch_key'"),
        ("compiler.inductor_config", "f" * 64, "compiler factor 'inductor_config'"),
        ("compiler.capability", OTHER_CAPABILITY, "compiler factor 'capability'"),
        ("compiler.torch", "2.11.0+cu130", "fingerprint 'torch'"),
        ("compiler.device_type", "cuda", "fingerprint 'device'"),
        ("env.ATEN_CPU_CAPABILITY", "avx2", "env factor 'ATEN_CPU_CAPABILITY'"),
    ],
)
def test_preflight_refuses_and_names_the_factor(tmp_path, cli, keys, factor, value, named):
    _, b = _bundle(tmp_path, cli, keys, **{factor: value})
    root = tmp_path / "d"
    r = cli("install", b, "--cache-root", root, "--trust", keys["pub"])
    assert r.rc == CacheMissError.exit_code == 4, r
    line = one_error_line(r.err)
    assert named in line and "preflight" in line
    assert dir_is_empty_or_absent(root)
    # --no-preflight installs it anyway (e.g. staging a GPU cache from a CPU box)
    assert cli("install", b, "--cache-root", root, "--trust", keys["pub"], "--no-preflight").rc == 0


def test_preflight_error_is_a_cache_miss():
    assert issubclass(PreflightError, CacheMissError)


def test_diff_names_every_factor(tmp_path, cli, keys):
    a, ab = _bundle(tmp_path, cli, keys, "a")
    b, bb = _bundle(
        tmp_path,
        cli,
        keys,
        "b",
        **{
            "config.compilation_config.cudagraph_mode": "FULL",
            "config.model_config.num_hidden_layers": 32,
            "code.compiler/models/llama.py": "c" * 64,
            "env.TORCHINDUCTOR_MAX_AUTOTUNE": "1",
            "compiler.torch_key": "0" * 64,
        },
    )
    for x, y in ((ab, bb), (a, b), (ab, b)):  # bundles, folders, mixed
        r = cli("diff", x, y)
        assert r.rc == 0, r
        out = r.out
        assert "config: compilation_config.cudagraph_mode: 'NONE' vs 'FULL'" in out
        assert "config: model_config.num_hidden_layers: 16 vs 32" in out
        assert "code: traced file 'compiler/models/llama.py' differs" in out
        assert "env: TORCHINDUCTOR_MAX_AUTOTUNE: <unset> vs '1'" in out
        assert "compiler: torch_key:" in out
        assert "5 difference(s)" in out, out
    data = json.loads(cli("diff", ab, bb, "--json").out)
    assert data["differs"] is True and data["a"] == str(ab)
    assert {d["category"] for d in data["differences"]} == {"config", "code", "env", "compiler"}
    # "differs" has its own code (1 is an unexpected failure), and its JSON object says so
    differs = cli("diff", ab, bb, "--exit-code", "--json")
    assert differs.rc == 10 and json.loads(differs.out)["exit_code"] == 10, differs
    same = cli("diff", ab, a, "--exit-code")
    assert same.rc == 0 and "no differences" in same.out


def test_diff_against_local(tmp_path, cli, keys):
    _, ab = _bundle(tmp_path, cli, keys, "a")
    r = cli("diff", ab, "local", "--device", "cpu")
    assert r.rc == 0 and "no differences" in r.out, r
    _, bb = _bundle(tmp_path, cli, keys, "b", **{"compiler.torch_key": "0" * 64, "env.ATEN_CPU_CAPABILITY": "avx2"})
    r = cli("diff", bb, "local", "--device", "cpu")
    assert "compiler: torch_key:" in r.out and "env: ATEN_CPU_CAPABILITY: 'avx2' vs <unset>" in r.out, r


def test_diff_ignores_what_the_preflight_records_but_does_not_compare(tmp_path, cli, keys):
    # Before: diff compared its own wider field list, so two bundles of one tree whose only difference is the GPU
    # driver (recorded, never compared: the install preflight passes either on the other's machine) were
    # reported as differing and `diff --exit-code` exited 10.
    from cachetool.bundle.ctb import write_ctb
    from cachetool.bundle.fingerprint import local_fingerprint
    from cachetool.bundle.packing import pack

    src = make_native_tree(tmp_path / "src", layers=3, factors=local_factors())
    paths = []
    for driver in ("550.54", "570.86"):
        with pack(src, sign_key=keys["key"], fingerprint=dict(local_fingerprint(device="cpu"), gpu_driver=driver)) as b:
            paths.append(write_ctb(b, tmp_path / f"driver-{driver}.ctb"))
    r = cli("diff", *paths, "--exit-code")
    assert r.rc == 0 and "no differences" in r.out, r
    with pack(src, sign_key=keys["key"], fingerprint=dict(local_fingerprint(device="cpu"), os="Darwin")) as b:
        other_os = write_ctb(b, tmp_path / "other-os.ctb")
    r = cli("diff", paths[0], other_os, "--exit-code")
    assert r.rc == 10 and "fingerprint: os: 'linux' vs 'Darwin'" in r.out, r


def test_diff_vllm_raw_factors(tmp_path, cli):
    a = make_vllm_tree(tmp_path / "a")
    b = make_vllm_tree(tmp_path / "b")
    for f in b.rglob("cache_key_factors.json"):
        d = json.loads(f.read_text())
        d["env"]["VLLM_USE_V1"] = "0"
        f.write_text(json.dumps(d))
    r = cli("diff", a, b)
    assert "factors: env.VLLM_USE_V1: '1' vs '0'" in r.out, r


def test_diff_missing_side(tmp_path, cli):
    r = cli("diff", tmp_path / "nope", "local")
    assert r.rc == 5 and "neither" in one_error_line(r.err)


@pytest.mark.slow
def test_real_tiny_model_cache(tmp_path, keys, cli, tiny_warm):
    """`cachetool warm --model tiny` on the CPU (the run's shared cold warm, ``tiny_warm`` in tests/conftest.py)
    → pack → install elsewhere: byte-identical, preflight passes."""
    warm = tiny_warm["root"]
    r = cli("pack", warm, "-o", tmp_path / "tiny.ctb", "--sign-key", keys["priv"])
    assert r.rc == 0 and "layout=native" in r.out, r
    r = cli("install", tmp_path / "tiny.ctb", "--cache-root", tmp_path / "fresh", "--trust", keys["pub"])
    assert r.rc == 0, r
    assert "preflight: fingerprint, compiler factors, env factors" in r.out
    assert tree_snapshot(tmp_path / "fresh") == tree_snapshot(warm)
    r = cli("diff", tmp_path / "tiny.ctb", "local", "--device", "cpu")
    assert "no differences" in r.out, r


def test_diff_names_the_same_fingerprint_fields_both_ways(tmp_path, cli, keys):
    # Before: a field only A recorded (a vLLM bundle's vllm version, against a bundle without one) was reported
    # by `diff A B` and not by `diff B A`; a field either side leaves unrecorded is not compared.
    from cachetool.bundle.ctb import write_ctb
    from cachetool.bundle.fingerprint import local_fingerprint
    from cachetool.bundle.packing import pack

    src = make_native_tree(tmp_path / "src", layers=3, factors=local_factors())
    fp = local_fingerprint(device="cpu")
    out = {}
    for name, extra in (("with", {"vllm": "0.32.0"}), ("without", {"vllm": None})):
        with pack(src, sign_key=keys["key"], fingerprint=dict(fp, **extra)) as b:
            out[name] = write_ctb(b, tmp_path / f"{name}.ctb")
    for a, b in ((out["with"], out["without"]), (out["without"], out["with"])):
        r = cli("diff", a, b, "--exit-code")
        assert r.rc == 0 and "no differences" in r.out, r


def test_factor_files_of_another_shape_are_compared_field_by_field():
    # Before: any entry with "values" made a file count as ours, so a file of other factor names was compared
    # over env/config/code/compiler only and nothing differed.
    from cachetool.facts.factor_compare import compare_factors
    from cachetool.layouts.factors import Factors
    from compiler.cache_key import Factors as CompilerFactors

    a, b = (
        Factors({"serve": {"values": {"max_model_len": 256}}}),
        Factors({"serve": {"values": {"max_model_len": 512}}}),
    )
    assert not CompilerFactors(a.raw).structured
    assert [(d.category, d.name, d.a, d.b) for d in compare_factors(a, b)] == [
        ("factors", "serve.values.max_model_len", 256, 512)
    ]


@pytest.mark.parametrize(
    "bundle_triton,here_triton",
    [("3.9.0", None), ("9.9.9", "3.9.0")],
    ids=["triton-only-in-the-bundle", "another-triton"],
)
def test_a_cpu_bundle_hits_whatever_triton_is_here(tmp_path, cli, keys, monkeypatch, bundle_triton, here_triton):
    # Before: a CPU bundle warmed where Triton was installed was refused where it is not ("fingerprint 'triton'
    # differs: bundle '3.9.0', this machine None", exit 4) while `diff B local` said "no differences" and the cache
    # hit once installed: a CPU cache's kernels are C++, no Triton reads them (its compiler factor records none).
    from cachetool.bundle.ctb import write_ctb
    from cachetool.bundle.fingerprint import local_fingerprint
    from cachetool.bundle.packing import pack
    from compiler import build_identity

    src = make_native_tree(tmp_path / "src", layers=3, factors=local_factors())
    with pack(src, sign_key=keys["key"], fingerprint=dict(local_fingerprint(device="cpu"), triton=bundle_triton)) as b:
        ctb = write_ctb(b, tmp_path / "cpu.ctb")
    from cachetool.facts import installed

    monkeypatch.setattr(build_identity, "triton_version", lambda: here_triton)  # the pipeline's reading
    monkeypatch.setattr(installed, "triton_version", lambda: here_triton)  # and cachetool's
    assert local_fingerprint(device="cpu")["triton"] == here_triton
    r = cli("install", ctb, "--cache-root", tmp_path / "d", "--trust", keys["pub"])
    assert r.rc == 0 and "preflight: fingerprint, compiler factors, env factors" in r.out, r
    r = cli("diff", ctb, "local", "--device", "cpu", "--exit-code")
    assert r.rc == 0 and "no differences" in r.out, r


CUDA_FP = {
    "os": "linux",
    "arch": "x86_64",
    "device": "cuda",
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
    "triton": "3.6.0",
    "gpu": "NVIDIA H200",
    "capability": "sm90",
}


def test_triton_is_compared_for_a_cuda_bundle_only():
    from cachetool.bundle.fingerprint import compare

    assert compare(CUDA_FP, dict(CUDA_FP, triton=None)) == [("triton", "3.6.0", None)]
    cpu = dict(CUDA_FP, device="cpu", torch="2.13.0+cpu", cuda=None, gpu=None, capability=None)
    assert compare(cpu, dict(cpu, triton=None)) == []
    assert compare(cpu, dict(cpu, triton="9.9.9")) == []


def test_diff_against_this_machine_is_the_preflights_comparison():
    # Before: diff dropped a field this machine leaves None (to name the same fields both ways between two bundles),
    # so a CUDA bundle against a GPU machine without Triton showed no difference while the preflight refused it.
    from cachetool.bundle.fingerprint import compare
    from cachetool.diff import Side, diff_sides

    bundle = Side("b.ctb", [], dict(CUDA_FP), layout="native")
    here = Side("local", [], dict(CUDA_FP, triton=None), partial=True)
    preflight = compare(bundle.fingerprint, here.fingerprint)
    assert preflight == [("triton", "3.6.0", None)]
    for a, b in ((bundle, here), (here, bundle)):
        assert [(d.category, d.name) for d in diff_sides(a, b)] == [("fingerprint", "triton")]


def test_a_miss_names_the_field_a_user_set_before_what_follows_from_it():
    """-tp 2 changes the all-reduce choice too, another model the head size: the user set tensor_parallel_size and
    num_hidden_layers / hidden_size, so those are named first (by name, all_reduce and head_dim came first)."""
    from cachetool.facts.factor_compare import compare_factors
    from cachetool.layouts.factors import Factors

    def config(tp: int, all_reduce: str, hidden: int, head_dim: int, layers: int) -> Factors:
        model = {
            "head_dim": head_dim,
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "parallel_config": {"all_reduce": all_reduce, "tensor_parallel_size": tp},
        }
        return Factors({"config": {"hash": f"{tp}{hidden}{layers}", "values": {"model_config": model}}})

    tp = compare_factors(config(1, "none", 64, 16, 2), config(2, "graph", 64, 16, 2), only=("config",))
    assert [d.name for d in tp] == [
        "model_config.parallel_config.tensor_parallel_size",
        "model_config.parallel_config.all_reduce",
    ]
    model = compare_factors(config(1, "none", 64, 16, 2), config(1, "none", 128, 32, 4), only=("config",))
    assert [d.name for d in model] == [
        "model_config.num_hidden_layers",
        "model_config.hidden_size",
        "model_config.head_dim",
    ]
