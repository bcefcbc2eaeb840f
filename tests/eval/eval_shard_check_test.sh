#!/bin/bash
# cairn-eval checks each dataset shard its tasks read once per job, split over the ranks as cairn-train does: a
# corrupted shard in rank 1's share fails both ranks with exit 3 naming it, with nothing written; a task over the val
# split hashes only the validation shard.
source "$(dirname "$0")/lib.sh"
cd "$WORK" || exit
# 4 shards: on 2 ranks rank 0 checks shards 0 and 2, rank 1 shards 1 and 3; the validation tail is in shard 3.
"$BIN/cairn-reshard" build /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/computers \
  --delimiter % --shards 4 --out "$WORK/data" --log-level warn
write_train_config train.toml "$WORK/run" 2 2
"$BIN/cairn-train" --config train.toml --log-level warn
CK="$WORK/run/train/ckpt/step_00000002"
# docs reads every shard of split "all" (4 documents scored, so the run stays short); val only the last shard.
cat > eval.toml <<TOML
[run]
dir = "$WORK/run"
[eval]
tasks = ["val", "docs"]
threads = 1
[eval.task.docs]
kind = "perplexity"
mode = "documents"
split = "all"
limit = 4
TOML
# mpirun under a timeout: a rank left out of the verdict would wait in a collective for ever.
eval_2_ranks() { timeout 180 mpirun -np 2 --oversubscribe "$BIN/cairn-eval" --config eval.toml "$@"; }

# Both tasks' shards in one check (shared by the tasks on one dataset), each rank its half.
eval_2_ranks "$CK" > good.out 2> good.err || { cat good.err >&2; fail "2 ranks on intact data"; }
grep -qE "data \".*/data\" \(tasks val, docs\): checking 4 shards \([0-9.]+ M tokens\) against index.json, 1 in 2 on each rank \(rank 0: [0-9.]+ M tokens\)" good.err ||
  { cat good.err >&2; fail "no split check of the 4 shards the tasks read"; }
[ "$(grep -c "checking .* shards" good.err)" = 1 ] || { cat good.err >&2; fail "the dataset was checked more than once"; }
mkdir before
cp -r run/eval before/
ls -R run/eval > before/listing

# One token of shard 1 changed to another valid id (only its checksum can tell): rank 1's share. Rank 1 finds it, every
# rank stops with its verdict (exit 3, "rank 1: corrupt dataset shard ..."; a rank checking every shard itself named it
# as its own find), and neither the record nor the harness files change.
$PY - data/shard_00001.h5 <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    t = f["tokens"]
    t[10] = (int(t[10]) + 1) % 256
PYEOF
rc=0
eval_2_ranks "$CK" --reevaluate > bad.out 2> bad.err || rc=$?
[ $rc = 3 ] || { cat bad.err >&2; fail "2 ranks, shard 1 corrupted: exit $rc, expected 3"; }
grep -qE "rank 1: corrupt dataset shard \".*/data/shard_00001.h5\"" bad.err ||
  { cat bad.err >&2; fail "2 ranks, shard 1 corrupted: not named as rank 1's verdict"; }
! grep -q "step 2: task" bad.err || { cat bad.err >&2; fail "a task was scored before the verdict"; }
for f in results.jsonl results.h5 provenance.jsonl; do
  cmp -s "before/eval/$f" "run/eval/$f" || fail "2 ranks, shard 1 corrupted: eval/$f changed"
done
ls -R run/eval | cmp -s before/listing - || fail "2 ranks, shard 1 corrupted: files added under eval/"
rc=0
eval_2_ranks "$CK" --out "$WORK/fresh" > /dev/null 2> fresh.err || rc=$?
[ $rc = 3 ] && grep -q "rank 1: corrupt dataset shard" fresh.err || { cat fresh.err >&2; fail "fresh run: exit $rc"; }
[ ! -e fresh/eval ] || fail "2 ranks, shard 1 corrupted: a fresh run made eval/"

# val reads only the last shard: it is checked alone, and the corrupted shard 1 is not hashed.
eval_2_ranks "$CK" --tasks val --out "$WORK/valonly" > /dev/null 2> val.err ||
  { cat val.err >&2; fail "val on data whose shard 1 is corrupted"; }
grep -qE "\(task val\): checking 1 shards \([0-9.]+ M tokens\) against index.json, 1 in 2 on each rank" val.err ||
  { cat val.err >&2; fail "val: not only its shard checked"; }
echo "eval_shard_check: OK"
