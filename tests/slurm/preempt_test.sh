#!/usr/bin/env bash
# Preemption on a real Slurm: the train job gets SIGUSR1 mid-run (scancel --signal=USR1 --batch, what
# --signal=B:USR1@grace does before a time limit), cairn-train checkpoints and exits 75, train.sbatch
# requeues the job, the job resumes from the checkpoint and completes; its final weights equal an
# uninterrupted run's, bitwise (CPU, same rank count). Run under scripts/slurm-local.sh run --.
# Never a race with the run's end: the ranks are frozen (SIGSTOP) mid-run, and only thawed once the
# relayed SIGUSR1 (scancel -> batch shell -> srun -> slurmstepd -> ranks) is pending on every one of
# them. (On a fast idle machine the 120 steps used to end before the signal landed: 2 failures in 7.)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -n "${SLURM_CONF:-}" ] || fail "SLURM_CONF not set: run under scripts/slurm-local.sh run --"

work="" ; make_workdir preempt
cd "$CAIRN_SOURCE_DIR"
config=tests/slurm/tiny.toml
steps=120
# Checkpoints only at the end (and on the signal), so the resumed run must start from the signal's.
common=(--set "train.steps=$steps" --set train.checkpoint_every=0 --set train.val_every=0
        --set "data.path=\"$work/data\"")

# The dataset once, shared by both runs.
slurm/run-local.sh "$config" --out "$work/prep" --stages reshard "${common[@]}" > "$work/prep.out" 2>&1 \
  || { cat "$work/prep.out"; fail "reshard failed"; }

submit() {  # submit DIR -> train job id
  slurm/submit-pipeline.sh "$config" --out "$1" --stages train "${common[@]}" > "$1.submit" 2>&1 \
    || { cat "$1.submit" >&2; fail "submit failed"; }
  sed -n 's/^submitted train as job \([0-9]*\).*/\1/p' "$1.submit"
}
straight=$(submit "$work/straight")
preempted=$(submit "$work/preempted")
[ -n "$straight" ] && [ -n "$preempted" ] || fail "no job ids"

# Signal once training is visibly under way (a few steps logged), with its ranks frozen until the signal
# is theirs: the run cannot reach its end first, however fast the machine or slow the relay.
metrics=$work/preempted/train/metrics.jsonl
logged_steps() { local n; n=$(grep -c '"kind": *"train"' "$metrics" 2>/dev/null) || true; echo "${n:-0}"; }
under_way() { [ "$(logged_steps)" -ge 5 ]; }
wait_for "train job $preempted to log 5 steps" 300 under_way
ranks=$(job_procs "$preempted" cairn-train | paste -sd ' ')
[ "$(wc -w <<<"$ranks")" -eq 2 ] || fail "job $preempted: expected 2 cairn-train ranks, found '$ranks'"
# shellcheck disable=SC2086
kill -STOP $ranks
thaw() { kill -CONT $ranks 2>/dev/null || true; }
at=$(logged_steps)
[ "$at" -lt "$steps" ] || { thaw; fail "training finished before it could be signalled (step $at)"; }
scancel --signal=USR1 --batch "$preempted"
all_pending() { local p; for p in $ranks; do signal_pending "$p" USR1 || return 1; done; }
wait_for "SIGUSR1 to reach the frozen ranks ($ranks) of job $preempted" 120 all_pending
thaw
echo "signalled job $preempted at step $at (ranks $ranks held until SIGUSR1 was pending on each)"

st=$(wait_job "$preempted" 600) || fail "preempted job: $st"
[ "$st" = COMPLETED ] || { cat "$work/preempted/logs/"train-*.out >&2; fail "preempted job ended $st"; }
restarts=$(job_field "$preempted" Restarts)
[ "${restarts:-0}" -ge 1 ] || fail "job $preempted was not requeued (Restarts=$restarts)"
log=$(ls "$work/preempted/logs/"train-*.out)
grep -q "requeued" "$log" || fail "train log does not say it requeued: $log"
grep -qi "resum" "$log" || fail "the requeued job did not report resuming: $log"
pass "job $preempted checkpointed on SIGUSR1, requeued (Restarts=$restarts) and COMPLETED"

st=$(wait_job "$straight" 600) || fail "uninterrupted job: $st"
[ "$st" = COMPLETED ] || fail "uninterrupted job ended $st"
[ "$(job_field "$straight" Restarts)" = 0 ] || fail "the uninterrupted run was requeued"

final=$(printf 'step_%08d' "$steps")
/usr/bin/python3 - "$work/straight/train/ckpt/$final/model.h5" "$work/preempted/train/ckpt/$final/model.h5" \
    "$work/preempted/train/ckpt" <<'PY' || fail "final weights differ"
import os, sys, h5py, numpy as np
a, b, ckpts = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), sys.argv[3]
names = []
a["params"].visit(lambda n: names.append(n) if isinstance(a["params"][n], h5py.Dataset) else None)
assert names, "no parameters in the checkpoint"
for n in names:
    x, y = a["params"][n][()], b["params"][n][()]
    assert x.dtype == y.dtype and x.shape == y.shape, n
    assert x.tobytes() == y.tobytes(), f"{n}: max |diff| {np.max(np.abs(x - y))}"
print(f"{len(names)} parameter tensors bitwise equal; checkpoints of the preempted run: {sorted(os.listdir(ckpts))}")
PY
pass "final weights of the preempted run equal the uninterrupted run's, bitwise"
