#!/usr/bin/env bash
# cairn-plan calibrate --from-runs on real cairn-train runs (1 rank, dp2, tp2, cp2, dp2 ZeRO-3, pp2 on this CPU): the
# refitted cluster file is written with its provenance and loads back, the leave-one-out table names every run with
# finite errors, runs with kernel profiles are fitted by kernel class (GEMM, attention, memory-bound) with the GEMM
# table learned at their matmul shapes, and a mix of profiled and unprofiled runs (or a profile of another start) as
# one compute factor, CP and ZeRO-3 runs are read with their collectives apart from compute, a pipeline through its
# critical stage, a sweep's fabric is refitted through intra_fabric_efficiency, one run says it has no held-out run,
# and a directory that is not a usable run (or holds a broken kernel profile) exits 2 naming it.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:?CAIRN_BIN_DIR must point at build/bin}
PY=/usr/bin/python3
W=$(mktemp -d /tmp/cairn_plan_refit.XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$W"' EXIT  # KEEP=1 keeps the runs for a look after a failure
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
T0=$SECONDS

"$BIN/cairn-reshard" --log-level error --out "$W/ds" --set 'data.delimiter="%"' build /usr/share/games/fortunes/fortunes
# vocab = 0 (the dataset's, padded to 64): calibrate has to find it through the run's dataset. A fixed peak skips
# cairn-train's own GEMM measurement; no validation, no TensorBoard: only step times matter here.
MODEL=(--data "$W/ds" --threads 1 --log-level warn --set model.layers=2 --set model.hidden=64 --set model.heads=4
       --set model.seq_len=64 --set train.global_batch=8 --set train.micro_batch=2 --set train.warmup=2
       --set train.checkpoint_every=0 --set train.val_every=0 --set train.tensorboard=false
       --set train.peak_tflops=0.05 --steps 10)
train() {
  local name=$1 np=$2
  shift 2
  local cmd=("$BIN/cairn-train" --out "$W/$name" "${MODEL[@]}" "$@")
  [[ $np == 1 ]] || cmd=(mpirun --oversubscribe -np "$np" "${cmd[@]}")
  "${cmd[@]}" || fail "$name: cairn-train exited $?"
}
# r1, dp2 and tp2 with per-kernel times (train/kernel_profile.json), cp2 and z3 without
train r1 1 --profile-kernels
train dp2 2 --profile-kernels
train tp2 2 --set parallel.tp=2 --profile-kernels
train cp2 2 --set parallel.cp=2 --set parallel.dp=1
train z3 2 --set parallel.zero=3
train pp2 2 --set parallel.pp=2 --set parallel.dp=1
echo "training: $(( SECONDS - T0 )) s"

# The site: this CPU as a node of 2 one-core devices (the 2-rank runs stay inside it, on the intra tier).
SITE=(--config configs/clusters/cpu-local.toml --set cluster.gpus_per_node=2 --set cluster.peak_tflops=0.083)

# ---- 1. three runs: leave-one-out table, refitted file with provenance, JSON report
"$BIN/cairn-plan" calibrate --from-runs "$W/r1" "$W/dp2" "$W/tp2" "${SITE[@]}" --output "$W/refit.toml" \
  --out "$W/cal" --json "$W/refit.json" --log-level warn > "$W/out.txt" 2> "$W/err.txt" \
  || fail "calibrate --from-runs exited $?: $(cat "$W/err.txt")"
cat "$W/out.txt"
[[ -s $W/refit.toml ]] || fail "no refitted cluster file"
[[ $(tail -1 "$W/out.txt") == "$W/refit.toml" ]] || fail "the written path is not the last line of stdout"
grep -q "after (held out)" "$W/out.txt" || fail "no held-out column"
for r in r1 dp2 tp2; do grep -q "^$r " "$W/out.txt" || fail "table has no row for $r"; done
grep -q "^mean |error|" "$W/out.txt" || fail "no mean/max line"
[[ $(head -1 "$W/refit.toml") == "# Cluster file written by cairn-plan calibrate --from-runs"* ]] || fail "no header"
grep -q "^# command line: .*--from-runs" "$W/refit.toml" || fail "no command line in the provenance"
grep -q "^# tool: cairn-plan .*(git " "$W/refit.toml" || fail "no tool/version/git in the provenance"
[[ $(grep -c "^# run: " "$W/refit.toml") == 3 ]] || fail "provenance does not list the 3 runs"
grep -q "^# factor compute: x" "$W/refit.toml" || fail "no compute factor recorded"
"$BIN/cairn-plan" "${SITE[@]}" --print-config > "$W/site.toml" || fail "--print-config of the site exited $?"
"$PY" - "$W" <<'PY'
import json, math, sys, tomllib
w = sys.argv[1]
site = tomllib.load(open("configs/clusters/cpu-local.toml", "rb"))["cluster"]
effective = tomllib.load(open(f"{w}/site.toml", "rb"))["cluster"]  # with the schema's defaults
refit = tomllib.load(open(f"{w}/refit.toml", "rb"))
assert list(refit) == ["cluster"], list(refit)
c = refit["cluster"]
missing = sorted(set(site) - set(c))
assert not missing, f"input [cluster] keys missing from the refitted file: {missing}"
assert c["gpus_per_node"] == 2 and c["peak_tflops"] == 0.083, "the invocation's --set values are not kept"
d = json.load(open(f"{w}/refit.json"))
rows = {r["run"].rsplit("/", 1)[-1]: r for r in d["rows"]}
assert sorted(rows) == ["dp2", "r1", "tp2"], sorted(rows)
assert rows["r1"]["ranks"] == 1 and rows["dp2"]["ranks"] == 2 and rows["tp2"]["ranks"] == 2, rows
assert rows["tp2"]["layout"].startswith("dp=1,tp=2") and rows["dp2"]["layout"].startswith("dp=2,tp=1"), rows
for name, r in rows.items():
    for k in ("measured_step_s", "predicted_before_s", "predicted_after_s", "error_before_pct", "error_after_pct"):
        assert math.isfinite(r[k]), (name, k, r[k])
    assert r["measured_step_s"] > 0 and r["predicted_after_s"] > 0, (name, r)
f = d["factors"]
assert f["compute"]["exercised"] and 0.2 <= f["compute"]["factor"] <= 5, f["compute"]
assert f["intra"]["exercised"] and not f["inter"]["exercised"], f
assert d["held_out"] and "provenance" in d
# The factors are what the file holds: compute scales gemm_max_efficiency (within the schema's 1.0).
want = min(1.0, site["gemm_max_efficiency"] * f["compute"]["factor"])
assert abs(c["gemm_max_efficiency"] - want) < 1e-9 * max(1, want), (c["gemm_max_efficiency"], want)
# Every run has a kernel profile: fitted by kernel class. Each class's measured share is the profile's share of the
# measured compute; attention scales attention_efficiency and memory hbm_efficiency, each on its own.
assert d["by_kernel_class"], "three profiled runs were not fitted by kernel class"
for name, r in rows.items():
    m, p = r["measured_time_s"], r["predicted_before_time_s"]
    assert r["kernel_profile"] and m["gemm"] > 0 and m["attention"] > 0 and m["memory_bound"] > 0, (name, m)
    assert abs(m["gemm"] + m["attention"] + m["memory_bound"] - m["compute"]) < 1e-9 * m["compute"] + 1e-12, (name, m)
    assert p["gemm"] > 0 and p["attention"] > 0 and abs(p["gemm"] + p["attention"] + p["memory_bound"]
                                                        - p["compute"]) < 1e-9 * p["compute"], (name, p)
# Attention's rate learned from this site's runs: the file says so, and cairn-plan stops flagging attention-bound plans.
assert c.get("attention_measured") is True, c.get("attention_measured")
# The schema's limits: attention_efficiency 1, hbm_efficiency 4 (a CPU's cached tensors beat its DRAM stream).
for knob, key, limit in (("attention", "attention_efficiency", 1.0), ("memory", "hbm_efficiency", 4.0)):
    assert f[knob]["exercised"] and f[knob]["terms"] == 3 and 0.2 <= f[knob]["factor"] <= 5, (knob, f[knob])
    want = min(limit, effective[key] * f[knob]["factor"])
    assert abs(c[key] - want) < 1e-9, (key, c[key], want)
s = d["summary"]
print(f"leave-one-out mean |error| {s['mean_abs_error_before_pct']:.1f} % -> {s['mean_abs_error_after_pct']:.1f} %, "
      f"max {s['max_abs_error_before_pct']:.1f} % -> {s['max_abs_error_after_pct']:.1f} %; factors " +
      ", ".join(f"{k} x{v['factor']:.3g}" for k, v in f.items() if v["exercised"]))
PY

# ---- 1a. GEMM by shape: the profiles' matmul shapes (micro-batch 2 x 64 tokens = 128 rows; hidden 64, QKV 192 wide,
# 96 per rank in tp2) become gemm_table entries, each at its speed relative to the other shapes, solved together so
# the model gives every learned shape (not held at 1.0) that efficiency before the compute factor scales them all.
"$PY" - "$W" <<'PY' || fail "GEMM by shape"
import json, sys, tomllib
w = sys.argv[1]
d = json.load(open(f"{w}/refit.json"))
shapes = {(s["m"], s["n"], s["k"]): s for s in d["gemm_shapes"]}
for want in ((128, 192, 64), (128, 96, 64), (128, 64, 192), (64, 192, 128), (128, 256, 64), (256, 64, 128)):
    assert want in shapes, (want, sorted(shapes))  # QKV forward (1 rank, tp2), its backward, MLP up, MLP down's dW
assert shapes[(128, 96, 64)]["runs"] == 1 and shapes[(128, 192, 64)]["runs"] == 2, shapes
# Targets: each shape's speed relative to the others (one level for all, at most 1.0 of peak for the fastest).
levels = [s["efficiency_target"] / (s["efficiency_before"] * s["predicted_s"] / s["measured_s"]) for s in shapes.values()]
assert max(levels) / min(levels) - 1 < 1e-9, levels
assert abs(max(s["efficiency_target"] for s in shapes.values()) - 1) < 1e-9 or abs(levels[0] - sum(
    s["measured_s"] for s in shapes.values()) / sum(s["predicted_s"] for s in shapes.values())) < 1e-9, levels[0]
for key, s in shapes.items():
    assert not s["held_at_limit"] and abs(s["efficiency_after"] / s["efficiency_target"] - 1) < 2e-3, (key, s)
c = tomllib.load(open(f"{w}/refit.toml", "rb"))["cluster"]
table = set(zip(c["gemm_table_m"], c["gemm_table_n"], c["gemm_table_k"]))
assert set(shapes) <= table, sorted(set(shapes) - table)
assert len(c["gemm_table_efficiency"]) == len(c["gemm_table_m"]) and max(c["gemm_table_efficiency"]) <= 1.0
assert any(l.startswith("gemm shapes: %d GEMM shapes in 3 runs" % len(shapes)) for l in d["notes"]), d["notes"]
print(f"gemm shapes: {len(shapes)} learned, measured/predicted {min(s['measured_s'] / s['predicted_s'] for s in shapes.values()):.2f}"
      f" to {max(s['measured_s'] / s['predicted_s'] for s in shapes.values()):.2f}")
PY
# Profiles without shapes (written before cairn-train recorded them) keep the table as calibrate measured it.
for r in r1 dp2; do
  cp -r "$W/$r" "$W/${r}old"
  "$PY" - "$W/${r}old/train/kernel_profile.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ranks"]:
    r.pop("gemm_shapes")
