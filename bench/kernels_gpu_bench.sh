#!/bin/bash
# GPU check (issue 7), one script for a session that has a GPU: builds the kernels-only tree with CUDA, runs the
# gpu-labelled tests (per-op and whole-model parity vs the CPU), then prints GPT-2 124M training-step tokens/s
# for cairn's CUDA backend and for eager PyTorch on the same model and batch.
# Usage: bench/kernels_gpu_bench.sh [build dir]   (env: B=micro-batch, STEPS, ARCH=90, PYTHON=python3)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
B=${B:-4}
STEPS=${STEPS:-5}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cmake -S "$root" -B "$build" -DCAIRN_KERNELS_ONLY=ON -DCAIRN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${ARCH:-90}" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
cmake --build "$build" -j"$(nproc)" --target kernels_cuda gpt_cuda kernels_ops kernels_gpt_bench || exit 1
ctest --test-dir "$build" -L "gpu|unit" --output-on-failure
model=(--layers 12 --hidden 768 --heads 12 --seq 1024 --vocab 50304 --batch "$B" --steps "$STEPS" --warmup 1)
echo "== cairn cuda (fp32)"
"$build/tests/kernels/kernels_gpt_bench" --backend cuda "${model[@]}"
echo "== PyTorch eager (fp32)"
"${PYTHON:-python3}" "$root/bench/kernels_torch_bench.py" --device cuda "${model[@]}" | tail -1
