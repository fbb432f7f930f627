#!/usr/bin/env bash
# scripts/gpu/boxes.sh "SCENARIO [tune options]" ["SCENARIO [tune options]" ...]
#
# ONE `run` call on a machine of several GPUs (kind nvidia-h200-x2): one box.sh
# per GPU, side by side, each a time box of its own study. Device time counts
# per machine held, not per GPU, so two studies cost the device time of one.
# Box i gets CUDA_VISIBLE_DEVICES=i, its own caches (/tmp/at-cache-gpu<i>: the
# engines of two studies never share compile artifacts or a model folder) and
# returns to $OUT/gpu<i>/ (without the compile cache: $OUT holds at most 8
# files, and two boxes' database, trial files, log and summary are 8).
# Here, after the call: scripts/gpu/fetch-back.sh FILES_AT/gpu0, then .../gpu1.
# The pack is installed once, before the boxes start, so that two boxes never
# unpack it at the same time. Exit: the highest exit code of the boxes.
# Env: as box.sh (BOX_LIMIT_S, BOX_MODEL, BOX_PARTS, BOX_SITE, BOX_BACKUP);
# BOX_TESTS_GPU<i> and BOX_VERB_GPU<i> set BOX_TESTS and BOX_VERB for box i;
# BOX_NGPU overrides the GPU count and BOX_CACHE_ROOT the caches' prefix (a dry
# run elsewhere: tests/project/test_gpu_scripts.py).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo" || exit 1
[ $# -ge 1 ] || { echo 'usage: boxes.sh "SCENARIO [tune options]" ...' >&2; exit 2; }
ngpu=${BOX_NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
if [ $# -gt "$ngpu" ]; then
  echo "boxes.sh: $# boxes for $ngpu GPU(s)" >&2; exit 2
fi
outd=${OUT:-/tmp/at-out}
inst=$(bash scripts/gpu/install.sh "${BOX_PARTS:-.gpu-pack/parts}" "${BOX_SITE:-/tmp/at-site}" 2>&1)
rc=$?
echo "[boxes] $inst"
[ $rc -eq 0 ] || exit "$rc"
pids=()
i=0
for spec in "$@"; do
  read -ra words <<< "$spec"
  mkdir -p "$outd/gpu$i"
  tests=BOX_TESTS_GPU$i verb=BOX_VERB_GPU$i
  ( CUDA_VISIBLE_DEVICES=$i OUT=$outd/gpu$i BOX_CACHE=${BOX_CACHE_ROOT:-/tmp/at-cache}-gpu$i \
      BOX_RETURN_CACHE=0 BOX_TESTS=${!tests:-} BOX_VERB=${!verb:-${BOX_VERB:-tune}} \
      bash scripts/gpu/box.sh "${words[@]}" 2>&1 | sed -u "s/^/[gpu$i] /"
    exit "${PIPESTATUS[0]}" ) &
  pids+=($!)
  i=$(( i + 1 ))
done
worst=0
for pid in "${pids[@]}"; do
  wait "$pid"; code=$?
  [ "$code" -gt "$worst" ] && worst=$code
done
echo "[boxes] done, exit $worst"
exit "$worst"
