"""Which entry of a ref's index a pull and a reader take (cachetool/refs/choice.py), on this machine's real
fingerprint: the entry for this platform, a one-line miss saying why each other does not fit, ``--platform``."""

from __future__ import annotations

import pytest

from cachetool import engines
from cachetool.bundle.fingerprint import local_fingerprint
from cachetool.bundle.manifest import platform_key
from cachetool.errors import CacheMissError, NotFoundError, UsageError
from cachetool.refs.choice import choose_entry, device_to_probe, entry_device, select_entry
from cachetool.stores.base import RefEntry, RefIndex
from tests.cache_trees import CUDA_FP

REF = "file:///s/tiny:v1"
CUDA_VLLM = {
    "os": "linux",
    "arch": "x86_64",
    "device": "cuda",
    "torch": "2.9.0+cu129",
    "cuda": "12.9",
    "triton": "3.5.0",
    "gpu": "NVIDIA H200",
    "capability": "sm90",
    "vllm": "0.26.0",
}
CPU_NATIVE = {"os": "linux", "arch": "x86_64", "device": "cpu", "torch": "2.13.0+cpu"}


def _entry(platform: str, fingerprint: dict) -> RefEntry:
    return RefEntry(
        manifest_digest="sha256:" + "0" * 64,
        platform=platform,
        fingerprint=fingerprint,
        size=1,
        created="2026-01-01T00:00:00Z",
    )


def _index(*entries: RefEntry) -> RefIndex:
    return RefIndex(name="tiny", tag="v1", entries=entries)


@pytest.fixture(scope="module")
def here() -> RefEntry:
    """An entry packed on this machine (its real CPU fingerprint)."""
    fp = local_fingerprint(device="cpu")
    return _entry(platform_key(fp), fp)


@pytest.fixture(scope="module")
def h200() -> RefEntry:
    return _entry(platform_key(CUDA_FP), dict(CUDA_FP))


def test_a_pull_takes_this_machines_entry_among_others(here, h200):
    assert select_entry(_index(h200, here), REF) is here
    assert select_entry(_index(here, h200), REF) is here


def test_no_fitting_entry_is_a_miss_that_says_why_each_does_not_fit(h200):
    with pytest.raises(CacheMissError) as e:
        select_entry(_index(h200), REF)
    message = str(e.value)
    assert "\n" not in message
    assert f"no bundle under {REF} fits this machine" in message
    assert h200.platform in message and "device 'cuda' here 'cpu'" in message, message


def test_an_empty_tag_is_a_miss_naming_the_ref():
    with pytest.raises(CacheMissError, match=f"^{REF} holds no bundles$"):
        select_entry(_index(), REF)


def test_another_engines_bundle_for_this_machine_names_the_engine_to_pull_it_with(here):
    """A vLLM bundle of this very machine does not serve a native server: the miss says to pull with --engine."""
    vllm_here = _entry("vllm0.26.0-" + here.platform, dict(here.fingerprint, vllm="0.26.0"))
    with pytest.raises(CacheMissError) as e:
        select_entry(_index(vllm_here), REF, engine=engines.get("native"))
    assert "a vllm bundle, not for a native server: pull it with --engine vllm" in str(e.value)


def test_a_reader_takes_the_platform_named(here, h200):
    assert choose_entry(_index(here, h200), REF, h200.platform) is h200


def test_a_platform_the_tag_lacks_is_not_found_and_lists_the_tags_platforms(here, h200):
    with pytest.raises(NotFoundError) as e:
        choose_entry(_index(here, h200), REF, "cuda-sm100-torch2.11.0+cu130")
    assert str(e.value) == (
        f"{REF} has no platform cuda-sm100-torch2.11.0+cu130 (it has: {here.platform}, {h200.platform})"
    )


def test_a_reader_takes_a_tags_only_entry_whatever_its_platform(h200):
    assert choose_entry(_index(h200), REF, None) is h200


def test_a_reader_takes_this_machines_entry_among_several(here, h200):
    assert choose_entry(_index(h200, here), REF, None) is here


def test_several_platforms_none_of_them_this_machines_ask_for_platform(h200):
    sm100 = _entry(platform_key(dict(CUDA_FP, capability="sm100")), dict(CUDA_FP, capability="sm100"))
    with pytest.raises(
        UsageError, match="holds 2 platforms .* none of them this machine's: choose one with --platform"
    ):
        choose_entry(_index(h200, sm100), REF, None)


def test_an_empty_tag_has_nothing_to_read():
    with pytest.raises(NotFoundError, match="holds no bundles"):
        choose_entry(_index(), REF, None)


def test_an_entrys_device_is_its_fingerprints_else_its_platform_keys():
    assert entry_device(_entry("x", {"device": "cuda:1"})) == "cuda"
    assert entry_device(_entry("x", {"device": "cpu"})) == "cpu"
    assert entry_device(_entry("vllm0.26.0-cuda-sm90-torch2.9.0+cu129", {})) == "cuda"
    assert entry_device(_entry("cpu-x86_64-torch2.13.0+cpu", {})) == "cpu"


def test_the_gpu_is_probed_when_any_entry_is_a_gpu_bundle_whatever_its_engine():
    """local_platform probed the GPU only for a platform key starting with "cuda"; vLLM's start with "vllm"
    (vllm0.26.0-cuda-sm90-...), so `pull --engine vllm` without --device took this GPU machine for a CPU one."""
    vllm_gpu = _entry("vllm0.26.0-cuda-sm90-torch2.9.0+cu129", CUDA_VLLM)
    cpu = _entry("cpu-x86_64-torch2.13.0+cpu", CPU_NATIVE)
    assert device_to_probe([cpu, vllm_gpu], None) is None  # None: probe
    assert device_to_probe([_entry("vllm0.26.0-cuda-sm90-torch2.9.0+cu129", {})], None) is None  # the key's words
    assert device_to_probe([cpu], None) == "cpu"
    assert device_to_probe([vllm_gpu], "cpu") == "cpu"  # --device decides


def test_pull_engine_vllm_without_device_takes_the_cuda_vllm_bundle_on_a_gpu_machine(monkeypatch):
    from cachetool.bundle import fingerprint
    from cachetool.engines.vllm import install_facts

    here = dict(CUDA_VLLM, vllm=None)  # a GPU machine (stubbed: there is none here), vLLM 0.26.0 installed

    def local_fingerprint(device=None):
        return dict(here) if device is None or device.startswith("cuda") else dict(CPU_NATIVE)

    monkeypatch.setattr(fingerprint, "local_fingerprint", local_fingerprint)
    monkeypatch.setattr(install_facts, "vllm_version", lambda: "0.26.0")
    monkeypatch.setattr(
        install_facts.machine, "cuda_device", lambda index=0: {"device": "NVIDIA H200", "capability": "9.0"}
    )
    gpu = _entry(platform_key(CUDA_VLLM), CUDA_VLLM)
    cpu = _entry(
        platform_key(dict(CPU_NATIVE, vllm="0.26.0", cpu_isa="avx2")), dict(CPU_NATIVE, vllm="0.26.0", cpu_isa="avx2")
    )
    assert select_entry(_index(cpu, gpu), REF, None, engines.get("vllm")) is gpu
