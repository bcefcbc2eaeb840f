#!/usr/bin/env bash
# A failing stage on a real Slurm: train fails (its dataset does not exist), so Slurm cancels the
# stages that depend on it (eval, report: --kill-on-invalid-dep) instead of leaving them pending, and
# submit-pipeline.sh --wait exits 1 naming the failed stage, its job and its log, which holds the
# tool's error. Run under scripts/slurm-local.sh run --. Also: the train stage requeues ranks that a stop signal ended
# before their handlers; the eval guard; two submissions at once; a signal mid-submission.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -n "${SLURM_CONF:-}" ] || fail "SLURM_CONF not set: run under scripts/slurm-local.sh run --"

work="" ; make_workdir failure
cd "$CAIRN_SOURCE_DIR"

rc=0
CAIRN_POLL_S=1 slurm/submit-pipeline.sh tests/slurm/tiny.toml --out "$work/run" --stages train,eval,report \
  --set "data.path=\"$work/no-such-dataset\"" --wait > "$work/submit.out" 2>&1 || rc=$?
cat "$work/submit.out"
[ "$rc" -eq 1 ] || fail "submit-pipeline --wait exited $rc, expected 1"

train_job=$(sed -n 's/^submitted train as job \([0-9]*\).*/\1/p' "$work/submit.out")
log="$work/run/logs/train-$train_job.out"
grep -q "^FAILED: stage train (job $train_job, FAILED, exit [0-9]*:[0-9]*); log: $log\$" "$work/submit.out" \
  || fail "the output does not name the failed stage and its log"
grep -q "no-such-dataset" "$log" || fail "the train log $log does not hold cairn-train's error"
# The excerpt under FAILED quotes the tool's error, which carries its rank on a multi-rank job ([r0/2 host]
# cairn-train: ...): the filter missed it and quoted srun's lines only.
grep -q "^  | .*cairn-train: .*no-such-dataset" "$work/submit.out" || fail "the FAILED excerpt does not quote cairn-train's error"
[ "$(job_state "$train_job")" = FAILED ] || fail "train job is $(job_state "$train_job")"
for s in eval report; do
  jid=$(sed -n "s/^submitted $s as job \\([0-9]*\\).*/\\1/p" "$work/submit.out")
  [ "$(job_state "$jid")" = CANCELLED ] || fail "$s job $jid is $(job_state "$jid"), expected CANCELLED"
  [ ! -e "$work/run/logs/$s-$jid.out" ] || fail "$s ran although train failed"
done
grep -q "^cancelled: eval report" "$work/submit.out" || fail "the output does not list the cancelled dependents"
pass "train FAILED, eval and report CANCELLED, the output names the stage and its log"

# With --eval-watch the eval job starts alongside training (after:TRAIN); when training fails it must
# stop watching instead of idling until its timeout, and the report is still cancelled.
rc=0
CAIRN_POLL_S=1 slurm/submit-pipeline.sh tests/slurm/tiny.toml --out "$work/run2" --stages train,eval,report \
  --set "data.path=\"$work/no-such-dataset\"" --eval-watch --wait > "$work/submit2.out" 2>&1 || rc=$?
cat "$work/submit2.out"
[ "$rc" -eq 1 ] || fail "--eval-watch: submit-pipeline --wait exited $rc, expected 1"
grep -q "^FAILED: stage train " "$work/submit2.out" || fail "--eval-watch: train failure not named"
report_job=$(sed -n 's/^submitted report as job \([0-9]*\).*/\1/p' "$work/submit2.out")
[ "$(job_state "$report_job")" = CANCELLED ] || fail "--eval-watch: report job is $(job_state "$report_job")"
eval_job=$(sed -n 's/^submitted eval as job \([0-9]*\).*/\1/p' "$work/submit2.out")
if [ -f "$work/run2/logs/eval-$eval_job.out" ]; then
  grep -q "stopping the watch" "$work/run2/logs/eval-$eval_job.out" || fail "eval did not stop watching"
  # the stop ends the watch, not as an eval failure beside the training's (it was FAILED, killed)
  [ "$(job_state "$eval_job")" = COMPLETED ] || fail "--eval-watch: eval job is $(job_state "$eval_job"), expected COMPLETED"
  ! grep -q "^FAILED: stage eval" "$work/submit2.out" || fail "--eval-watch: eval listed as FAILED"
fi
pass "--eval-watch: a failed training stops the watching eval; report CANCELLED"

