#!/usr/bin/env bash
# Local mode and the scripts' command lines, without Slurm: slurm/run-local.sh runs all six stage
# bodies in order with mpirun and the report's gates pass; a report gate failure surfaces as exit 3
# naming the stage; submit-pipeline.sh --dry-run works without Slurm and honours --stages;
# bad arguments get exit 2 and a message naming what is wrong.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
work="" ; make_workdir local
cd "$CAIRN_SOURCE_DIR"
tiny=tests/slurm/tiny.toml

expect() {  # expect CODE TEXT CMD...: runs CMD, checks its exit code and that its output has TEXT
  local code=$1 text=$2 rc=0; shift 2
  "$@" > "$work/out" 2>&1 || rc=$?
  [ "$rc" -eq "$code" ] || { cat "$work/out"; fail "$* exited $rc, expected $code"; }
  grep -qF -- "$text" "$work/out" || { cat "$work/out"; fail "$* did not say '$text'"; }
}
expect 2 'cannot open "nope.toml"' slurm/submit-pipeline.sh nope.toml --dry-run
expect 2 "unknown stage 'trian'" slurm/submit-pipeline.sh "$tiny" --stages trian --dry-run
expect 2 "--sbatch wants STAGE:ARGS" slurm/submit-pipeline.sh "$tiny" --sbatch "-N 2" --dry-run
expect 2 "unknown option '--bogus'" slurm/run-local.sh "$tiny" --bogus
expect 2 "stepz" slurm/run-local.sh "$tiny" --set train.stepz=3
expect 2 "Usage" slurm/nightly.sh "$tiny"
# nightly.sh checks the config as cairn-report reads it before it submits or creates anything: a misspelled gate
# used to surface only after the whole pipeline, as an infrastructure failure.
mkdir -p "$work/baseline/train"  # a run, as far as nightly.sh checks before it starts
expect 2 'unknown gate metric "val_los" (did you mean "val_loss"?)' slurm/nightly.sh "$tiny" "$work/baseline" \
  --set "run.dir=\"$work/nightly\"" --set "report.gates.val_los={ max = 4.0 }"
expect 2 "unknown key 'max_rise'" slurm/nightly.sh "$tiny" "$work/baseline" \
  --set "run.dir=\"$work/nightly\"" --set "report.gates.val_loss={ max_rise = 4.0 }"
[ ! -e "$work/nightly" ] || fail "a nightly refused for its config created $work/nightly"
# A nightly refused by another's lock changes nothing: no new run directory, `latest` not repointed.
mkdir -p "$work/nightly/20260101T000000Z"
ln -s 20260101T000000Z "$work/nightly/latest"
flock "$work/nightly/.nightly.lock" -c "slurm/nightly.sh $tiny $work/baseline --set 'run.dir=\"$work/nightly\"' \
  > $work/out 2>&1" && fail "a nightly ran while another held the lock" || true
grep -qF "another nightly.sh holds" "$work/out" || { cat "$work/out"; fail "the refused nightly did not say why"; }
[ "$(readlink "$work/nightly/latest")" = 20260101T000000Z ] || fail "a refused nightly repointed latest"
[ "$(ls "$work/nightly")" = "$(printf '20260101T000000Z\nlatest')" ] || fail "a refused nightly left a directory"
pass "bad arguments: exit 2 with the reason"

expect 0 "JOB_REPORT=" slurm/submit-pipeline.sh "$tiny" --out "$work/dry" --stages train,report --dry-run
[ "$(grep -c '^JOB_' "$work/out")" -eq 2 ] || fail "--stages train,report did not give two jobs"
grep -q -- "--dependency=afterok:\$JOB_TRAIN --kill-on-invalid-dep=yes" "$work/out" \
  || { cat "$work/out"; fail "report does not depend on train alone"; }
pass "--dry-run without Slurm, --stages drops dependencies on stages left out"

