#!/bin/bash
# cairn-eval's record follows the checkpoints it scored, not just their step numbers: after cairn-train --resume DIR
# rolls back and writes step N again, N is scored again (results keyed by checkpoint_id, also for rows written before
# ids were recorded); a damaged checkpoint in a sweep is reported, the others are scored, the exit code is 1; a
# damaged checkpoint is exit 1 however it is named (a step directory, a model.h5, a root), a missing or unsealed one 2.
source "$(dirname "$0")/lib.sh"
cd "$WORK"
make_dataset "$WORK/data"
write_train_config train.toml "$WORK/run" 20 10
"$BIN/cairn-train" --config train.toml --log-level warn
write_eval_config eval.toml "$WORK/run"
CK=$WORK/run/train/ckpt
"$BIN/cairn-eval" --config eval.toml --log-level warn > /dev/null
# rows: step -> (checkpoint_id, loss, wall_time) of the train_val loss rows
rows() {
  $PY - "$WORK/run/eval/results.jsonl" <<'PY'
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if r["metric"] == "loss":
        print(r["step"], r.get("checkpoint_id", "-"), repr(r["value"]), r["wall_time"])
PY
}
rows > before.txt
[ "$(wc -l < before.txt)" = 2 ] || fail "expected rows for steps 10 and 20: $(cat before.txt)"
grep -q '^20 [0-9a-f]\{16\} ' before.txt || fail "no checkpoint_id recorded: $(cat before.txt)"

# Rollback: step 20 written again from step 10 with another learning rate.
"$BIN/cairn-train" --config train.toml --log-level error --resume "$CK/step_00000010" --set train.lr=3e-4
"$BIN/cairn-eval" --config eval.toml --log-level warn > /dev/null
rows > after.txt
$PY - before.txt after.txt "$WORK/run/eval/lm_eval/step_00000020.json" <<'PY'
import json, sys
b = {l.split()[0]: l.split()[1:] for l in open(sys.argv[1])}
a = {l.split()[0]: l.split()[1:] for l in open(sys.argv[2])}
assert a["10"] == b["10"], ("step 10 was not rewritten and must not be rescored", b["10"], a["10"])
assert a["20"][0] != b["20"][0], ("step 20 was rewritten: a new checkpoint_id", b["20"], a["20"])
assert a["20"][1] != b["20"][1], ("step 20 was rewritten with another lr: another loss", b["20"], a["20"])
lm = json.load(open(sys.argv[3]))
assert lm["cairn"]["checkpoint_id"] == a["20"][0], lm["cairn"]
print("rollback: step 20 rescored", b["20"][1], "->", a["20"][1])
PY

# Rows written before checkpoint ids existed: kept when they are newer than the checkpoint, rescored after a rollback.
$PY - "$WORK/run/eval/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    r.pop("checkpoint_id", None)
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
"$BIN/cairn-eval" --config eval.toml 2> legacy.err > /dev/null
grep -q "2 checkpoint(s) already evaluated" legacy.err || { cat legacy.err >&2; fail "legacy rows were not taken as done"; }
"$BIN/cairn-train" --config train.toml --log-level error --resume "$CK/step_00000010" --set train.lr=1e-4
"$BIN/cairn-eval" --config eval.toml --log-level warn > /dev/null
rows > legacy.txt
grep -q "^10 - " legacy.txt || fail "step 10 (unchanged) was rescored: $(cat legacy.txt)"
grep -q "^20 [0-9a-f]\{16\} " legacy.txt || fail "step 20 (rewritten) was not rescored: $(cat legacy.txt)"

# A damaged checkpoint in a sweep: reported, the others scored, exit 1 at the end; with checksums off the load finds it.
cp -r "$CK/step_00000010" saved10
# (mid-file: inside the tensors, so with verify_checkpoints = false the tensor checksums find it at load)
printf 'garbage' | dd of="$CK/step_00000010/model.h5" bs=1 seek=$(($(stat -c %s "$CK/step_00000010/model.h5") / 2)) \
  conv=notrunc status=none
for verify in true false; do
  rm -f run/eval/results.jsonl
  expect_exit 1 'step_00000010.*not evaluated' "$BIN/cairn-eval" --config eval.toml --set "eval.verify_checkpoints=$verify"
  grep -q 'step_00000010' "$WORK/err.txt" || fail "verify=$verify: the damaged checkpoint is not named"
  rows > damaged.txt
  grep -q '^20 ' damaged.txt && ! grep -q '^10 ' damaged.txt || fail "verify=$verify: $(cat damaged.txt)"
done
# --watch (the run has FINISHED): the damaged step reported once, not on every poll; the rest scored; exit 1.
expect_exit 1 'step_00000010' "$BIN/cairn-eval" --config eval.toml --out w1 --watch "$WORK/run/train" \
  --poll-interval 0.05
[ "$(grep -c 'error: damaged checkpoint' "$WORK/err.txt")" = 1 ] || { cat "$WORK/err.txt" >&2; fail "--watch: reported again"; }
[ "$(grep -c '"loss"' w1/eval/results.jsonl)" = 1 ] || fail "--watch: step 20 not scored beside the damaged step 10"
# The same damage named directly (a step directory; on 2 ranks, found at load), then truncated (the step directory,
# its model.h5): all exit 1.
expect_exit 1 'checksum mismatch' "$BIN/cairn-eval" --config eval.toml --out d1 "$CK/step_00000010"
expect_exit 1 'step_00000010.*checksum mismatch in tensor' mpirun -np 2 --oversubscribe "$BIN/cairn-eval" \
  --config eval.toml --out d2 --set eval.verify_checkpoints=false "$CK"
[ "$(grep -c '"loss"' d2/eval/results.jsonl)" = 1 ] || fail "2 ranks: step 20 not scored beside the damaged step 10"
truncate -s 3000 "$CK/step_00000010/model.h5"
expect_exit 1 'step_00000010' "$BIN/cairn-eval" --config eval.toml --out d3 --set eval.verify_checkpoints=false \
  "$CK/step_00000010"
expect_exit 1 'step_00000010' "$BIN/cairn-eval" --config eval.toml --out d4 "$CK/step_00000010/model.h5"
# Not a checkpoint at all: the user's to fix (exit 2).
mkdir -p unsealed && cp saved10/model.h5 unsealed/
expect_exit 2 'incomplete checkpoint' "$BIN/cairn-eval" --config eval.toml --out d5 "$WORK/unsealed"
expect_exit 2 'No such file' "$BIN/cairn-eval" --config eval.toml --out d6 "$CK/step_00000099"
echo "eval_rollback: OK"
