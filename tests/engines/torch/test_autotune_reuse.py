"""cachetool/engines/torch/autotune_reuse.py: torch 2.13's ``CachingAutotuner.recheck_autotune_cache`` rule for the
torch releases that tune again on a cache hit (PyTorch issue #172819), and the ``sitecustomize`` it becomes in a
pulled root's ``.cachetool-site`` folder.

The rule is compared with torch 2.13's own method on stub autotuners and a real autotune cache file (written by
torch's ``AutotuneCache``); the start-up side runs in a few fresh interpreters (each importing torch costs
seconds, so they are kept few)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("triton")

import torch
import triton  # after the skip: a box without Triton skips the module
from torch._inductor.runtime import triton_heuristics as heuristics
from torch._inductor.runtime.autotune_cache import AutotuneCache

from cachetool.engines.torch import autotune_reuse, run as torch_run

SOURCE = Path(autotune_reuse.__file__)
PROBE = Path(torch_run.__file__).with_name("probe.py")
META = {"coordinate_descent_tuning": True}
TORCH_RULE = heuristics.CachingAutotuner.__dict__["recheck_autotune_cache"]  # torch's own, as imported here

# ---------------------------------------------------------------------------------------------- the rule


class _Compiled:
    """What ``CachingAutotuner.compile_results`` holds, as far as the rule reads it."""

    def __init__(self, config):
        self.config = config


class _Autotuner:
    """The attributes and methods of a ``CachingAutotuner`` that ``recheck_autotune_cache`` uses."""

    def __init__(self, configs, filename: str):
        self.compile_results = [_Compiled(c) for c in configs]
        self.filename = filename
        self.inductor_meta = dict(META)
        self.fn = types.SimpleNamespace(fn=object())  # the kernel's source is loaded: no reload
        self.autotune_cache_info = None
        self.precompiled: list = []
        self.reloads = 0

    def is_statically_launchable(self) -> bool:
        return True

    def _precompile_config(self, cfg):
        self.precompiled.append(cfg)
        return _Compiled(cfg)

    def reload_kernel_from_src(self):
        self.reloads += 1
        return types.SimpleNamespace(fn=object())


def _configs(*xblocks: int) -> list:
    return [triton.Config({"XBLOCK": x}, num_warps=4, num_stages=1) for x in xblocks]


def _kernel(tmp_path: Path) -> str:
    """A kernel's file name (the autotune cache file goes beside it)."""
    path = tmp_path / "kernels" / "cabcdef0123.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# a kernel\n")
    return str(path)


def _save_winner(filename: str, compiled: list, winner, found_by_coordesc: bool) -> None:
    """The ``*.best_config`` file a tuning run leaves beside the kernel, written by torch's own cache."""
    cache = AutotuneCache.create(META, filename, heuristics.hash_configs(compiled))
    assert cache is not None
    cache.save(winner, 0, found_by_coordesc=found_by_coordesc)


def _outcome(tuner: _Autotuner, compiled_before: list) -> dict:
    """What the rule left: which results (a compiled one by its index, else a new one), their configs and marks,
    what was compiled anew, and the cache information."""
    return {
        "results": [compiled_before.index(r) if r in compiled_before else "new" for r in tuner.compile_results],
        "configs": [heuristics.triton_config_to_hashable(r.config) for r in tuner.compile_results],
        "by_coordesc": [getattr(r.config, "found_by_coordesc", False) for r in tuner.compile_results],
        "precompiled": [heuristics.triton_config_to_hashable(c) for c in tuner.precompiled],
        "reloads": tuner.reloads,
        "info": tuner.autotune_cache_info,
    }


def _both_rules(filename: str, xblocks: tuple[int, ...]) -> tuple[dict, dict]:
    """torch 2.13's method and the backport, each on its own autotuner (fresh configs) of the same kernel."""
    outcomes = []
    for rule in (TORCH_RULE, autotune_reuse.recheck_autotune_cache):
        tuner = _Autotuner(_configs(*xblocks), filename)
        before = list(tuner.compile_results)
        rule(tuner, tuner.reload_kernel_from_src)
        outcomes.append(_outcome(tuner, before))
    return outcomes[0], outcomes[1]


def test_torch_rule_under_comparison_is_torchs_own_method():
    assert TORCH_RULE.__module__ == heuristics.__name__
    assert TORCH_RULE is not autotune_reuse.recheck_autotune_cache


def test_one_compiled_config_takes_the_coordesc_winner_compiled_anew_marked_as_torch_2_13_does(tmp_path):
    filename = _kernel(tmp_path)
    [winner] = _configs(256)
    winner.num_warps = 8
    _save_winner(filename, _configs(64), winner, found_by_coordesc=True)

    torchs, ours = _both_rules(filename, (64,))

    assert ours == torchs
    assert ours["results"] == ["new"]
    assert ours["configs"] == [(("XBLOCK", 256), ("num_warps", 8), ("num_stages", 1))]
    assert ours["by_coordesc"] == [True]
    assert ours["precompiled"] == ours["configs"]  # compiled once, the winner alone
    assert ours["reloads"] == 0  # the kernel's source was there
    assert ours["info"]["autotune_cache_state"] == "hit"