# Paths sbatch reads as patterns: % in the run directory is escaped in --output (Slurm put the job id into the
# directory's name, and the job failed without a log); a backslash is refused. Numbers the scripts compute with are
# checked (a bad CAIRN_MTIME_SLACK_S ended run-local's loop and it exited 0 having run nothing). An env file that
# fails a test under set -e no longer ends the job silently.
expect 0 "--output=$work/pct %%j dir/logs/plan-%j.out" slurm/submit-pipeline.sh "$tiny" --out "$work/pct %j dir" \
  --stages plan --dry-run
expect 2 "contains a backslash" slurm/submit-pipeline.sh "$tiny" --out "$work/back\\slash" --stages plan --dry-run
# A $ in a path is quoted in the printed commands (pasted, "$work/a$b" became "$work/a"); the $JOB_X placeholders
# stay bare so that they expand. A misspelt launcher is exit 2 before any stage runs (it was exit 1 at train).
expect 0 "'--output=$work/cost\$b/logs/train-%j.out'" slurm/submit-pipeline.sh "$tiny" --out "$work/cost\$b" \
  --stages train,eval --dry-run
grep -qF -- "--dependency=afterok:\$JOB_TRAIN " "$work/out" || { cat "$work/out"; fail "the placeholder was quoted"; }
expect 2 "CAIRN_LAUNCHER must be srun, mpirun or none (got 'mpirn')" env CAIRN_LAUNCHER=mpirn slurm/run-local.sh \
  "$tiny" --out "$work/launcher" --stages plan,train
[ ! -e "$work/launcher/plan" ] || fail "a misspelt launcher let the plan stage run"
expect 2 "CAIRN_MTIME_SLACK_S must be a whole number (got '5s')" env CAIRN_MTIME_SLACK_S=5s slurm/run-local.sh "$tiny" \
  --out "$work/slack" --stages plan
expect 2 "CAIRN_WAIT_CONTROLLER_S must be a whole number (got '15m')" env CAIRN_WAIT_CONTROLLER_S=15m \
  slurm/submit-pipeline.sh "$tiny" --out "$work/waitctl" --stages plan --dry-run
printf 'grep -q never /dev/null\nexport CAIRN_TEST_ENV_FILE_RAN=1\n' > "$work/site.env"
expect 0 "== stage plan done" env CAIRN_ENV_FILE="$work/site.env" slurm/run-local.sh "$tiny" --out "$work/envfile" \
  --stages plan
# A control character in --out (an escape sequence pasted with a path) reaches the tools escaped and comes back from
# --print-config decoded: the stage writes into that directory, not into "$PWD/\"...\"" as before.
ctl=$'ctl\e[1mdir'
expect 0 "== stage plan done" slurm/run-local.sh "$tiny" --out "$work/$ctl" --stages plan
[ -d "$work/$ctl/plan" ] || fail "the plan of a run directory with a control character is not in it"
pass "sbatch patterns in paths, numeric settings and site env files"

# The whole pipeline locally; an absolute loss gate so it passes without a baseline.
rc=0
slurm/run-local.sh "$tiny" --out "$work/run" --set "report.gates.val_loss={ max = 4.0 }" > "$work/local.out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { tail -n 30 "$work/local.out"; fail "run-local exited $rc"; }
for s in sweep plan reshard train eval report; do
  grep -q "== stage $s done" "$work/local.out" || fail "stage $s did not run"
  [ -s "$work/run/logs/$s.log" ] || fail "no log for $s"
done
grep -q "^report: $work/run/report/index.html" "$work/local.out" || fail "the outputs were not printed"
pass "run-local: six stages in order, report written"

# An impossible gate fails the report stage: exit 3, stage and log named.
expect 3 "FAILED: stage report (exit 3); log: $work/run/logs/report.log" \
  slurm/run-local.sh "$tiny" --out "$work/run" --stages report --set "report.gates.val_loss={ max = 0.1 }"
pass "a failed gate: exit 3 naming the report stage"