# --wait while the controller does not answer (a restart, an overloaded slurmctld): `scontrol show job` fails for a
# while. --wait died at once with exit 1 and no message (set -e on the failed lookup); now it says so, keeps
# waiting, and goes on when the controller answers again; past CAIRN_WAIT_CONTROLLER_S it gives up, saying why.
mkdir -p "$work/shim"
real_scontrol=$(command -v scontrol)
cat > "$work/shim/scontrol" <<SH
#!/usr/bin/env bash
# fails "show job" while \$work/silent exists, as scontrol does when slurmctld is unreachable
if [ "\$1 \$2" = "show job" ] && [ -e "$work/silent" ]; then
  echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2
  exit 1
fi
exec "$real_scontrol" "\$@"
SH
chmod +x "$work/shim/scontrol"
touch "$work/silent"
# The controller comes back 3 s after --wait said it is silent (not on a timer from here: a slow submission must not
# find it back already), or after 120 s whatever happened.
( for _ in $(seq 600); do grep -q "does not answer" "$work/submit4.out" 2>/dev/null && break; sleep 0.2; done
  sleep 3; rm -f "$work/silent" ) &
rc=0
PATH="$work/shim:$PATH" CAIRN_POLL_S=1 slurm/submit-pipeline.sh tests/slurm/tiny.toml --out "$work/run4" \
  --stages reshard --set "data.path=\"$work/data4\"" --wait > "$work/submit4.out" 2>&1 || rc=$?
wait
cat "$work/submit4.out"
[ "$rc" -eq 0 ] || fail "--wait through a silent controller exited $rc, expected 0"
grep -q "^the Slurm controller does not answer" "$work/submit4.out" || fail "--wait did not say the controller is silent"
grep -q "^the Slurm controller answers again" "$work/submit4.out" || fail "--wait did not say the controller is back"
grep -q "^pipeline COMPLETED" "$work/submit4.out" || fail "--wait did not see the pipeline complete"
pass "--wait waited through a silent controller and saw the pipeline complete"

touch "$work/silent"
rc=0
PATH="$work/shim:$PATH" CAIRN_POLL_S=1 CAIRN_WAIT_CONTROLLER_S=3 slurm/submit-pipeline.sh tests/slurm/tiny.toml \
  --out "$work/run5" --stages reshard --set "data.path=\"$work/data5\"" --wait > "$work/submit5.out" 2>&1 || rc=$?
rm -f "$work/silent"
cat "$work/submit5.out"
[ "$rc" -eq 1 ] || fail "--wait with a controller silent past CAIRN_WAIT_CONTROLLER_S exited $rc, expected 1"
grep -q "^INFRA: the Slurm controller has not answered for [0-9]* s" "$work/submit5.out" || fail "--wait gave up without saying why"
pass "--wait gives up after CAIRN_WAIT_CONTROLLER_S of silence, exit 1, saying so"

# A submission stopped while it submits (a cron timeout reaching nightly.sh, Ctrl-C): the jobs already submitted are
# cancelled and named, and their ids left for nightly.sh (they stayed queued and nightly said none was submitted).
# sbatch is slowed to 2 s a job so the signal lands between two submissions.
real_sbatch=$(command -v sbatch)
mkdir -p "$work/slow"
printf '#!/usr/bin/env bash\nsleep 2\nexec "%s" "$@"\n' "$real_sbatch" > "$work/slow/sbatch"
chmod +x "$work/slow/sbatch"
PATH="$work/slow:$PATH" slurm/submit-pipeline.sh tests/slurm/tiny.toml --out "$work/run6" --sbatch 'all:--hold' \
  > "$work/submit6.out" 2>&1 &
sub=$!
for _ in $(seq 300); do grep -q "^submitted sweep as job" "$work/submit6.out" 2>/dev/null && break; sleep 0.2; done
kill -TERM "$sub"
rc=0; wait "$sub" || rc=$?
cat "$work/submit6.out"
[ "$rc" -eq 1 ] || fail "a submission stopped by SIGTERM exited $rc, expected 1"
ids=$(sed -n 's/.*cancelled the jobs already submitted: \([0-9 ]*\)$/\1/p' "$work/submit6.out")
[ -n "$ids" ] || fail "a stopped submission did not name the jobs it cancelled"
for jid in $ids; do
  st=$(job_state "$jid")
  [ "$st" = CANCELLED ] || [ -z "$st" ] || fail "job $jid of a stopped submission is $st, expected CANCELLED"
