"""What each JIT cache of a vLLM root is valid under: recorded by a warm, compared by an install before any blob.

The bundle's fingerprint (torch, Triton, CUDA, the GPU, vLLM) covers Triton's kernels and Inductor's cache. The other
JIT caches (:mod:`~cachetool.engines.vllm.jit_caches`) hang on more, and only they do:

- FlashInfer's JIT modules: FlashInfer's version (its workspace is per version), nvcc's (it builds them), the GPU's
  compute capability, and **the root's absolute path**: its ninja build commands hold the workspace path, so a
  module is rebuilt anywhere else (not relocatable: the path rule of docs/vllm.md);
- DeepGEMM's kernels: nvcc, the capability, and the folder of DeepGEMM's headers (its JIT key holds the include
  path: DeepGEMM#388), which is vLLM's install;
- FlashInfer's autotune results: FlashInfer's version and the GPU model they were measured on.

A warm writes these in each such folder (``cachetool_jit_facts.json``); the vLLM layout lists each as a key folder of
kind ``jit`` (named ``jit.{folder}``), so the manifest carries them and ``diff`` names them; the install compares them
with this machine before it downloads anything and skips a unit that cannot be valid here, saying which
(:func:`invalid_units`). A value that cannot be read here (no nvcc in a server image that needs none to load) is
no difference.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from cachetool import envs
from cachetool.engines.vllm import install_facts
from cachetool.engines.vllm.jit_caches import VARIABLES
from cachetool.facts import machine
from cachetool.layouts.entries import KeyFolder
from cachetool.layouts.factors import Factors

FACTS_FILE = "cachetool_jit_facts.json"
KIND = "jit"
PREFIX = "jit."
WHAT = {
    "flashinfer": ("flashinfer", "nvcc", "capability", "root"),
    "deep_gemm": ("deep_gemm_headers", "nvcc", "capability"),
    "flashinfer_autotune_cache": ("flashinfer", "gpu"),
}


@functools.lru_cache(maxsize=1)
def nvcc_version() -> str | None:
    """The CUDA compiler's release (``13.0.88``) as FlashInfer and DeepGEMM find it (CUDA_HOME, PATH, /usr/local/cuda),
    or None where there is none."""
    home = envs.raw("CUDA_HOME", VARIABLES)
    candidates = [Path(home) / "bin" / "nvcc"] if home else []
    candidates += [Path(p) for p in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc") if p]
    nvcc = next((c for c in candidates if c.is_file()), None)
    if nvcc is None:
        return None
    try:
        out = subprocess.run(
            [str(nvcc), "--version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release [\d.]+, V([\d.]+)", out)
    return m.group(1) if m else None


def _values_here(root: Path) -> dict[str, str | None]:
    gpu = machine.cuda_device(0)
    flashinfer = install_facts.installed_file("flashinfer._build_meta")
    headers = install_facts.installed_file("vllm.third_party.deep_gemm")
    return {
        "flashinfer": machine.literal_assignments(flashinfer).get("__version__") if flashinfer else None,
        "nvcc": nvcc_version(),
        "capability": gpu["capability"] if gpu else None,
        "gpu": gpu["device"] if gpu else None,
        "root": str(root),
        "deep_gemm_headers": str(headers.parent / "include") if headers else None,
    }


def _of(folder: str, here: dict[str, str | None]) -> dict[str, str | None]:
    """What the JIT cache ``folder`` is valid under, of this machine's values ``here`` (:func:`_values_here`)."""
    return {name: here[name] for name in WHAT.get(folder, ())}


def record(root: Path) -> list[Path]:
    """Write each JIT folder's facts in it (a warm, after its start); returns the files written."""
    written, here = [], None
    for folder in WHAT:
        top = Path(root) / folder
        if top.is_dir() and not top.is_symlink():
            here = here or _values_here(root)  # read once, and only for a root that has a JIT folder
            (top / FACTS_FILE).write_text(json.dumps(_of(folder, here), indent=1, sort_keys=True))
            written.append(top / FACTS_FILE)
    return written


def key_folders(root: Path) -> list[KeyFolder]:
    """The recorded facts of ``root``'s JIT folders, as the manifest lists them (kind ``jit``)."""
    out = []
    for folder in WHAT:
        try:
            values = json.loads((Path(root) / folder / FACTS_FILE).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(values, dict):
            out.append(KeyFolder(PREFIX + folder, KIND, Factors.recording(KIND, values)))
    return out


def invalid_units(manifest: Any, root: Path) -> dict[str, str]:
    """The JIT units of ``manifest`` that cannot be valid in a root at ``root`` on this machine, each with why in a
    few words (``flashinfer: FlashInfer 0.6.14 in the bundle, 0.7.0 here``)."""
    out, values = {}, None
    for key in manifest.keys:
        recorded = key.recorded(KIND)
        folder = key.hash[len(PREFIX) :]
        if not isinstance(recorded, dict) or folder not in WHAT:
            continue
        values = values or _values_here(root)  # read once, and only for a bundle that has JIT facts
        here = _of(folder, values)
        differ = [
            f"{name} {recorded.get(name)} in the bundle, {here[name]} here"
            for name in WHAT[folder]
            if here.get(name) is not None and recorded.get(name) is not None and here[name] != recorded[name]
        ]
        if differ:
            rule = (
                " (not relocatable: its build commands hold the root's path)"
                if any(d.startswith("root ") for d in differ)
                else ""
            )
            out[folder] = "; ".join(differ) + rule
    return out
