#!/bin/bash
# GPU check (issue 7), one script for a machine with a GPU: builds the CUDA backend, runs the gpu-labelled tests
# (per-op and whole-model parity vs the CPU), then measures GPT-2 124M (12 layers, hidden 768, 12 heads, seq 1024,
# vocab 50304) training-step tokens/s, MFU and peak memory at the largest micro-batch that fits, for cairn's CUDA
# backend (fp32, and bf16 GEMMs) and for the machine's PyTorch (eager and torch.compile, fp32 and bf16 autocast).
#
# Build: with CMake when the kernels-only configure works (-DCAIRN_KERNELS_ONLY=ON: needs OpenBLAS and Boost.Test);
# otherwise (a GPU image with CUDA, CMake and PyTorch but none of our Debian libraries) nvcc/g++ directly, with
# bench/gpu_shims/ standing in for Boost.Test (the few macros the gpu tests use) and for cblas_sgemm.
# Usage: bench/kernels_gpu_bench.sh [work dir]
#   env: ARCH=90 (sm_), MAX_B=64 (micro-batch cap), STEPS=5, PYTHON=python3, SKIP_TORCH=1,
#        TORCH_COMPILE=0|1|2 (torch.compile: none, bf16, bf16 and fp32), OUT=dir (gets kernels_gpu_bench.log and
#        results.txt), FORCE_DIRECT=1 (skip CMake), SHIM_BOOST=1 (Boost.Test stand-in even where Boost exists)
#        ATTN_SIMPLE=1 (also run the GPT-2 step with the simple attention kernels: CAIRN_CUDA_ATTENTION=simple)
# Device time: about 2 min build, 1 min tests, 20 s attention kernels, 1-2 min per cairn run, 1-3 min per PyTorch mode.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$root/build-gpu-bench}
ARCH=${ARCH:-90}
MAX_B=${MAX_B:-64}
STEPS=${STEPS:-5}
PYTHON=${PYTHON:-python3}
mkdir -p "$work"
out=${OUT:-$work}
mkdir -p "$out"
exec > >(tee "$out/kernels_gpu_bench.log") 2>&1
results=$out/results.txt
: > "$results"
status=0
note() { echo "== $*"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
"$NVCC" --version | tail -1
jobs=$(nproc)

# ---------------------------------------------------------------- build
tests=()
if [[ ${FORCE_DIRECT:-0} != 1 ]] && cmake -S "$root" -B "$work/cmake" -DCAIRN_KERNELS_ONLY=ON -DCAIRN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
     -DCMAKE_BUILD_TYPE=Release >"$work/cmake-configure.log" 2>&1; then
  note "build: CMake kernels-only"
  cmake --build "$work/cmake" -j"$jobs" --target kernels_cuda gpt_cuda kernels_ops kernels_flash_emulation \
    kernels_flash_bf16_emulation || exit 1
  ctest_dir=$work/cmake
else
  why=$(grep -m1 -iE 'could not find|not found|error' "$work/cmake-configure.log" 2>/dev/null || echo "FORCE_DIRECT=1")
  note "build: no CMake kernels-only build ($why); building with nvcc/g++ directly"
  ctest_dir=
fi

# Direct build: the kernels, the GPT model, the gpu tests and the flash-attention emulation test (shimmed Boost.Test
# when Boost is missing) and the benchmark.
d=$work/direct
mkdir -p "$d"
CXX=${CXX:-g++}
inc=(-I"$root/kernels/include" -I"$root/libcommon/include" -I"$CUDA_HOME/include")
cxxflags=(-O3 -std=c++20 -fopenmp -DCAIRN_HAVE_CUDA_BACKEND "${inc[@]}")
blas=()
if ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so '; then
  blas=(-lopenblas)
else
  "$CXX" "${cxxflags[@]}" -c "$root/bench/gpu_shims/cblas_naive.cpp" -o "$d/cblas_naive.o" || exit 1
  blas=("$d/cblas_naive.o")
fi
pids=()
objs=()
for cu in "$root"/kernels/cuda/*.cu; do
  o=$d/$(basename "${cu%.cu}").o
  "$NVCC" -O3 -std=c++17 -arch=sm_"$ARCH" -I"$root/kernels/include" -c "$cu" -o "$o" &
  pids+=($!)
  objs+=("$o")
done
for src in kernels/cpu/common.cpp kernels/cpu/reference.cpp kernels/cpu/fast.cpp kernels/profile.cpp \
           kernels/cuda/cublas_api.cpp kernels/cuda/cuda_probe.cpp libcommon/src/gpt/model.cpp; do
  o=$d/$(basename "${src%.cpp}").o
  extra=()
  [[ $src == *fast.cpp ]] && extra=(-fno-trapping-math)
  [[ $src == *cublas_api.cpp ]] && extra=(-DCAIRN_CUDA_LIBRARY_DIR="\"$CUDA_HOME/lib64:$CUDA_HOME/lib\"")
  "$CXX" "${cxxflags[@]}" "${extra[@]}" -c "$root/$src" -o "$o" &
  pids+=($!)
  objs+=("$o")
done
for p in "${pids[@]}"; do wait "$p" || exit 1; done
libs=("${objs[@]}" "${blas[@]}" -L"$CUDA_HOME/lib64" -L"$CUDA_HOME/lib" -lcudart -ldl -lpthread)  # cuBLAS: dlopen (cublas_api.cpp)
"$CXX" "${cxxflags[@]}" "$root/bench/kernels_gpu_gpt_bench.cpp" "${libs[@]}" -o "$d/kernels_gpu_gpt_bench" || exit 1
if [[ -z $ctest_dir ]]; then
  shim=()
  if [[ ${SHIM_BOOST:-0} == 1 ]] || ! echo '#include <boost/test/unit_test.hpp>' | "$CXX" -E -x c++ - >/dev/null 2>&1; then
    shim=(-I"$root/bench/gpu_shims")
  fi
  for t in kernels/kernels_cuda kernels/kernels_flash_emulation kernels/kernels_flash_bf16_emulation \
           libcommon/gpt/gpt_cuda; do
    if [[ ${#shim[@]} -gt 0 ]]; then
      "$CXX" "${cxxflags[@]}" "${shim[@]}" -I"$root/tests/kernels" "$root/tests/${t}_test.cpp" "${libs[@]}" \
        -o "$d/$(basename "$t")" || exit 1
    else
      "$CXX" "${cxxflags[@]}" -DBOOST_TEST_DYN_LINK -I"$root/tests/kernels" "$root/tests/${t}_test.cpp" "${libs[@]}" \
        -lboost_unit_test_framework -o "$d/$(basename "$t")" || exit 1
    fi
    tests+=("$d/$(basename "$t")")
  done
fi

# ---------------------------------------------------------------- gpu tests
note "gpu tests (fp32 per-op and whole-model parity 1e-4, AdamW losses 1e-4, recompute bitwise, bf16 2e-2..5e-2)"
if [[ -n $ctest_dir ]]; then
  ctest --test-dir "$ctest_dir" -L "gpu|unit" --output-on-failure | tee "$work/ctest.txt" || status=1
  grep -q 'Skipped' "$work/ctest.txt" && echo "TEST gpu rc=77 (skipped)" >>"$results"
else
  for t in "${tests[@]}"; do
    echo "-- $(basename "$t")"
    "$t"
    rc=$?
    [[ $rc -eq 77 ]] && echo "SKIPPED (no usable GPU)"
    [[ $rc -ne 0 && $rc -ne 77 ]] && status=1
    echo "TEST $(basename "$t") rc=$rc" >>"$results"
  done
fi
if [[ $status -ne 0 ]]; then echo "TESTS FAILED" >>"$results"; elif grep -q "rc=77" "$results"; then echo "TESTS SKIPPED (no usable GPU)" >>"$results"; else echo "TESTS passed" >>"$results"; fi

# ---------------------------------------------------------------- attention alone (GPT-2 124M shape)
note "attention kernels: flash vs simple, B=8 T=1024 C=768 NH=12 (fp32)"
timeout 300 "$d/kernels_gpu_gpt_bench" --hidden 768 --heads 12 --seq 1024 --batch 8 --steps 10 --attention-bench 1 \
  | tee "$work/attention.txt" || status=1
grep '^RESULT' "$work/attention.txt" >>"$results"

# ---------------------------------------------------------------- GPT-2 124M
model=(--layers 12 --hidden 768 --heads 12 --seq 1024 --vocab 50304 --steps "$STEPS")
: > "$work/cairn.txt"
for bf16 in 0 1; do
  note "cairn cuda $([[ $bf16 == 1 ]] && echo bf16 || echo fp32), GPT-2 124M, largest micro-batch <= $MAX_B that fits"
  timeout 600 "$d/kernels_gpu_gpt_bench" "${model[@]}" --max-batch "$MAX_B" --bf16 "$bf16" | tee -a "$work/cairn.txt" \
    || status=1
done
if [[ ${ATTN_SIMPLE:-0} == 1 ]]; then
  note "cairn cuda bf16 with the simple attention kernels (for comparison; RESULT lines say cairn_bf16)"
  CAIRN_CUDA_ATTENTION=simple timeout 600 "$d/kernels_gpu_gpt_bench" "${model[@]}" --max-batch "$MAX_B" --bf16 1 \
    | sed 's/^RESULT cairn_bf16/RESULT cairn_bf16_simple_attention/' | tee -a "$work/cairn.txt" || status=1
fi
grep '^RESULT' "$work/cairn.txt" >>"$results"
if [[ ${SKIP_TORCH:-0} != 1 ]]; then
  modes=("eager fp32" "eager bf16")
  [[ ${TORCH_COMPILE:-1} -ge 1 ]] && modes+=("compile bf16")
  [[ ${TORCH_COMPILE:-1} -ge 2 ]] && modes+=("compile fp32")
  for m in "${modes[@]}"; do
    set -- $m
    note "PyTorch $1 $2"
    timeout 600 "$PYTHON" "$root/bench/kernels_gpu_torch_bench.py" --mode "$1" --dtype "$2" "${model[@]}" \
      --max-batch "$MAX_B" >"$work/torch_$1_$2.txt" 2>&1
    rc=$?
    grep -v '^RESULT' "$work/torch_$1_$2.txt" | tail -3
    if [[ $rc -eq 0 ]]; then grep '^RESULT' "$work/torch_$1_$2.txt" >>"$results"; else echo "torch $1 $2 failed (rc $rc)" | tee -a "$results"; fi
  done
fi
note "results"
cat "$results"
exit $status
