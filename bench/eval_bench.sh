#!/bin/bash
# Benchmark (prints figures, asserts nothing): cairn-eval's forward-only tokens/s against cairn-train's
# training tokens/s on the same model, batch and thread count (target: eval >= 2.5x training).
# usage: bench/eval_bench.sh [BIN_DIR] [layers hidden heads seq_len batch threads steps]
set -euo pipefail
BIN=${1:-build/bin}
L=${2:-4} H=${3:-256} NH=${4:-4} T=${5:-256} B=${6:-8} THREADS=${7:-1} STEPS=${8:-12}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=$THREADS
W=$(mktemp -d /tmp/cairn-eval-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
"$BIN/cairn-reshard" build /usr/share/games/fortunes --delimiter % --shards 2 --out "$W/data" --log-level warn
cat > "$W/c.toml" <<TOML
[run]
dir = "$W/run"
[model]
layers = $L
hidden = $H
heads = $NH
seq_len = $T
[data]
path = "$W/data"
val_fraction = 0.05
[train]
steps = $STEPS
global_batch = $B
micro_batch = $B
warmup = 2
lr = 1e-3
checkpoint_every = $STEPS
val_every = 0
tensorboard = false
threads = $THREADS
spike_zscore = 0.0
[eval]
tasks = ["val"]
batch_size = $B
limit = 64
threads = $THREADS
TOML
"$BIN/cairn-train" --config "$W/c.toml" --log-level warn
"$BIN/cairn-eval" --config "$W/c.toml" --log-level warn > /dev/null
python3 - "$W/run" "$L" "$H" "$T" "$B" "$THREADS" <<'PY'
import json, statistics, sys
run, L, H, T, B, th = sys.argv[1:]
tr = [j["tokens_per_s"] for j in map(json.loads, open(f"{run}/train/metrics.jsonl")) if j.get("kind") == "train"]
tr = statistics.median(tr[2:] if len(tr) > 4 else tr)
ev = [r for r in map(json.loads, open(f"{run}/eval/results.jsonl")) if r["task"] == "val"]
tps = [r["value"] for r in ev if r["metric"] == "eval_tokens_per_s"][0]
eps = [r["value"] for r in ev if r["metric"] == "eval_examples_per_s"][0]
n = [r["n"] for r in ev if r["metric"] == "loss"][0]
print(f"model: {L} layers, hidden {H}, seq {T}, batch {B}, {th} thread(s)")
print(f"train: {tr:,.0f} tokens/s (median step)")
print(f"eval:  {tps:,.0f} tokens/s, {eps:,.1f} windows/s over {n} validation windows (limit 64)")
print(f"ratio eval/train: {tps / tr:.2f}x (target >= 2.5x)")
PY
