#!/usr/bin/env bash
# Builds ci/Dockerfile with buildah where no container registry can be reached (only Debian's mirror and PyPI),
# then runs the image the way ci/k8s does: read-only root filesystem, uid 10001, emptyDirs at /cache and /tmp.
#   scripts/build-image.sh [TAG]      (default TAG: localhost/cachetool:cpu; needs root)
# - the base: Debian 12 assembled with debootstrap (python3, python3-venv), since python:3.11.13-slim-bookworm
#   cannot be pulled; BASE_IMAGE=... uses an image you have instead;
# - torch: the Dockerfile installs it from TORCH_INDEX_URL; here a local PEP 503 index of `pip download torch`
#   (what pip on this machine resolves, the CPU build) stands in for download.pytorch.org;
# - this machine's pip.conf and CA bundle are mounted into the build's RUN steps (PyPI is reached through them).
# Then, in the image, as the warm Job and the Deployment would: warm + push to a folder store, pull into a fresh
# /cache, and `check --require-hit` (nothing compiles).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO"
TAG=${1:-localhost/cachetool:cpu}
WORK=${BUILD_DIR:-/var/tmp/cachetool-image-build}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
[ "$(id -u)" = 0 ] || { echo "build-image.sh needs root (buildah, debootstrap, mount namespaces)" >&2; exit 2; }
mkdir -p "$WORK"

step "install buildah and debootstrap (apt)"
command -v buildah >/dev/null && command -v debootstrap >/dev/null \
  || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends buildah debootstrap; }

base=${BASE_IMAGE:-localhost/debian-bookworm-python3:local}
if [ -z "${BASE_IMAGE:-}" ] && ! buildah inspect --type image "$base" >/dev/null 2>&1; then
  step "assemble the base $base (debootstrap bookworm + python3, python3-venv)"
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$WORK/rootfs" \
    http://deb.debian.org/debian
  ctr=$(buildah from scratch)
  cp -a "$WORK/rootfs/." "$(buildah mount "$ctr")/"
  buildah umount "$ctr" >/dev/null
  buildah commit -q "$ctr" "$base" >/dev/null
  buildah rm "$ctr" >/dev/null
fi

step "a local index with torch==$TORCH_VERSION and its dependencies"
rm -rf "$WORK/wheels" "$WORK/simple"
mkdir -p "$WORK/wheels"
python3 -m pip download -qq --dest "$WORK/wheels" "torch==$TORCH_VERSION"
python3 - "$WORK/wheels" "$WORK/simple" <<'EOF'
import os, re, shutil, sys
src, dst = sys.argv[1:]
for f in os.listdir(src):
    d = os.path.join(dst, re.sub(r"[-_.]+", "-", f.split("-")[0]).lower())
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(src, f), d)
for d in os.listdir(dst):
    links = "".join(f'<a href="{f}">{f}</a>' for f in os.listdir(os.path.join(dst, d)))
    open(os.path.join(dst, d, "index.html"), "w").write(f"<html><body>{links}</body></html>")
EOF

step "build ci/Dockerfile as $TAG"
mounts=(-v "$WORK/simple:/simple:ro")
[ -f /etc/pip.conf ] && mounts+=(-v /etc/pip.conf:/etc/pip.conf:ro)
[ -f /etc/ssl/certs/ca-certificates.crt ] && mounts+=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
buildah bud --layers --isolation chroot --network host -f ci/Dockerfile -t "$TAG" \
  --build-arg BASE_IMAGE="$base" --build-arg TORCH_INDEX_URL=file:///simple "${mounts[@]}" .

step "run the image as ci/k8s does: warm + push, pull into a fresh /cache, check --require-hit"
ctr=$(buildah from "$TAG")
mnt=$(buildah mount "$ctr")
trap 'buildah umount "$ctr" >/dev/null 2>&1; buildah rm "$ctr" >/dev/null 2>&1' EXIT
mkdir -p "$mnt/store"
# shellcheck disable=SC2016
unshare -m --propagation private bash -euc '
  mnt=$1
  mount --bind "$mnt" "$mnt"
  for d in cache tmp store; do mount -t tmpfs -o mode=1777 tmpfs "$mnt/$d"; done
  mount -t proc proc "$mnt/proc"
  mount -o remount,bind,ro "$mnt"    # the read-only root filesystem; /cache, /tmp, /store are the emptyDirs
  exec chroot --userspec=10001:10001 "$mnt" /usr/bin/env -i PATH=/opt/cachetool/bin:/usr/bin:/bin \
    HOME=/home/cachetool CACHETOOL_CACHE_ROOT=/cache PYTHONDONTWRITEBYTECODE=1 /bin/bash -euc "
      if touch /probe 2>/dev/null; then echo \"the root filesystem is writable\" >&2; exit 1; fi
      cachetool keygen -o /store/signing.key
      cachetool warm --model tiny --device cpu --cache-root /tmp/ci-root --push file:///store/tiny:img --sign-key /store/signing.key
      cachetool pull file:///store/tiny:img --cache-root /cache --trust /store/signing.key.pub --model tiny --device cpu --timeout 300 --on-miss continue
      cachetool check --model tiny --device cpu --cache-root /cache --require-hit"
' bash "$mnt"
echo "== build-image.sh: $TAG built; in it, with a read-only root as uid 10001: warm, pull, check --require-hit passed"
