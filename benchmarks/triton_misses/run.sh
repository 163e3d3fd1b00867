#!/usr/bin/env bash
# Which Triton kernels a later max-autotune start builds on torch 2.11, and which part of Triton's cache key differs
# from the warm's compile of the same kernel (docs/torch.md, "max-autotune on the GPU"). One device call, no vLLM
# (about 2 minutes of device time; carry nothing; run on the H100 on 2026-12-06, tree f778f79: the Mega-Cache start
# rewrote the warm root's results, and only the kept start, which reads them, built):
#   bash benchmarks/triton_misses/run.sh     # warm (saving Mega-Cache), a copy, the Mega-Cache start, a copy, kept
# The copies are moved as an install moves them (Triton's group files rewritten), so they read nothing of the warm's.
set -u
out=${OUT:-/tmp/out}; mkdir -p $out; S=$out/summary.txt
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../.." && pwd)
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pyc
python3 -c "import sys; sys.path.insert(0, '$repo'); from benchmarks.bench_torch_engine import PROGRAM; open('/tmp/prog.py','w').write(PROGRAM)"
ARGS="--device cuda --layers 2 --dim 512 --mode max-autotune-no-cudagraphs"
rm -rf /tmp/w /tmp/w0 /tmp/m1 /tmp/m2 /tmp/mg /tmp/mega.bin ~/.triton /tmp/torchinductor_root
one() {  # one NAME ROOT SITE? ARGS...: the program alone on ROOT with the listener
  local name=$1 R=$2 site=${3:-}; shift 3 2>/dev/null || shift $#
  local pp=$here/listener; [ -n "$site" ] && pp=$R/.cachetool-site:$pp
  local n0=$(find $R/triton -name '*.cubin' 2>/dev/null | wc -l); local s=$(date +%s)
  DIAG_LOG=$out/$name.jsonl PYTHONPATH=$pp TORCHINDUCTOR_CACHE_DIR=$R/inductor TRITON_CACHE_DIR=$R/triton \
    timeout 300 python3 /tmp/prog.py $ARGS "$@" > $out/run-$name.txt 2>&1
  local rc=$? n1=$(find $R/triton -name '*.cubin' 2>/dev/null | wc -l)
  echo "$(date -u +%T) $name: exit $rc, $(( $(date +%s) - s )) s, cubins $n0 -> $n1, $(grep -c '"hit": false' $out/$name.jsonl) misses" | tee -a $S
  rm -rf ~/.triton /tmp/torchinductor_root
}
one warm /tmp/w "" --save-mega /tmp/mega.bin
python3 -c "
import sys, torch; sys.path.insert(0, '$repo')
from pathlib import Path
from cachetool.engines.torch import autotune_site
print('site', autotune_site.settle(Path('/tmp/w'), [torch.__version__]))" >> $S 2>&1
cp -a /tmp/w /tmp/w0
moved() {  # moved DEST: the warm's root as it was copied to DEST, Triton's group files rewritten as an install does
  cp -a /tmp/w0 "$1"
  python3 -c "import sys; sys.path.insert(0, '$repo'); from pathlib import Path
from cachetool.layouts import triton_groups as g
print('$1: group files rewritten:', g.rewrite_groups(Path('$1/triton').rglob(g.GROUP_PREFIX + '*.json'), print))" >> $S 2>&1
}
moved /tmp/m1; one moved-before-mega /tmp/m1 site
one mega /tmp/mg "" --load-mega /tmp/mega.bin
# the mega start's autotuners come from the warm's FX entries and save what they tune at the warm's path: what it
# changed in /tmp/w (the kept row reads it)
( cd /tmp/w0 && find . -type f | sort ) > $out/files-w0.txt; ( cd /tmp/w && find . -type f | sort ) > $out/files-w.txt
changed=$(cd /tmp/w0 && find . -name '*.best_config' | while read -r f; do cmp -s "$f" "/tmp/w/$f" || echo "$f"; done)
echo "after mega: /tmp/w has $(comm -13 $out/files-w0.txt $out/files-w.txt | wc -l) new file(s) \
($(comm -13 $out/files-w0.txt $out/files-w.txt | grep -c best_config) best_config), $(echo -n "$changed" | grep -c .) of \
$(grep -c best_config $out/files-w0.txt) best_config file(s) changed" | tee -a $S
for f in $(echo "$changed" | head -3); do echo "  $f: warm $(cat /tmp/w0/$f) | now $(cat /tmp/w/$f)" >> $S; done
moved /tmp/m2; one moved-after-mega /tmp/m2 site
one kept /tmp/w site
python3 $here/compare.py $out/warm.jsonl $out/moved-before-mega.jsonl $out/mega.jsonl $out/moved-after-mega.jsonl $out/kept.jsonl > $out/compare.txt 2>&1
head -c 6000 $out/compare.txt
cat $S
