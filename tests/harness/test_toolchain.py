"""tests/toolchain/g++, the suite's C++ compiler (scripts/test.sh): Inductor's one-call "compile and link a .so"
goes through ccache, so the same kernel source built again in another folder comes from the cache, and the
library it gives loads and runs like the first; every other call is the real g++'s."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

WRAPPER = Path(__file__).resolve().parents[1] / "toolchain" / "g++"
pytestmark = pytest.mark.skipif(
    not (shutil.which("ccache") and os.path.exists("/usr/bin/g++")),
    reason="ccache or g++ is not installed (scripts/install.sh --test installs ccache)",
)


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "CCACHE_DIR": str(tmp_path / "ccache"), "CCACHE_NOHASHDIR": "1"}


def _stats(env: dict[str, str]) -> dict[str, int]:
    out = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split("\t") for line in out.splitlines() if "\t" in line)}


def test_a_kernel_built_in_two_folders_is_compiled_once_and_both_libraries_run(tmp_path: Path) -> None:
    env = _env(tmp_path)
    for folder in ("root_a", "root_b"):  # two cache roots: the source's path differs, its content does not
        src = tmp_path / folder / "kernel.cpp"
        src.parent.mkdir()
        src.write_text('extern "C" int twice(int x) { return 2 * x; }\n')
        lib = src.with_suffix(".so")
        subprocess.run([str(WRAPPER), str(src), "-O2", "-g1", "-shared", "-fPIC", "-o", str(lib)], env=env, check=True)
        assert ctypes.CDLL(str(lib)).twice(21) == 42
    stats = _stats(env)
    assert stats["cache_miss"] == 1 and stats["direct_cache_hit"] == 1


def test_other_calls_and_failures_are_the_real_compilers(tmp_path: Path) -> None:
    env = _env(tmp_path)
    ours = subprocess.run([str(WRAPPER), "--version"], env=env, capture_output=True, text=True)
    real = subprocess.run(["/usr/bin/g++", "--version"], capture_output=True, text=True)
    assert ours.returncode == 0 and ours.stdout == real.stdout
    bad = tmp_path / "bad.cpp"
    bad.write_text("this is not C++\n")
    proc = subprocess.run(
        [str(WRAPPER), str(bad), "-shared", "-fPIC", "-o", str(tmp_path / "bad.so")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "error" in proc.stderr and not (tmp_path / "bad.so").exists()


def test_one_kernel_built_in_two_folders_at_once_is_compiled_once(tmp_path: Path) -> None:
    """The ranks of a tensor-parallel warm build the same kernels at the same moment: the second build waits for
    the first and takes its object from the cache."""
    env = _env(tmp_path)
    # <regex> makes the compile last about a second here, so that both builds run at once
    source = (
        '#include <regex>\nextern "C" int matches(const char* s) { return std::regex_match(s, std::regex("a+")); }\n'
    )
    builds = []
    for folder in ("rank_0", "rank_1"):
        src = tmp_path / folder / "kernel.cpp"
        src.parent.mkdir()
        src.write_text(source)
        builds.append(
            subprocess.Popen(
                [str(WRAPPER), str(src), "-O2", "-shared", "-fPIC", "-o", str(src.with_suffix(".so"))], env=env
            )
        )
    assert [b.wait(120) for b in builds] == [0, 0]
    assert [ctypes.CDLL(str(tmp_path / f / "kernel.so")).matches(b"aaa") for f in ("rank_0", "rank_1")] == [1, 1]
    stats = _stats(env)
    assert stats["cache_miss"] == 1 and stats["direct_cache_hit"] == 1, stats
