"""A `vllm serve` command line read as vLLM reads it, without vLLM: its spellings, the eager servers, and a
comparison of option values that is total over any JSON value."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from cachetool.engines.vllm import server_command as sc

EAGER = [
    (["--enforce-eager"], {}),
    (["--enforce_eager"], {}),
    (["-O0"], {}),
    (["-O", "0"], {}),
    (["-O=0"], {}),
    (["--optimization-level", "0"], {}),
    (["--optimization-level=0"], {}),
    (["--optimization_level", "0"], {}),
    (["-cc.mode=0"], {}),
    (["-cc.mode=NONE"], {}),
    (["-cc.mode", "none"], {}),
    (["--compilation-config.mode=0"], {}),
    (["--compilation-config", '{"mode": 0}'], {}),
    (["-cc", '{"level": 0}'], {}),
    (["-O3", "--enforce-eager"], {}),
    (["-cc.mode=3", "--enforce-eager"], {}),
    (["--max-model-len", "64"], {"TORCH_COMPILE_DISABLE": "1"}),
]
COMPILING = [
    ([], {}),
    (["-O3"], {}),
    (["-O1"], {}),
    (["--optimization-level", "2"], {}),
    (["-O0", "-cc.mode=3"], {}),
    (["--enforce-eager", "--no-enforce-eager"], {}),
    (["--max-model-len", "0"], {}),
    (["-cc.mode=3"], {}),
    (["--compilation-config", '{"cudagraph_mode": "NONE"}'], {}),
    ([], {"TORCH_COMPILE_DISABLE": "0"}),
]


@pytest.mark.parametrize("flags,env", EAGER)
def test_every_spelling_of_an_eager_server_compiles_nothing(flags, env):
    assert sc.compiles_nothing(flags, env)


@pytest.mark.parametrize("flags,env", COMPILING)
def test_a_compiling_server_is_not_called_eager(flags, env):
    assert sc.compiles_nothing(flags, env) is None


def test_vllms_spelling_rules():
    assert sc.normalized(["--max_model_len=8", "--x_y", "a_b", "-O3", "-O=2", "-O", "1", "-cc.cudagraph_mode=A_B"]) == [
        "--max-model-len=8",
        "--x-y",
        "a_b",
        "--optimization-level",
        "3",
        "--optimization-level",
        "2",
        "--optimization-level",
        "1",
        "-cc.cudagraph_mode=A_B",
    ]
    rest, dicts = sc.split_dict_args(["-cc.mode=3", "-tp", "2", "-cc.pass_config.fuse", "true"])
    assert rest == ["-tp", "2"] and dicts == {"-cc": {"mode": 3, "pass_config": {"fuse": True}}}


TABLE = {
    "--max-model-len": {"dest": "max_model_len", "takes": 1},
    "--enforce-eager": {"dest": "enforce_eager", "takes": 0, "const": True},
    "--no-enforce-eager": {"dest": "enforce_eager", "takes": 0, "const": False},
    "--served-model-name": {"dest": "served_model_name", "takes": "+"},
    "--compilation-config": {"dest": "compilation_config", "takes": 1},
    "-cc": {"dest": "compilation_config", "takes": 1},
    "--port": {"dest": "port", "takes": 1, "server_only": True},
}


def test_a_command_line_read_with_the_recorded_option_table():
    p = sc.parse(
        [
            "--max_model_len",
            "64",
            "--served-model-name",
            "a",
            "b",
            "--enforce-eager",
            "-cc.mode=3",
            "--port=9",
            "--unknown-flag",
            "positional",
        ],
        TABLE,
    )
    assert p.values == {
        "max_model_len": "64",
        "served_model_name": ["a", "b"],
        "enforce_eager": True,
        "compilation_config": {"mode": 3},
        "port": "9",
    }
    assert p.unread == ["--unknown-flag", "positional"]
    assert p.given["compilation_config"] == "-cc"


def test_option_values_compare_as_vllm_reads_them():
    assert sc.same_value("256", 256) and sc.same_value("0.50", 0.5) and sc.same_value(["1", "2"], [1, 2])
    assert not sc.same_value("256", "128") and not sc.same_value("bfloat16", "float32")
    assert sc.same_value(float("nan"), float("nan")) and not sc.same_value([1], [1, 2])


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(JSON, JSON)
def test_the_value_comparison_is_total_and_reflexive(a, b):
    assert sc.same_value(a, a)
    assert sc.same_value(a, b) == sc.same_value(b, a)
    assert isinstance(sc.canonical(a), str)


@given(st.lists(st.text(max_size=12), max_size=12), st.dictionaries(st.text(max_size=10), st.text(max_size=6)))
def test_any_command_line_is_read_without_an_exception(flags, env):
    reason = sc.compiles_nothing(flags, env)
    assert reason is None or isinstance(reason, str)
    parsed = sc.parse(flags, TABLE)
    assert set(parsed.values) <= {spec["dest"] for spec in TABLE.values()}
    assert len(sc.normalized(flags)) >= len(flags)
