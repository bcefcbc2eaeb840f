#!/usr/bin/env bash
# Benchmark of cairn-plan's exhaustive search: the 1T GPT of Narayanan et al. 2021 on 3072 A100s
# (every divisor-valid TP/PP/v, micro-batch, ZeRO stage, recompute mode, SP). Prints plans evaluated
# and elapsed time; the issue's bar is < 1 s on a 2-core machine.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:-build/bin}/cairn-plan
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for run in 1 2 3; do
  start=$(date +%s.%N)
  line=$($BIN --config configs/models/gpt-1t.toml --config configs/clusters/dgx-a100-80gb.toml \
    --set cluster.nodes=384 --set train.global_batch=3072 --out "$OUT" --top 3 --log-level warn | grep "plans evaluated")
  end=$(date +%s.%N)
  echo "run $run: ${line#\# } (process wall $(echo "$end - $start" | bc) s incl. writing plans.h5)"
done
$BIN --config configs/models/gpt-1t.toml --config configs/clusters/dgx-a100-80gb.toml \
  --set cluster.nodes=384 --set train.global_batch=3072 --out "$OUT" --top 5 --log-level warn
