"""The engine boundary's own promises (issue 30): the cache root resolved once, in one order; an engine refuses
another engine's options in one line, also where no key question is asked; a recorded value's whitespace survives
a difference's line; the API's older ``install(expected_key=...)`` still checks the key."""

from __future__ import annotations

import json

import pytest

from cachetool import engines
from cachetool.cache_root import CacheRoot
from cachetool.errors import PreflightError, UsageError
from cachetool.layouts.factors import Difference
from tests.cache_trees import make_native_tree


def test_the_cache_root_is_the_flag_then_the_engines_config_then_its_variable_then_its_default(monkeypatch, tmp_path):
    native, vllm = engines.get("native"), engines.get("vllm")
    monkeypatch.delenv("CACHETOOL_CACHE_ROOT", raising=False)
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    assert CacheRoot.of(None, native).source == "default"  # not the variable's name while it is unset
    monkeypatch.setenv("CACHETOOL_CACHE_ROOT", str(tmp_path / "var"))
    assert CacheRoot.of(None, native) == CacheRoot(tmp_path / "var", "CACHETOOL_CACHE_ROOT")
    configured = native.start_request("warm", "tiny", None, {"config": '{"cache_dir": "%s"}' % (tmp_path / "cc")})
    assert configured.cache_root == CacheRoot(tmp_path / "cc", "config")
    overridden = native.start_request("warm", "tiny", None, {"overrides": (f"cache_dir={tmp_path / 'o'}",)})
    assert overridden.cache_root == CacheRoot(tmp_path / "o", "config")
    assert CacheRoot.of(None, native, str(tmp_path / "cc")) == CacheRoot(tmp_path / "cc", "config")
    flagged = native.start_request("warm", "tiny", tmp_path / "flag", {"config": '{"cache_dir": "/x"}'})
    assert flagged.cache_root == CacheRoot(tmp_path / "flag", "flag")
    assert flagged.config.cache_dir == str(tmp_path / "flag")  # the start writes where its request's root is
    assert CacheRoot.of(None, vllm).path.name == "vllm"  # ~/.cache/vllm: its own default, not ours
    with pytest.raises(UsageError, match="--compilation-config is a native-engine option"):
        vllm.start_request("warm", None, None, {"config": '{"cache_dir": "/x"}'})


def test_an_engine_reads_its_cache_root_from_a_variable_it_declares_itself(monkeypatch, tmp_path):
    """A new engine's variable needs no entry in cachetool/envs.py (issue 36: an engine lives in engines/ alone):
    it declares it (``Engine.variables``) and the cache root reads it there; a name neither registered nor declared
    is still a KeyError, not a silent None."""
    import dataclasses

    from cachetool import envs

    @dataclasses.dataclass
    class Declaring:  # only what CacheRoot.of reads of an engine
        cache_root_variable: str = "CACHETOOL_TEST_OWN_ROOT"
        cache_root_default: str = "~/.cache/own"
        variables: tuple = (envs.EnvVar("CACHETOOL_TEST_OWN_ROOT", None, "a test engine's root"),)

    monkeypatch.setenv("CACHETOOL_TEST_OWN_ROOT", str(tmp_path / "own"))
    assert CacheRoot.of(None, Declaring()) == CacheRoot(tmp_path / "own", "CACHETOOL_TEST_OWN_ROOT")
    with pytest.raises(KeyError):
        CacheRoot.of(None, Declaring(variables=()))


def test_a_config_cache_dir_decides_where_warm_writes_without_cache_root(tmp_path, monkeypatch):
    """``warm -cc.cache_dir=D`` wrote into CACHETOOL_CACHE_ROOT once the root was resolved before the config was
    read; the start is refused on a root it cannot write, so the root it checks is the one it would use."""
    from cachetool import api
    from cachetool.errors import UnwritableRootError

    monkeypatch.setenv("CACHETOOL_CACHE_ROOT", str(tmp_path / "variable"))
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with pytest.raises(UnwritableRootError, match="file"):
        api.warm("tiny", overrides=[f"cache_dir={blocked / 'root'}"])
    assert not (tmp_path / "variable").exists()


