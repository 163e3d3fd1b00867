"""The pull's verdict on a server launched otherwise than the warm, decided from the warm's recorded facts without
vLLM: every difference is hashed (a miss, named), unhashed (a hit) or unknown (vLLM is asked); and the comparison
is total over any JSON a factor file can hold (the real server judges the same cases in
tests/engines/vllm/real/test_real_server.py)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from cachetool.engines.vllm import key, verdict
from cachetool.layouts.factors import Factors

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 2,
    "layer_types": ["full_attention"] * 2,
    "hidden_size": 128,
}
FLAGS = ["--max-model-len", "256", "--dtype", "bfloat16"]
OPTIONS = {
    "--max-model-len": {"dest": "max_model_len", "takes": 1},
    "--seed": {"dest": "seed", "takes": 1},
    "--dtype": {"dest": "dtype", "takes": 1},
    "--tokenizer": {"dest": "tokenizer", "takes": 1},
    "--compilation-config": {"dest": "compilation_config", "takes": 1},
    "-cc": {"dest": "compilation_config", "takes": 1},
}
LEVEL = "VLLM_LOGGING_LEVEL"
HASHING = {
    "schema": 1,
    "options": OPTIONS,
    "defaults": {"seed": 0, "dtype": "auto"},
    "flags": {
        "max_model_len": {"hashed": True, "fields": ["model_config.max_model_len"]},
        "seed": {"hashed": False},
        "tokenizer": {"hashed": None},
        "dtype": {
            "choices": {'"float32"': {"hashed": True, "fields": ["model_config.dtype"]}, '"auto"': {"hashed": False}}
        },
    },
    "env": {
        "vllm_hashed": ["VLLM_CPU_ATTN_SPLIT_KV", "VLLM_FLAG"],
        "vllm_unhashed": ["VLLM_CPU_KVCACHE_SPACE"],
        "torch_config": {
            "TORCHINDUCTOR_FREEZING": ["inductor.freezing"],
            "TORCHINDUCTOR_COMPILE_THREADS_X": ["inductor.not_portable"],
        },
        "torch_config_unmapped": ["TORCHINDUCTOR_VEC_ISA_OK"],
        "set_by_vllm": {"TORCHINDUCTOR_CPP_DYNAMIC_THREADS": {"value": "1", "forced": True}},
    },
    "hf_config_hashed": True,
}


def recorded(model: Path, *, env: dict | None = None, hashing: dict | None = HASHING) -> Factors:
    launch = {
        "vllm": "0.32.0",
        "torch": "2.13.0+cpu",
        "model": str(model),
        "model_config": "d" * 64,
        "flags": FLAGS,
        "env": env or {},
        "config_json": CONFIG,
        "server_only_options": {},
    }
    inputs = {
        "env": {"hash": "e", "values": {"VLLM_CPU_ATTN_SPLIT_KV": True, "VLLM_FLAG": 0}},
        "config": {"hash": "c", "values": {}},
        "inductor": {"hash": "i", "values": {"inductor.freezing": False}},
        "compiler": {"values": {"vllm": "0.32.0", "torch": "2.13.0+cpu"}},
        "model": str(model),
    }
    return Factors(
        key.recorded_factors(inputs, {"vllm/model.py": "f" * 64}, {}, FLAGS, 1, launch=launch, hashing=hashing)
    )


def judge(factors: Factors, model: Path, flags=FLAGS, env=None, versions=None, traced=None) -> verdict.Verdict:
    return verdict.judge(
        factors,
        model=str(model),
        flags=list(flags),
        env=env or {},
        versions=versions or {"vllm": "0.32.0", "torch": "2.13.0+cpu"},
        traced=traced or {"vllm/model.py": "f" * 64},
    )


def model_at(folder: Path, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**CONFIG, **changes}))
    return folder


def test_the_same_server_is_a_hit(tmp_path):
    m = model_at(tmp_path / "m")
    v = judge(recorded(m), m)
    assert v.hit and v.decided and not v.unhashed


def test_flags_vllm_does_not_hash_are_a_hit_and_named(tmp_path):
    m = model_at(tmp_path / "m")
    v = judge(recorded(m), m, flags=[*FLAGS, "--seed", "7", "--dtype=bfloat16"])
    assert v.hit and v.unhashed == ["flag --seed"]


def test_a_hashed_flag_is_a_miss_naming_the_field_it_moves(tmp_path):
    m = model_at(tmp_path / "m")
    v = judge(recorded(m), m, flags=["--max_model_len", "128", "--dtype", "bfloat16"])
    assert not v.hit and v.decided
    (d,) = v.misses()
    assert d.name == "--max-model-len (model_config.max_model_len)" and (d.a, d.b) == ("256", "128")


def test_a_choice_is_judged_by_its_value(tmp_path):
    m = model_at(tmp_path / "m")
    assert (
        judge(recorded(m), m, flags=["--max-model-len", "256", "--dtype", "float32"]).misses()[0].name
        == "--dtype (model_config.dtype)"
    )
    assert judge(recorded(m), m, flags=["--max-model-len", "256", "--dtype", "auto"]).hit
    # a choice the warm never tried, an option it could not try, a JSON option, a token no option reads: vLLM asked
    for flags in (["--dtype", "float16"], ["--tokenizer", "t"], ["-cc.cudagraph_mode=NONE"], ["--what", "x"]):
        v = judge(recorded(m), m, flags=["--max-model-len", "256", "--dtype", "bfloat16", *flags])
        assert not v.decided and v.unknown, flags


def test_variables_by_what_reads_them(tmp_path):
    m = model_at(tmp_path / "m")
    f = recorded(m, env={"TORCHINDUCTOR_CPP_DYNAMIC_THREADS": "1"})
    cases = {
        "VLLM_CPU_KVCACHE_SPACE": ("1", "hit"),
        "VLLM_NOT_A_VARIABLE": ("x", "hit"),
        "TORCHINDUCTOR_CPP_DYNAMIC_THREADS": ("0", "hit"),  # vLLM sets it whatever the server's environment says
        "TORCHINDUCTOR_COMPILE_THREADS_X": ("4", "hit"),  # read by Inductor, but not in vLLM's Inductor factors
        "VLLM_CPU_ATTN_SPLIT_KV": ("0", "miss"),
        "TORCHINDUCTOR_FREEZING": ("1", "miss"),
        "TORCHINDUCTOR_VEC_ISA_OK": ("1", "unknown"),
        "OMP_NUM_THREADS": ("1", "unknown"),
    }
    for name, (value, want) in cases.items():
        v = judge(f, m, env={"TORCHINDUCTOR_CPP_DYNAMIC_THREADS": "1", name: value})
        got = "hit" if v.hit else ("miss" if v.hashed else "unknown")
        assert got == want, (name, v)
    assert judge(f, m, env={"TORCHINDUCTOR_CPP_DYNAMIC_THREADS": "1", "VLLM_CPU_ATTN_SPLIT_KV": "1"}).hit  # = True
    miss = judge(f, m, env={"TORCHINDUCTOR_CPP_DYNAMIC_THREADS": "1", "TORCHINDUCTOR_FREEZING": "1"}).misses()[0]
    assert miss.category == "inductor" and miss.name == "inductor.freezing" and miss.b == "TORCHINDUCTOR_FREEZING=1"


def test_vllms_logging_level_is_left_to_vllm_where_debug_is_on_one_side_only(tmp_path):
    """On torch < 2.12 vLLM turns Inductor's asserts on where VLLM_LOGGING_LEVEL is DEBUG, which moves its config
    hash (seen on the H100: a check started with DEBUG looked up another key folder). Before, every VLLM_ variable
    outside the compile factors was a hit: a server started with DEBUG to see why it is slow was promised the
    warm's folder and compiled everything. Only vLLM, in a process started with that value, can say; a level that
    is DEBUG on neither side (or on both, in any case) is read alike."""
    m = model_at(tmp_path / "m")
    for warm, server in (({}, {LEVEL: "DEBUG"}), ({LEVEL: "DEBUG"}, {}), ({LEVEL: "INFO"}, {LEVEL: "debug"})):
        v = judge(recorded(m, env=warm), m, env=server)
        assert not v.decided and v.unknown == [f"env {LEVEL} (read while vLLM builds its config)"], (warm, server)
    for warm, server in (
        ({}, {LEVEL: "INFO"}),
        ({LEVEL: "WARNING"}, {LEVEL: "error"}),
        ({LEVEL: "DEBUG"}, {LEVEL: "debug"}),
    ):
        v = judge(recorded(m, env=warm), m, env=server)
        assert v.hit and v.unhashed == [f"env {LEVEL} (vLLM's config reads it alike)"], (warm, server)


def test_a_model_redirect_file_is_left_to_vllm(tmp_path):
    """VLLM_MODEL_REDIRECT_PATH can map the server's model name to another path, which vLLM hashes."""
    m = model_at(tmp_path / "m")
    v = judge(recorded(m), m, env={"VLLM_MODEL_REDIRECT_PATH": str(tmp_path / "redirect.json")})
    assert not v.decided and v.unknown == ["env VLLM_MODEL_REDIRECT_PATH (read while vLLM builds its config)"]


