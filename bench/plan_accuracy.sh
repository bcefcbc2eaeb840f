#!/usr/bin/env bash
# Predicted vs published throughput of Megatron-style runs (hardware TFLOP/s per GPU, i.e. counting
# full-recompute FLOPs as those papers do). Published figures: Narayanan et al. 2021 Table 1 (GPT,
# s = 2048, V = 51200, DGX A100 80GB, full recompute) and BigScience's BLOOM-176B (Jean Zay: 4 x 100 Gb/s
# Omni-Path per node). Micro-batch is left to the planner where the paper does not state it. Megatron
# in 2021 reduced gradients after the pipeline flush (no overlap): BENCH_SETS defaults to that.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:-build/bin}/cairn-plan
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
A100=configs/clusters/dgx-a100-80gb.toml
printf "%-10s %-26s %10s %10s %7s\n" model plan published predicted ratio
row() {  # name layers hidden heads vocab gpus tp pp batch published [extra sets...]
  local name=$1 l=$2 h=$3 a=$4 V=$5 g=$6 tp=$7 pp=$8 B=$9 pub=${10}; shift 10
  local nodes=$((g / 8)) dp=$((g / tp / pp))
  local j
  j=$($BIN --set model.layers=$l --set model.hidden=$h --set model.heads=$a --set model.vocab=$V \
      --set model.seq_len=2048 --config $A100 --set cluster.nodes=$nodes --set train.global_batch=$B \
      --plan "tp=$tp,pp=$pp,dp=$dp,v=1,zero=0,recompute=full,sp=off" ${BENCH_SETS---set plan.dp_overlap=false} "$@" --out "$OUT" --top 1 \
      --log-level warn --json - | /usr/bin/python3 -c 'import json,sys; p=json.load(sys.stdin)["plans"][0]; print(p["hw_tflops_per_gpu"], p["mb"])')
  set -- $j
  printf "%-10s %-26s %10s %10.1f %7.2f\n" "$name" "tp$tp pp$pp dp$dp mb$2" "$pub" "$1" "$(echo "$1 / $pub" | bc -l)"
}
row 1.7B   24  2304  24 51200   32 1  1  512 137
row 3.6B   30  3072  32 51200   64 2  1  512 138
row 7.5B   36  4096  32 51200  128 4  1  512 142
row 18B    40  6144  48 51200  256 8  1 1024 135
row 39B    48  8192  64 51200  512 8  2 1536 138
row 76B    60 10240  80 51200 1024 8  4 1792 140
row 145B   80 12288  96 51200 1536 8  8 2304 148
row 310B   96 16384 128 51200 1920 8 16 2160 155
row 530B  105 20480 128 51200 2520 8 35 2520 163
row 1T    128 25600 160 51200 3072 8 64 3072 163
# BLOOM ran Megatron-DeepSpeed: full-size p2p sends, gradient reduction after the pipeline flush.
row BLOOM  70 14336 112 250880 384 4 12 2048 150 --set plan.mb=2 --set cluster.inter_bw_gbps=6.25 --set plan.zero=1 \
  --set plan.dp_overlap=false --set plan.pp_scatter_gather=false