def test_a_coordesc_winner_among_the_compiled_configs_is_kept_with_its_mark_as_torch_2_13_does(tmp_path):
    filename = _kernel(tmp_path)
    _save_winner(filename, _configs(64, 128), _configs(128)[0], found_by_coordesc=True)

    torchs, ours = _both_rules(filename, (64, 128))

    assert ours == torchs
    assert ours["results"] == [1]  # narrowed to the compiled result of the winner, nothing compiled anew
    assert ours["by_coordesc"] == [True]
    assert ours["precompiled"] == []
    assert ours["info"]["autotune_cache_state"] == "hit"


@pytest.mark.parametrize("xblocks", [(64,), (64, 128)], ids=["one-config", "two-configs"])
def test_without_a_cache_file_the_compiled_results_stay_unmarked_as_torch_2_13_leaves_them(tmp_path, xblocks):
    filename = _kernel(tmp_path)

    torchs, ours = _both_rules(filename, xblocks)

    assert ours == torchs
    assert ours["results"] == list(range(len(xblocks)))
    assert ours["by_coordesc"] == [False] * len(xblocks)
    assert ours["precompiled"] == []
    assert ours["info"]["autotune_cache_state"] == "miss"


# ---------------------------------------------------------------------------------------------- which torch


@pytest.mark.parametrize("version", ["2.11.0+cu130", "2.12.1", "2.12.0a0+git1234", "2.13.0+cpu", "2.13.1+cu130"])
def test_torch_2_11_to_2_13_need_the_rule(version):
    assert autotune_reuse.needed(version) is True


@pytest.mark.parametrize("version", ["2.14.0", "3.0.0", "2.10.0", "2.8.1", "not a version", "", "2"])
def test_releases_never_checked_here_and_an_unreadable_version_do_not_need_it(version):
    assert autotune_reuse.needed(version) is False


def test_a_release_it_was_not_checked_against_keeps_torchs_own_method(monkeypatch):
    class CachingAutotuner:
        def recheck_autotune_cache(self, reload_kernel_from_src):
            pass

    heuristics_of_later_torch = types.SimpleNamespace(
        CachingAutotuner=CachingAutotuner, check_autotune_cache=None, triton_config_to_hashable=None
    )
    CachingAutotuner._precompile_config = lambda self, config: None
    own = CachingAutotuner.recheck_autotune_cache
    monkeypatch.setattr(torch, "__version__", "2.14.0")

    assert autotune_reuse.apply(heuristics_of_later_torch) is False
    assert CachingAutotuner.recheck_autotune_cache is own
    assert autotune_reuse.apply(heuristics_of_later_torch, force=True) is True  # what the config file asks
    assert CachingAutotuner.recheck_autotune_cache is autotune_reuse.recheck_autotune_cache


def test_a_torch_that_lacks_what_the_rule_calls_is_left_as_it_is_with_one_line(capsys):
    heuristics_without = types.SimpleNamespace(CachingAutotuner=type("CachingAutotuner", (), {}))
    assert autotune_reuse.apply(heuristics_without, force=True) is False
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lacks" in err[0] and "recheck_autotune_cache" in err[0]


# ---------------------------------------------------------------------------------------------- as sitecustomize


def _env(pythonpath: list[Path]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}


def _python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r


def _site_folder(parent: Path, force: bool = False) -> Path:
    """The folder a pull writes: autotune_reuse.py as sitecustomize.py (``force``: with the file that applies the
    rule on any torch, one it was never checked against included)."""
    folder = parent / ".cachetool-site"
    folder.mkdir(parents=True)
    shutil.copyfile(SOURCE, folder / "sitecustomize.py")
    if force:
        (folder / autotune_reuse.CONFIG).write_text(json.dumps({"force": True}))
    return folder


IMPORT_HEURISTICS = """
import json, sys
import torch
import torch._inductor.runtime.triton_heuristics as h
f = h.CachingAutotuner.recheck_autotune_cache
print(json.dumps({
    "module": f.__module__,
    "qualname": f.__qualname__,
    "torch": torch.__version__,
    "site": sys.modules["sitecustomize"].__file__,
    "watching": [type(w).__name__ for w in sys.meta_path if type(w).__name__ == "_HeuristicsWatch"],
}))
"""


