#!/usr/bin/env bash
# Manual check (about 2.5 minutes, so not in ctest): training longer than its Slurm time limit
# completes through the real --signal=B:USR1@grace path: the job gets USR1 before each 1-minute limit,
# checkpoints, requeues, resumes, and finally COMPLETES after several restarts.
#   scripts/slurm-local.sh run -- bash tests/slurm/timelimit_check.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -n "${SLURM_CONF:-}" ] || fail "SLURM_CONF not set: run under scripts/slurm-local.sh run --"
work="" ; make_workdir timelimit
cd "$CAIRN_SOURCE_DIR"
common=(--set train.steps=500 --set train.checkpoint_every=0 --set train.val_every=0 --set train.log_every=100
        --set "data.path=\"$work/data\"")
slurm/run-local.sh configs/demo.toml --out "$work/prep" --stages reshard "${common[@]}" > /dev/null 2>&1 \
  || fail "reshard failed"
CAIRN_POLL_S=2 slurm/submit-pipeline.sh configs/demo.toml --out "$work/run" --stages train "${common[@]}" \
  --sbatch 'train:--time=1' --grace 40 --wait > "$work/submit.out" 2>&1 || { cat "$work/submit.out"; fail "pipeline failed"; }
jid=$(sed -n 's/^submitted train as job \([0-9]*\).*/\1/p' "$work/submit.out")
restarts=$(job_field "$jid" Restarts)
[ "${restarts:-0}" -ge 1 ] || fail "the job finished without hitting its time limit (Restarts=$restarts)"
[ -f "$work/run/train/FINISHED" ] || fail "no train/FINISHED"
grep -c "resuming from" "$work/run/logs/train-$jid.out" | grep -qx "$restarts" || fail "not every restart resumed"
pass "train job $jid: 500 steps through $restarts time-limit requeues, COMPLETED"