json.dump(d, open(sys.argv[1], "w"))
PY
done
"$BIN/cairn-plan" calibrate --from-runs "$W/r1old" "$W/dp2old" "${SITE[@]}" --output "$W/old.toml" --log-level warn \
  > "$W/old.txt" || fail "calibrate on profiles without GEMM shapes exited $?"
grep -q "gemm shapes: none" "$W/old.txt" || fail "no 'gemm shapes: none' line: $(cat "$W/old.txt")"
grep -q "^gemm_table_m = \[\]" "$W/old.toml" || fail "a GEMM table was written without shapes"

# ---- 1b. context parallelism and ZeRO-3 against a sweep's fabric. The rank count of cp2 ([parallel] dp = 1) counts
# cp; its ring waits (time_s.cp_comm) and ZeRO-3's per-layer gathers and reduce-scatters (time_s.zero_comm) are
# collectives, not compute. The fabric below is far faster than MPI on this machine, so the runs ask for a fraction of
# its speed: the intra knob scales intra_fabric_efficiency (the nominal intra_efficiency is not used with a fabric).
cat > "$W/fabric.toml" <<'TOML'
[fabric]
backend = "mpi"
world_size = 2
nodes = 1
ranks_per_node = 2
[intra.allreduce]
alpha_us = 0.01
busbw_gbps = 1000.0
r2 = 0.99
ranks = 2
[intra.sendrecv]
alpha_us = 0.01
busbw_gbps = 1000.0
r2 = 0.99
ranks = 2
TOML
"$BIN/cairn-plan" calibrate --from-runs "$W/dp2" "$W/tp2" "$W/cp2" "$W/z3" "${SITE[@]}"   --set "cluster.fabric=\"$W/fabric.toml\"" --output "$W/fab.toml" --json "$W/fab.json" --log-level error   > "$W/fab.txt" || fail "calibrate --from-runs with CP, ZeRO-3 and a fabric exited $?"
grep -q "^cp2 .*cp=2" "$W/fab.txt" || fail "no cp2 row: $(cat "$W/fab.txt")"
grep -q "kernel classes: 2 of 4 runs have a kernel profile; compute is fitted as one" "$W/fab.txt" \
  || fail "a mix of profiled and unprofiled runs is not fitted as one compute factor: $(cat "$W/fab.txt")"