def test_another_config_json_names_the_fields_and_another_path_the_path(tmp_path):
    m = model_at(tmp_path / "m")
    f = recorded(m)
    model_at(m, num_hidden_layers=3, layer_types=["full_attention"] * 3)
    names = [d.name for d in judge(f, m).misses()]
    assert names == ["model_config.hf_config.layer_types", "model_config.hf_config.num_hidden_layers"]
    other = model_at(tmp_path / "other")
    assert judge(f, other).misses()[0].name == "model_config.model"


def test_versions_and_traced_files_are_misses(tmp_path):
    m = model_at(tmp_path / "m")
    assert judge(recorded(m), m, versions={"vllm": "0.31.0", "torch": "2.13.0+cpu"}).misses()[0].name == "vllm"
    assert judge(recorded(m), m, traced={"vllm/model.py": "0" * 64}).misses()[0].category == "code"


def test_a_bundle_without_hashing_facts_asks_vllm(tmp_path):
    m = model_at(tmp_path / "m")
    v = judge(recorded(m, hashing=None), m, flags=[*FLAGS, "--seed", "1"])
    assert not v.decided and "older cachetool" in v.unknown[0]


def test_another_path_and_a_list_field_compare_without_a_crash(tmp_path):
    """vLLM asked (stage 3) for a server at another path whose config.json changed a list field: the comparison
    put the values in a set (``unhashable type: 'list'``, exit 1 even under --on-miss continue)."""
    rec = {
        "config": {
            "hash": "a",
            "values": {
                "model_config": {
                    "hash": "x",
                    "model": "/a",
                    "tokenizer": "/a",
                    "hf_config": {"layer_types": ["full"] * 2},
                }
            },
        },
        "serve": {"values": {"model": "/a"}},
        "compiler": {"values": {}},
    }
    local = {
        "config": {
            "hash": "b",
            "values": {
                "model_config": {
                    "hash": "y",
                    "model": "/b",
                    "tokenizer": "/b",
                    "hf_config": {"layer_types": ["full"] * 3},
                }
            },
        },
        "env": {"hash": None, "values": {}},
        "compiler": {"values": {}},
        "model": "/b",
    }
    names = [d.name for d in key.differences(Factors(rec), local)]
    assert names[0] == "model" and "model_config.hf_config.layer_types" in names
    assert "model_config.tokenizer" not in names  # follows from the path: named once


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=JSON, b=JSON, c=JSON)
def test_any_json_in_recorded_and_local_inputs_compares_without_an_exception(a, b, c):
    rec = {
        "config": {"hash": "h1", "values": {"model_config": {"hash": "x", "model": a, "f": b}, "other": c}},
        "serve": {"values": {"model": a}},
        "env": {"hash": "e", "values": {"V": b}},
        "inductor": {"hash": "i", "values": {"inductor.x": c}},
        "compiler": {"values": {"vllm": c}},
        "code": {"values": {"f": "x"}},
    }
    local = {
        "config": {"hash": "h2", "values": {"model_config": {"hash": "y", "model": c, "f": a}, "other": b}},
        "env": {"hash": "e2", "values": {"V": a}},
        "inductor": {"hash": "j", "values": {"inductor.x": b}},
        "compiler": {"values": {"vllm": a}},
        "model": c,
    }
    diffs = key.differences(Factors(rec), local, {"f": "x"})
    assert all(isinstance(d.name, str) for d in diffs)
    same = key.differences(
        Factors(rec),
        {
            **rec,
            "config": {"hash": "h1", "values": rec["config"]["values"]},
            "env": {"hash": "e", "values": {"V": b}},
            "inductor": {"hash": "i", "values": {"inductor.x": c}},
            "compiler": {"values": {"vllm": c}},
            "model": a,
        },
        {"f": "x"},
    )
    assert same == []


@settings(max_examples=150)
@given(
    launch=st.dictionaries(st.sampled_from(["vllm", "torch", "model", "flags", "env", "config_json"]), JSON),
    hashing=st.dictionaries(st.sampled_from(["options", "defaults", "flags", "env", "hf_config_hashed"]), JSON),
    flags=st.lists(st.text(max_size=10), max_size=6),
    env=st.dictionaries(st.text(max_size=8), st.text(max_size=4)),
)
def test_any_recorded_facts_give_a_verdict_without_an_exception(launch, hashing, flags, env):
    f = Factors({"launch": {"values": launch}, "hashing": {"values": {**hashing, "schema": 1}}, "code": {"values": {}}})
    v = verdict.judge(f, model="/nowhere", flags=flags, env=env, versions={"vllm": "x", "torch": "y"}, traced={})
    assert isinstance(v.hit, bool) and isinstance(v.decided, bool)
