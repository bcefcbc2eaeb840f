#!/bin/bash
# cairn-eval --watch follows a (2-rank) training run: started before the trainer, it evaluates each checkpoint
# as it is sealed, stops at FINISHED, resumes from results.jsonl on a rerun, and honours --idle-timeout.
source "$(dirname "$0")/lib.sh"
cd "$WORK"
make_dataset "$WORK/data"
write_train_config train.toml "$WORK/run" 40 10
write_eval_config eval.toml "$WORK/run"
# The watcher starts first, on a train directory that does not exist yet.
# Both data parallel over 2 ranks: train_val must reproduce the 2-rank trainer's validation pass.
mpirun -np 2 --oversubscribe "$BIN/cairn-eval" --config eval.toml --watch "$WORK/run/train" --poll-interval 0.2 \
  --idle-timeout 120 > watch.out 2> watch.err &
WATCH=$!
sleep 1
mpirun -np 2 --oversubscribe "$BIN/cairn-train" --config train.toml --set train.micro_batch=4 --log-level warn
wait $WATCH || { cat watch.err >&2; fail "cairn-eval --watch failed"; }
grep -q "training run finished" watch.err || { cat watch.err >&2; ls -la run/train run/train/ckpt >&2; fail "watch did not stop at FINISHED"; }
$PY - "$WORK/run" <<'PY'
import json, sys
run = sys.argv[1]
val = {j["step"]: j["val_loss"] for j in map(json.loads, open(f"{run}/train/metrics.jsonl")) if j["kind"] == "val"}
got = {r["step"]: r["value"] for r in map(json.loads, open(f"{run}/eval/results.jsonl")) if r["metric"] == "loss"}
assert sorted(got) == [10, 20, 30, 40], got
for s in got:
    assert abs(got[s] - val[s]) <= 1e-5, (s, got[s], val[s])
print("watch evaluated steps", sorted(got))
PY
# Rerun after the run finished: nothing new, immediate stop.
n=$(wc -l < run/eval/results.jsonl)
"$BIN/cairn-eval" --config eval.toml --watch "$WORK/run/train/ckpt" --poll-interval 0.2 2> rerun.err > /dev/null
[ "$(wc -l < run/eval/results.jsonl)" = "$n" ] || fail "rerun re-evaluated checkpoints"
# No FINISHED marker: --idle-timeout ends the watch.
rm run/train/FINISHED
"$BIN/cairn-eval" --config eval.toml --watch "$WORK/run/train" --poll-interval 0.2 --idle-timeout 1 2> idle.err > /dev/null
grep -q "idle_timeout" idle.err || { cat idle.err >&2; fail "idle timeout not reported"; }
# A task error fails a watcher at once, not hours later at the first checkpoint.
: > empty.jsonl
expect_exit 2 "empty task" "$BIN/cairn-eval" --config eval.toml --watch "$WORK/nothing_yet" --idle-timeout 600 \
  --tasks mc --set 'eval.task.mc={kind="multiple_choice", path="'"$WORK"'/empty.jsonl"}'
echo "eval_watch: OK"
