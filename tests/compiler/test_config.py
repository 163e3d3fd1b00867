"""CompilationConfig: parsing, overrides, validation, opt-out hashing. No compilation."""

from __future__ import annotations

import pytest

from compiler.config import (
    ATTENTION_OPS,
    CompilationConfig,
    CompilationMode,
    ConfigError,
    CUDAGraphMode,
    DynamicShapesType,
)
from tests.cli_calls import run_cli


def test_defaults() -> None:
    cfg = CompilationConfig()
    assert cfg.mode == CompilationMode.PIECEWISE
    assert cfg.resolved_splitting_ops == list(ATTENTION_OPS)
    assert cfg.dynamic_shapes_config.type == DynamicShapesType.BACKED
    assert cfg.dynamic_shapes_config.evaluate_guards is False
    assert cfg.cudagraph_mode is None  # resolved per device (NONE on the CPU)
    assert cfg.compile_cache_save_format == "binary"


def test_save_format_default_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHETOOL_COMPILE_CACHE_SAVE_FORMAT", "unpacked")
    assert CompilationConfig().compile_cache_save_format == "unpacked"


def test_json_and_dot_overrides() -> None:
    cfg = CompilationConfig.from_cli(
        '{"mode": 3, "splitting_ops": [], "cudagraph_capture_sizes": [4, 1, 2, 2]}',
        [
            "-cc.dynamic_shapes_config.type=unbacked",
            "-cc.dynamic_shapes_config.evaluate_guards=true",
            "-cc.cudagraph_mode=FULL",
            "-cc.compile_sizes=[1,8]",
        ],
    )
    assert cfg.dynamic_shapes_config.type == DynamicShapesType.UNBACKED
    assert cfg.dynamic_shapes_config.evaluate_guards is True
    assert cfg.splitting_ops == [] and cfg.resolved_splitting_ops == []
    assert cfg.cudagraph_mode == CUDAGraphMode.FULL
    assert cfg.cudagraph_capture_sizes == [1, 2, 4] and cfg.max_cudagraph_capture_size == 4
    assert cfg.resolved_compile_sizes == [1, 8]


def test_capture_sizes_from_max_and_compile_sizes_alias() -> None:
    cfg = CompilationConfig.from_dict(
        {"max_cudagraph_capture_size": 32, "cudagraph_mode": "piecewise", "compile_sizes": ["cudagraph_capture_sizes"]}
    )
    assert cfg.cudagraph_capture_sizes == [1, 2, 4, 8, 16, 24, 32]
    assert cfg.resolved_compile_sizes == [1, 2, 4, 8, 16, 24, 32]
    assert cfg.cudagraph_mode.has_piecewise()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"modee": 3}, "unknown compilation config key 'modee'"),
        ({"dynamic_shapes_config": {"typ": "backed"}}, "unknown compilation config key 'dynamic_shapes_config.typ'"),
        ({"mode": 7}, "mode must be 0, 1, 2 or 3"),
        ({"dynamic_shapes_config": {"type": "wobbly"}}, "dynamic_shapes_config.type must be one of"),
        ({"compile_cache_save_format": "zip"}, "compile_cache_save_format must be"),
        ({"cudagraph_mode": "SOMETIMES"}, "cudagraph_mode must be one of"),
        ({"cudagraph_capture_sizes": [0, 2]}, "positive integers"),
        ({"cudagraph_capture_sizes": [1, 2], "max_cudagraph_capture_size": 8}, "must equal the largest"),
        ({"cudagraph_mode": "PIECEWISE", "splitting_ops": []}, "needs splitting_ops"),
        ({"cudagraph_mode": "PIECEWISE", "mode": 1}, "needs mode=3"),
        ({"compile_sizes": [-1]}, "compile_sizes entries"),
        ({"splitting_ops": "x"}, "splitting_ops must be a list"),
    ],
)
def test_bad_values_one_line(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        CompilationConfig.from_dict(data)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_json_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        CompilationConfig.from_json('{"mode": 3,')
    assert "not valid JSON" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError):
        CompilationConfig.from_json("[1, 2]")
    with pytest.raises(ConfigError):
        CompilationConfig.from_cli(None, ["-cc.mode"])


def test_hash_is_opt_out() -> None:
    base = CompilationConfig()
    # Excluded fields: same hash.
    assert CompilationConfig(cache_dir="/elsewhere").compute_hash() == base.compute_hash()
    assert CompilationConfig(compile_cache_save_format="unpacked").compute_hash() == base.compute_hash()
    # Every other field is hashed, including ones nobody listed: check each field changes the hash.
    changed = {
        "mode": CompilationConfig(mode=CompilationMode.DYNAMO_TRACE_ONCE),
        "splitting_ops": CompilationConfig(splitting_ops=[]),
        "compile_sizes": CompilationConfig(compile_sizes=[4]),
        "cudagraph_mode": CompilationConfig.from_dict({"cudagraph_mode": "FULL"}),
        "cudagraph_capture_sizes": CompilationConfig(cudagraph_capture_sizes=[1, 2]),
        "max_cudagraph_capture_size": CompilationConfig(max_cudagraph_capture_size=16),
        "dynamic_shapes_config": CompilationConfig.from_dict({"dynamic_shapes_config": {"type": "unbacked"}}),
    }
    import dataclasses

    fields = {f.name for f in dataclasses.fields(CompilationConfig)}
    assert set(changed) | CompilationConfig.HASH_EXCLUDE == fields, "a new field needs a hash test"
    for name, cfg in changed.items():
        assert cfg.compute_hash() != base.compute_hash(), name


def test_default_splitting_ops_hash_like_explicit() -> None:
    assert CompilationConfig(splitting_ops=list(ATTENTION_OPS)).compute_hash() == CompilationConfig().compute_hash()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--compilation-config", "{bad json"], "not valid JSON"),
        (["--compilation-config", '{"nope": 1}'], "unknown compilation config key 'nope'"),
        (["-cc.dynamic_shapes_config.type=sideways"], "dynamic_shapes_config.type must be one of"),
        (["-cc.bogus=1"], "unknown compilation config key 'bogus'"),
    ],
)
def test_cli_bad_config_one_line_error_writes_nothing(tmp_path, args: list[str], needle: str) -> None:
    root = tmp_path / "root"
    proc = run_cli("warm", "--model", "tiny", "--cache-root", str(root), *args)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert not root.exists()


def test_cli_unknown_model_one_line(tmp_path) -> None:
    proc = run_cli("check", "--model", "no-such-model", "--cache-root", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: unknown model 'no-such-model'")
    assert not (tmp_path / "r").exists()
