#!/usr/bin/env bash
# Predicted vs measured cairn-train step time on this CPU: calibrate the cost model with OpenBLAS on
# the model's shapes (one thread, as the training run), train a small GPT a few steps, compare.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:-build/bin}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
F=/usr/share/games/fortunes
MODEL=(--set model.layers=${LAYERS:-4} --set model.hidden=${HIDDEN:-256} --set model.heads=4
       --set model.seq_len=${SEQ:-256} --set train.global_batch=8)
"$BIN/cairn-reshard" --log-level warn --out "$W/ds" --set 'data.delimiter="%"' --set data.shards=2 \
  build "$F/fortunes" "$F/computers" "$F/science"
# Byte tokenizer: 257 ids, padded to 320 as cairn-train does.
"$BIN/cairn-plan" calibrate --config configs/clusters/cpu-local.toml --set cluster.peak_tflops=0.083 \
  "${MODEL[@]}" --set model.vocab=320 --seconds 0.3 --max-dim 512 --output "$W/cpu1.toml" --out "$W" --log-level warn
"$BIN/cairn-train" --out "$W/r" --data "$W/ds" --threads 1 --log-level warn "${MODEL[@]}" --set train.micro_batch=8 \
  --steps ${STEPS:-8} --set train.checkpoint_every=0 --set train.val_every=0 --set train.tensorboard=false
"$BIN/cairn-plan" --config configs/clusters/cpu-local.toml --config "$W/cpu1.toml" "${MODEL[@]}" --set model.vocab=320 \
  --set cluster.gpus_per_node=1 --out "$W" --explain --plan dp=1,mb=8 --json "$W/pred.json" --log-level warn > /dev/null
/usr/bin/python3 - "$W" <<'PY'
import json, sys, statistics
w = sys.argv[1]
rows = [json.loads(l) for l in open(w + "/r/train/metrics.jsonl") if '"train"' in l]
meas = statistics.median(r["time_s"]["total"] for r in rows[2:])  # skip warm-up steps
p = json.load(open(w + "/pred.json"))["plans"][0]
b = p["breakdown"]["time_s"]
fwd = statistics.median(r["time_s"]["forward"] for r in rows[2:])
bwd = statistics.median(r["time_s"]["backward"] for r in rows[2:])
print(f"measured step {meas:.3f} s (forward {fwd:.3f}, backward {bwd:.3f}); predicted {p['step_time_s']:.3f} s "
      f"(forward {b['stage_forward_per_microbatch']:.3f}, backward {b['stage_backward_per_microbatch']:.3f}); "
      f"predicted/measured {p['step_time_s'] / meas:.2f}")
PY
