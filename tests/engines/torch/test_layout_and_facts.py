"""The torch engine's layout, facts and registry entry on trees built from its documented layout (fast: no program
runs): what packs as a unit, what its bundles' fingerprint and platform say, what a pull checks first, and that its
bundles sit beside the native engine's under one tag."""

from __future__ import annotations

import json

import pytest

from cachetool import engines
from cachetool.bundle.fingerprint import local_fingerprint
from cachetool.bundle.manifest import platform_key
from cachetool.bundle.packing import pack
from cachetool.engines.layouts import detect
from cachetool.engines.torch import key
from cachetool.engines.torch.command import parse
from cachetool.engines.torch.layout import scan
from cachetool.errors import EngineFlagsError, PreflightError
from cachetool.facts.machine import cpu_isa
from tests.cache_trees import make_native_tree
from tests.engines.torch.roots import make_torch_root


def test_the_units_are_the_folders_inductor_and_triton_name_by_content(tmp_path):
    root, k = make_torch_root(tmp_path / "r")
    assert detect(root) == "torch"
    s = scan(root)
    assert sorted(u.path for u in s.units) == [
        "facts/" + k,
        "inductor/ab",
        "inductor/aotautograd/a1",
        "inductor/fxgraph/ud/fud1",
        "triton/K1",
    ]
    assert not any("locks" in f.rel for f in s.files)  # Inductor makes its lock files as it needs them
    [kf] = s.keys
    assert kf.hash == k and kf.kind == "program" and kf.factors.values("compiler")["torch_engine"] == "1"


def test_a_bundle_records_the_engines_facts_in_its_fingerprint_and_platform(tmp_path):
    root, _ = make_torch_root(tmp_path / "r")
    with pack(root) as b:
        fp = b.manifest.fingerprint
        assert b.manifest.layout == "torch"
        assert fp["torch_engine"] == "1" and fp["cpu_isa"] == cpu_isa() and fp["device"] == "cpu", fp
        assert b.platform == f"torch.compile-cpu-{fp['arch']}-{cpu_isa()}-torch{fp['torch']}"
    assert engines.for_fingerprint(fp) is engines.get("torch")
    native = {k: v for k, v in fp.items() if k not in ("torch_engine", "cpu_isa")}
    assert platform_key(native) != b.platform  # a native bundle of the same machine has its own entry


def test_this_machines_platform_key_for_the_engine_is_the_bundles(tmp_path):
    """What pull computes for --engine torch here (its machine facts, no torch import) is what a warm here packs."""
    eng = engines.get("torch")
    fp = local_fingerprint("cpu")
    root, _ = make_torch_root(tmp_path / "r")
    with pack(root) as b:
        assert platform_key({**fp, **eng.machine_facts("cpu")}, eng) == b.platform


