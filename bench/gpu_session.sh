#!/usr/bin/env bash
# Every GPU check of issues #3 and #7 in one run on a lent GPU machine, from the bundle scripts/gpu-bundle.sh made
# here (no build there): the gpu tests (per-op and whole-model CUDA parity), cairn-train on CUDA end to end
# (bench/train_gpu_check.sh: GPU vs CPU curves, bf16, checkpoints across backends, cairn-eval on CUDA), the NCCL
# sweep of every collective 8 B..8 GiB on one GPU (#wrong must be 0), then GPT-2 124M training-step tokens/s and
# MFU for cairn (fp32, bf16) and PyTorch (eager bf16, torch.compile bf16; Python runs without the bundle's
# libraries). Phases run in that order while the time budget lasts; each one's output lands in $OUT, and
# results.txt sums them up: every phase is measured or skipped with its reason.
# Preflight (seconds, before any phase): a bundle built at another commit than this tree (or from uncommitted changes)
# is a loud STALE BUNDLE line in results.txt and on stderr; the driver's CUDA version (nvidia-smi) is compared with the
# bundle's runtime (CUDA_RUNTIME, or libcudart's soname for older bundles), and a driver too old for it skips every
# cairn phase at once (status 1) while nvidia-smi and the PyTorch baselines still run. Each cairn phase checks its own
# programs' libraries (ldd): one with unresolved libraries is skipped with their names (status 1), the others run.
# Without a GPU (the rehearsal here) the gpu tests and benchmarks run and skip themselves (exit 77, with the reason),
# the NCCL sweep and calibrate are skipped by the preflight, the PyTorch baselines skip without CUDA.
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
  local why=
  [[ $rc -eq 77 ]] && why=" (skipped: $(grep -m1 -E 'SKIPPED|no usable|cannot run' "$logs/$name.log" | sed 's/^SKIPPED: //' | cut -c1-400))"
  say "PHASE $name rc=$rc$why $((SECONDS - t0))s"
  [[ $rc -eq 0 || $rc -eq 77 ]] || status=1
  return 0
}

work=$(mktemp -d /tmp/cairn-gpu.XXXXXX)
logs=$work/logs
mkdir -p "$logs"
: >"$OUT/session.log"
tar -C "$work" -xJf "$bundle_tar" || { say "cannot unpack $bundle_tar"; exit 1; }
bdir=$work/cairn-gpu-bundle
# shellcheck disable=SC1091
source "$bdir/env.sh"
if [[ -z ${CAIRN_CUDA_LIB_DIRS+set} ]]; then  # a bundle made before env.sh added CUDA's library directories
  # shellcheck source=scripts/gpu-cuda-libs.sh
  source "$root/scripts/gpu-cuda-libs.sh"
  cairn_cuda_lib_path "$bdir/lib"
fi
say "libraries: bundle lib/, then ${CAIRN_CUDA_LIB_DIRS:-no CUDA library directory found}; PyTorch: ${CAIRN_TORCH_PYTHON:-none found}"

# ---- preflight: which build, which driver (seconds)
bundle_sha=$(cat "$bdir/GIT_SHA")
tree_sha=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
say "bundle $bundle_sha $(cat "$bdir/ARCH"); tree ${tree_sha:0:7}"
# the tree's own uncommitted source changes, which no bundle can hold
edits=$(git -C "$root" diff --name-only HEAD -- kernels libcommon tools CMakeLists.txt cmake 2>/dev/null | wc -l)
say_stale() {  # in results.txt and on stderr: the figures below are not this tree's
  say "STALE BUNDLE: $1"
  echo "STALE BUNDLE: $1" >&2
}
if [[ $edits -gt 0 && ${bundle_sha%-dirty} == "$tree_sha" ]]; then
  say_stale "built at ${bundle_sha:0:12}, but this tree has $edits uncommitted source file(s) (git diff HEAD -- kernels libcommon tools) that it cannot hold"
fi
if [[ ${bundle_sha%-dirty} != "$tree_sha" || $bundle_sha == *-dirty ]]; then
  apart=$(git -C "$root" rev-list --count "${bundle_sha%-dirty}..HEAD" 2>/dev/null || echo "an unknown number of")
  say_stale "built at ${bundle_sha:0:12}$([[ $bundle_sha == *-dirty ]] && echo ' from uncommitted changes'), this tree is at ${tree_sha:0:12} ($apart commits later): cairn's figures below are that build's, not this tree's; rebuild with scripts/gpu-bundle.sh"