"$PY" - "$W" <<'PY' || fail "CP / ZeRO-3 / fabric refit"
import json, sys, tomllib
w = sys.argv[1]
d = json.load(open(f"{w}/fab.json"))
rows = {r["run"].rsplit("/", 1)[-1]: r for r in d["rows"]}
assert not d["by_kernel_class"] and not d["factors"]["attention"]["exercised"], d["factors"]["attention"]
assert tomllib.load(open(f"{w}/fab.toml", "rb"))["cluster"].get("attention_measured", False) is False, "not learned"
assert rows["cp2"]["ranks"] == 2 and rows["cp2"]["ranks_from"] == "[parallel] dp x cp x tp x pp", rows["cp2"]
assert rows["cp2"]["measured_time_s"]["cp_comm"] > 0 and rows["cp2"]["predicted_before_time_s"]["cp_comm"] > 0, rows["cp2"]
z = rows["z3"]["measured_time_s"]
assert z["zero_comm"] > 0 and z["dp_comm"] >= z["zero_comm"], z  # the DP waits include ZeRO-3's inside the layers
f = d["factors"]["intra"]
assert f["exercised"] and f["adjustable"] and f["factor"] < 1, f
c = tomllib.load(open(f"{w}/fab.toml", "rb"))["cluster"]
assert abs(c["intra_fabric_efficiency"] - f["factor"]) < 1e-9, (c["intra_fabric_efficiency"], f)
assert c["intra_efficiency"] == 0.8 or c["intra_efficiency"] == tomllib.load(
    open("configs/clusters/cpu-local.toml", "rb"))["cluster"]["intra_efficiency"], c["intra_efficiency"]
