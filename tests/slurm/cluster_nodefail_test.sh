#!/usr/bin/env bash
# A compute node dies mid-training on a 2-node Slurm (train on 2 nodes x 2 ranks): every process of node2 is
# SIGKILLed (slurmd, slurmstepd, ranks: everything in its network namespace) and the controller marks it DOWN;
# Slurm requeues the train job (--requeue, JobRequeue=1), which waits until node2 is back (slurmd restarted,
# scontrol update state=resume), resumes from the newest complete checkpoint and ends with final weights bitwise
# equal to an uninterrupted run's on the same layout. Run under scripts/slurm-cluster.sh run -- with the path of
# tests/train's cairn-train-pausing.
# Never a race: the run's ranks pause after step 25 (cairn-train-pausing, CAIRNTEST_TRAIN_PAUSE=step_done at step
# 25; checkpoint 20 complete by then) until the test acts, and node1's job processes are frozen (SIGSTOP) before
# node2 dies, so the controller learns of the failure (node DOWN) before node1's launcher could notice that its
# peers vanished and end the job FAILED (see slurm/README.md, "Node failure").
set -euo pipefail
source "$(dirname "$0")/cluster_lib.sh"
pausing=${1:?usage: cluster_nodefail_test.sh PATH/cairn-train-pausing}
[ -x "$pausing" ] || fail "no cairn-train-pausing at $pausing"

work="" ; make_workdir cluster-nodefail
cd "$CAIRN_SOURCE_DIR"
config=tests/slurm/tiny.toml
steps=40 pause_at=25
common=(--set "train.steps=$steps" --set train.checkpoint_every=10 --set train.val_every=0 --set train.micro_batch=2
        --set "data.path=\"$work/data\"" --set cluster.nodes=2 --set cluster.gpus_per_node=2)
slurm/run-local.sh "$config" --out "$work/prep" --stages reshard "${common[@]}" > "$work/prep.out" 2>&1 \
  || { cat "$work/prep.out"; fail "reshard failed"; }

submit() {  # submit DIR -> train job id (2 nodes x 2 ranks)
  slurm/submit-pipeline.sh "$config" --out "$1" --stages train "${common[@]}" \
    --sbatch 'train:-N 2 --ntasks-per-node=2' > "$1.submit" 2>&1 || { cat "$1.submit" >&2; fail "submit failed"; }
  sed -n 's/^submitted train as job \([0-9]*\).*/\1/p' "$1.submit"
}
straight=$(submit "$work/straight")
st=$(wait_job "$straight" 300) || fail "uninterrupted job: $st"
[ "$st" = COMPLETED ] || { cat "$work/straight/logs/"train-*.out >&2; fail "uninterrupted job ended $st"; }
[ "$(job_field "$straight" NodeList)" = "node[1-2]" ] || fail "the uninterrupted run was not on node[1-2]"
pass "uninterrupted run $straight COMPLETED on node[1-2]"

# The interrupted run: cairn-train from a bin dir whose cairn-train pauses after step $pause_at.
mkdir -p "$work/bin"
ln -s "$CAIRN_BIN_DIR"/cairn-* "$work/bin/"
ln -sf "$pausing" "$work/bin/cairn-train"
job=$(CAIRN_BIN_DIR=$work/bin CAIRNTEST_TRAIN_PAUSE=step_done CAIRNTEST_TRAIN_PAUSE_STEP=$pause_at \
      CAIRNTEST_TRAIN_PAUSE_FILE=$work/paused submit "$work/failing")
paused() { [ "$(find "$work" -maxdepth 1 -name 'paused.*' | wc -l)" -eq 4 ]; }
wait_for "all 4 ranks of job $job to pause after step $pause_at" 300 paused
# The requeued job must run the real cairn-train (the same code without the hook).
ln -sf "$CAIRN_BIN_DIR/cairn-train" "$work/bin/cairn-train"
ckpts=$work/failing/train/ckpt
newest=$(for d in "$ckpts"/step_*; do [ -e "$d/DONE" ] && basename "$d"; done | sort | tail -1)
[ "$newest" = step_00000020 ] || fail "expected step_00000020 as the newest complete checkpoint, found '$newest'"

# node1's processes of the job (batch shell, srun, ranks; not slurmstepd) freeze, then node2 dies.
id=$(basename "$cluster"); id=${id#cairn-cluster.}
frozen=""
for p in $(ip netns pids "cairn-$id-n1"); do
  [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmstepd ] && continue
  grep -qzsx "SLURM_JOB_ID=$job" "/proc/$p/environ" && frozen+="$p "
done
[ -n "$frozen" ] || fail "no process of job $job on node1"
# shellcheck disable=SC2086
kill -STOP $frozen
node_kill node2
[ -z "$(ip netns pids "cairn-$id-n2")" ] || fail "processes left on node2 after node-kill"
scontrol update nodename=node2 state=down reason="cluster_nodefail_test: node2 killed"
echo "node2 killed and DOWN at step $pause_at of job $job (node1's processes $frozen frozen)"
requeued() { [ "$(job_state "$job")" = PENDING ] && [ "$(job_field "$job" Restarts)" -ge 1 ]; }
wait_for "job $job to be requeued" 120 requeued
kill -CONT $frozen 2>/dev/null || true
pass "node2 failed: job $job requeued (Restarts=$(job_field "$job" Restarts)), pending until node2 returns"

node_start node2
# Set DOWN by hand, it stays DOWN until resumed (ReturnToService=1), and so the job keeps pending until then.
st=$(node_state node2)
[[ "$st" == down* ]] || fail "node2 is '$st' after its slurmd registered, expected down until resumed"
[ "$(job_state "$job")" = PENDING ] || fail "job $job is $(job_state "$job") while node2 is down"
scontrol update nodename=node2 state=resume
st=$(wait_job "$job" 300) || fail "requeued job: $st"
[ "$st" = COMPLETED ] || { cat "$work/failing/logs/"train-*.out >&2; fail "requeued job ended $st"; }
log=$(ls "$work/failing/logs/"train-*.out)
grep -q "resuming from \".*/$newest\" at step 20" "$log" \
  || { grep -i "resum\|scratch" "$log"; fail "the requeued job did not resume from $newest"; }
[ "$(node_state node2)" = idle ] || fail "node2 is $(node_state node2) after the run"
pass "job $job resumed from $newest after node2 returned and COMPLETED"

final=$(printf 'step_%08d' "$steps")
/usr/bin/python3 - "$work/straight/train/ckpt/$final/model.h5" "$ckpts/$final/model.h5" <<'PY' \
  || fail "final weights differ from the uninterrupted run's"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a["params"].visit(lambda n: names.append(n) if isinstance(a["params"][n], h5py.Dataset) else None)
assert names, "no parameters in the checkpoint"
for n in names:
    x, y = a["params"][n][()], b["params"][n][()]
    assert x.dtype == y.dtype and x.shape == y.shape, n
    assert x.tobytes() == y.tobytes(), f"{n}: max |diff| {np.max(np.abs(x - y))}"
print(f"{len(names)} parameter tensors bitwise equal")
PY
pass "final weights after the node failure equal the uninterrupted run's, bitwise"
