#!/usr/bin/env bash
# Whole training runs against PyTorch: 40 steps of cairn-train (AdamW with weight decay, clipping at every step,
# warmup then cosine decay, gradient accumulation) on 1 rank, tp2 x pp2 and dp2 x tp2 + sp with ZeRO-3 give the
# losses, gradient norms, learning rates and step-10/40 parameters of a float64 PyTorch run written from the docs
# (torch_run_ref.py), within float32 rounding; two deliberately wrong references (weight decay on norms and biases,
# Megatron's warmup) are noticed, so the tolerances can see such mistakes.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:?CAIRN_BIN_DIR must point at build/bin}
PY=/usr/bin/python3  # Debian's python3 with python3-torch and python3-h5py
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /tmp/cairn_torch_run.XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
"$PY" -c 'import torch, h5py' 2> /dev/null || fail "$PY cannot import torch and h5py (install python3-torch python3-h5py)"

# Real text, bytes as tokens: 1031 tokens are exactly 16 windows of 64 + 1, one global batch, so every step sees
# every window and the result does not depend on the data order.
head -c 1030 /usr/share/common-licenses/Apache-2.0 > "$W/text.txt"
"$BIN/cairn-reshard" --log-level error build "$W/text.txt" --out "$W/ds" --shards 1

# lr 3e-3 with Adam's eps 1e-5: large enough that a wrong update grows, small enough that float32 and float64
# runs of the same maths stay within ~1e-5 (at lr 1e-2 and eps 1e-8 they part by 1e-2 within 25 steps).
COMMON=(--data "$W/ds" --threads 1 --log-level warn --set model.layers=2 --set model.hidden=64 --set model.heads=4
        --set model.seq_len=64 --set data.val_fraction=0 --set train.val_every=0 --set train.global_batch=16
        --set train.micro_batch=4 --set train.warmup=10 --set train.schedule='"cosine"' --set train.min_lr=3e-4
        --set train.weight_decay=0.1 --set train.eps=1e-5 --set train.spike_zscore=0 --set train.tensorboard=false)
RUN=("${COMMON[@]}" --steps 40 --set train.lr=3e-3 --set train.grad_clip=0.1 --set train.checkpoint_every=10
     --set train.keep_checkpoints=10)

# Initial weights: one update at lr 1e-30 changes none (in float32) but the zero biases (to ~1e-30).
"$BIN/cairn-train" "${COMMON[@]}" --out "$W/init" --steps 1 --set train.lr=1e-30 --set train.min_lr=0 ||
  fail "initial weights: exit $?"
ref() {  # ref NAME [--wrong KIND]
  local name=$1
  shift
  "$PY" "$HERE/torch_run_ref.py" --init "$W/init/train/ckpt/step_00000001/model.h5" --data "$W/ds" \
    --out "$W/$name" --steps 40 --micro 4 --lr 3e-3 --min-lr 3e-4 --warmup 10 --weight-decay 0.1 --eps 1e-5 \
    --clip 0.1 --save 10,40 "$@" || fail "reference $name: exit $?"
}
ref ref
ref decay-norms --wrong decay-norms
ref megatron-warmup --wrong megatron-warmup

"$BIN/cairn-train" "${RUN[@]}" --out "$W/r1" || fail "1 rank: exit $?"
"$PY" "$HERE/torch_run_compare.py" "$W/r1" "$W/ref" || fail "1 rank differs from PyTorch"
# Every step's norm (before clipping) is above grad_clip, so every step checks the clipping.
"$PY" -c 'import json, sys
norms = [json.loads(l)["grad_norm"] for l in open(sys.argv[1]) if "\"kind\":\"train\"" in l]
sys.exit(len(norms) != 40 or min(norms) <= 0.1)' "$W/r1/train/metrics.jsonl" ||
  fail "grad_clip = 0.1 did not clip every step: the test no longer checks clipping"
for wrong in decay-norms megatron-warmup; do
  "$PY" "$HERE/torch_run_compare.py" "$W/r1" "$W/$wrong" --expect-differ || fail "negative control $wrong"
done

layout() {  # layout NAME RANKS --set ...
  local name=$1 np=$2
  shift 2
  mpirun --oversubscribe -np "$np" "$BIN/cairn-train" "${RUN[@]}" --out "$W/$name" "$@" > "$W/$name.log" 2>&1 ||
    fail "$name: exit $? $(tail -3 "$W/$name.log")"
  "$PY" "$HERE/torch_run_compare.py" "$W/$name" "$W/ref" || fail "$name differs from PyTorch"
}
layout tp2pp2 4 --set parallel.tp=2 --set parallel.pp=2
layout dp2tp2sp-zero3 4 --set parallel.tp=2 --set parallel.sp='"on"' --set parallel.zero=3
echo "torch_run: ok"
