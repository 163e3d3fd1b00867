#!/usr/bin/env bash
# The test command: installs everything (tool, test extras, real vLLM, the S3 and OCI servers) into .venv/ (see
# scripts/install.sh) and runs the suite (pyproject's testpaths) in PYTEST_WORKERS (default 3) parallel workers,
# one test file per worker at a time (--dist loadgroup with tests/conftest.py's scheduler: a file's module
# fixtures are built once; the verdict table's parts, marked xdist_group, are units of their own; the long units
# start first, told by what their tests do), with the 15 slowest tests, the suite's time and how busy the cores
# were at the end. The workers share one S3 and one OCI server on 127.0.0.1, started by the first worker that needs
# it and stopped by pid when the run ends (tests/servers.py, tests/server_run.py).
# Extra arguments go to pytest (e.g. `scripts/test.sh tests/stores -x`; `-n 0` runs in one process).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO"
step "install the tool, test extras, real vLLM and the servers (scripts/install.sh --test --vllm)"
scripts/install.sh --test --vllm
step "byte-compile the tool's modules (cachetool/, compiler/)"
# With PYTHONDONTWRITEBYTECODE set (as on this CI's machines) no process writes __pycache__/, so every one of the
# suite's `cachetool` subprocesses would compile these ~16k lines again (~0.7 s CPU each); a .pyc written here
# is still checked against its source's mtime and size, so an edited file is compiled afresh.
PYTHONDONTWRITEBYTECODE= "$VPY" -m compileall -q -j 0 cachetool compiler >/dev/null
step "run the tests (pytest, $VENV)"
# The suite compiles the same tiny-model CPU kernels in many fresh cache roots (each cold warm runs g++ about 11
# times, two thirds of its time): through ccache (tests/toolchain/g++) a kernel already built in this run is not
# built again. The C++ cache is this run's alone and starts empty; CACHETOOL_TEST_CCACHE=0 turns it off.
if [ "${CACHETOOL_TEST_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  CCACHE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/cachetool-test-ccache.XXXXXX")
  export CCACHE_DIR CCACHE_NOHASHDIR=1 PATH=$REPO/tests/toolchain:$PATH  # after the venv's bin/ (below)
  trap 'rm -rf "$CCACHE_DIR"' EXIT
fi
# As `. .venv/bin/activate` would: tests that run the `cachetool` entry point by name find the venv's.
export VIRTUAL_ENV=$VENV PATH=$VENV/bin:$PATH
# The machine's busy and total CPU ticks (/proc/stat's first line: user nice system idle iowait irq softirq steal):
# the suite is bound by its CPU work on a small box, and the last line says how busy the cores were
# (docs/benchmarks.md, "The test suite"); on a shared box it also shows the load of others.
cpu_ticks() { [ -r /proc/stat ] && awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
read -r busy0 total0 < <(cpu_ticks || echo 0 0)
start=$(date +%s)
rc=0
# Three workers by default, one more than a small box's 2 cores: much of a test's time is a subprocess or a server
# it waits on (a vLLM start is three processes that hand over to each other), so a third worker keeps both cores
# busy (docs/benchmarks.md, "The test suite").
"$VPY" -m pytest -n "${PYTEST_WORKERS:-3}" --dist loadgroup "$@" || rc=$?
echo "== test.sh: the suite took $(( $(date +%s) - start )) s (exit $rc)"
read -r busy1 total1 < <(cpu_ticks || echo 0 0)
if [ "$total1" -gt "$total0" ]; then
  percent=$(( 100 * (busy1 - busy0) / (total1 - total0) )) cpu_s=$(( (busy1 - busy0) / $(getconf CLK_TCK) ))
  # the cores /proc/stat counts are the online ones (nproc counts only this process's allowed ones)
  echo "== test.sh: the machine's $(getconf _NPROCESSORS_ONLN) cores were $percent% busy ($cpu_s CPU-seconds: the suite's and anything else's)"
fi
[ -z "${CCACHE_DIR:-}" ] || echo "== test.sh: C++ kernel builds through ccache: $(ccache --print-stats | awk -F'\t' '$1=="direct_cache_hit"||$1=="preprocessed_cache_hit"{h+=$2} $1=="cache_miss"{m=$2} END{print h+0 " from the cache, " m+0 " compiled"}')"
STEP="run the tests: pytest failed"
[ "$rc" = 0 ]
