#!/usr/bin/env bash
# Corruption is caught, not trained on: a dataset whose tokens were changed after it was written (its checksums
# left as they were) stops cairn-train and cairn-eval with exit 3 naming the shard, before a step is reported.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:?CAIRN_BIN_DIR must point at build/bin}
W=$(mktemp -d /tmp/cairn_train_corrupt.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN/cairn-reshard" --log-level error --out "$W/ds" --set 'data.delimiter="%"' --set data.shards=4 build /usr/share/games/fortunes/fortunes
MODEL=(--data "$W/ds" --threads 1 --log-level warn --set model.layers=1 --set model.hidden=32 --set model.heads=2
       --set model.seq_len=32 --set train.global_batch=4 --set train.val_every=0 --set train.checkpoint_every=0)
"$BIN/cairn-train" --out "$W/good" "${MODEL[@]}" --steps 2 || fail "training on the intact dataset failed"

cp -r "$W/ds" "$W/ds_clean"
# one token of every shard changed to another valid id (only the checksums can tell), so the first batch and
# the validation tail both touch a corrupted shard whatever the shuffle
/usr/bin/python3 - "$W"/ds/shard_*.h5 <<'PYEOF'
import sys, h5py
for path in sys.argv[1:]:
    with h5py.File(path, "r+") as f:
        t = f["tokens"]
        t[10] = (int(t[10]) + 1) % 256
PYEOF

rc=0
err=$("$BIN/cairn-train" --out "$W/bad" "${MODEL[@]}" --steps 40 2>&1 >/dev/null) || rc=$?
[[ $rc == 3 ]] || fail "cairn-train on a corrupted shard: exit $rc, expected 3: $err"
grep -qE 'corrupt dataset shard ".*shard_0000[0-3].h5"' <<<"$err" || fail "the error does not name the corrupted shard: $err"
for _ in 1 2; do  # the same through 2 ranks (the verdict of the rank that checked the shard reaches both)
  rc=0
  err=$(mpirun --oversubscribe -np 2 "$BIN/cairn-train" --out "$W/bad2" "${MODEL[@]}" --steps 40 2>&1 >/dev/null) || rc=$?
  [[ $rc == 3 ]] || fail "2 ranks on a corrupted shard: exit $rc, expected 3: $err"
done
# Checked once per job, before anything is written: each rank hashes its share of the shards (rank r: r, r + 2, ...)
# and every rank stops on any rank's verdict. One corrupted shard of rank 1's share, through 2 ranks: exit 3 naming
# it, no run directory content (a rank that read every shard itself hashed the whole dataset at every start).
cp -r "$W/ds_clean" "$W/ds1"
cp "$W/ds/shard_00001.h5" "$W/ds1/"
rc=0
err=$(mpirun --oversubscribe -np 2 "$BIN/cairn-train" --out "$W/bad1" --data "$W/ds1" "${MODEL[@]:2}" --steps 40 \
  2>&1 >/dev/null) || rc=$?
[[ $rc == 3 ]] || fail "2 ranks, shard 1 corrupted: exit $rc, expected 3: $err"
grep -qE 'corrupt dataset shard ".*ds1/shard_00001.h5"' <<<"$err" || fail "2 ranks, shard 1: not named: $err"
[[ ! -e "$W/bad1/train/metrics.jsonl" ]] || fail "2 ranks, shard 1 corrupted: the run wrote metrics.jsonl"
rc=0
err=$("$BIN/cairn-eval" --out "$W/good" --data "$W/ds" --log-level warn --set 'eval.tasks=["val"]' 2>&1 >/dev/null) || rc=$?
[[ $rc == 3 ]] || fail "cairn-eval on a corrupted dataset: exit $rc, expected 3: $err"
grep -q 'shard_00003.h5' <<<"$err" || fail "cairn-eval's error does not name the validation shard: $err"
echo "corrupted shard: cairn-train (1 and 2 ranks) and cairn-eval exit 3 naming it"