print(f"fabric refit: intra_fabric_efficiency {c['intra_fabric_efficiency']:.3g}; cp2 cp_comm "
      f"{rows['cp2']['measured_time_s']['cp_comm'] * 1e3:.2f} ms, z3 zero_comm {z['zero_comm'] * 1e3:.2f} ms per step")
PY

# ---- 1c. a kernel profile written by another start of the run (here tp2's, in a copy of dp2) is not evidence for
# its steps: warned about and left out, so the three runs are fitted with one compute factor
cp -r "$W/dp2" "$W/dp2stale"
cp "$W/tp2/train/kernel_profile.json" "$W/dp2stale/train/kernel_profile.json"
"$BIN/cairn-plan" calibrate --from-runs "$W/r1" "$W/dp2stale" "$W/tp2" "${SITE[@]}" --output "$W/stale.toml" \
  --log-level warn > "$W/stale.txt" 2> "$W/stale.err" || fail "calibrate with a stale kernel profile exited $?"
grep -q "dp2stale/train/kernel_profile.json: written by another start of the run" "$W/stale.err" \
  || fail "no warning about the stale kernel profile: $(cat "$W/stale.err")"
grep -q "kernel classes: 2 of 3 runs have a kernel profile" "$W/stale.txt" || fail "stale profile used: $(cat "$W/stale.txt")"

