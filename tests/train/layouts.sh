#!/usr/bin/env bash
# cairn-train's parallel layouts against 1 rank: tp2, pp2 (1F1B), pp2 x v2 (interleaved), tp2 + sp, dp2 x tp2,
# dp2 x pp2, tp2 x pp2, dp2 ZeRO-1, dp2 x tp2 ZeRO-1, dp2 x tp2 x pp2 (8 ranks), ZeRO-2/3, context parallelism (cp2
# and dp2 x cp2 x pp2 ZeRO-2 on 8 ranks by ring, cp2 x tp2 + sp by all-gather) and an uneven pp2 split (stage_layers = [2, 3] of 5 layers) give
# the same 30 losses (1e-5 relative), gradient norms (1e-4), validation losses (1e-5) and step-30 parameters (1e-5 of
# each tensor's max) as 1 rank. The 8-rank step-15 checkpoints resume as 1 rank (also with wte padded to 384 rows, and
# a 384-row one at 320, refused when its rows past 320 hold values), dp2, tp2 x pp2 and ZeRO-3 (steps 16..30 as
# 1 rank's); tp2 x pp2 resumed by tp2 x pp2 is bitwise its own
# uninterrupted run; cairn-eval scores the 8-rank checkpoint as the 1-rank one. Metrics carry tp_comm, pp_wait and
# mem_gib, pipelined runs every stage's split (its busiest rank's), the trace has pipeline waits on every rank;
# impossible layouts exit 2 with a clear message, writing nothing. pp2 x v2, dp2 x cp2 x pp2 and the uneven split
# match their pipeline messages in posting order per direction and kind ([train] pipe_match = "order", as NCCL's
# tagless point-to-point does on GPUs), the other pipelined runs by tag: a schedule that broke NCCL's order would
# pair one micro-batch's tensor with another's receive there and change the losses.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:?CAIRN_BIN_DIR must point at build/bin}
PY=/usr/bin/python3   # Debian's python (h5py, numpy)
W=$(mktemp -d /tmp/cairn_train_layouts.XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$W"' EXIT  # KEEP=1 keeps the runs for a look after a failure
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
MPIRUN=(mpirun --oversubscribe)
T0=$SECONDS

"$BIN/cairn-reshard" --log-level error --out "$W/ds" --set 'data.delimiter="%"' build /usr/share/games/fortunes/fortunes

# lr = 1e-3 and Adam's eps = 1e-5 keep the float noise of a different summation order below the tolerances: at
# lr = 3e-3 and eps = 1e-8, 1 rank with micro_batch 1 or 4 instead of 2 (the same maths) already differs from itself
# by ~1e-4 in the step-30 tensors (Adam turns the rounding noise of gradients that are zero in exact arithmetic, like
# the key biases', into lr-sized steps) and up to 2e-3 in the gradient norm of an ill-conditioned step.
# The r1mb1 row of the table shows that floor for these settings (~1e-6 in the tensors).
MODEL=(--data "$W/ds" --threads 1 --set model.hidden=32 --set model.heads=4 --set model.seq_len=32
       --set train.global_batch=8 --set train.micro_batch=2 --set train.warmup=2 --set train.lr=0.001
       --set train.eps=1e-5 --set train.spike_zscore=0 --set train.checkpoint_every=15 --set train.val_every=10
       --steps 30)

# train NAME RANKS ARGS...: one run into $W/NAME (1 rank without mpirun)
train() {
  local name=$1 np=$2
  shift 2
  local cmd=("$BIN/cairn-train" --out "$W/$name" "${MODEL[@]}" --log-level warn "$@")
  [[ $np == 1 ]] || cmd=("${MPIRUN[@]}" -np "$np" "${cmd[@]}")
  "${cmd[@]}" || fail "$name ($np ranks): cairn-train exited $?: ${cmd[*]}"
}
TP=(--set parallel.tp=2)
PP=(--set parallel.pp=2)
# validation scores val_batches global batches, the same windows in every layout: nothing to adjust for dp2
DP2=()

# ---- 1. references and 2. the layouts (each run is reused by the checks below)
train r1 1 --set model.layers=4
train r1mb1 1 --set model.layers=4 --set train.micro_batch=1  # the same maths in another order: the noise floor
train tp2 2 --set model.layers=4 "${TP[@]}"
train pp2 2 --set model.layers=4 "${PP[@]}"
ORDERED=(--set 'train.pipe_match="order"')
train pp2v2 2 --set model.layers=4 "${PP[@]}" --set parallel.v=2 --trace-steps 2:4 "${ORDERED[@]}"
train tp2sp 2 --set model.layers=4 "${TP[@]}" --set 'parallel.sp="on"'
train dp2tp2 4 --set model.layers=4 "${DP2[@]}" "${TP[@]}"
train dp2pp2 4 --set model.layers=4 "${DP2[@]}" "${PP[@]}"
train tp2pp2 4 --set model.layers=4 "${TP[@]}" "${PP[@]}"
train dp2z1 2 --set model.layers=4 "${DP2[@]}" --set parallel.zero=1
# ZeRO-1 needs dp > 1 to shard anything (at dp1 it is a no-op with a note), so it runs as dp2 x tp2
train dp2tp2z1 4 --set model.layers=4 "${DP2[@]}" "${TP[@]}" --set parallel.zero=1
train dp2tp2pp2 8 --set model.layers=4 "${DP2[@]}" --set parallel.dp=2 "${TP[@]}" "${PP[@]}"
# ZeRO-2 (gradients reduce-scattered per unit) and ZeRO-3 (parameters sharded, gathered per unit), also with tp x pp
train dp2z2 2 --set model.layers=4 "${DP2[@]}" --set parallel.zero=2
train dp2z3 2 --set model.layers=4 "${DP2[@]}" --set parallel.zero=3
train dp2tp2pp2z3 8 --set model.layers=4 "${DP2[@]}" --set parallel.dp=2 "${TP[@]}" "${PP[@]}" --set parallel.zero=3
# context parallelism: each 32-token sequence in 4 chunks of 8 (rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2)
CP=(--set parallel.cp=2)
# K/V around a ring (cp_comm = "p2p", the default) in cp2 and dp2cp2pp2z2, all-gathered in cp2tp2sp
train cp2 2 --set model.layers=4 "${CP[@]}"
train cp2tp2sp 4 --set model.layers=4 "${CP[@]}" "${TP[@]}" --set 'parallel.sp="on"' --set 'parallel.cp_comm="allgather"'
train dp2cp2pp2z2 8 --set model.layers=4 "${DP2[@]}" --set parallel.dp=2 "${CP[@]}" "${PP[@]}" --set parallel.zero=2 \
  "${ORDERED[@]}"
# ---- 3. uneven pipeline: 5 layers as 2 + 3, against its own 1-rank reference
train l5r1 1 --set model.layers=5
train l5pp2 2 --set model.layers=5 "${PP[@]}" --set 'parallel.stage_layers=[2,3]' "${ORDERED[@]}"
echo "layouts: $(( SECONDS - T0 )) s for the 20 training runs"

# ---- 4. cross-layout resume: the 8-rank step-15 checkpoints as 1 rank, dp2, cp2, tp2 x pp2, dp2 x pp2 ZeRO-1 and ZeRO-3;
# tp2 x pp2 by itself
# resume NAME FROM RANKS ARGS...: copy run FROM without its step-30 checkpoint and resume it from step 15
resume() {
  local name=$1 from=$2 np=$3
  shift 3
  cp -r "$W/$from" "$W/$name"
  rm -rf "$W/$name/train/ckpt/step_00000030" "$W/$name/train/FINISHED"
  local cmd=("$BIN/cairn-train" --out "$W/$name" "${MODEL[@]}" --log-level info "$@")
  [[ $np == 1 ]] || cmd=("${MPIRUN[@]}" -np "$np" "${cmd[@]}")
  local err rc=0
  err=$("${cmd[@]}" 2>&1 >/dev/null) || rc=$?
  [[ $rc == 0 ]] || fail "$name: resume exited $rc: ${cmd[*]}: $err"
  grep -q "resuming from \".*step_00000015\" at step 15" <<<"$err" || fail "$name: did not resume from step 15: $err"
  [[ -f "$W/$name/train/FINISHED" && -f "$W/$name/train/ckpt/step_00000030/DONE" ]] || fail "$name: resumed run did not finish"
}
resume res8to1 dp2tp2pp2 1 --set model.layers=4
resume res8todp2 dp2tp2pp2 2 --set model.layers=4 "${DP2[@]}"
resume res8totp2pp2 dp2tp2pp2 4 --set model.layers=4 "${TP[@]}" "${PP[@]}"
resume rescp8to1 dp2cp2pp2z2 1 --set model.layers=4
resume rescp8tocp2 dp2cp2pp2z2 2 --set model.layers=4 "${CP[@]}"
# into dp2 x pp2: the first replica reads each stage's pieces and broadcasts them, with ZeRO-1 scattering the
# moments' shards instead
resume res8todp2pp2 dp2tp2pp2 4 --set model.layers=4 "${DP2[@]}" "${PP[@]}"
resume rescp8todp2pp2z1 dp2cp2pp2z2 4 --set model.layers=4 "${DP2[@]}" "${PP[@]}" --set parallel.zero=1
resume restp2pp2 tp2pp2 4 --set model.layers=4 "${TP[@]}" "${PP[@]}"
# another padded vocabulary (another tp pads it otherwise): wte's padding rows added (320 -> 384) or dropped
# (tp2 at 384 -> 1 rank at 320)
resume res8to1v384 dp2tp2pp2 1 --set model.layers=4 --set model.vocab=384
train tp2v384 2 --set model.layers=4 "${TP[@]}" --set model.vocab=384
resume resv384to1 tp2v384 1 --set model.layers=4
# ... but rows past 320 that hold values (a model that used those ids) are refused at 320, naming them: the
# step-15 checkpoint with wte's rows 330.. set, its checksums resealed
cp -r "$W/tp2v384" "$W/v384nz"
rm -rf "$W/v384nz/train/ckpt/step_00000030" "$W/v384nz/train/FINISHED"
"$PY" - "$W/v384nz/train/ckpt/step_00000015" <<'PYEOF'
import ctypes, json, sys
import h5py
d = sys.argv[1]
xxh = ctypes.CDLL("libxxhash.so.0")
xxh.XXH64.restype, xxh.XXH64.argtypes = ctypes.c_uint64, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
digest = lambda b: "%016x" % xxh.XXH64(b, len(b), 0)
with h5py.File(f"{d}/model.h5", "r+") as f:
    names = []
    f.visit(lambda n: names.append(n) if n.split("/")[-1] == "wte" else None)
    wte = f[names[0]]
    a = wte[...]
    assert a.shape[0] == 384 and not a[320:].any(), a.shape
    a[330:] = 0.25
    wte[...] = a
    wte.attrs["xxh64"] = digest(a.astype("<f4").tobytes())
done = json.load(open(f"{d}/DONE"))
data = open(f"{d}/model.h5", "rb").read()
done["files"]["model.h5"] = {"bytes": len(data), "xxh64": digest(data)}
json.dump(done, open(f"{d}/DONE", "w"))
PYEOF
rc=0
err=$("$BIN/cairn-train" --out "$W/v384nz" "${MODEL[@]}" --log-level warn --set model.layers=4 2>&1 >/dev/null) || rc=$?
[[ $rc == 2 ]] || fail "a 384-row wte holding rows 330.. resumed at vocab 320: exit $rc: $err"
grep -qF "holds non-zero values in rows 320..383, which this run's vocab = 320 drops (set [model] vocab = 384" <<<"$err" ||
  fail "a 384-row wte holding rows 330.., refused without naming them: $err"
# into ZeRO-3: each rank gets only its shard of the parameters (MPI_Scatterv), never the whole piece
resume res8todp2z3 dp2tp2pp2 2 --set model.layers=4 "${DP2[@]}" --set parallel.zero=3
resume rescp8todp2pp2z3 dp2cp2pp2z2 4 --set model.layers=4 "${DP2[@]}" "${PP[@]}" --set parallel.zero=3

# cairn-eval on the step-30 checkpoints of 1 rank and of dp2 x tp2 x pp2 (the whole validation split)
for run in r1 dp2tp2pp2; do
  "$BIN/cairn-eval" --out "$W/eval_$run" --data "$W/ds" --tasks val --threads 1 --log-level warn \
    "$W/$run/train/ckpt/step_00000030" > /dev/null || fail "cairn-eval of $run exited $?"
done

"$PY" - "$W" <<'PYEOF'
import json, sys
import h5py, numpy as np
w = sys.argv[1]
failures = []
def check(ok, msg):
    if not ok:
        failures.append(msg)
def lines(run, kind):
    return [l for l in map(json.loads, open(f"{w}/{run}/train/metrics.jsonl")) if l["kind"] == kind]
def train(run):
    t = lines(run, "train")
    assert [l["step"] for l in t] == list(range(1, 31)), (run, "train steps", [l["step"] for l in t])
    return t
def val(run):
    v = {l["step"]: (l["val_loss"], l["val_first_window"], l["val_windows"]) for l in lines(run, "val")}
    assert sorted(v) == [10, 20, 30], (run, "val steps", sorted(v))
    return v
def ckpt(run, step=30):
    with h5py.File(f"{w}/{run}/train/ckpt/step_{step:08d}/model.h5", "r") as f:
        out = {}
        f["params"].visititems(lambda k, d: out.__setitem__(k, d[()]) if isinstance(d, h5py.Dataset) else None)
        return out, json.loads(f.attrs["train_state"])
def rel(a, b):
    return abs(a - b) / abs(b)
def param_diff(run, ref):
    got, _ = ckpt(run)
    want, _ = ckpt(ref)
    assert sorted(got) == sorted(want), (run, "tensor names differ from 1 rank's",
                                         sorted(set(got) ^ set(want)))
    worst, name = 0.0, ""
    for k, b in want.items():
        a = got[k]
        if k == "wte" and a.shape[0] > b.shape[0]:  # a vocabulary padded further: its extra rows stay zero
            assert not np.any(a[b.shape[0]:]), (run, "wte's padding rows past", b.shape[0], "are not zero")
            a = a[:b.shape[0]]
        assert a.shape == b.shape, (run, k, a.shape, b.shape)
        d = float(np.max(np.abs(a.astype(np.float64) - b)) / max(float(np.max(np.abs(b))), 1e-30))
        if d > worst:
            worst, name = d, k
    return worst, name

layouts = [  # run, reference, layout as the checkpoint records it
    ("r1mb1", "r1", "dp1 x tp1 x pp1, micro-batch 1 x 8"),
    ("tp2", "r1", "dp1 x tp2 x pp1, micro-batch 2 x 4"),
    ("pp2", "r1", "dp1 x tp1 x pp2 (layers 2+2), micro-batch 2 x 4"),
    ("pp2v2", "r1", "dp1 x tp1 x pp2 (v2, layers 1+1+1+1), micro-batch 2 x 4"),
    ("tp2sp", "r1", "dp1 x tp2 x pp1, micro-batch 2 x 4, sp"),
    ("dp2tp2", "r1", "dp2 x tp2 x pp1, micro-batch 2 x 2"),
    ("dp2pp2", "r1", "dp2 x tp1 x pp2 (layers 2+2), micro-batch 2 x 2"),
    ("tp2pp2", "r1", "dp1 x tp2 x pp2 (layers 2+2), micro-batch 2 x 4"),
    ("dp2z1", "r1", "dp2 x tp1 x pp1, micro-batch 2 x 2, ZeRO-1"),
    ("dp2tp2z1", "r1", "dp2 x tp2 x pp1, micro-batch 2 x 2, ZeRO-1"),
    ("dp2tp2pp2", "r1", "dp2 x tp2 x pp2 (layers 2+2), micro-batch 2 x 2"),
    ("dp2z2", "r1", "dp2 x tp1 x pp1, micro-batch 2 x 2, ZeRO-2"),
    ("dp2z3", "r1", "dp2 x tp1 x pp1, micro-batch 2 x 2, ZeRO-3"),
    ("dp2tp2pp2z3", "r1", "dp2 x tp2 x pp2 (layers 2+2), micro-batch 2 x 2, ZeRO-3"),
    ("cp2", "r1", "dp1 x cp2 x tp1 x pp1, micro-batch 2 x 4"),
    ("cp2tp2sp", "r1", "dp1 x cp2 x tp2 x pp1, micro-batch 2 x 4, sp"),
    ("dp2cp2pp2z2", "r1", "dp2 x cp2 x tp1 x pp2 (layers 2+2), micro-batch 2 x 2, ZeRO-2"),
    ("l5pp2", "l5r1", "dp1 x tp1 x pp2 (layers 2+3), micro-batch 2 x 4"),
]
print(f"{'layout':<12} {'loss':>9} {'grad_norm':>9} {'val_loss':>9} {'params':>9}  worst tensor  (max relative difference vs 1 rank)")
for run, ref, want_layout in layouts:
    t, tr = train(run), train(ref)
    dl = max(rel(a["loss"], b["loss"]) for a, b in zip(t, tr))
    dg = max(rel(a["grad_norm"], b["grad_norm"]) for a, b in zip(t, tr))
    v, vr = val(run), val(ref)
    check(all(v[s][1:] == vr[s][1:] for s in vr), f"{run}: validation windows (first, count) {v[30][1:]} vs {vr[30][1:]}")
    dv = max(rel(v[s][0], vr[s][0]) for s in vr)
    dp, name = param_diff(run, ref)
    layout = ckpt(run)[1]["layout"]
    print(f"{run:<12} {dl:9.2e} {dg:9.2e} {dv:9.2e} {dp:9.2e}  {name}")
    check(layout == want_layout, f"{run}: the checkpoint says layout '{layout}', expected '{want_layout}'")
    check(dl <= 1e-5, f"{run}: loss differs from 1 rank's by {dl:.3e} relative (> 1e-5)")
    check(dg <= 1e-4, f"{run}: grad norm differs from 1 rank's by {dg:.3e} relative (> 1e-4)")
    check(dv <= 1e-5, f"{run}: val loss differs from 1 rank's by {dv:.3e} relative (> 1e-5)")
    check(dp <= 1e-5, f"{run}: step-30 tensor {name} differs from 1 rank's by {dp:.3e} of its max (> 1e-5)")
check(ckpt("r1")[1]["layout"] == "dp1 x tp1 x pp1, micro-batch 2 x 4", f"r1 layout {ckpt('r1')[1]['layout']}")

r1 = train("r1")
check(r1[-1]["loss"] < r1[0]["loss"] - 0.5, f"r1: the loss did not fall ({r1[0]['loss']} -> {r1[-1]['loss']})")

# ---- resumes: steps 16..30 (and the step-30 parameters) of the 8-rank checkpoint resumed by other layouts
ref = train("r1")
for run, source in (("res8to1", "dp2 x tp2 x pp2"), ("res8todp2", "dp2 x tp2 x pp2"),
                    ("res8totp2pp2", "dp2 x tp2 x pp2"), ("res8todp2pp2", "dp2 x tp2 x pp2"),
                    ("rescp8to1", "dp2 x cp2 x pp2 ZeRO-2"),
                    ("rescp8tocp2", "dp2 x cp2 x pp2 ZeRO-2"), ("rescp8todp2pp2z1", "dp2 x cp2 x pp2 ZeRO-2"),
                    ("res8todp2z3", "dp2 x tp2 x pp2"), ("rescp8todp2pp2z3", "dp2 x cp2 x pp2 ZeRO-2"),
                    ("res8to1v384", "dp2 x tp2 x pp2"), ("resv384to1", "tp2, vocab 384")):
    t = train(run)
    dl = max(rel(a["loss"], b["loss"]) for a, b in zip(t[15:], ref[15:]))
    dp, name = param_diff(run, "r1")
    print(f"{run:<12} {dl:9.2e} {'':>9} {'':>9} {dp:9.2e}  {name}  ({source} step 15 -> {ckpt(run)[1]['layout']})")
    check(dl <= 1e-5, f"{run}: resumed steps 16..30 differ from 1 rank's by {dl:.3e} relative (> 1e-5)")
    check(dp <= 1e-5, f"{run}: step-30 tensor {name} differs from 1 rank's by {dp:.3e} of its max (> 1e-5)")
# same layout: bitwise
a, b = train("restp2pp2"), train("tp2pp2")
diff = [(x["step"], x["loss"], y["loss"], x["grad_norm"], y["grad_norm"]) for x, y in zip(a, b)
        if (x["loss"], x["grad_norm"]) != (y["loss"], y["grad_norm"])]
check(not diff, f"restp2pp2: tp2 x pp2 resumed at 15 is not bitwise its uninterrupted run: {diff[:3]}")
check(val("restp2pp2") == val("tp2pp2"), f"restp2pp2: val losses {val('restp2pp2')} vs {val('tp2pp2')}")
pa, pb = ckpt("restp2pp2")[0], ckpt("tp2pp2")[0]
neq = [k for k in pb if k not in pa or not np.array_equal(pa[k], pb[k])]
check(sorted(pa) == sorted(pb) and not neq, f"restp2pp2: step-30 tensors not bitwise equal: {neq[:5]}")
print(f"{'restp2pp2':<12} bitwise: {'yes' if not diff and not neq else 'NO'} (tp2 x pp2 step 15 -> tp2 x pp2)")

# ---- cairn-eval: the 8-rank checkpoint scores as the 1-rank one
def eval_loss(run):
    rows = [r for r in map(json.loads, open(f"{w}/eval_{run}/eval/results.jsonl"))
            if r["task"] == "val" and r["metric"] == "loss" and r["step"] == 30]
    assert len(rows) == 1, (run, rows)
    return rows[0]["value"]
e1, e8 = eval_loss("r1"), eval_loss("dp2tp2pp2")
de = rel(e8, e1)
print(f"cairn-eval val loss at step 30: 1 rank {e1:.7f}, dp2 x tp2 x pp2 {e8:.7f}, relative difference {de:.2e}")
check(de <= 1e-5, f"cairn-eval: val loss of the 8-rank checkpoint {e8} vs 1 rank's {e1}: {de:.3e} relative (> 1e-5)")

# ---- 5. metrics: tp_comm, cp_comm, pp_wait, mem_gib; the trace of pp2 x v2
runs = ["r1", "l5r1"] + [r for r, _, _ in layouts] + ["res8to1", "res8todp2", "res8totp2pp2", "restp2pp2",
                                                       "res8todp2pp2", "rescp8to1", "rescp8tocp2", "rescp8todp2pp2z1",
                                                       "res8todp2z3", "rescp8todp2pp2z3", "res8to1v384", "resv384to1"]
for run in runs:
    bad = [l["step"] for l in train(run) if not l.get("mem_gib", 0) > 0]
    check(not bad, f"{run}: train lines without mem_gib > 0 at steps {bad}")
    bad = [l["step"] for l in train(run) if not {"tp_comm", "cp_comm", "pp_wait"} <= set(l["time_s"])]
    check(not bad, f"{run}: time_s lacks tp_comm / cp_comm / pp_wait at steps {bad}")
check(any(l["time_s"]["tp_comm"] > 0 for l in train("tp2")), "tp2: time_s.tp_comm is 0 on every step")
check(any(l["time_s"]["pp_wait"] > 0 for l in train("pp2")), "pp2: time_s.pp_wait is 0 on every step")
check(any(l["time_s"]["cp_comm"] > 0 for l in train("cp2")), "cp2: time_s.cp_comm is 0 on every step")
check(all(l["time_s"]["tp_comm"] == 0 and l["time_s"]["cp_comm"] == 0 and l["time_s"]["pp_wait"] == 0
          for l in train("r1")), "r1: 1 rank reports tensor-parallel, context-parallel or pipeline time")
# Pipelined runs: each train line names every stage's busiest rank (Megatron's order: the stage is rank // (tp cp dp))
# with its split, stage 0's at least rank 0's busy time (rank 0 is one of its ranks); runs without stages have none.
pipelined = {"pp2": 1, "pp2v2": 1, "dp2pp2": 2, "tp2pp2": 2, "dp2tp2pp2": 4, "dp2tp2pp2z3": 4, "dp2cp2pp2z2": 4,
             "l5pp2": 1}  # run -> ranks per stage
busy = lambda t: t["forward"] + t["backward"]
for run in ["r1", "l5r1"] + [r for r, _, _ in layouts]:  # one layout from step 1 to 30 (no resumes)
    for l in train(run):
        st = l.get("stages")
        if run not in pipelined:
            check(st is None, f"{run}: step {l['step']} has stages without a pipeline")
            continue
        per = pipelined[run]
        ok = (isinstance(st, list) and [s["stage"] for s in st] == [0, 1]
              and all(s["rank"] // per == s["stage"] for s in st)
              and busy(st[0]["time_s"]) >= busy(l["time_s"]) - 2e-6  # stages are in whole microseconds
              and all(0 <= s["time_s"]["pp_wait"] <= s["time_s"]["total"] for s in st)
              and all(abs(v * 1e6 - round(v * 1e6)) < 1e-3 for s in st for v in s["time_s"].values()))
        check(ok, f"{run}: step {l['step']}: stages {st}")
waits = [max(s["time_s"]["pp_wait"] for s in l["stages"]) for l in train("pp2")]
check(all(x > 0 for x in waits), "pp2: a step whose stages report no pipeline wait")
trace = json.load(open(f"{w}/pp2v2/train/trace.json"))
ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
pids = {e["pid"] for e in ev}
waits = {e["pid"] for e in ev if e["name"] == "pipeline wait"}
check(pids == {0, 1}, f"pp2v2 trace: process rows {sorted(pids)}, expected [0, 1]")
check(waits == {0, 1}, f"pp2v2 trace: 'pipeline wait' events on ranks {sorted(waits)}, expected [0, 1]")
# The tied embedding's sum between the first and last stage is a pipeline wait of its own on the comm row.
tied = {e["pid"] for e in ev if e["name"] == "tied embedding all-reduce" and e.get("tid", 0) != 0}
check(tied == {0, 1}, f"pp2v2 trace: 'tied embedding all-reduce' on the comm rows of ranks {sorted(tied)}, expected [0, 1]")
for n in ("forward", "backward", "optimizer"):
    check(any(e["name"] == n for e in ev), f"pp2v2 trace: no '{n}' event")
print(f"metrics: tp2 max tp_comm {max(l['time_s']['tp_comm'] for l in train('tp2')):.2e} s, pp2 max pp_wait "
      f"{max(l['time_s']['pp_wait'] for l in train('pp2')):.2e} s, mem_gib on every line of {len(runs)} runs, "
      f"pp2v2 trace: {sum(e['name'] == 'pipeline wait' for e in ev)} pipeline waits on ranks {sorted(waits)}")
if failures:
    print("\n".join("FAIL: " + f for f in failures), file=sys.stderr)
    sys.exit(1)
PYEOF

# ---- 3 and 6. impossible layouts: exit 2, a message naming the problem, no metrics.jsonl
# expect2 NAME RANKS "fragment" ARGS...: the fragment is matched as a fixed string
expect2() {
  local name=$1 np=$2 want=$3
  shift 3
  local cmd=("${MPIRUN[@]}" -np "$np" "$BIN/cairn-train" --out "$W/bad_$name" "${MODEL[@]}" "$@")
  local rc=0 err
  err=$("${cmd[@]}" 2>&1 >/dev/null) || rc=$?
  [[ $rc == 2 ]] || fail "$name: expected exit 2, got $rc from: ${cmd[*]}: $err"
  grep -qF -- "$want" <<<"$err" || fail "$name: message lacks '$want': $err"
  [[ ! -e "$W/bad_$name/train/metrics.jsonl" ]] || fail "$name: a rejected layout wrote metrics.jsonl"
  echo "rejected $name: $(grep -m1 -F -- "$want" <<<"$err")"
}
expect2 l5pp2_no_split 2 "give an uneven split explicitly, e.g. [parallel] stage_layers = [" \
  --set model.layers=5 "${PP[@]}"
expect2 tp3_heads4 3 "[model] heads = 4 is not divisible by [parallel] tp = 3" --set model.layers=4 --set parallel.tp=3
expect2 np3_tp2 3 "the 3 MPI ranks are not divisible by [parallel] tp*pp = 2*1" --set model.layers=4 "${TP[@]}"
expect2 v2_3micro 2 "= 6/(1*2) = 3, to be a multiple of [parallel] pp = 2" \
  --set model.layers=4 "${PP[@]}" --set parallel.v=2 --set train.global_batch=6
expect2 sp_odd 2 "sp = on splits micro-batch * [model] seq_len = 1*33 = 33 tokens over [parallel] tp = 2" \
  --set model.layers=4 "${TP[@]}" --set 'parallel.sp="on"' --set train.micro_batch=1 --set model.seq_len=33
expect2 cp2_seq30 2 "[model] seq_len = 30 is not divisible by 2*[parallel] cp = 2*2 = 4" \
  --set model.layers=4 "${CP[@]}" --set model.seq_len=30
expect2 np3_cp2 3 "the 3 MPI ranks are not divisible by [parallel] cp*tp*pp = 2*1*1" --set model.layers=4 "${CP[@]}"
echo "train layouts: all checks passed in $(( SECONDS - T0 )) s"
