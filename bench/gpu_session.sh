#!/usr/bin/env bash
# Every GPU check of issues #3 and #7 in one run on a lent GPU machine, from the bundle scripts/gpu-bundle.sh made
# here (no build there): the gpu tests (per-op and whole-model CUDA parity), cairn-train on CUDA end to end
# (bench/train_gpu_check.sh: GPU vs CPU curves, bf16, checkpoints across backends, cairn-eval on CUDA), the NCCL
# sweep of every collective 8 B..8 GiB on one GPU (#wrong must be 0), then GPT-2 124M training-step tokens/s and
# MFU for cairn (fp32, bf16) and PyTorch (eager bf16, torch.compile bf16; Python runs without the bundle's
# libraries). Phases run in that order while the time budget lasts; each one's output lands in $OUT, and
# results.txt sums them up. Rehearsed on a machine without a GPU (every phase then skips or exits 2).
# $OUT gets four files (the device tool returns at most eight): results.txt, session.log (every phase's whole
# output, in order), sweep_nccl.json and cluster-calibrated.toml (cairn-plan calibrate on the GPU).
# Usage, from the device tool (carry .gpu-carry):
#   bash bench/gpu_session.sh [.gpu-carry/cairn-gpu-bundle.tar.xz]
#   env: OUT (result folder, default ./gpu-session-out), BUDGET_S (default 480), MAX_B (GPT-2 micro-batch cap, 32),
#        STEPS (timed GPT-2 steps, 5), SWEEP_MAX (default 8G), TORCH_COMPILE (1 = also torch.compile bf16)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bundle_tar=${1:-$root/.gpu-carry/cairn-gpu-bundle.tar.xz}
OUT=${OUT:-$root/gpu-session-out}
BUDGET_S=${BUDGET_S:-480}
MAX_B=${MAX_B:-32}
STEPS=${STEPS:-5}
SWEEP_MAX=${SWEEP_MAX:-8G}
TORCH_COMPILE=${TORCH_COMPILE:-1}
mkdir -p "$OUT"
results=$OUT/results.txt
: >"$results"
start=$SECONDS
status=0
say() { echo "$*" | tee -a "$results"; }
left() { echo $((BUDGET_S - (SECONDS - start))); }
# phase NAME ESTIMATE_S TIMEOUT_S command...: runs when the estimate still fits the budget; output to $logs/NAME.log,
# then appended to $OUT/session.log
phase() {
  local name=$1 estimate=$2 limit=$3
  shift 3
  if [[ $(left) -lt $estimate ]]; then
    say "PHASE $name skipped: $(left) s of the budget left, needs ~$estimate s"
    return 0
  fi
  echo "== $name (timeout $limit s, $(left) s of the budget left)"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  tail -25 "$logs/$name.log"
  { echo "==== $name (rc $rc)"; cat "$logs/$name.log"; } >>"$OUT/session.log"
  say "PHASE $name rc=$rc$([[ $rc -eq 77 ]] && echo ' (skipped: no usable GPU)') $((SECONDS - t0))s"
  [[ $rc -eq 0 || $rc -eq 77 ]] || status=1
  return 0
}

