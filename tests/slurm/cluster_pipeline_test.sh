#!/usr/bin/env bash
# The pipeline on a 2-node Slurm: submit-pipeline.sh runs all six stages, the MPI ones (sweep, reshard, train, eval)
# on 2 nodes x 2 ranks (srun --mpi=pmix; ranks on different nodes talk TCP between namespaces), and every job ends
# COMPLETED. Then the same config and the same plan (this run's plan/best.toml) on one node (slurm/run-local.sh,
# mpirun -np 4): the dataset, every training and validation loss per step and every eval value (but the speeds)
# are equal, exactly (same layout, same reductions: only the transport differs). Run under
# scripts/slurm-cluster.sh run --.
set -euo pipefail
source "$(dirname "$0")/cluster_lib.sh"

work="" ; make_workdir cluster-pipeline
cd "$CAIRN_SOURCE_DIR"
config=tests/slurm/tiny.toml
# micro_batch 2: every layout the plan may pick for 4 ranks (dp up to 4) divides global_batch 8 (with tiny.toml's 4,
# a plan of dp = 4 fails cairn-train's layout check; the plan's choice depends on the measured fabric).
sets=(--set cluster.nodes=2 --set cluster.gpus_per_node=2 --set train.micro_batch=2
      --set "report.gates.val_loss={ max = 4.0 }")
spread=()
for s in sweep reshard train eval; do spread+=(--sbatch "$s:-N 2 --ntasks-per-node=2"); done

rc=0
CAIRN_POLL_S=1 slurm/submit-pipeline.sh "$config" --out "$work/run" "${sets[@]}" "${spread[@]}" --wait \
  > "$work/submit.out" 2>&1 || rc=$?
cat "$work/submit.out"
[ "$rc" -eq 0 ] || fail "submit-pipeline --wait exited $rc"
/usr/bin/python3 - "$work/run/pipeline.json" > "$work/jobs.txt" <<'PY' || fail "pipeline.json is not what was submitted"
import json, sys
p = json.load(open(sys.argv[1]))
assert [s["stage"] for s in p["stages"]] == ["sweep", "plan", "reshard", "train", "eval", "report"]
for s in p["stages"]:
    print(s["stage"], s["job_id"])
PY
while read -r stage jid; do
  st=$(job_state "$jid")
  [ "$st" = COMPLETED ] || fail "$stage job $jid is $st"
  nodes=$(job_field "$jid" NodeList)
  case "$stage" in
    sweep|reshard|train|eval) [ "$nodes" = "node[1-2]" ] || fail "$stage job $jid ran on '$nodes', not node[1-2]" ;;
  esac
done < "$work/jobs.txt"
grep -q "nodes = 2" "$work/run/sweep/fabric.toml" || fail "the sweep did not see 2 nodes"
pass "six jobs COMPLETED; sweep, reshard, train and eval on node[1-2] x 2 ranks"

# The single-node reference: the same stages with the cluster run's plan, 4 ranks on this machine.
mkdir -p "$work/ref/plan"
cp "$work/run/plan/best.toml" "$work/ref/plan/best.toml"
rc=0
CAIRN_NP=4 slurm/run-local.sh "$config" --out "$work/ref" --stages reshard,train,eval "${sets[@]}" \
  > "$work/ref.out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { tail -n 30 "$work/ref.out"; fail "the single-node run exited $rc"; }
grep -q "layering the plan $work/ref/plan/best.toml" "$work/ref.out" || fail "the single-node run did not use the plan"

/usr/bin/python3 - "$work/run" "$work/ref" <<'PY' || fail "the 2-node results differ from the single-node run's"
import json, sys
def lines(path, kinds):
    out = []
    for l in open(path):
        r = json.loads(l)
        if r.get("kind") in kinds:
            out.append(r)
    return out
run, ref = sys.argv[1], sys.argv[2]
assert json.load(open(f"{run}/data/index.json"))["shards"] == json.load(open(f"{ref}/data/index.json"))["shards"], "datasets differ"
a = [(r["kind"], r["step"], r.get("loss"), r.get("grad_norm"), r.get("val_loss")) for r in lines(f"{run}/train/metrics.jsonl", {"train", "val"})]
b = [(r["kind"], r["step"], r.get("loss"), r.get("grad_norm"), r.get("val_loss")) for r in lines(f"{ref}/train/metrics.jsonl", {"train", "val"})]
assert a and len([x for x in a if x[0] == "train"]) == 30, f"{len(a)} metrics lines"
assert a == b, next((x, y) for x, y in zip(a, b) if x != y) if len(a) == len(b) else (len(a), len(b))
def values(path):  # every eval value but the throughputs (examples/tokens per second)
    rows = map(json.loads, open(path))
    return sorted((r["step"], r["task"], r["metric"], r["value"]) for r in rows if not r["metric"].endswith("_per_s"))
e, f = values(f"{run}/eval/results.jsonl"), values(f"{ref}/eval/results.jsonl")
assert e and e == f, (e, f)
print(f"{len(a)} train/val lines and {len(e)} eval values equal; last loss {a[-1]}")
PY
pass "2 nodes x 2 ranks = 1 node x 4 ranks: dataset, losses per step, val losses and eval values identical"
