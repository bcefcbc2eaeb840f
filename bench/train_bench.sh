#!/usr/bin/env bash
# Benchmark (prints figures; not a test): cairn-train's whole training step (loader, forward, backward,
# gradient all-reduce, AdamW) in tokens/s against eager PyTorch 1.13 on the same GPT, batch and thread
# count (bench/kernels_torch_bench.py, Debian's /usr/bin/python3), then 1 -> 2 rank data-parallel scaling
# (weak scaling: the same micro-batch per rank). Each figure is the best of REPEAT runs (runs alternate),
# each run's figure its mean over the timed steps, so a busy shared machine disturbs it less.
# Usage: bench/train_bench.sh [build/bin]   (env: LAYERS HIDDEN HEADS SEQ BATCH STEPS THREADS REPEAT)
set -euo pipefail
BIN=${1:-${CAIRN_BIN_DIR:-build/bin}}
HERE=$(cd "$(dirname "$0")" && pwd)
L=${LAYERS:-4} C=${HIDDEN:-256} H=${HEADS:-4} T=${SEQ:-256} B=${BATCH:-4} S=${STEPS:-10} TH=${THREADS:-1}
R=${REPEAT:-3}
W=$(mktemp -d /tmp/cairn_train_bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=$TH
F=/usr/share/games/fortunes
"$BIN/cairn-reshard" --log-level warn --out "$W/ds" --set 'data.delimiter="%"' --set data.shards=2 build "$F"
ARGS=(--data "$W/ds" --log-level warn --threads "$TH" --set model.layers=$L --set model.hidden=$C
      --set model.heads=$H --set model.seq_len=$T --set model.vocab=320 --set train.val_every=0
      --set train.checkpoint_every=0 --set train.tensorboard=false --steps $((S + 2)))
mean_tok_s() {  # tokens / seconds over the steps after the first 2 (warm-up), like the PyTorch figure
  /usr/bin/python3 -c "import json,sys
v=[json.loads(l) for l in open(sys.argv[1]) if '\"train\"' in l][2:]
print(f'{sum(x[\"tokens_per_s\"]*x[\"time_s\"][\"total\"] for x in v)/sum(x[\"time_s\"][\"total\"] for x in v):.0f}')" \
    "$1/train/metrics.jsonl"
}
best() { printf '%s\n' "$@" | sort -n | tail -1; }
one=() torch=() two=() twoz=()
for rep in $(seq 1 "$R"); do
  rm -rf "$W"/r*
  "$BIN/cairn-train" --out "$W/r1" "${ARGS[@]}" --set train.global_batch=$B
  one+=("$(mean_tok_s "$W/r1")")
  torch+=("$(/usr/bin/python3 "$HERE/kernels_torch_bench.py" --layers $L --hidden $C --heads $H --seq $T \
    --batch $B --vocab 320 --steps $S --warmup 2 | awk '/^torch/ {print $2}')")
  mpirun --oversubscribe -np 2 "$BIN/cairn-train" --out "$W/r2" "${ARGS[@]}" --set train.global_batch=$((2 * B))
  two+=("$(mean_tok_s "$W/r2")")
  mpirun --oversubscribe -np 2 "$BIN/cairn-train" --out "$W/r2z" "${ARGS[@]}" --set train.global_batch=$((2 * B)) \
    --set parallel.zero=1
  twoz+=("$(mean_tok_s "$W/r2z")")
done
echo "GPT L=$L C=$C H=$H T=$T V=320, micro-batch $B per rank, $TH thread(s) per rank, $S timed steps, best of $R"
echo "  runs: cairn 1 rank ${one[*]} | torch ${torch[*]} | cairn 2 ranks ${two[*]} | ZeRO-1 ${twoz[*]}"
o=$(best "${one[@]}") t=$(best "${torch[@]}") w=$(best "${two[@]}") z=$(best "${twoz[@]}")
echo "cairn-train 1 rank : $o tokens/s"
echo "pytorch eager      : $t tokens/s (PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'))"
awk -v a="$o" -v b="$t" 'BEGIN { printf "cairn / pytorch    : %.2fx\n", a / b }'
echo "cairn-train 2 ranks: $w tokens/s (ZeRO-1: $z)"
awk -v a="$o" -v b="$w" 'BEGIN { printf "1 -> 2 rank scaling: %.2fx (efficiency %.0f%%)\n", b / a, 50 * b / a }'
