#!/usr/bin/env bash
# scripts/gpu/fetch-back.sh FILES_AT [--show]
#
# Runs HERE after every box (scripts/gpu/box.sh), with the folder where the
# `run` tool put the files of $OUT (its files_at). Puts them where the next box
# and this checkout expect them:
#   NAME.db                      -> studies/NAME.db (only if it holds at least as
#                                   many trials as the local one)
#   NAME-files.tar.gz[.partN]    -> studies/NAME/ (trials/N/ logs and bench.json,
#                                   tune.log, reference.json)
#   compile-cache.tar.gz         -> .gpu-pack/cache/ (carried to a fresh machine)
#   box.log, box-summary.json    -> studies/NAME/boxes/<time>.{log,json} (committed
#                                   with the study: the box's set-up and trial timings)
# With --show, then prints the study with `autotune show` (a few seconds: the
# machine goes back 30 s after a call, so send the next call first).
set -euo pipefail
SRC=${1:?usage: fetch-back.sh FILES_AT [--show]}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
shopt -s nullglob
mkdir -p studies .gpu-pack/cache
stamp=$(date +%Y%m%d-%H%M%S)
name=""
for db in "$SRC"/*.db; do
  name=$(basename "$db" .db)
  new=$("$PY" scripts/gpu/boxtool.py count "$db")
  old=$("$PY" scripts/gpu/boxtool.py count "studies/$name.db")
  if [ "$new" -lt "$old" ]; then
    echo "NOT copied: $db has $new trials, studies/$name.db $old" >&2
    continue
  fi
  cp -f "$db" "studies/$name.db"; chmod u+w "studies/$name.db"
  echo "studies/$name.db: $old -> $new trials"
done
for first in "$SRC"/*-files.tar.gz "$SRC"/*-files.tar.gz.part0; do
  base=${first%.part0}
  if [ "$first" != "$base" ]; then cat "$base".part* > "/tmp/fetch-$$.tar.gz"
  else cp "$first" "/tmp/fetch-$$.tar.gz"; fi
  tar -xzf "/tmp/fetch-$$.tar.gz" -C studies
  rm -f "/tmp/fetch-$$.tar.gz"
  echo "studies/: $(tar -tzf "$first" 2>/dev/null | wc -l) file(s) from $(basename "$base")"
done
if [ -f "$SRC/compile-cache.tar.gz" ]; then
  cp -f "$SRC/compile-cache.tar.gz" .gpu-pack/cache/compile-cache.tar.gz
  chmod u+w .gpu-pack/cache/compile-cache.tar.gz
  echo ".gpu-pack/cache/compile-cache.tar.gz: $(du -h "$SRC/compile-cache.tar.gz" | cut -f1)"
fi
# a box that returned no database yet (a job still in its first step) still names its
# study by its files
if [ -z "$name" ]; then
  for files in "$SRC"/*-files.tar.gz "$SRC"/*-files.tar.gz.part0; do
    name=$(basename "${files%.part0}" -files.tar.gz)
  done
fi
boxes=studies/${name:-unknown}/boxes
mkdir -p "$boxes"
# two boxes fetched within one second must not overwrite each other's records
n=1; base=$stamp
while [ -e "$boxes/$stamp.log" ] || [ -e "$boxes/$stamp.json" ]; do
  n=$(( n + 1 )); stamp=$base-$n
done
[ -f "$SRC/box.log" ] && cp -f "$SRC/box.log" "$boxes/$stamp.log"
[ -f "$SRC/box-summary.json" ] && \
  cp -f "$SRC/box-summary.json" "$boxes/$stamp.json"
chmod -R u+w studies 2>/dev/null || true
if [ -n "$name" ] && [ "${2:-}" = --show ]; then
  "$PY" -m autotune show "studies/$name.db" || true
fi
