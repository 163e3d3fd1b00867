#!/usr/bin/env bash
# The main job end to end on the embedded default: the CPU, the tiny model, a local folder store.
#   warm (compile) → push to file:// store (packed and signed) → pull into a fresh cache root
#   → check: start the model as a server would and require that nothing compiles.
# DEMO_DIR keeps the files (default: a fresh temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
work=${DEMO_DIR:-$(mktemp -d -t cachetool-demo.XXXXXX)}
mkdir -p "$work"
ref="file://$work/store/tiny:demo"
echo "== demo folder: $work"
[ -f "$work/signing.key" ] || cachetool keygen -o "$work/signing.key"
echo "== warm: compile the tiny model on the CPU, then pack, sign and push to $ref"
cachetool warm --model tiny --device cpu --cache-root "$work/ci-root" --push "$ref" --sign-key "$work/signing.key"
echo "== pull into a fresh cache root: signature (pinned key) and the cache key this model/config needs are checked before any blob"
rm -rf "$work/server-root"
cachetool pull "$ref" --cache-root "$work/server-root" --trust "$work/signing.key.pub" --model tiny --device cpu
echo "== check: start as a server would; --require-hit fails if anything compiles"
cachetool check --model tiny --device cpu --cache-root "$work/server-root" --require-hit
