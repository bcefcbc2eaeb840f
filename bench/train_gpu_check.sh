#!/usr/bin/env bash
# cairn-train on the CUDA backend, end to end (needs a full build with -DCAIRN_CUDA=ON; exit 77 where no GPU is
# usable, so ctest can register it with SKIP_RETURN_CODE 77 and label gpu):
#   1. backend = "cuda" where it cannot run: exit 2 with the reason (checked on machines without a GPU too);
#   2. 1 GPU vs 1 CPU rank: same loss curve within 1e-4 relative per step over 30 steps (fp32, other summation
#      orders compound through AdamW), metrics carry peak_mem_gib; precision = "bf16" with recompute = "gelu"
#      within 3e-2 of the fp32 GPU curve;
#   3. a CPU checkpoint resumes on the GPU and a GPU checkpoint on the CPU (same HDF5 files);
#   4. with >= 2 GPUs: 2 ranks over NCCL (micro-batch halved) and 2 ranks with ZeRO-1 reproduce the 1-GPU curve
#      within 1e-4;
#   5. cairn-eval on the CUDA backend scores the GPU run's last checkpoint like the CPU backend: loss within 1e-5
#      relative, token accuracy (argmax on the device) equal up to near-ties.
#   6. parallel layouts (lr 1e-3, Adam eps 1e-5, fp32, 20 steps, against a 1-GPU run of the same settings):
#      with >= 2 GPUs, tp2 (tensor-parallel collectives over NCCL: NCCL must have started), pp2 and pp2 x v2
#      (pipeline messages over NCCL channels; v2 against a 4-layer 1-GPU run), tp2 + sp, ZeRO-2 and ZeRO-3 dp2, cp2 by
#      ring and by all-gather (and tp2 x pp2, dp2 x tp2, dp2 x pp2 ZeRO-3 with >= 4 GPUs) within 1e-4 relative per
#      step, tp runs reporting time_s.tp_comm > 0;
#      with exactly 1 GPU no layout can split anything (tp/pp/dp need one rank per GPU), so: gradient accumulation
#      (micro-batch 2, 4 micro-steps) within 1e-4, ZeRO-3 at dp1 (a no-op) equal to the plain run (1e-6), and two
#      ranks asking for tp2 on the one GPU refused with exit 2 by the one-GPU-per-rank rule. What cannot run is
#      printed as a SKIPPED line with the reason. Multi-rank runs need mpirun: BIN_DIR/mpirun (the GPU bundle's) or
#      the one on PATH, or env MPIRUN.
# Usage: bench/train_gpu_check.sh BIN_DIR   (the build's bin/ with cairn-train, cairn-reshard and cairn-eval)
#   env: PY (python3 with json only), FORTUNES_DIR (default /usr/share/games/fortunes), MPIRUN (mpirun to use)
set -euo pipefail
BIN=${1:-${CAIRN_BIN_DIR:?usage: train_gpu_check.sh BIN_DIR}}
PY=${PY:-$(command -v python3 || echo /usr/bin/python3)}
W=$(mktemp -d /tmp/cairn_train_gpu.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
F=${FORTUNES_DIR:-/usr/share/games/fortunes}

"$BIN/cairn-reshard" --log-level warn --out "$W/ds" --set 'data.delimiter="%"' --set data.shards=2 \
  build "$F/fortunes" "$F/science"
BASE=(--data "$W/ds" --threads 1 --log-level warn --set model.layers=2 --set model.hidden=64 --set model.heads=4
      --set model.seq_len=64 --set train.global_batch=8 --set train.warmup=5
      --set train.checkpoint_every=15 --set train.val_every=0 --set train.spike_zscore=0)
MODEL=("${BASE[@]}" --set train.lr=0.003)
# The layout runs (6.): tests/train/layouts.sh's lr and eps, which keep the rounding noise of other summation orders
# well below the tolerance (Adam turns noise in near-zero gradients into lr-sized steps), fp32, 20 steps.
LAY=("${BASE[@]}" --set train.lr=0.001 --set train.eps=1e-5 --steps 20 --backend cuda)
# mpirun: the bundle's (relocated Open MPI, see scripts/gpu-bundle.sh), else PATH's; none: multi-rank runs skip.
if [[ -z ${MPIRUN:-} ]]; then
  if [[ -x $BIN/mpirun ]]; then MPIRUN=$BIN/mpirun; else MPIRUN=$(command -v mpirun || true); fi
fi
skip() { echo "SKIPPED: $*"; }

# ---- 1. unavailable backend: a usage error (exit 2) naming the reason, nothing trained; a GPU whose driver fails
# exits 1 (a failure here, never a skip)
set +e
err=$("$BIN/cairn-train" --out "$W/probe" "${MODEL[@]}" --steps 1 --backend cuda 2>&1 >/dev/null)
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
  [[ $rc -eq 2 ]] || fail "backend cuda unavailable should exit 2, got $rc: $err"
  grep -q 'backend' <<<"$err" || fail "no reason given: $err"
  echo "SKIPPED: backend cuda cannot run here (exit 2 checked): $err"
  exit 77
fi
rm -rf "$W/probe"

# ---- 2. GPU vs CPU, one rank
"$BIN/cairn-train" --out "$W/cpu" "${MODEL[@]}" --steps 30 --backend cpu
"$BIN/cairn-train" --out "$W/gpu" "${MODEL[@]}" --steps 30 --backend cuda
"$BIN/cairn-train" --out "$W/gpub" "${MODEL[@]}" --steps 30 --backend cuda --set 'train.precision="bf16"' \
  --set 'train.recompute="gelu"'
# ---- 3. checkpoints cross over: CPU step 15 -> GPU to 30, GPU step 15 -> CPU to 30
mkdir -p "$W/c2g/train/ckpt" "$W/g2c/train/ckpt"
cp -r "$W/cpu/train/ckpt/step_00000015" "$W/c2g/train/ckpt/"
cp -r "$W/gpu/train/ckpt/step_00000015" "$W/g2c/train/ckpt/"
"$BIN/cairn-train" --out "$W/c2g" "${MODEL[@]}" --steps 30 --backend cuda
"$BIN/cairn-train" --out "$W/g2c" "${MODEL[@]}" --steps 30 --backend cpu
# ---- 4. NCCL data parallel (needs two GPUs)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "GPUs visible: $ngpu; mpirun: ${MPIRUN:-none}"
if [[ $ngpu -ge 2 && -n $MPIRUN ]]; then
  timeout 300 "$MPIRUN" -np 2 --oversubscribe "$BIN/cairn-train" --out "$W/gpu2" "${MODEL[@]}" --steps 30 \
    --backend cuda --set train.micro_batch=4
  timeout 300 "$MPIRUN" -np 2 --oversubscribe "$BIN/cairn-train" --out "$W/gpu2z" "${MODEL[@]}" --steps 30 \
    --backend cuda --set train.micro_batch=4 --set parallel.zero=1
elif [[ $ngpu -ge 2 ]]; then
  skip "4. NCCL data parallel: no mpirun (set MPIRUN)"
else
  skip "4. NCCL data parallel: $ngpu GPU(s), needs 2 (one rank per GPU)"
fi

# ---- 6. parallel layouts against one GPU with the same settings
# lay NAME RANKS ARGS...: one run into $W/NAME, its whole output (NCCL_DEBUG=INFO) in $W/NAME.log
lay() {
  local name=$1 np=$2
  shift 2
  local cmd=("$BIN/cairn-train" --out "$W/$name" "${LAY[@]}" "$@")
  [[ $np == 1 ]] || cmd=(timeout 300 "$MPIRUN" -np "$np" --oversubscribe "${cmd[@]}")
  local rc=0
  NCCL_DEBUG=INFO "${cmd[@]}" >"$W/$name.log" 2>&1 || rc=$?
  [[ $rc == 0 ]] || { tail -30 "$W/$name.log" >&2; fail "$name: exited $rc: ${cmd[*]}"; }
}
lay lay1 1
if [[ $ngpu -ge 2 && -n $MPIRUN ]]; then
  lay tp2 2 --set parallel.tp=2
  lay pp2 2 --set parallel.pp=2 --set train.micro_batch=2  # 4 micro-batches through the 1F1B schedule
  lay tp2sp 2 --set parallel.tp=2 --set 'parallel.sp="on"'
  lay z3dp2 2 --set train.micro_batch=4 --set parallel.zero=3
  lay z2dp2 2 --set train.micro_batch=4 --set parallel.zero=2
  # interleaved 1F1B: both directions between the two ranks, each over its own NCCL channel (4 layers: pp x v)
  lay lay1l4 1 --set model.layers=4
  lay pp2v2 2 --set model.layers=4 --set parallel.pp=2 --set parallel.v=2 --set train.micro_batch=2
  # context parallelism: K/V around a ring (ncclSend/ncclRecv) and all-gathered (ncclAllGather/ReduceScatter)
  lay cp2 2 --set parallel.cp=2
  lay cp2ag 2 --set parallel.cp=2 --set 'parallel.cp_comm="allgather"'
  # The TP collectives must go over NCCL (a dp1 layout has no other NCCL communicator), not through host memory.
  for run in tp2 tp2sp; do
    grep -q 'NCCL INFO' "$W/$run.log" || fail "$run: no NCCL communicator was started (tensor parallelism over MPI?)"
  done
  if [[ $ngpu -ge 4 ]]; then
    lay tp2pp2 4 --set parallel.tp=2 --set parallel.pp=2 --set train.micro_batch=2
    # two NCCL communicators per rank (data-parallel buckets on their stream, TP collectives on theirs) at once
    lay dp2tp2 4 --set parallel.tp=2 --set train.micro_batch=4
    # ZeRO-3 with a pipeline: the data-parallel communicator, the pipeline channels and the embedding group at once
    lay dp2pp2z3 4 --set parallel.pp=2 --set parallel.zero=3 --set train.micro_batch=2
  else
    skip "6. tp2 x pp2, dp2 x tp2: $ngpu GPUs, need 4"
  fi
else
  if [[ $ngpu -ge 2 ]]; then
    skip "6. tp2, pp2, tp2 + sp, ZeRO-3 dp2: no mpirun (set MPIRUN)"
  else
    skip "6. tp2, pp2, tp2 + sp, ZeRO-3 dp2 (NCCL tensor-parallel collectives untested): 1 GPU, each needs 2 ranks" \
      "on 2 GPUs (one GPU per rank); running what one GPU can show instead"
  fi
  lay acc4 1 --set train.micro_batch=2
  lay z3dp1 1 --set parallel.zero=3
  if [[ -n $MPIRUN ]]; then
    # Two ranks on the one GPU: refused (exit 2) by the binding rule before anything is trained.
    set +e
    err=$(timeout 120 "$MPIRUN" -np 2 --oversubscribe "$BIN/cairn-train" --out "$W/share" "${LAY[@]}" \
      --set parallel.tp=2 2>&1 >/dev/null)
    rc=$?
    set -e
    [[ $rc -eq 2 ]] || fail "2 ranks on 1 GPU: expected exit 2, got $rc: $err"
    grep -q 'would share GPU' <<<"$err" || fail "2 ranks on 1 GPU: no reason given: $err"
    echo "2 ranks on 1 GPU with tp2: refused with exit 2 ($(grep -m1 -o 'ranks [0-9]* and [0-9]* would share GPU' <<<"$err"))"
  else
    skip "6. 2 ranks on 1 GPU refused: no mpirun (set MPIRUN)"
  fi
fi

# ---- 5. cairn-eval on the GPU vs the CPU, the GPU run's step-30 checkpoint
for be in cpu cuda; do
  "$BIN/cairn-eval" --out "$W/gpu" --data "$W/ds" --log-level warn --threads 1 --backend "$be" --tasks val \
    --reevaluate "$W/gpu/train/ckpt/step_00000030" >/dev/null
  mv "$W/gpu/eval/results.jsonl" "$W/eval_$be.jsonl"
done

"$PY" - "$W" <<'PYEOF'
import json, os, sys
w = sys.argv[1]
def lines(run):
    return [json.loads(l) for l in open(f"{w}/{run}/train/metrics.jsonl") if '"train"' in l]
def losses(run):
    return [l["loss"] for l in lines(run)]
def worst(a, b):
    assert len(a) == len(b), (len(a), len(b))
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))
cpu, gpu = losses("cpu"), losses("gpu")
print(f"gpu vs cpu, 30 steps: max relative loss difference {worst(gpu, cpu):.2e}")
assert worst(gpu, cpu) <= 1e-4
assert cpu[-1] < cpu[0] - 0.5, ("loss did not fall", cpu[0], cpu[-1])
g = lines("gpu")[-1]
assert g["peak_mem_gib"] > 0 and g["device_mem_gib"] >= g["peak_mem_gib"], g
assert "peak_mem_gib" not in lines("cpu")[-1]
print(f"gpu peak_mem_gib {g['peak_mem_gib']:.4f}, device_mem_gib {g['device_mem_gib']:.3f}, mfu {g['mfu']:.4f}")
bf = losses("gpub")
print(f"bf16 GEMMs + GELU recompute vs fp32 on the GPU: max relative loss difference {worst(bf, gpu):.2e}")
assert worst(bf, gpu) <= 3e-2 and bf[-1] < bf[0] - 0.5
for run, ref in (("c2g", cpu), ("g2c", gpu)):
    got = losses(run)  # steps 16..30 after resuming from the other backend's step-15 checkpoint
    print(f"{run}: steps 16..30 vs the straight run: max relative difference {worst(got, ref[15:]):.2e}")
    assert worst(got, ref[15:]) <= 1e-4, run
