#!/bin/bash
# Benchmark (figures, not a test): tokens/s of a GPT training step, cairn's fast and reference CPU backends vs
# eager PyTorch (Debian's python3-torch) on the same model, batch and thread count.
# Usage: bench/kernels_bench.sh [build dir] [threads list] [-- model options for both programs]
#   e.g. bench/kernels_bench.sh build "1 2" -- --layers 4 --hidden 256 --heads 4 --seq 256 --batch 4 --vocab 8192
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
threads=${2:-"1 2"}
# OpenBLAS and OpenMP keep separate thread pools; spinning OpenMP workers steal the cores OpenBLAS needs (and on a
# shared machine everyone's), so both programs run with passive waiting unless told otherwise.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
shift $(( $# >= 2 ? 2 : $# ))
[[ ${1:-} == "--" ]] && shift
bench=$build/bench/kernels_gpt_bench
[[ -x $bench ]] || { echo "kernels_bench: build the kernels_gpt_bench target first ($bench)" >&2; exit 1; }
backend=all  # the single-threaded reference once (it is ~100x slower), then the fast backend only
for t in $threads; do
  echo "== $t thread(s)"
  OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$bench" --backend $backend "$@"
  backend=cpu
  OMP_NUM_THREADS=$t /usr/bin/python3 "$root/bench/kernels_torch_bench.py" "$@" | tail -1
done
