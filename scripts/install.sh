#!/usr/bin/env bash
# Installs cachetool and what it needs on a fresh machine (Debian, Python 3.11+).
#   scripts/install.sh           the tool itself (torch CPU build, then the project)
#   scripts/install.sh --test    also the test extras and the real servers the tests start
#                                (Ceph RGW for S3, docker-registry for OCI, skopeo for interop checks)
# Idempotent: what is already there is not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
with_test=0
[ "${1:-}" = "--test" ] && with_test=1

if [ "$with_test" = 1 ]; then
  missing=0
  for bin in radosgw ceph-mon ceph-osd ceph-mgr radosgw-admin docker-registry skopeo; do
    command -v "$bin" >/dev/null 2>&1 || missing=1
  done
  if [ "$missing" = 1 ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
      radosgw ceph-mon ceph-osd ceph-mgr docker-registry skopeo
  fi
fi

# torch first, pinned to the CPU build: a bare `torch` requirement would pull a multi-GB CUDA build.
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  "$PY" -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
fi
if [ "$with_test" = 1 ]; then
  "$PY" -m pip install -q -e ".[test]"
else
  "$PY" -m pip install -q -e .
fi