fi
# The CUDA runtime the bundle links: recorded by gpu-bundle.sh, else the major version of libcudart's soname.
runtime=$(cat "$bdir/CUDA_RUNTIME" 2>/dev/null)
if [[ -z $runtime ]]; then
  runtime=$(ldd "$CAIRN_BUNDLE_TESTS/kernels_cuda" 2>/dev/null | grep -o 'libcudart\.so\.[0-9]*' | head -1 | sed 's/.*\.so\.//')
  runtime=${runtime:+$runtime.x (libcudart.so.$runtime; the bundle has no CUDA_RUNTIME)}
fi
cairn_stop=  # set: every cairn phase is skipped with this reason
no_gpu=      # set: no NVIDIA driver or GPU (the rehearsal): phases that cannot skip themselves are skipped with it
if ! command -v nvidia-smi >/dev/null 2>&1; then
  no_gpu="no GPU: nvidia-smi not found (no NVIDIA driver on this machine)"
  say "preflight: $no_gpu; bundle's CUDA runtime ${runtime:-unknown}"
elif ! gpus=$(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1) \
     || [[ -z $gpus ]]; then
  no_gpu="no GPU: nvidia-smi lists none ($(head -1 <<<"$gpus"))"
  say "preflight: $no_gpu"
else
  say "$gpus"
  driver_cuda=$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: *[0-9.]*' | head -1 | grep -o '[0-9.]*$')
  say "preflight: the driver supports CUDA ${driver_cuda:-unknown (nvidia-smi printed no CUDA Version)}, the bundle's runtime is CUDA ${runtime:-unknown}"
  # CUDA's minor version compatibility: a driver runs any runtime of its own major version, not a newer major
  if [[ -n $driver_cuda && -n $runtime && ${driver_cuda%%.*} -lt ${runtime%%.*} ]]; then
    cairn_stop="the driver's CUDA $driver_cuda is older than the bundle's CUDA runtime $runtime (update the driver, or build the bundle with CUDA ${driver_cuda%%.*}.x)"
    say "PREFLIGHT FAILED: $cairn_stop; cairn's phases are skipped"
    echo "gpu_session: $cairn_stop" >&2
    status=1
  fi
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}