def test_the_preflight_checks_the_inductor_variables_the_warm_had(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_VEC_ISA_OK", raising=False)
    root, k = make_torch_root(tmp_path / "r")
    with pack(root) as b:
        assert key.check_env(b.manifest) == ["Inductor and Triton variables"]
        monkeypatch.setenv("TORCHINDUCTOR_SCALAR_ASSERTS", "0")
        with pytest.raises(
            PreflightError,
            match="variable TORCHINDUCTOR_SCALAR_ASSERTS differs: the warm had it unset, this machine '0'",
        ):
            key.check_env(b.manifest)
        monkeypatch.delenv("TORCHINDUCTOR_SCALAR_ASSERTS")
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/elsewhere")  # where caches go: not a setting
        assert key.check_env(b.manifest) == ["Inductor and Triton variables"]
        # not in the machine's build evidence, but in Inductor's cache key (cpp.vec_isa_ok): a start with it
        # misses a warm without it
        monkeypatch.setenv("TORCHINDUCTOR_VEC_ISA_OK", "1")
        with pytest.raises(PreflightError, match="variable TORCHINDUCTOR_VEC_ISA_OK differs"):
            key.check_env(b.manifest)


@pytest.mark.parametrize("variable", ["TORCHINDUCTOR_FX_GRAPH_CACHE", "PYTORCH_NO_CUDA_MEMORY_CACHING"])
def test_a_variable_that_changes_no_generated_code_is_never_a_pull_refusal(tmp_path, monkeypatch, cli, keys, variable):
    """A pull under TORCHINDUCTOR_FX_GRAPH_CACHE=1 (the default, set explicitly) or PYTORCH_NO_CUDA_MEMORY_CACHING=1
    was refused (exit 4) while check on the same root said hit: neither changes what Inductor generates. Such a
    variable is recorded and diff names it; a pull installs, set either way round."""
    monkeypatch.delenv("TORCHINDUCTOR_VEC_ISA_OK", raising=False)
    monkeypatch.setenv(variable, "1")  # the warm had it
    root, _k = make_torch_root(tmp_path / "r")
    store = f"file://{tmp_path / 'store'}/m:main"
    assert cli("push", root, store, "--sign-key", keys["priv"]).rc == 0
    monkeypatch.delenv(variable)  # the pull does not
    r = cli("pull", store, "--engine", "torch", "--cache-root", tmp_path / "pulled", "--trust", keys["pub"])
    assert r.rc == 0, r
    monkeypatch.setenv(variable, "0")  # or has another value
    r = cli("pull", store, "--engine", "torch", "--cache-root", tmp_path / "pulled2", "--trust", keys["pub"])
    assert r.rc == 0, r
    d = cli("diff", store, "local", "--engine", "torch")
    assert variable in d.out + d.err, d


def test_a_torch_bundle_and_a_native_bundle_share_a_tag_each_pulled_by_its_engine(tmp_path, cli, keys):
    store = f"file://{tmp_path / 'store'}/m:main"
    root, _ = make_torch_root(tmp_path / "t")
    make_native_tree(tmp_path / "n")
    assert cli("push", root, store, "--sign-key", keys["priv"]).rc == 0
    assert cli("push", tmp_path / "n", store, "--sign-key", keys["priv"]).rc == 0
    assert len(json.loads(cli("ls", store, "--json").out)["refs"]) == 2
    r = cli("pull", store, "--cache-root", tmp_path / "pulled", "--trust", keys["pub"], "--engine", "torch", "--json")
    assert r.rc == 0 and json.loads(r.out)["platform"].startswith("torch.compile-"), r.err
    assert (tmp_path / "pulled" / "inductor" / "ab" / "cabc.so").is_file()
    assert not (tmp_path / "pulled" / "inductor" / "locks").exists()


def test_diff_against_this_machine_compares_the_engines_own_fields(tmp_path, cli, keys, monkeypatch):
    root, _ = make_torch_root(tmp_path / "r")
    assert cli("pack", root, "-o", tmp_path / "t.ctb", "--sign-key", keys["priv"]).rc == 0
    r = cli("diff", tmp_path / "t.ctb", "local", "--json")
    assert json.loads(r.out)["differences"] == [], r.out  # its engine's fields are this machine's too
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    names = [
        (d["category"], d["name"])
        for d in json.loads(cli("diff", tmp_path / "t.ctb", "local", "--json").out)["differences"]
    ]
    assert ("fingerprint", "cpu_isa") in names and ("compiler", "cpu_isa") in names, names


def test_a_start_that_did_not_finish_leaves_no_kernel_it_may_have_cut_and_pack_waits_for_it(tmp_path, cli, keys):
    """Inductor links a C++ kernel straight to its final name, and later starts load whatever is there: a start
    killed outright leaves its mark, pack refuses the root naming it, and the next start removes what was built
    after it began (a graph that names a kernel builds it again) before its program runs."""
    import os
    import time

    from cachetool.engines.torch import unfinished

    root, _ = make_torch_root(tmp_path / "r")
    for p in root.rglob("*"):  # all of it built before the killed start
        os.utime(p, (time.time() - 60, time.time() - 60))
    kept = root / "inductor" / "ab" / "cabc.so"
    killed = unfinished.begin(root)
    doc = json.loads(killed.read_text())
    killed.write_text(json.dumps({**doc, "pid": 2**22 + 7}))  # its cachetool is gone
    cut = root / "inductor" / "cd" / "ccd.so"
    cut.parent.mkdir()
    cut.write_bytes(b"\x7fEL")  # cut short by the kill
    r = cli("pack", root, "-o", tmp_path / "t.ctb", "--sign-key", keys["priv"])
    assert r.rc == 2 and "has not finished" in r.err and str(killed) in r.err, r.err

    mine = unfinished.begin(root)  # the next start
    assert not killed.exists() and not cut.exists() and kept.is_file()
    unfinished.end(root, mine, completed=True)
    assert not (root / ".cachetool-incomplete").exists()
    assert cli("pack", root, "-o", tmp_path / "t.ctb", "--sign-key", keys["priv"]).rc == 0

    stopped = unfinished.begin(root)
    (root / "triton" / "K2").mkdir()
    (root / "triton" / "K2" / "k.cubin").write_bytes(b"c")
    unfinished.end(root, stopped, completed=False)  # a stopped start: what it built goes, what was there stays
    assert not (root / "triton" / "K2").exists() and (root / "triton" / "K1").is_dir() and kept.is_file()


def test_the_command_after_the_engines_options():
    c = parse(
        [
            "--ready-url",
            "http://h:1/health",
            "--request",
            "/a",
            "--request",
            'POST http://h:2/b {"x": 1}',
            "--stop-timeout=5",
            "--",
            "python",
            "--version",
        ]
    )
    assert c.argv == ("python", "--version") and c.ready_url == "http://h:1/health" and c.stop_timeout == 5
    assert [(r.method, r.url, r.body, r.is_json) for r in c.requests] == [
        ("GET", "http://h:1/a", None, False),
        ("POST", "http://h:2/b", '{"x": 1}', True),
    ]
    assert parse(["python", "--ready-url", "x"]).argv == ("python", "--ready-url", "x")  # the program's own flags
    with pytest.raises(EngineFlagsError, match="--ready-url given twice"):
        parse(["--ready-url", "http://h/", "--ready-url", "http://h/", "python"])
