#!/usr/bin/env bash
# The demo pipeline (configs/demo.toml, fewer steps) submitted with submit-pipeline.sh on a real Slurm:
# --dry-run submits nothing; the real submission chains six jobs, every job ends COMPLETED, eval runs
# alongside training (--eval-watch), pipeline.json records the jobs, and the report exists with its
# gates passing. Run under scripts/slurm-local.sh run -- (ctest does that).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -n "${SLURM_CONF:-}" ] || fail "SLURM_CONF not set: run under scripts/slurm-local.sh run --"

work="" ; make_workdir pipeline
run=$work/run
cd "$CAIRN_SOURCE_DIR"
# Fewer steps than the demo's, with checkpoints and validation still happening, and a loss gate that
# 30 steps reach; everything else is the demo as the README runs it.
args=(configs/demo.toml --out "$run" --set train.steps=30 --set train.checkpoint_every=15
      --set train.val_every=15 --set "report.gates.val_loss={ max = 3.4 }")

jobs_before=$(squeue -h -o %i | wc -l)
slurm/submit-pipeline.sh "${args[@]}" --eval-watch --dry-run > "$work/dry.out"
[ "$(squeue -h -o %i | wc -l)" -eq "$jobs_before" ] || fail "--dry-run submitted jobs"
[ ! -e "$run/pipeline.json" ] || fail "--dry-run wrote pipeline.json"
[ "$(grep -c '^JOB_[A-Z]*=$(sbatch ' "$work/dry.out")" -eq 6 ] || { cat "$work/dry.out"; fail "--dry-run did not print six sbatch commands"; }
grep -q -- '--dependency=after:$JOB_TRAIN' "$work/dry.out" || fail "--eval-watch: eval does not start after:train"
grep -q -- '--signal=B:USR1@' "$work/dry.out" || fail "train lacks --signal=B:USR1@grace"
pass "--dry-run prints the six sbatch commands and submits nothing"

rc=0
CAIRN_POLL_S=1 slurm/submit-pipeline.sh "${args[@]}" --eval-watch --wait > "$work/submit.out" 2>&1 || rc=$?
cat "$work/submit.out"
[ "$rc" -eq 0 ] || fail "submit-pipeline --wait exited $rc"
grep -q "^watch: squeue -j " "$work/submit.out" || fail "no squeue hint printed"

[ -f "$run/pipeline.json" ] || fail "no pipeline.json"
/usr/bin/python3 - "$run/pipeline.json" > "$work/jobs.txt" <<'PY' || fail "pipeline.json is not what was submitted"
import json, sys
p = json.load(open(sys.argv[1]))
stages = [s["stage"] for s in p["stages"]]
assert stages == ["sweep", "plan", "reshard", "train", "eval", "report"], stages
assert p["config"].endswith("configs/demo.toml") and "train.steps=30" in p["sets"], p
for s in p["stages"]:
    print(s["stage"], s["job_id"], s["log"])
PY
while read -r stage jid log; do
  st=$(job_state "$jid")
  [ "$st" = COMPLETED ] || { tail -n 20 "$log" >&2; fail "$stage job $jid is $st"; }
  [ -s "$log" ] || fail "$stage log $log is empty"
done < "$work/jobs.txt"
pass "all six jobs COMPLETED"

for f in sweep/fabric.toml plan/best.toml data/index.json train/FINISHED train/metrics.jsonl \
         eval/results.jsonl report/index.html report/summary.md report/summary.json; do
  [ -s "$run/$f" ] || [ -e "$run/$f" ] || fail "missing $run/$f"
done
/usr/bin/python3 - "$run/report/summary.json" <<'PY' || fail "report gates did not pass"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["gates"], "summary.json has no gates"
assert s["verdict"] == "pass" and all(g["verdict"] == "pass" for g in s["gates"]), s["gates"]
print("gates:", ", ".join(g["metric"] for g in s["gates"]))
PY
pass "report written, gates pass"
