"""The Python API (``cachetool.warm/check/push/pull/expected_cache_key/compilation_config``): config parsing
and result shapes. Fast: nothing here compiles."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

import cachetool
from cachetool.api import WarmSummary
from cachetool.engines.native.start import CompileRunResult
from cachetool.errors import CompilationConfigError, ModelError, StopSignalError, UsageError
from cachetool.transfer.push import PushResult
from compiler.config import CompilationConfig, CompilationMode, CUDAGraphMode, DynamicShapesType


def test_api_names_are_the_top_level_functions() -> None:
    from cachetool import api

    top = [n for n in cachetool.__all__ if n != "__version__"]
    assert set(api.__all__) - set(top) == {"install", "diff", "prune"}  # at the top those names are modules
    for name in top:
        assert getattr(cachetool, name) is getattr(api, name), name


def test_default_and_json() -> None:
    assert cachetool.compilation_config().to_dict() == CompilationConfig().to_dict()
    cfg = cachetool.compilation_config('{"mode": 2, "compile_sizes": [4, 1]}')
    assert cfg.mode == CompilationMode.DYNAMO_TRACE_ONCE and cfg.resolved_compile_sizes == [1, 4]


def test_dict_with_enums_and_overrides(tmp_path: Path) -> None:
    cfg = cachetool.compilation_config(
        {"cudagraph_mode": CUDAGraphMode.FULL, "dynamic_shapes_config": {"type": DynamicShapesType.UNBACKED}},
        overrides=["dynamic_shapes_config.evaluate_guards=true", "-cc.compile_sizes=[8]"],
        cache_root=tmp_path / "r",
    )
    assert cfg.cudagraph_mode == CUDAGraphMode.FULL
    assert cfg.dynamic_shapes_config.type == DynamicShapesType.UNBACKED
    assert cfg.dynamic_shapes_config.evaluate_guards is True
    assert cfg.resolved_compile_sizes == [8]
    assert cfg.cache_dir == str((tmp_path / "r").resolve())


def test_instance_is_copied_and_overridden(tmp_path: Path) -> None:
    mine = CompilationConfig(
        mode=CompilationMode.PIECEWISE, max_cudagraph_capture_size=10, compile_cache_save_format="unpacked"
    )
    before = mine.to_dict()
    same = cachetool.compilation_config(mine, cache_root=tmp_path)
    assert same is not mine and mine.to_dict() == before, "the caller's config is not changed"
    assert same.cache_dir == str(tmp_path.resolve())
    assert {k: v for k, v in same.to_dict().items() if k != "cache_dir"} == {
        k: v for k, v in before.items() if k != "cache_dir"
    }
    assert same.compute_hash() == mine.compute_hash()
    # capture sizes from a max that is not itself a size (10 -> 1, 2, 4, 8) survive the round trip
    over = cachetool.compilation_config(mine, overrides=["mode=2"])
    assert over.mode == CompilationMode.DYNAMO_TRACE_ONCE and mine.mode == CompilationMode.PIECEWISE
    assert over.cudagraph_capture_sizes == [1, 2, 4, 8] and over.compile_cache_save_format == "unpacked"


@pytest.mark.parametrize(
    ("config", "overrides", "needle"),
    [
        ({"modee": 3}, (), "unknown compilation config key 'modee'"),
        (None, ("bogus=1",), "unknown compilation config key 'bogus'"),
        (None, ("dynamic_shapes_config.type=sideways",), "dynamic_shapes_config.type must be one of"),
        ('{"mode": 3', (), "not valid JSON"),
        ("[1]", (), "must be a JSON object"),
        ({"mode": object()}, (), "compilation config: object is not JSON serialisable"),
        (42, (), "must be a CompilationConfig, a dict, a JSON string or None, got int"),
    ],
)
def test_bad_config_is_a_usage_error(config: object, overrides: tuple[str, ...], needle: str) -> None:
    with pytest.raises(UsageError) as err:
        cachetool.compilation_config(config, overrides)
    assert isinstance(err.value, CompilationConfigError) and err.value.exit_code == 2
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_warm_refuses_bad_push_options_before_compiling(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with pytest.raises(UsageError, match="--push needs --sign-key"):
        cachetool.warm("tiny", cache_root=root, push=f"file://{tmp_path}/store/tiny:v1")
    with pytest.raises(UsageError):
        cachetool.warm("tiny", cache_root=root, push="ftp://nowhere/x:1", sign_key="k")
    with pytest.raises(CompilationConfigError):
        cachetool.warm("tiny", cache_root=root, overrides=["nope=1"])
    with pytest.raises(ModelError, match="unknown model 'nope'"):
        cachetool.check("nope", cache_root=root)
    with pytest.raises(ModelError, match="unknown model 'nope'"):
        cachetool.expected_cache_key("nope")
    assert not root.exists()


def _run_result(**kw: object) -> CompileRunResult:
    base = dict(
        command="warm",
        model="tiny",
        device="cpu",
        cache_root="/r",
        cache_dir="/r/t/h/rank_0_0/backbone",
        rank_dir="/r/t/h/rank_0_0",
        cache_key="0123456789",
        graphs_compiled=3,
        graphs_loaded=0,
        graphs_reused=2,
        pieces=5,
        unique_pieces=3,
        dynamo_compiles=1,
        seconds=9.5,
        startup_seconds=7.25,
        compile_seconds=6.0,
    )
    base.update(kw)
    return CompileRunResult(**base)  # type: ignore[arg-type]


def test_warm_summary_json_without_push() -> None:
    doc = WarmSummary(compile=_run_result(), phases={"warm": 9.5}).to_json()
    json.dumps(doc)  # plain JSON
    assert set(doc) == {
        "compile",
        "push",
        "bytes",
        "phases",
        "graphs_compiled",
        "graphs_loaded",
        "cache_dir",
        "seconds",
        "ref",
        "manifest_digest",
    }
    assert doc["push"] is None and doc["ref"] is None and doc["manifest_digest"] is None
    assert doc["bytes"] == {"raw": None, "unique": None, "stored": None}
    assert (doc["graphs_compiled"], doc["graphs_loaded"]) == (3, 0)
    assert doc["cache_dir"] == "/r/t/h/rank_0_0/backbone" and doc["seconds"] == 9.5
    assert doc["compile"]["hit"] is False and doc["compile"]["cache_key"] == "0123456789"


def test_warm_summary_json_with_push() -> None:
    push = PushResult(
        ref="file:///s/tiny:v1",
        manifest_digest="sha256:ab",
        platform="cpu-x",
        signed=True,
        blobs_total=4,
        blobs_uploaded=3,
        blobs_skipped=1,
        bytes_uploaded=100,
        bytes_skipped=20,
        platforms=["cpu-x"],
        seconds=0.5,
    )
    s = WarmSummary(
        compile=_run_result(graphs_compiled=0, graphs_loaded=3),
        push=push,
        bytes_raw=1000,
        bytes_unique=600,
        bytes_compressed=200,
        phases={"warm": 2.0, "pack": 0.25, "push": 0.5},
    )
    doc = json.loads(json.dumps(s.to_json()))
    assert doc["ref"] == "file:///s/tiny:v1" and doc["manifest_digest"] == "sha256:ab"
    assert doc["push"]["blobs_uploaded"] == 3 and doc["push"]["signed"] is True
    assert doc["bytes"] == {"raw": 1000, "unique": 600, "stored": 200}  # ls's size, push's word
    assert doc["phases"] == {"warm": 2.0, "pack": 0.25, "push": 0.5} and doc["seconds"] == 2.75
    assert doc["compile"]["hit"] is True and doc["graphs_loaded"] == 3


def test_a_pull_outcome_is_one_of_the_outcomes_with_the_tables_words():
    """``PullOutcome.outcome`` is typed (an :class:`Outcome`, str-valued so that the outcome line and ``--json`` are
    the words they were): the three successes (``not-needed``: an eager server of a bundle with nothing it reads)
    and one per failure row of the exit-code table that a pull can reach (not `check`'s compiled nor `diff`'s
    differs)."""
    from cachetool import exit_codes
    from cachetool.transfer.pull_policy import Outcome, PullOutcome, failure_outcome

    failures = [row for row in exit_codes.TABLE if row not in (exit_codes.OK, exit_codes.COMPILED, exit_codes.DIFFERS)]
    assert [o.value for o in Outcome] == [
        "installed",
        "already-installed",
        "not-needed",
        *(row.name for row in failures),
    ]
    out = failure_outcome("file:///s/llama:v1", "continue", UsageError("wrong flag"))
    assert isinstance(out, PullOutcome) and out.outcome is Outcome.USAGE_ERROR and out.exit_code == 2
    assert json.loads(json.dumps(out.to_json()))["outcome"] == "usage-error"
    assert out.line().startswith("pull: outcome=usage-error ref=file:///s/llama:v1 exit=2 code=2 on_miss=continue ")
    for row in (exit_codes.COMPILED, exit_codes.DIFFERS):  # no pull ends in them: an unexpected failure
        assert Outcome.of_failure(row) is Outcome.ERROR


class _WarmStoppedBySigterm:
    """An engine whose warm writes into its root, is stopped by SIGTERM while it runs, and removes the root if it
    created it (as the native, vLLM and torch engines do)."""

    def start(self, request):
        root = request.cache_root.path
        created = not root.exists()
        root.mkdir(parents=True, exist_ok=True)
        (root / "half-built").write_text("")
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the stop handler raises in here
        finally:
            if created:
                shutil.rmtree(root)


@pytest.mark.parametrize("there", [False, True], ids=["root-it-created", "root-that-was-there"])
def test_a_stopped_warms_message_names_only_what_is_left_of_its_root(tmp_path: Path, there: bool) -> None:
    """Before, a stopped warm said "pack refuses what it left unfinished in ROOT" even when it had removed ROOT."""
    from cachetool import api

    root = tmp_path / "root"
    if there:
        root.mkdir()
    settled = api.start_request("warm", "tiny", cache_root=root)
    with pytest.raises(StopSignalError) as stopped:
        cachetool.warm(api.Start(_WarmStoppedBySigterm(), settled.request))
    line = str(stopped.value)
    assert line.startswith("warm stopped by SIGTERM: every process it started is ended; ") and "\n" not in line
    assert root.exists() is there
    if there:
        assert f"pack refuses what it left unfinished in {root}" in line, line
    else:
        assert line.endswith(f"the cache root {root} it created is removed") and "pack" not in line, line
