#!/usr/bin/env bash
# A stage whose launcher "succeeds" having run nothing must fail, never look COMPLETED (issue #19: srun's
# "task 0 launch failed" returned 0, train ended COMPLETED without FINISHED and eval waited an hour).
# The tools are replaced by a wrapper that exits 0 and writes nothing (CAIRN_BIN_DIR; --print-config
# still goes to the real tool, which the scripts use to find the run directory):
#   local mode, every stage: exit 1 with `cairn <stage>: <launcher> returned 0 but "<output>" is missing`;
#   an output left by an earlier run does not count ("was not rewritten");
#   Slurm: the train job ends FAILED with that message in its log, eval is cancelled and
#   submit-pipeline.sh --wait exits 1 naming the stage; nightly.sh reports an infrastructure failure.
# Run under scripts/slurm-local.sh run --.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -n "${SLURM_CONF:-}" ] || fail "SLURM_CONF not set: run under scripts/slurm-local.sh run --"

work="" ; make_workdir silent
cd "$CAIRN_SOURCE_DIR"
tiny=tests/slurm/tiny.toml
real=$CAIRN_BIN_DIR

# fake_bin DIR TOOL...: DIR holds every real tool, except that each TOOL named does nothing and exits 0.
fake_bin() {
  local dir=$1 t; shift
  mkdir -p "$dir"
  for t in sweep plan reshard train eval report; do ln -sf "$real/cairn-$t" "$dir/cairn-$t"; done
  for t in "$@"; do
    rm -f "$dir/cairn-$t"
    cat > "$dir/cairn-$t" <<EOF
#!/bin/sh
# A cairn-$t that "succeeds" without doing anything, like a task launch that failed but returned 0.
for a in "\$@"; do [ "\$a" = --print-config ] && exec "$real/cairn-$t" "\$@"; done
exit 0
EOF
    chmod 755 "$dir/cairn-$t"
  done
}
fake_bin "$work/bin-all" sweep plan reshard train eval report

# Local mode (mpirun), each stage alone: the check is the stage's, whatever ran it.
declare -A output_of=([sweep]=sweep/fabric.toml [plan]=plan/best.toml [reshard]=data/index.json
                      [train]=train/FINISHED [eval]=eval/results.jsonl [report]=report/index.html)
for s in sweep plan reshard train eval report; do
  rc=0
  CAIRN_BIN_DIR=$work/bin-all slurm/run-local.sh "$tiny" --out "$work/local" --stages "$s" --strict \
    > "$work/local-$s.out" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] || { cat "$work/local-$s.out"; fail "local $s: exit $rc, expected 1"; }
  grep -qE "^cairn $s: [a-z-]+ returned 0 but \"$work/local/${output_of[$s]}\" is missing\$" "$work/local-$s.out" \
    || { cat "$work/local-$s.out"; fail "local $s: no 'returned 0 but ... is missing' message"; }
  grep -q "FAILED: stage $s (exit 1)" "$work/local-$s.out" || fail "local $s: the stage is not named as failed"
done
pass "local mode: each of the six stages fails (exit 1) when its tool writes nothing"

# An earlier run's outputs are not this run's: the report's files from an hour ago do not count.
mkdir -p "$work/local/report"
for f in index.html summary.md summary.json; do echo old > "$work/local/report/$f"; touch -d '1 hour ago' "$work/local/report/$f"; done
rc=0
CAIRN_BIN_DIR=$work/bin-all slurm/run-local.sh "$tiny" --out "$work/local" --stages report > "$work/stale.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$work/stale.out"; fail "stale report outputs: exit $rc, expected 1"; }
grep -q "^cairn report: .* returned 0 but \"$work/local/report/index.html\" was not rewritten" "$work/stale.out" \
  || { cat "$work/stale.out"; fail "stale report outputs: no 'was not rewritten' message"; }
pass "local mode: outputs left by an earlier run do not make a silent stage succeed"

# On Slurm: train "succeeds" through srun without FINISHED or metrics.
fake_bin "$work/bin-train" train
rc=0
CAIRN_BIN_DIR=$work/bin-train CAIRN_POLL_S=1 slurm/submit-pipeline.sh "$tiny" --out "$work/run" --stages train,eval \
  --wait > "$work/submit.out" 2>&1 || rc=$?
cat "$work/submit.out"
[ "$rc" -eq 1 ] || fail "submit-pipeline --wait exited $rc, expected 1"
! grep -q "pipeline COMPLETED" "$work/submit.out" || fail "submit-pipeline printed 'pipeline COMPLETED'"
train_job=$(sed -n 's/^submitted train as job \([0-9]*\).*/\1/p' "$work/submit.out")
eval_job=$(sed -n 's/^submitted eval as job \([0-9]*\).*/\1/p' "$work/submit.out")
log=$work/run/logs/train-$train_job.out
[ "$(job_state "$train_job")" = FAILED ] || fail "train job $train_job is $(job_state "$train_job"), expected FAILED"
[ "$(job_field "$train_job" ExitCode)" = 1:0 ] || fail "train job $train_job ExitCode=$(job_field "$train_job" ExitCode)"
grep -q "^cairn train: srun returned 0 but \"$work/run/train/FINISHED\" is missing\$" "$log" \
  || { cat "$log"; fail "the train log does not say what is missing"; }
grep -q "^FAILED: stage train (job $train_job, FAILED, exit 1:0); log: $log\$" "$work/submit.out" \
  || fail "submit-pipeline does not name the failed train stage"
grep -q "| cairn train: srun returned 0 but" "$work/submit.out" || fail "submit-pipeline does not quote the reason"
[ "$(job_state "$eval_job")" = CANCELLED ] || fail "eval job $eval_job is $(job_state "$eval_job"), expected CANCELLED"
pass "Slurm: train job $train_job FAILED (exit 1) naming train/FINISHED; eval CANCELLED; --wait exit 1"

# nightly.sh over tools that do nothing: the first stages fail, the pipeline does not complete, exit 1.
mkdir -p "$work/baseline/train"  # a run, as far as nightly.sh checks before it starts
rc=0
CAIRN_BIN_DIR=$work/bin-all CAIRN_POLL_S=1 slurm/nightly.sh "$tiny" "$work/baseline" --out "$work/nightly" \
  > "$work/nightly.out" 2>&1 || rc=$?
cat "$work/nightly.out"
[ "$rc" -eq 1 ] || fail "nightly exited $rc, expected 1"
tail -n 1 "$work/nightly.out" | grep -q "nightly: INFRA-FAILURE: the pipeline did not complete" \
  || fail "nightly's verdict is not INFRA-FAILURE"
grep -q "| cairn sweep: srun returned 0 but \"$work/nightly/sweep/fabric.toml\" is missing" "$work/nightly.out" \
  || fail "nightly's output does not say what the sweep left missing"
pass "nightly: stages that wrote nothing -> INFRA-FAILURE, exit 1"
