#!/usr/bin/env bash
# The main job end to end on the embedded default: the CPU, the tiny model, a local folder store.
#   warm (compile) → push to file:// store (packed and signed) → pull into a fresh cache root
#   → check: start the model as a server would and require that nothing compiles.
# Installs the tool first into .venv/ (see scripts/install.sh). DEMO_DIR=DIR works there and leaves the files;
# by default a fresh temporary folder is used and removed when the demo ends.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO"
step "install the tool into $VENV (scripts/install.sh)"
scripts/install.sh
CT=$VENV/bin/cachetool
if [ -n "${DEMO_DIR:-}" ]; then
  work=$DEMO_DIR
else
  work=$(mktemp -d -t cachetool-demo.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
ref="file://$work/store/tiny:demo"
echo "== demo folder: $work"
step "keygen: a signing key pair"
[ -f "$work/signing.key" ] || "$CT" keygen -o "$work/signing.key"
step "warm: compile the tiny model on the CPU, then pack, sign and push to $ref"
"$CT" warm --model tiny --device cpu --cache-root "$work/ci-root" --push "$ref" --sign-key "$work/signing.key"
step "pull into a fresh cache root: signature (pinned key) and the cache key this model/config needs are checked before any blob"
rm -rf "$work/server-root"
"$CT" pull "$ref" --cache-root "$work/server-root" --trust "$work/signing.key.pub" --model tiny --device cpu
step "check: start as a server would; --require-hit fails if anything compiles"
"$CT" check --model tiny --device cpu --cache-root "$work/server-root" --require-hit
echo "== demo.sh: passed"