for run in ("gpu2", "gpu2z"):
    if os.path.exists(f"{w}/{run}"):
        print(f"{run}: 2 ranks NCCL vs 1 GPU: max relative difference {worst(losses(run), gpu):.2e}")
        assert worst(losses(run), gpu) <= 1e-4, run
lay1 = losses("lay1")
assert len(lay1) == 20 and lay1[-1] < lay1[0] - 0.5, ("layout reference did not learn", lay1)
refs = {"lay1": lay1}
if os.path.exists(f"{w}/lay1l4"):
    refs["lay1l4"] = losses("lay1l4")
for run, tol, what in (("tp2", 1e-4, "tp2 on 2 GPUs"), ("pp2", 1e-4, "pp2 on 2 GPUs"),
                       ("tp2sp", 1e-4, "tp2 + sp on 2 GPUs"), ("z3dp2", 1e-4, "ZeRO-3 dp2 on 2 GPUs"),
                       ("z2dp2", 1e-4, "ZeRO-2 dp2 on 2 GPUs"), ("pp2v2", 1e-4, "pp2 x v2 on 2 GPUs (4 layers)"),
                       ("tp2pp2", 1e-4, "tp2 x pp2 on 4 GPUs"), ("dp2tp2", 1e-4, "dp2 x tp2 on 4 GPUs"),
                       ("dp2pp2z3", 1e-4, "dp2 x pp2 ZeRO-3 on 4 GPUs"),
                       ("cp2", 1e-4, "cp2 (ring) on 2 GPUs"), ("cp2ag", 1e-4, "cp2 (all-gather) on 2 GPUs"),
                       ("acc4", 1e-4, "1 GPU, 4 micro-batches of 2"),
                       ("z3dp1", 1e-6, "1 GPU, ZeRO-3 at dp1 (no-op)")):
    if not os.path.exists(f"{w}/{run}"):
        continue
    d = worst(losses(run), refs["lay1l4" if run == "pp2v2" else "lay1"])
    print(f"{run}: {what} vs 1 GPU, 20 steps: max relative difference {d:.2e} (limit {tol:.0e})")
    assert d <= tol, run
    for key in ("tp_comm", "cp_comm"):
        if key[:2] in run:
            t = [l["time_s"].get(key, 0) for l in lines(run)]
            print(f"{run}: time_s.{key} mean {sum(t) / len(t) * 1e3:.3f} ms per step")
            assert any(x > 0 for x in t), (run, f"time_s.{key} is 0 on every step")
ev = {be: {r["metric"]: r["value"] for r in map(json.loads, open(f"{w}/eval_{be}.jsonl"))} for be in ("cpu", "cuda")}
print(f"eval val loss cpu {ev['cpu']['loss']:.6f} cuda {ev['cuda']['loss']:.6f}; "
      f"accuracy cpu {ev['cpu']['accuracy']:.5f} cuda {ev['cuda']['accuracy']:.5f}")
assert abs(ev["cuda"]["loss"] - ev["cpu"]["loss"]) <= 1e-5 * abs(ev["cpu"]["loss"]), ev
assert abs(ev["cuda"]["accuracy"] - ev["cpu"]["accuracy"]) <= 0.002, ev
PYEOF
echo "train_gpu_check: OK"