work=$(mktemp -d /tmp/cairn-gpu.XXXXXX)
logs=$work/logs
mkdir -p "$logs"
: >"$OUT/session.log"
tar -C "$work" -xJf "$bundle_tar" || { say "cannot unpack $bundle_tar"; exit 1; }
# shellcheck disable=SC1091
source "$work/cairn-gpu-bundle/env.sh"
say "bundle $(cat "$work/cairn-gpu-bundle/GIT_SHA") $(cat "$work/cairn-gpu-bundle/ARCH"); tree $(git -C "$root" rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$results"
missing=$(for f in "$CAIRN_BUNDLE_BIN"/* "$CAIRN_BUNDLE_TESTS"/*; do ldd "$f" | grep 'not found'; done | sort -u)
[[ -z $missing ]] || { say "libraries missing: $missing"; exit 1; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}

# ---- correctness first
phase kernels_cuda 20 120 "$CAIRN_BUNDLE_TESTS/kernels_cuda"
phase gpt_cuda 30 180 "$CAIRN_BUNDLE_TESTS/gpt_cuda"
# (also its parallel-layout part: on 1 GPU accumulation, ZeRO-3 at dp1 and the refusal of 2 ranks on one GPU via the
# bundle's mpirun, ~4 more short runs; with >= 2 GPUs tp2, pp2, tp2 + sp, ZeRO-3 dp2 over NCCL. SKIPPED lines say
# what one GPU cannot show.)
phase train_cuda 110 360 env PY=python3 FORTUNES_DIR="$CAIRN_BUNDLE_DATA" bash "$root/bench/train_gpu_check.sh" "$CAIRN_BUNDLE_BIN"
grep -E 'max relative|eval val loss|peak_mem|tp_comm|GPUs visible|SKIPPED|refused|FAIL' "$logs/train_cuda.log" \
  >>"$results" 2>/dev/null
# The NCCL sweep on one GPU: every collective, float32 sum, nccl-tests' defaults otherwise; #wrong must be 0.
phase sweep_nccl 90 240 "$CAIRN_BUNDLE_BIN/cairn-sweep" --backend nccl --out "$work/sweep" all -b 8 -e "$SWEEP_MAX" -f 2 \
  -n 20 -w 5 -c 1 --json "$OUT/sweep_nccl.json"
grep -E '^# (Collective test starting|Out of bounds|Avg bus bandwidth|Fit)' "$logs/sweep_nccl.log" >>"$results" 2>/dev/null

# ---- speed: attention alone (fp32 flash, simple, bf16 tensor-core flash; GPT-2 shape, batch 8), then
# GPT-2 124M (12 layers, hidden 768, 12 heads, seq 1024, vocab 50304)
phase attention_bench 20 120 "$CAIRN_BUNDLE_TESTS/kernels_gpu_gpt_bench" --hidden 768 --heads 12 --seq 1024 --batch 8 \
  --steps 10 --attention-bench 1
grep -h '^RESULT' "$logs/attention_bench.log" >>"$results" 2>/dev/null
model=(--layers 12 --hidden 768 --heads 12 --seq 1024 --vocab 50304 --steps "$STEPS")
phase gpt2_cairn_bf16 60 180 "$CAIRN_BUNDLE_TESTS/kernels_gpu_gpt_bench" "${model[@]}" --max-batch "$MAX_B" --bf16 1
phase gpt2_torch_eager_bf16 60 180 env -u LD_LIBRARY_PATH python3 "$root/bench/kernels_gpu_torch_bench.py" --mode eager --dtype bf16 \
  "${model[@]}" --max-batch "$MAX_B"
phase gpt2_cairn_fp32 60 180 "$CAIRN_BUNDLE_TESTS/kernels_gpu_gpt_bench" "${model[@]}" --max-batch "$MAX_B" --bf16 0
[[ $TORCH_COMPILE == 1 ]] && phase gpt2_torch_compile_bf16 120 240 env -u LD_LIBRARY_PATH python3 "$root/bench/kernels_gpu_torch_bench.py" \
  --mode compile --dtype bf16 "${model[@]}" --max-batch "$MAX_B"
grep -h '^RESULT' "$logs"/gpt2_*.log >>"$results" 2>/dev/null

# ---- the cost model's calibration of this GPU (#16): cuBLAS bf16 and cuBLASLt FP8 (E4M3) GEMMs at Llama 2 7B's
# shapes for TP 1-8, squares and K = 64 panels, and HBM bandwidth, into the cluster file cairn-plan reads.
phase plan_calibrate 40 150 "$CAIRN_BUNDLE_BIN/cairn-plan" calibrate --device gpu --config "$root/configs/models/llama2-7b.toml" \
  --config "$root/configs/clusters/h200.toml" --seconds 0.05 --output "$OUT/cluster-calibrated.toml" --out "$work/plan"
grep -E '^(peak_tflops|peak_fp8_tflops|gemm_max_efficiency|fp8_gemm_max_efficiency|hbm_gbps) ' \
  "$OUT/cluster-calibrated.toml" >>"$results" 2>/dev/null

say "session: $((SECONDS - start)) s, status $status"
echo "== results"
cat "$results"
rm -rf "$work"
exit $status