# ---- 1d. a profile taken on a GPU backend (every kernel waited for the device) is named in a warning
cp -r "$W/r1" "$W/r1gpu"
sed -i 's/"backend": "cpu"/"backend": "cuda"/' "$W/r1gpu/train/kernel_profile.json"
grep -q '"backend": "cuda"' "$W/r1gpu/train/kernel_profile.json" || fail "could not mark the copied profile as cuda"
"$BIN/cairn-plan" calibrate --from-runs "$W/r1gpu" "${SITE[@]}" --output "$W/gpu.toml" --log-level warn > /dev/null \
  2> "$W/gpu.err" || fail "calibrate with a GPU profile exited $?"
grep -q "r1gpu/train/kernel_profile.json: profiled on cuda, where every kernel waited for the device" "$W/gpu.err" \
  || fail "no warning about a GPU kernel profile: $(cat "$W/gpu.err")"

# ---- 1e. a pipeline: the split of its critical stage (each step's stage with the most compute, as its busiest rank
# timed it), not rank 0's; a copy whose lines lost their stages (written before cairn-train logged them) reads rank 0's
"$PY" - "$W/pp2/train/metrics.jsonl" "$W/pp2old" <<'PY'
import json, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(os.path.dirname(os.path.dirname(src)), dst)
with open(f"{dst}/train/metrics.jsonl", "w") as f:
    for line in open(src):
        d = json.loads(line)
        d.pop("stages", None)
        f.write(json.dumps(d) + "\n")
PY
for run in pp2 pp2old; do
  "$BIN/cairn-plan" calibrate --from-runs "$W/r1" "$W/$run" "${SITE[@]}" --output "$W/$run.toml" --json "$W/$run.json" \
    --log-level error > "$W/$run.txt" || fail "calibrate --from-runs with $run exited $?"
done
grep -q "^pipeline pp2 (report only): measured pp_wait .* s (critical stage [01]), predicted" "$W/pp2.txt" \
  || fail "no critical-stage pipeline line: $(cat "$W/pp2.txt")"
grep -q "^pipeline pp2old (report only): .*(rank 0: the run logged no stages)" "$W/pp2old.txt" \
  || fail "a run without stages is not read as rank 0's: $(cat "$W/pp2old.txt")"
