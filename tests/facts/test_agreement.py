"""cachetool's engine-neutral facts (cachetool/facts/) and the pipeline's own readers (compiler.build_identity,
compiler.cache_key) answer alike on this machine: a bundle's fingerprint (read by cachetool) and its compiler factor
(written by the pipeline) must not disagree about one fact."""

from __future__ import annotations

import pytest

from cachetool.facts import devices, field_diff, installed, machine
from cachetool.facts.factor_compare import FACTOR_NAMES, UNCOMPUTED
from compiler import build_identity, cache_key


def test_the_build_is_read_alike():
    assert installed.torch_build() == (build_identity.torch_build() or {})
    assert installed.triton_version() == build_identity.triton_version()
    assert installed.module_file("torch.version") == build_identity.module_file("torch.version")


@pytest.mark.parametrize("forced", [None, "DEFAULT", "AVX2", "AVX512", "bogus"])
def test_the_cpu_is_read_alike(monkeypatch, forced):
    if forced is None:
        monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    else:
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", forced)
    assert devices.cpu_capability() == build_identity.cpu_capability()
    assert devices.cpu_flags() == build_identity.cpu_flags()


def test_the_devices_and_settings_are_read_alike(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/x")
    assert machine.inductor_env() == build_identity.inductor_env()
    assert machine.cuda_device(0) == build_identity.cuda_device(0)
    assert machine.cuda_driver() == build_identity.cuda_driver()


CASES = [
    ({"a": 1}, {"a": 2}),
    ({"a": {"b": 1}}, {"a": {"c": 1}}),
    ({"a": float("nan")}, {"a": float("nan")}),
    ({"hidden_size": 1, "z": 1, "mode": 2}, {"hidden_size": 2, "z": 2, "mode": 3}),
    (1, 2),
    ({"a": {}}, {}),
    ({"x": [1, 2]}, {"x": [2, 1]}),
]


@pytest.mark.parametrize("a, b", CASES)
@pytest.mark.parametrize("nested", [True, False])
def test_field_differences_are_named_alike(a, b, nested):
    ours = field_diff.most_telling_first(field_diff.field_differences(a, b, nested=nested))
    theirs = cache_key.most_telling_first(cache_key.field_differences(a, b, nested=nested))
    assert [(d.field, repr(d.a), repr(d.b)) for d in ours] == [(d.field, repr(d.a), repr(d.b)) for d in theirs]


def test_the_factor_names_and_the_uncomputed_mark_are_the_pipelines():
    assert FACTOR_NAMES == cache_key.FACTOR_NAMES
    assert cache_key.UNKNOWN.startswith(UNCOMPUTED)