def test_pull_engine_vllm_with_a_native_tp_flag_is_refused_without_a_model(cli, tmp_path):
    """``pull --engine vllm -tp 2`` with no model asked no key question, so -tp went unread (exit 5, or 0 under
    --on-miss continue): a flag that cannot apply is a usage error."""
    r = cli(
        "pull",
        f"file://{tmp_path}/store/x:y",
        str(tmp_path / "root"),
        "--engine",
        "vllm",
        "-tp",
        "2",
        "--on-miss",
        "continue",
        "--json",
    )
    assert r.rc == 2, r
    assert "native-engine option" in json.loads(r.out)["message"]


def test_diff_engine_vllm_refuses_a_b_that_is_not_local_before_reading_a(cli, tmp_path):
    r = cli("diff", str(tmp_path / "missing.ctb"), str(tmp_path / "other.ctb"), "--engine", "vllm")
    assert r.rc == 2 and "B must be 'local'" in r.err, r


def test_a_difference_keeps_the_whitespace_that_is_the_difference():
    line = Difference("env", "CFLAGS", "-O2  -g", "-O2 -g").line()
    assert "'-O2  -g' vs '-O2 -g'" in line


def test_install_with_an_expected_key_computed_beforehand_refuses_another_key(tmp_path, keys):
    from cachetool import api

    src = make_native_tree(tmp_path / "src", ranks=("rank_0_0",))
    api.pack(src, tmp_path / "b.ctb", sign_key=keys["priv"])
    with pytest.raises(PreflightError, match="0123456789"):
        api.install(
            tmp_path / "b.ctb",
            tmp_path / "root",
            trust=[keys["pub"]],
            expected_key={"hash": "0123456789", "factors": {}},
        )
    assert not (tmp_path / "root" / "torch_compile_cache").exists()


def test_every_engine_has_every_member_of_the_interface():
    """The torch engine lacked ``notice`` (added to the interface with the vLLM release notice): every pull with
    ``--engine torch`` failed with an AttributeError (exit 1)."""
    from cachetool.engines.base import Engine

    members = {n for n in vars(Engine) if not n.startswith("_")} | set(Engine.__annotations__)
    missing = {name: sorted(m for m in members if not hasattr(e, m)) for name, e in engines.ENGINES.items()}
    assert missing == {name: [] for name in engines.ENGINES}


@pytest.mark.parametrize(
    ("engine", "options", "line"),
    [
        ("native", {"load_weights": True}, "--load-weights is for --engine vllm"),
        ("native", {"engine_flags": ["-tp", "2"]}, "flags after -- are vLLM's"),
        ("vllm", {"rank": 1}, "--rank is a native-engine option"),
        ("vllm", {"device": "cpu"}, "--device is a native-engine option"),  # given is chosen, whatever its value
        (
            "torch",
            {"engine_flags": ["python", "x.py"], "tensor_parallel_size": 2},
            "--tensor-parallel-size is another engine's option",
        ),
        ("native", {"devcie": "cpu"}, "unknown start option 'devcie'"),
    ],
)
def test_each_engine_parses_its_own_request_and_refuses_another_engines_option_in_one_line(
    engine, options, line, tmp_path
):
    with pytest.raises(UsageError) as refused:
        engines.get(engine).start_request("warm", "tiny" if engine != "torch" else None, tmp_path, options)
    assert line in str(refused.value) and "\n" not in str(refused.value)


def test_a_listener_is_no_option_an_engine_refuses(tmp_path):
    """The CLI hands every engine both listeners; each calls the one it has something for."""
    said = []
    for name in engines.ENGINES:
        request = engines.get(name).start_request(
            "check",
            "tiny" if name != "torch" else None,
            tmp_path,
            {
                "on_progress": said.append,
                "engine_progress": said.append,
                **({"engine_flags": ["python", "x.py"]} if name == "torch" else {}),
            },
        )
        assert request.command == "check" and request.cache_root.path == tmp_path
    assert not tmp_path.joinpath("torch_compile_cache").exists()  # parsing a request writes nothing
