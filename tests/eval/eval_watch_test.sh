#!/bin/bash
# cairn-eval --watch follows a (2-rank) training run: started before the trainer, it evaluates each checkpoint
# as it is sealed, stops at FINISHED, resumes from results.jsonl on a rerun, and honours --idle-timeout; two
# evaluators on one run keep each other's rows.
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
# A checkpoint sealed while a poll scans the root is evaluated, never reported as damaged: a writer seals copies of
# step 40 one after another (files first, DONE last and atomically, as the trainer does) while the watcher polls
# every 10 ms.
mkdir -p race/train/ckpt
cp run/train/config.toml race/train/ 2> /dev/null || true
"$BIN/cairn-eval" --config eval.toml --set run.dir="$WORK/race" --watch "$WORK/race/train" --poll-interval 0.01 \
  --idle-timeout 120 > /dev/null 2> race.err &
RACE=$!
for s in $(seq 101 140); do
  d=race/train/ckpt/$(printf step_%08d "$s")
  mkdir "$d"
  for f in run/train/ckpt/step_00000040/*; do [ "$(basename "$f")" = DONE ] || cp "$f" "$d/"; done
  cp run/train/ckpt/step_00000040/DONE "$d/.DONE.tmp" && mv "$d/.DONE.tmp" "$d/DONE"
done
touch race/train/FINISHED
wait $RACE || { cat race.err >&2; fail "watch failed on checkpoints sealed during its scans"; }
! grep -q "damaged" race.err || { cat race.err >&2; fail "a checkpoint sealed during a scan was reported damaged"; }
[ "$(grep -c '"metric":"loss"' race/eval/results.jsonl)" = 40 ] || fail "watch did not evaluate all 40 sealed copies"
# Rerun after the run finished: nothing new, immediate stop.
n=$(wc -l < run/eval/results.jsonl)
"$BIN/cairn-eval" --config eval.toml --watch "$WORK/run/train/ckpt" --poll-interval 0.2 2> rerun.err > /dev/null
[ "$(wc -l < run/eval/results.jsonl)" = "$n" ] || fail "rerun re-evaluated checkpoints"
# No FINISHED marker: --idle-timeout ends the watch.
rm run/train/FINISHED
"$BIN/cairn-eval" --config eval.toml --watch "$WORK/run/train" --poll-interval 0.2 --idle-timeout 1 2> idle.err > /dev/null
grep -q "idle_timeout" idle.err || { cat idle.err >&2; fail "idle timeout not reported"; }
# ... on 2 ranks too, decided by rank 0's clock for both (each rank's own could part them) and said once.
mpirun -np 2 --oversubscribe "$BIN/cairn-eval" --config eval.toml --watch "$WORK/run/train" --poll-interval 0.05 \
  --idle-timeout 0.3 2> idle2.err > /dev/null || { cat idle2.err >&2; fail "2-rank idle timeout: exit $?"; }
[ "$(grep -c "idle_timeout" idle2.err)" = 1 ] || { cat idle2.err >&2; fail "2-rank idle timeout not said once"; }
# A task error fails a watcher at once, not hours later at the first checkpoint.
: > empty.jsonl
expect_exit 2 "empty task" "$BIN/cairn-eval" --config eval.toml --watch "$WORK/nothing_yet" --idle-timeout 600 \
  --tasks mc --set 'eval.task.mc={kind="multiple_choice", path="'"$WORK"'/empty.jsonl"}'
# Two cairn-evals on one run (a --watch following training and one started by hand) both keep their rows: each
# merges into results.jsonl, under <eval>/.results.lock, what is on disk when it writes, not what it read at start.
# flock(1) stands in for the other evaluator: it holds the lock while step 10's rows land, after this eval has read
# the (empty) record and waits for the lock (its log says so). No timing involved.
"$BIN/cairn-eval" --config eval.toml --set run.dir="$WORK/ten" run/train/ckpt/step_00000010 > /dev/null 2> ten.err ||
  { cat ten.err >&2; fail "eval of step 10 failed"; }
mkdir -p two/eval
flock two/eval/.results.lock sh -c 'touch held; while [ ! -e release ]; do sleep 0.05; done' &
HOLDER=$!
for i in $(seq 6000); do [ -e held ] && break; sleep 0.05; done
[ -e held ] || fail "flock(1) never took two/eval/.results.lock"
"$BIN/cairn-eval" --config eval.toml --set run.dir="$WORK/two" run/train/ckpt/step_00000020 > /dev/null 2> two.err &
EV=$!
until grep -q 'waiting up to .* for ".*two/eval/.results.lock"' two.err; do
  kill -0 $EV 2> /dev/null || { touch release; cat two.err >&2; fail "cairn-eval wrote its results without the lock"; }
  sleep 0.05
done
cp ten/eval/results.jsonl two/eval/results.jsonl
touch release
wait $HOLDER
wait $EV || { cat two.err >&2; fail "cairn-eval failed after waiting for the results lock"; }
$PY - two/eval/results.jsonl <<'PY'
import json, sys
steps = sorted({json.loads(l)["step"] for l in open(sys.argv[1])})
assert steps == [10, 20], f"results.jsonl holds steps {steps}, wanted [10, 20]: one evaluator's rows were lost"
PY
echo "ok: two evaluators on one run keep each other's rows"
echo "eval_watch: OK"
