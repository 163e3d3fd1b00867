"""Bad input to ``cachetool warm`` / ``check``: one ``error:`` line, exit code 2, nothing under the cache root,
no traceback. In-process through the CLI's ``main`` (no compilation starts: each case fails before the model
is built or while its weights are read); tests/compiler/test_config.py runs a few of them as real subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cachetool.cli import main
from compiler.models.llama import build_model
from compiler.models.safetensors_io import save_safetensors
from tests.hf_folders import hf_config, hf_tensors


@pytest.fixture(autouse=True)
def _keep_logging() -> object:
    """``main`` sets up the ``compiler``/``cachetool`` loggers (a handler, no propagation); undo it so that later
    tests' ``caplog`` still sees their records."""
    import logging

    saved = {
        n: (lg.handlers[:], lg.propagate, lg.level) for n in ("compiler", "cachetool") for lg in [logging.getLogger(n)]
    }
    yield
    for n, (handlers, propagate, level) in saved.items():
        lg = logging.getLogger(n)
        lg.handlers[:], lg.propagate = handlers, propagate
        lg.setLevel(level)


def _folder(
    tmp: Path, name: str, config: object, tensors: dict[str, torch.Tensor] | None = None, raw: bytes | None = None
) -> str:
    d = tmp / name
    d.mkdir()
    (d / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if tensors is not None:
        save_safetensors(tensors, d / "model.safetensors")
    if raw is not None:
        (d / "model.safetensors").write_bytes(raw)
    return str(d)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("models")
    good = hf_tensors(build_model("tiny"))
    missing = dict(good)
    missing.pop("model.norm.weight")
    misshaped = dict(good)
    misshaped["model.layers.0.self_attn.k_proj.weight"] = good["model.layers.0.self_attn.k_proj.weight"][:8]
    _folder(tmp, "ok", hf_config(), good)
    whole = (tmp / "ok" / "model.safetensors").read_bytes()
    bert = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": 100,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
    }
    return {
        "bert": _folder(tmp, "bert", bert),
        "bert_file": str(tmp / "bert" / "config.json"),
        "no_heads": _folder(tmp, "no_heads", {k: v for k, v in hf_config().items() if k != "num_attention_heads"}),
        "list": _folder(tmp, "list", "[1, 2]"),
        "bad_json": _folder(tmp, "bad_json", '{"vocab_size": 10'),
        "bad_value": _folder(tmp, "bad_value", {**hf_config(), "hidden_size": "wide"}),
        "kv_heads": _folder(tmp, "kv_heads", {**hf_config(), "num_key_value_heads": 3}),
        "no_config": str((tmp / "ok").parent / "nothing_here"),
        "garbage": _folder(tmp, "garbage", hf_config(), raw=bytes(range(256)) * 20),
        "truncated": _folder(tmp, "truncated", hf_config(), raw=whole[: len(whole) // 2]),
        "missing": _folder(tmp, "missing", hf_config(), missing),
        "misshaped": _folder(tmp, "misshaped", hf_config(), misshaped),
        "ok": str(tmp / "ok"),
    }


CASES = [
    # (id, extra args, needle in the error line)
    ("unknown -cc key", ["-cc.bogus=1"], "unknown compilation config key 'bogus'"),
    (
        "unknown nested -cc key",
        ["-cc.dynamic_shapes_config.kind=x"],
        "unknown compilation config key 'dynamic_shapes_config.kind'",
    ),
    ("bad JSON", ["--compilation-config", '{"mode": 3,'], "not valid JSON"),
    ("JSON not an object", ["--compilation-config", "[3]"], "must be a JSON object"),
    ("bad value", ["-cc.mode=9"], "mode must be 0, 1, 2 or 3"),
    ("bad enum value", ["-cc.cudagraph_mode=SOMETIMES"], "cudagraph_mode must be one of"),
    ("-cc without value", ["-cc.mode"], "needs a value"),
    ("tp 0", ["-tp", "0"], "'--tensor-parallel-size' / '-tp': 0 is not in the range x>=1"),
    ("negative rank", ["--rank", "-1"], "'--rank': -1 is not in the range"),
    ("unknown flag", ["--no-such-flag"], "No such option '--no-such-flag'"),
    ("unsupported device", ["--device", "tpu"], "unsupported device 'tpu'"),
]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, [ln for ln in err.splitlines() if ln.strip()]


def _assert_one_line_error(code: int, lines: list[str], needle: str, root: Path) -> None:
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert needle in lines[0], lines
    assert "Traceback" not in lines[0]
    assert not root.exists(), sorted(root.rglob("*"))


@pytest.mark.parametrize("command", ["warm", "check"])
@pytest.mark.parametrize(("args", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_flags_and_config(
    command: str, args: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    code, lines = _run([command, "--model", "tiny", "--cache-root", str(root), *args], capsys)
    _assert_one_line_error(code, lines, needle, root)


def test_missing_model_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    code, lines = _run(["warm", "--cache-root", str(root)], capsys)
    _assert_one_line_error(code, lines, "warm needs --model", root)  # the native engine's, since --model is optional


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("tp", ["1", "2"])
def test_cuda_without_gpu(tp: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    code, lines = _run(["warm", "--model", "tiny", "--cache-root", str(root), "--device", "cuda", "-tp", tp], capsys)
    _assert_one_line_error(code, lines, "--device cuda: no CUDA device is available", root)


MODEL_CASES = [
    ("unknown", "no-such-model", "unknown model 'no-such-model'"),
    ("no config.json", "no_config", "unknown model"),
    ("not llama (folder)", "bert", "is not a Llama config (BertModel); supported: LlamaForCausalLM"),
    ("not llama (file)", "bert_file", "is not a Llama config (BertModel)"),
    ("missing dims", "no_heads", "lacks num_attention_heads"),
    ("config is a list", "list", "is not a JSON object"),
    ("config is bad JSON", "bad_json", "cannot read model config"),
    ("bad dim value", "bad_value", "bad value in model config"),
    ("heads vs kv heads", "kv_heads", "is not a multiple of num_key_value_heads 3"),
    ("garbage safetensors", "garbage", "cannot read weights"),
    ("truncated safetensors", "truncated", "outside the file's"),
    ("missing weight", "missing", "weights missing in"),
    ("misshaped weight", "misshaped", "has shape (8, 64); the model config needs (32, 64)"),
]


@pytest.mark.parametrize("command", ["warm", "check"])
@pytest.mark.parametrize(("key", "needle"), [c[1:] for c in MODEL_CASES], ids=[c[0] for c in MODEL_CASES])
def test_bad_models(
    command: str, key: str, needle: str, models: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    spec = models.get(key, key)
    code, lines = _run([command, "--model", spec, "--cache-root", str(root)], capsys)
    _assert_one_line_error(code, lines, needle, root)


def test_bad_model_with_tensor_parallel(
    models: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked before any rank process starts."""
    root = tmp_path / "root"
    code, lines = _run(["warm", "--model", models["garbage"], "--cache-root", str(root), "-tp", "2"], capsys)
    _assert_one_line_error(code, lines, "cannot read weights", root)


def test_good_folder_loads_its_weights(models: dict[str, str]) -> None:
    """The control for the weight cases: the same folder with every tensor intact loads them all."""
    loaded = build_model(models["ok"]).state_dict()
    for name, t in build_model("tiny").state_dict().items():
        torch.testing.assert_close(loaded[name], t, msg=name)