@pytest.mark.parametrize("force", [False, True], ids=["by-version", "forced"])
def test_at_startup_the_rule_replaces_torchs_only_where_the_version_or_the_config_asks(tmp_path, force):
    site = _site_folder(tmp_path, force)
    seen = json.loads(_python(IMPORT_HEURISTICS, _env([site]), tmp_path).stdout.strip().splitlines()[-1])

    assert Path(seen["site"]).parent == site
    assert seen["watching"] == []  # the finder went once the module was imported
    if force or autotune_reuse.needed(seen["torch"]):
        assert (seen["module"], seen["qualname"]) == ("sitecustomize", "recheck_autotune_cache"), seen
    else:  # a torch the rule was not checked against: left as it is
        assert (seen["module"], seen["qualname"]) == (heuristics.__name__, "CachingAutotuner.recheck_autotune_cache")


def _marking_folder(parent: Path, marker: Path) -> Path:
    """A folder whose sitecustomize.py (a distribution's own, say) appends a line to ``marker``."""
    folder = parent / "third"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        f"with open({str(marker)!r}, 'a') as f:\n    f.write('ran\\n')\n", encoding="utf-8"
    )
    return folder


def _probe_folder(parent: Path) -> Path:
    """The probe as a warm and a check put it first on the path (run.py's ``_probe_folder``)."""
    folder = parent / "probe"
    (folder / "reports").mkdir(parents=True)
    shutil.copyfile(PROBE, folder / "sitecustomize.py")
    (folder / torch_run.PROBE_CONFIG).write_text(
        json.dumps({"reports": str(folder / "reports"), "root": str(parent / "root")})
    )
    return folder


def test_probe_then_site_folder_then_a_third_sitecustomize_each_run_once_and_the_rule_applies(tmp_path):
    """The path of a warm and a check: the probe first runs the site folder's module, which applies the rule and
    runs the third (a distribution's own) once; none runs twice."""
    marker = tmp_path / "marker.txt"
    path = [_probe_folder(tmp_path), _site_folder(tmp_path, force=True), _marking_folder(tmp_path, marker)]

    r = _python(IMPORT_HEURISTICS, _env(path), tmp_path)

    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert (seen["module"], seen["qualname"]) == ("sitecustomize", "recheck_autotune_cache"), seen
    assert "Error in sitecustomize" not in r.stderr, r.stderr  # no recursion caught on the way
    assert marker.is_file() and marker.read_text().splitlines() == ["ran"]


def test_site_folder_then_a_third_sitecustomize_each_run_once(tmp_path):
    marker = tmp_path / "marker.txt"
    path = [_site_folder(tmp_path), _marking_folder(tmp_path, marker)]

    r = _python("pass", _env(path), tmp_path)

    assert "Error in sitecustomize" not in r.stderr, r.stderr  # no recursion caught on the way
    assert marker.is_file() and marker.read_text().splitlines() == ["ran"]


def test_a_loaded_autotuner_naming_the_warms_path_finds_its_winner_beside_the_kernel_here(tmp_path, monkeypatch):
    """An autotuner loaded from the FX-graph cache names its kernel where it was compiled (the warm's root, which a
    pod that pulled does not have); the rule looks the winner up where this process's Inductor cache holds the
    kernel, and saves there. torch 2.13's own method looks beside the warm's path and misses."""
    warm = tmp_path / "warm" / "inductor" / "ab" / "cabcdef0123.py"  # never made: the warm's root is elsewhere
    here = tmp_path / "pod" / "inductor" / "ab" / "cabcdef0123.py"
    here.parent.mkdir(parents=True)
    here.write_text("# a kernel\n")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "pod" / "inductor"))
    [winner] = _configs(256)
    _save_winner(str(here), _configs(64), winner, found_by_coordesc=True)

    torchs, ours = _both_rules(str(warm), (64,))  # torch 2.13's method first

    assert torchs["info"]["autotune_cache_state"] == "miss" and torchs["results"] == [0]
    assert ours["info"]["autotune_cache_state"] == "hit"
    assert ours["results"] == ["new"] and ours["by_coordesc"] == [True]
    tuner = _Autotuner(_configs(64), str(warm))
    autotune_reuse.recheck_autotune_cache(tuner, tuner.reload_kernel_from_src)
    assert tuner.filename == str(here)
    assert tuner.save_cache_hook.__self__.local_cache[1].startswith(str(here.parent) + os.sep)
    assert not warm.parent.exists()


def test_a_kernel_this_cache_has_no_folder_for_keeps_its_path(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "pod"))
    (tmp_path / "pod").mkdir()
    warm = str(tmp_path / "warm" / "ab" / "cabcdef0123.py")
    assert autotune_reuse.kernel_path_here(warm) == warm
    assert autotune_reuse.kernel_path_here(None) is None
    (tmp_path / "pod" / "kernels").mkdir()  # a folder of that name here, but not where Inductor puts this kernel
    elsewhere = str(tmp_path / "warm" / "kernels" / "cabcdef0123.py")
    assert autotune_reuse.kernel_path_here(elsewhere) == elsewhere