grep -q "^stages pp2: busy s measured / predicted: 0 .*, 1 " "$W/pp2.txt" || fail "no per-stage line: $(cat "$W/pp2.txt")"
grep -q "^stages pp2old" "$W/pp2old.txt" && fail "a per-stage line for a run without stages"
"$PY" - "$W" <<'PY' || fail "critical stage"
import json, statistics, sys
w = sys.argv[1]
lines = [json.loads(l) for l in open(f"{w}/pp2/train/metrics.jsonl")]
steps = [l for l in lines if l.get("kind") == "train"][3:]  # after the 3 warm-up steps calibrate leaves out
compute = lambda t: t["forward"] + t["backward"] - t["tp_comm"] - t["cp_comm"] - t["zero_comm"]
want = statistics.median(max(compute(s["time_s"]) for s in l["stages"]) for l in steps)
rank0 = statistics.median(compute(l["time_s"]) for l in steps)
m = {r["run"].rsplit("/", 1)[-1]: r for r in json.load(open(f"{w}/pp2.json"))["rows"]}["pp2"]["measured_time_s"]
old = {r["run"].rsplit("/", 1)[-1]: r for r in json.load(open(f"{w}/pp2old.json"))["rows"]}["pp2old"]["measured_time_s"]
assert m["stage"] in (0, 1) and abs(m["compute"] - want) <= 1e-9 * want, (m, want)
assert "stage" not in old and abs(old["compute"] - rank0) <= 1e-9 * rank0, (old, rank0)
# Each stage's busy time (forward + backward without ZeRO's waits) against the model's split of the work.
row = {r["run"].rsplit("/", 1)[-1]: r for r in json.load(open(f"{w}/pp2.json"))["rows"]}["pp2"]
busy = [statistics.median(l["stages"][k]["time_s"]["forward"] + l["stages"][k]["time_s"]["backward"] -
                          l["stages"][k]["time_s"]["zero_comm"] for l in steps) for k in (0, 1)]
assert all(abs(a - b) <= 1e-9 * b for a, b in zip(row["measured_stage_busy_s"], busy)), (row["measured_stage_busy_s"], busy)
assert len(row["predicted_stage_busy_s"]) == 2 and min(row["predicted_stage_busy_s"]) > 0, row["predicted_stage_busy_s"]
print(f"pipeline: critical stage {m['stage']}, compute {m['compute'] * 1e3:.2f} ms (rank 0's {rank0 * 1e3:.2f} ms), "
      f"its pp_wait {m['pp_wait'] * 1e3:.2f} ms")
PY

# ---- 2. the written file loads back as a cluster file and plans with it
TINY=(--set model.layers=2 --set model.hidden=64 --set model.heads=4 --set model.seq_len=64 --set model.vocab=128
      --set train.global_batch=8)
"$BIN/cairn-plan" --config "$W/refit.toml" "${TINY[@]}" --out "$W/chk" --explain --plan dp=2,mb=2 > "$W/explain.txt" \
  2> "$W/chk.err" || fail "the refitted file does not load/plan: $(cat "$W/chk.err")"
"$BIN/cairn-plan" --config "$W/refit.toml" --print-config > "$W/print.txt" || fail "--print-config with the file failed"
grep -q "refit.toml" "$W/print.txt" || fail "print-config does not show the file"

# ---- 3. one run: default output under <out>/plan/, and it says there is no held-out run
"$BIN/cairn-plan" calibrate --from-runs "$W/r1" "${SITE[@]}" --out "$W/one" --log-level warn > "$W/one.txt" \
  || fail "calibrate --from-runs with one run exited $?"
[[ -s $W/one/plan/cluster-refit.toml ]] || fail "default output <out>/plan/cluster-refit.toml missing"
grep -q "no held-out run" "$W/one.txt" || fail "one run: no 'no held-out run' note"

# ---- 4. [parallel] dp = 0: the rank count from a checkpoint's DONE marker of the last start (world_size, read by
# records::read_checkpoint_done); a marker that does not read (here: no files) is no evidence and is skipped.
cp -r "$W/dp2" "$W/dp2ck"
mkdir -p "$W/dp2ck/train/ckpt/step_00000009" "$W/dp2ck/train/ckpt/step_00000010"
echo '{"step": 9, "world_size": 2, "files": {"model.h5": {"bytes": 1, "xxh64": "0123456789abcdef"}}}' \
  > "$W/dp2ck/train/ckpt/step_00000009/DONE"
