#!/usr/bin/env bash
# Demo check (prints figures; not a test): the configs/demo.toml training stage on fortunes (bytes
# tokenizer) with 2 ranks; prints wall time and the final validation loss against the dataset's unigram
# entropy (nats/token, computed from the shards). Usage: bench/train_demo.sh [build/bin] [--set k=v ...]
set -euo pipefail
BIN=${1:-${CAIRN_BIN_DIR:-build/bin}}
shift || true
W=$(mktemp -d /tmp/cairn_train_demo.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$BIN/cairn-reshard" --config configs/demo.toml --log-level warn --out "$W/data" build
start=$(date +%s.%N)
mpirun --oversubscribe -np 2 "$BIN/cairn-train" --config configs/demo.toml --out "$W" --data "$W/data" \
  --set train.log_every=100 "$@"
end=$(date +%s.%N)
/usr/bin/python3 - "$W" "$start" "$end" <<'PYEOF'
import glob, json, math, sys
import h5py, numpy as np
w, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
counts = np.zeros(1 << 16, dtype=np.int64)
for f in glob.glob(f"{w}/data/shard_*.h5"):
    with h5py.File(f, "r") as h:
        name = next(k for k in ("tokens", "data/tokens") if k in h)
        counts += np.bincount(h[name][...], minlength=counts.size)[: counts.size]
p = counts[counts > 0] / counts.sum()
unigram = float(-(p * np.log(p)).sum())
lines = [json.loads(l) for l in open(f"{w}/train/metrics.jsonl")]
val = [l for l in lines if l["kind"] == "val"]
train = [l for l in lines if l["kind"] == "train"]
print(f"demo: {train[-1]['step']} steps, {train[-1]['tokens']} tokens in {end - start:.1f} s wall "
      f"(2 ranks); final val loss {val[-1]['val_loss']:.3f} nats vs unigram entropy {unigram:.3f} nats "
      f"({unigram - val[-1]['val_loss']:.2f} below)")
PYEOF
