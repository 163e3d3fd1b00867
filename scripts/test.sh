#!/usr/bin/env bash
# The test command: installs everything (tool, test extras, the S3 and OCI servers) into .venv/ (see
# scripts/install.sh) and runs the suite, in two parallel workers, with the slowest tests listed at the end.
# The servers are started by the test setup on 127.0.0.1 and stopped by pid (tests/servers.py).
# Extra arguments go to pytest (e.g. `scripts/test.sh tests/stores -x`; `-n 0` runs in one process).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO"
scripts/install.sh --test
step "run the tests (pytest, $VENV)"
start=$(date +%s)
rc=0
"$VPY" -m pytest tests "$@" || rc=$?
echo "== test.sh: the suite took $(( $(date +%s) - start )) s (exit $rc)"
STEP="run the tests: pytest failed"
[ "$rc" = 0 ]