# cairn_phase NAME ESTIMATE_S TIMEOUT_S "PROGRAMS" command...: a phase of cairn's bundle, skipped with the reason when
# the preflight stopped cairn's phases, or when PROGRAMS (space-separated paths) have unresolved libraries (ldd:
# status 1, the other phases still run)
cairn_phase() {
  local name=$1 estimate=$2 limit=$3 programs=$4 f missing=
  shift 4
  if [[ -n $cairn_stop ]]; then
    say "PHASE $name skipped: $cairn_stop"
    return 0
  fi
  for f in $programs; do
    local m
    [[ -x $f ]] || { missing+="$(basename "$f"): not in the bundle; "; continue; }
    m=$(ldd "$f" 2>&1 | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
    [[ -n $m ]] && missing+="$(basename "$f"): unresolved ${m% }; "
  done
  if [[ -n $missing ]]; then
    say "PHASE $name skipped: cannot load (${missing%; })"
    status=1
    return 0
  fi
  phase "$name" "$estimate" "$limit" "$@"
}
# torch_phase NAME ESTIMATE_S TIMEOUT_S args...: a PyTorch baseline (kernels_gpu_torch_bench.py), run by the Python
# that has PyTorch, without the bundle's libraries
torch_phase() {
  local name=$1 estimate=$2 limit=$3
  shift 3
  if [[ -z $CAIRN_TORCH_PYTHON ]]; then
    say "PHASE $name skipped: no Python with PyTorch (tried \$PYTHON, python3, /usr/bin/python3, /usr/local/bin/python3)"
    return 0
  fi
  phase "$name" "$estimate" "$limit" env -u LD_LIBRARY_PATH "$CAIRN_TORCH_PYTHON" "$root/bench/kernels_gpu_torch_bench.py" "$@"
}
# cairn_gpu_phase WHY NAME ...: a cairn phase that cannot skip itself without a GPU (it exits 2, not 77): skipped with
# the preflight's reason where there is none, else cairn_phase NAME ...
cairn_gpu_phase() {
  local why=$1
  shift
  if [[ -n $no_gpu && -z $cairn_stop ]]; then
    say "PHASE $1 skipped: $no_gpu ($why)"
    return 0
  fi
  cairn_phase "$@"
}
T=$CAIRN_BUNDLE_TESTS B=$CAIRN_BUNDLE_BIN

# ---- correctness first
cairn_phase kernels_cuda 20 120 "$T/kernels_cuda" "$T/kernels_cuda"
cairn_phase gpt_cuda 30 180 "$T/gpt_cuda" "$T/gpt_cuda"
# (also its parallel-layout part: on 1 GPU accumulation, ZeRO-3 at dp1 and the refusal of 2 ranks on one GPU via the
# bundle's mpirun, ~4 more short runs; with >= 2 GPUs tp2, pp2, tp2 + sp, ZeRO-3 dp2 over NCCL. SKIPPED lines say
# what one GPU cannot show.)
cairn_phase train_cuda 110 360 "$B/cairn-train $B/cairn-reshard $B/cairn-eval $B/mpirun" \
  env PY=python3 FORTUNES_DIR="$CAIRN_BUNDLE_DATA" bash "$root/bench/train_gpu_check.sh" "$CAIRN_BUNDLE_BIN"
grep -E 'max relative|eval val loss|peak_mem|tp_comm|GPUs visible|SKIPPED|refused|FAIL' "$logs/train_cuda.log" \
  >>"$results" 2>/dev/null
# The NCCL sweep on one GPU: every collective, float32 sum, nccl-tests' defaults otherwise; #wrong must be 0.
cairn_gpu_phase "cairn-sweep --backend nccl needs one" sweep_nccl 90 240 "$B/cairn-sweep" "$B/cairn-sweep" \
  --backend nccl --out "$work/sweep" all -b 8 -e "$SWEEP_MAX" -f 2 -n 20 -w 5 -c 1 --json "$OUT/sweep_nccl.json"
grep -E '^# (Collective test starting|Out of bounds|Avg bus bandwidth|Fit)' "$logs/sweep_nccl.log" >>"$results" 2>/dev/null

# ---- speed: attention alone (fp32 flash, simple, bf16 tensor-core flash; GPT-2 shape, batch 8), then
# GPT-2 124M (12 layers, hidden 768, 12 heads, seq 1024, vocab 50304)
cairn_phase attention_bench 20 120 "$T/kernels_gpu_gpt_bench" "$T/kernels_gpu_gpt_bench" --hidden 768 --heads 12 \
  --seq 1024 --batch 8 --steps 10 --attention-bench 1
grep -h '^RESULT' "$logs/attention_bench.log" >>"$results" 2>/dev/null
model=(--layers 12 --hidden 768 --heads 12 --seq 1024 --vocab 50304 --steps "$STEPS")
cairn_phase gpt2_cairn_bf16 60 180 "$T/kernels_gpu_gpt_bench" "$T/kernels_gpu_gpt_bench" "${model[@]}" \
  --max-batch "$MAX_B" --bf16 1
torch_phase gpt2_torch_eager_bf16 60 180 --mode eager --dtype bf16 "${model[@]}" --max-batch "$MAX_B"
cairn_phase gpt2_cairn_fp32 60 180 "$T/kernels_gpu_gpt_bench" "$T/kernels_gpu_gpt_bench" "${model[@]}" \
  --max-batch "$MAX_B" --bf16 0
[[ $TORCH_COMPILE == 1 ]] && torch_phase gpt2_torch_compile_bf16 120 240 --mode compile --dtype bf16 "${model[@]}" \
  --max-batch "$MAX_B"
grep -h '^RESULT' "$logs"/gpt2_*.log >>"$results" 2>/dev/null

# ---- the cost model's calibration of this GPU (#16): cuBLAS bf16 and cuBLASLt FP8 (E4M3) GEMMs at Llama 2 7B's
# shapes for TP 1-8, squares and K = 64 panels, and HBM bandwidth, into the cluster file cairn-plan reads.
cairn_gpu_phase "calibrate --device gpu measures one" plan_calibrate 40 150 "$B/cairn-plan" "$B/cairn-plan" calibrate \
  --device gpu --config "$root/configs/models/llama2-7b.toml" --config "$root/configs/clusters/h200.toml" \
  --seconds 0.05 --output "$OUT/cluster-calibrated.toml" --out "$work/plan"
grep -E '^(peak_tflops|peak_fp8_tflops|gemm_max_efficiency|fp8_gemm_max_efficiency|hbm_gbps) ' \
  "$OUT/cluster-calibrated.toml" >>"$results" 2>/dev/null

say "session: $((SECONDS - start)) s, status $status"
echo "== results"
cat "$results"
rm -rf "$work"
exit $status