echo '{"step": 10, "world_size": 3, "files": {}}' > "$W/dp2ck/train/ckpt/step_00000010/DONE"
"$BIN/cairn-plan" calibrate --from-runs "$W/dp2ck" "${SITE[@]}" --out "$W/ck" --json "$W/ck.json" --log-level warn \
  > /dev/null || fail "calibrate --from-runs on a run with checkpoints exited $?"
"$PY" - "$W/ck.json" <<'PY' || fail "the rank count was not taken from the checkpoint's DONE marker"
import json, sys
r = json.load(open(sys.argv[1]))["rows"][0]
assert r["ranks"] == 2 and r["ranks_from"] == "checkpoint DONE world_size", r
PY

# ---- 5. directories that are not usable runs: exit 2 naming them, nothing written
expect_usage() {  # DIR WHAT: calibrate on DIR (with a good run) must exit 2 naming DIR (or its file) and saying WHAT
  local rc=0
  "$BIN/cairn-plan" calibrate --from-runs "$W/r1" "$1" "${SITE[@]}" --output "$W/bad.toml" > /dev/null \
    2> "$W/bad.err" || rc=$?
  [[ $rc == 2 ]] || fail "$1: exit $rc, want 2: $(cat "$W/bad.err")"
  grep -q "^cairn-plan: .*\"$1[\"/]" "$W/bad.err" || fail "$1 not named: $(cat "$W/bad.err")"
  grep -q "$2" "$W/bad.err" || fail "$1: no '$2' in: $(cat "$W/bad.err")"
  [[ ! -e $W/bad.toml ]] || fail "$1: a file was written anyway"
}
expect_usage "$W/nonexistent" "no such directory"
mkdir -p "$W/empty"
expect_usage "$W/empty" "no train/metrics.jsonl"
mkdir -p "$W/nosteps/train"
head -1 "$W/r1/train/metrics.jsonl" > "$W/nosteps/train/metrics.jsonl"  # the provenance line only
grep -m2 '"train"' "$W/r1/train/metrics.jsonl" | sed 's/"skipped":false/"skipped":true/' >> "$W/nosteps/train/metrics.jsonl"
expect_usage "$W/nosteps" "no finished training steps"
# A line that is not JSON with lines after it is damage, not a killed run's torn last line: it was skipped silently.
cp -r "$W/dp2" "$W/garbled"
sed -i '3s/.*/[1, 2, 3]/' "$W/garbled/train/metrics.jsonl"
expect_usage "$W/garbled" 'malformed metrics line ".*/garbled/train/metrics.jsonl:3": not a JSON object, and not the last'
# A torn last line (a killed run) is still read past.
cp -r "$W/dp2" "$W/torn"
truncate -s -20 "$W/torn/train/metrics.jsonl"
"$BIN/cairn-plan" calibrate --from-runs "$W/r1" "$W/torn" "${SITE[@]}" --output "$W/torn.toml" --log-level error \
  > /dev/null || fail "a run with a torn last metrics line: exit $?"
cp -r "$W/dp2" "$W/badprof"
echo '{"kind": "kernel_profile", "ranks": []}' > "$W/badprof/train/kernel_profile.json"
expect_usage "$W/badprof" "not a kernel profile"
cp -r "$W/dp2" "$W/badshape"
"$PY" - "$W/badshape/train/kernel_profile.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["ranks"][0]["gemm_shapes"][0]["n"] = -1
json.dump(d, open(sys.argv[1], "w"))
PY
expect_usage "$W/badshape" "bad gemm_shapes entry in kernel profile"
echo "calibrate_runs.sh: ok ($(( SECONDS - T0 )) s)"
