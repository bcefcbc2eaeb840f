#!/usr/bin/env bash
# slurm/nightly.sh on a real Slurm: against a baseline run of the same config it exits 0 (CPU training
# is deterministic, so the gated numbers match); against a baseline with a planted regression (its
# validation loss lowered by 0.5, so tonight's looks worse) it exits 3; a missing baseline exits 1.
# Run under scripts/slurm-local.sh run --.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -n "${SLURM_CONF:-}" ] || fail "SLURM_CONF not set: run under scripts/slurm-local.sh run --"

work="" ; make_workdir nightly
cd "$CAIRN_SOURCE_DIR"
config=tests/slurm/tiny.toml
export CAIRN_POLL_S=1

rc=0
slurm/nightly.sh "$config" "$work/none" --set "run.dir=\"$work/nightly\"" > "$work/missing.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$work/missing.out"; fail "missing baseline: exit $rc, expected 1"; }
pass "missing baseline -> exit 1"

# The baseline: the same pipeline, run once (no report: its relative gates need a baseline themselves).
slurm/submit-pipeline.sh "$config" --out "$work/baseline" --stages sweep,plan,reshard,train,eval --wait > "$work/baseline.out" 2>&1 \
  || { cat "$work/baseline.out"; fail "baseline pipeline failed"; }

rc=0
slurm/nightly.sh "$config" "$work/baseline" --set "run.dir=\"$work/nightly\"" > "$work/pass.out" 2>&1 || rc=$?
cat "$work/pass.out"
[ "$rc" -eq 0 ] || fail "nightly against a matching baseline exited $rc, expected 0"
tail -n 1 "$work/pass.out" | grep -q "nightly: PASS" || fail "last line is not the PASS verdict"
[ -L "$work/nightly/latest" ] && [ -f "$work/nightly/latest/report/summary.md" ] || fail "no latest/report"
pass "matching baseline -> exit 0"

# Planted regression: a baseline whose validation loss was 0.5 lower than tonight's.
cp -r "$work/baseline" "$work/better"
/usr/bin/python3 - "$work/better/train/metrics.jsonl" <<'PY'
import json, sys
path = sys.argv[1]
out = []
for line in open(path):
    rec = json.loads(line)
    if rec.get("kind") == "val":
        rec["val_loss"] -= 0.5
    out.append(json.dumps(rec))
open(path, "w").write("\n".join(out) + "\n")
PY
rc=0
slurm/nightly.sh "$config" "$work/better" --set "run.dir=\"$work/nightly\"" > "$work/regress.out" 2>&1 || rc=$?
cat "$work/regress.out"
[ "$rc" -eq 3 ] || fail "nightly against a planted regression exited $rc, expected 3"
tail -n 1 "$work/regress.out" | grep -q "nightly: REGRESSION" || fail "last line is not the REGRESSION verdict"
grep -q "val_loss" "$work/nightly/latest/report/summary.md" || fail "summary.md does not name the failed gate"
pass "planted regression -> exit 3"

# The baseline given as <base>/latest: it is resolved before `latest` moves to tonight's run (it was compared with
# itself: "no run to compare with the baseline", exit 3). latest is the passing run of above, a matching baseline.
prev=$(readlink -f "$work/nightly/latest")
rc=0
slurm/nightly.sh "$config" "$work/nightly/latest" --set "run.dir=\"$work/nightly\"" > "$work/latest.out" 2>&1 || rc=$?
cat "$work/latest.out"
[ "$rc" -eq 0 ] || fail "nightly against <base>/latest exited $rc, expected 0"
grep -q "baseline $prev;" "$work/latest.out" || fail "the baseline was not resolved to $prev"
pass "<base>/latest as the baseline -> the run it pointed at, exit 0"

# A baseline that holds no run, and a bad submit-pipeline option: refused before anything is created (the run
# directories and `latest` stay as they were).
before=$(ls "$work/nightly" | sort | tr '\n' ' ') latest_before=$(readlink "$work/nightly/latest")
mkdir -p "$work/empty-baseline"
rc=0
slurm/nightly.sh "$config" "$work/empty-baseline" --set "run.dir=\"$work/nightly\"" > "$work/empty.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "INFRA-FAILURE: baseline .* holds no run" "$work/empty.out" \
  || { cat "$work/empty.out"; fail "empty baseline: exit $rc, expected 1 naming it"; }
rc=0
slurm/nightly.sh "$config" "$work/baseline" --set "run.dir=\"$work/nightly\"" --grace abc > "$work/grace.out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q "USAGE: --grace wants seconds" "$work/grace.out" \
  || { cat "$work/grace.out"; fail "--grace abc: exit $rc, expected 2 naming the option"; }
[ "$(ls "$work/nightly" | sort | tr '\n' ' ')" = "$before" ] && [ "$(readlink "$work/nightly/latest")" = "$latest_before" ] \
  || fail "a refused nightly created a run directory or moved latest: $(ls "$work/nightly")"
pass "empty baseline -> exit 1, --grace abc -> exit 2, nothing created"

# A nightly stopped by a signal (cron's timeout) while its jobs run: it cancels the jobs it submitted, says so and
# exits 1; nothing of it is left holding the lock (the next nightly would be refused) or printing afterwards.
slurm/nightly.sh "$config" "$work/baseline" --set "run.dir=\"$work/nightly\"" > "$work/stopped.out" 2>&1 &
nightly_pid=$!
submitted() { [ "$(readlink "$work/nightly/latest")" != "$latest_before" ] && [ -f "$work/nightly/latest/pipeline.json" ]; }
wait_for "the stopped nightly to submit its jobs" 120 submitted
kill -TERM "$nightly_pid"
rc=0
wait "$nightly_pid" || rc=$?
cat "$work/stopped.out"
[ "$rc" -eq 1 ] && tail -n 1 "$work/stopped.out" | grep -Eq "INFRA-FAILURE: nightly.sh stopped by SIGTERM; cancelled its jobs( [0-9]+)+$" \
  || fail "stopped nightly: exit $rc, expected 1 with the stop as its last line"
ids=$(sed -n 's/.*submitted [a-z]* as job \([0-9]*\).*/\1/p' "$work/stopped.out" | paste -sd' ')
tail -n 1 "$work/stopped.out" | grep -q "cancelled its jobs $ids\$" || fail "the stop line does not list the jobs $ids"
train_id=$(sed -n 's/.*submitted train as job \([0-9]*\).*/\1/p' "$work/stopped.out")
for jid in $ids; do
  st=$(wait_job "$jid" 120) || fail "job $jid of the stopped nightly: $st"
  # a first stage may have finished in the moment before the signal; training waits for two stages, so it cannot
  [ "$st" = CANCELLED ] || { [ "$st" = COMPLETED ] && [ "$jid" != "$train_id" ]; } ||
    fail "job $jid of the stopped nightly ended $st, expected CANCELLED"
done
flock -n "$work/nightly/.nightly.lock" true || fail "the stopped nightly's lock is still held"
lines=$(wc -l < "$work/stopped.out"); sleep 3
[ "$(wc -l < "$work/stopped.out")" = "$lines" ] || fail "the stopped nightly still prints: $(tail -n 2 "$work/stopped.out")"
pass "a nightly stopped by SIGTERM cancels its jobs, frees the lock and exits 1"