done
[ "$(sort -un "$work"/run6/logs/.submitted.* | paste -sd' ')" = "$ids" ] || fail "the cancelled ids were not left for nightly.sh"
[ ! -e "$work/run6/pipeline.json" ] || fail "a stopped submission wrote pipeline.json"
pass "a submission stopped while submitting cancels and names its jobs ($ids)"

# Two submissions on one run directory started together: the second waits for the first's lock, then finds its jobs
# queued and is refused (both were accepted: each checked before the other had written pipeline.json). Held jobs
# stay PENDING, so the outcome does not depend on how fast the first's jobs run.
PATH="$work/slow:$PATH" slurm/submit-pipeline.sh tests/slurm/tiny.toml --out "$work/run7" --sbatch 'all:--hold' \
  > "$work/submit7a.out" 2>&1 &
first=$!
for _ in $(seq 300); do [ -e "$work/run7/logs/.submit.lock" ] && break; sleep 0.1; done
rc=0
PATH="$work/slow:$PATH" slurm/submit-pipeline.sh tests/slurm/tiny.toml --out "$work/run7" --sbatch 'all:--hold' \
  > "$work/submit7b.out" 2>&1 || rc=$?
wait "$first" || fail "the first of two submissions failed: $(cat "$work/submit7a.out")"
held=$(sed -n 's/.*"job_id": \([0-9][0-9]*\).*/\1/p' "$work/run7/pipeline.json" | paste -sd' ')
# shellcheck disable=SC2086
scancel $held 2>/dev/null || true
[ "$rc" -eq 2 ] && grep -q "has jobs of an earlier submission still queued or running" "$work/submit7b.out" ||
  fail "the second of two submissions started together: exit $rc: $(cat "$work/submit7b.out")"
pass "two submissions started together on one run directory: the second is refused"

# The eval stage's guard over the training job asks again when the controller does not answer once (it stopped for
# good, and a training failure after that left eval watching for [eval] idle_timeout).
mkdir -p "$work/guard"
cat > "$work/guard/scontrol" <<SH2
#!/usr/bin/env bash
n=\$(cat "$work/guard/count" 2>/dev/null || echo 0); echo \$((n + 1)) > "$work/guard/count"
[ "\$n" -eq 0 ] && { echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1; }
echo "JobId=\$3 JobState=FAILED ExitCode=1:0"
SH2
chmod +x "$work/guard/scontrol"
sleep 60 & victim=$!
(
  # shellcheck disable=SC1091
  source slurm/lib/common.sh && source slurm/stages/eval.sh
  PATH="$work/guard:$PATH" CAIRN_POLL_S=0.2 cairn_watch_guard 4242 "$victim" "$work/guard/marker"
) > "$work/guard.out" 2>&1
rc=0; wait "$victim" 2>/dev/null || rc=$?
[ "$(cat "$work/guard/marker" 2>/dev/null)" = FAILED ] && [ "$rc" -ne 0 ] ||
  fail "the eval guard did not stop the watch after a silent poll: $(cat "$work/guard.out")"
pass "the eval guard asks again after a silent controller and stops the watch when training FAILED"

# A stop signal relayed while the ranks still load (before cairn-train's main installs its handlers) ends them by the
# signal's default action (exit 138): the train stage requeues (75) instead of failing the job.
mkdir -p "$work/early/bin" "$work/early/run/train"
printf '#!/usr/bin/env bash\nexec sleep 61.25\n' > "$work/early/bin/cairn-train"
chmod +x "$work/early/bin/cairn-train"
(
  # shellcheck disable=SC1091
  source slurm/lib/common.sh && source slurm/stages/train.sh
  CAIRN_BIN_DIR="$work/early/bin" CAIRN_RUN_DIR="$work/early/run" CAIRN_LAUNCHER=none cairn_stage_train
) > "$work/early.out" 2>&1 &
stage=$!
for _ in $(seq 1 200); do pgrep -f "sleep 61.25" > /dev/null && break; sleep 0.1; done
pgrep -f "sleep 61.25" > /dev/null || fail "the train stage did not start its shim: $(cat "$work/early.out")"
kill -USR1 "$stage"
rc=0; wait "$stage" || rc=$?
[ "$rc" -eq 75 ] && grep -q "ended by the relayed stop signal (exit 138)" "$work/early.out" ||
  fail "a stop signal before cairn-train's handlers: the stage exited $rc: $(cat "$work/early.out")"
pass "a stop signal that ends the ranks before their handlers is a requeue (75), not a failure"
