#!/usr/bin/env bash
# The test command: installs everything (tool, test extras, the S3 and OCI servers) and runs the suite.
# The servers are started by the test setup on 127.0.0.1 and stopped by pid (tests/servers.py).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --test
exec "${PYTHON:-python3}" -m pytest tests "$@"
