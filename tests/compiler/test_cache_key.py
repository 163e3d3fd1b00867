"""The cache key: factors, hash folder, path independence. Dynamo traces only (key-only runs), no Inductor."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compiler import cache_key
from compiler.config import CompilationConfig
from compiler.runner import compute_cache_key
from tests.cli_calls import REPO, cli_env


@pytest.fixture(scope="module")
def base_key(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("keyroot")
    return compute_cache_key("tiny", compilation_config=CompilationConfig(cache_dir=str(root)))


def test_key_layout_and_public_factor_functions(base_key) -> None:
    key, layout = base_key
    assert len(key.hash) == 10 and layout.dir.parts[-4:] == ("torch_compile_cache", key.hash, "rank_0_0", "backbone")
    assert set(key.factors.names) == {"env", "config", "code", "compiler"}
    # cachetool's preflight contract: the local functions reproduce the env and compiler factors.
    assert key.factors.values("env") == cache_key.local_env_factors()
    assert key.factors.values("compiler") == cache_key.local_compiler_factors("cpu")
    for name in key.factors.names:
        f = key.factors.factor(name)
        assert cache_key.factor_hash(f.values) == f.hash, name
    assert cache_key.combine({n: key.factors.hash_of(n) for n in key.factors.names}) == key.hash
    assert key.factors.factor("compiler").evidence is not None  # what a preflight's cheap path compares
    doc = key.to_json()
    assert doc["schema"] == 1 and doc["hash"] == key.hash
    assert set(doc["factors"]["config"]["values"]) == {"compilation_config", "model_config"}
    assert not (layout.root / "torch_compile_cache").exists(), "a key-only run writes nothing"


def test_code_factor_is_path_independent(base_key) -> None:
    key, _ = base_key
    code = key.factors.values("code")
    assert "module:compiler.models.llama" in code
    assert all(not k.split(":", 1)[1].startswith("/") for k in code), code
    assert not any(str(REPO) in k or "site-packages" in k for k in code)


def test_hashed_field_changes_folder_excluded_and_root_do_not(base_key, tmp_path) -> None:
    key, layout = base_key
    other_root = tmp_path / "moved"
    same, same_layout = compute_cache_key(
        "tiny",
        compilation_config=CompilationConfig.from_dict(
            {"cache_dir": str(other_root), "compile_cache_save_format": "unpacked"}
        ),
    )
    assert same.hash == key.hash and same_layout.root == other_root.resolve()
    diff, diff_layout = compute_cache_key(
        "tiny",
        compilation_config=CompilationConfig.from_dict(
            {"cache_dir": str(layout.root), "dynamic_shapes_config": {"type": "unbacked"}}
        ),
    )
    assert diff.hash != key.hash and diff_layout.hash_dir != layout.hash_dir
    assert diff.factors.hash_of("config") != key.factors.hash_of("config")
    assert diff.factors.hash_of("code") == key.factors.hash_of("code")


_KEY_SCRIPT = """
import json, compiler
from compiler.runner import compute_cache_key
key, layout = compute_cache_key("tiny")
print(json.dumps({"hash": key.hash, "file": compiler.__file__, "code": key.factors.values("code")}))
"""


def _key_in(path: Path) -> dict:
    env = cli_env(PYTHONPATH=str(path))
    proc = subprocess.run(
        [sys.executable, "-c", _KEY_SCRIPT], capture_output=True, text=True, env=env, cwd=str(path), timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_same_code_at_another_path_same_hash_and_edit_changes_it(tmp_path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    a, b = tmp_path / "install_a", tmp_path / "deep" / "install_b"
    for d in (a, b):
        shutil.copytree(REPO / "compiler", d / "compiler", ignore=ignore)
    ka, kb = _key_in(a), _key_in(b)
    assert ka["file"].startswith(str(a)) and kb["file"].startswith(str(b))
    assert ka["hash"] == kb["hash"]
    llama = b / "compiler" / "models" / "llama.py"
    llama.write_text(llama.read_text() + "\n# an edit to a traced file\n")
    kc = _key_in(b)
    assert kc["hash"] != ka["hash"]
    changed = [k for k in kc["code"] if kc["code"][k] != ka["code"].get(k)]
    assert changed == ["module:compiler.models.llama"]


def test_root_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path, base_key) -> None:
    monkeypatch.setenv("CACHETOOL_CACHE_ROOT", str(tmp_path / "envroot"))
    key, layout = compute_cache_key("tiny")
    assert layout.root == (tmp_path / "envroot").resolve()
    assert key.hash == base_key[0].hash  # the root is not part of the key


def test_factors_file_round_trips_typed(base_key, tmp_path) -> None:
    """``cache_key_factors.json`` is parsed once into typed factors and written back as read."""
    key, _ = base_key
    back = cache_key.CacheKey.read(key.write(tmp_path))
    assert back == key and isinstance(back.factors, cache_key.Factors)
    assert back.factors.factor("compiler") == key.factors.factor("compiler")
    assert json.loads((tmp_path / cache_key.FACTORS_FILE).read_text())["factors"] == key.factors.to_json()


def test_factors_of_another_shape_stay_raw_and_unstructured() -> None:
    """Another engine's file (or a damaged one) parses without error: no typed entries, the JSON kept as it was,
    and a non-dict ``values`` is one ``value`` field."""
    raw = cache_key.Factors.parse({"raw": {"vllm": "0.32"}})
    assert (
        raw is not None
        and not raw.structured
        and raw.factor("raw") is None
        and raw.to_json() == {"raw": {"vllm": "0.32"}}
    )
    assert cache_key.Factors.parse([1, 2]) is None and cache_key.Factors.parse(None) is None
    odd = cache_key.Factors.parse({"env": {"hash": 5, "values": "x"}, "serve": {"values": {"model": "/m"}}})
    assert odd.factor("env") == cache_key.Factor(None, {"value": "x"}) and odd.values("serve") == {"model": "/m"}
    assert odd.names == ("env", "serve") and cache_key.Factors.parse(odd) is odd
