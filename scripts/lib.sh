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
