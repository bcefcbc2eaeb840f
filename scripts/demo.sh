#!/usr/bin/env bash
# README command 1: install dependencies, build the tools, run the demo pipeline locally (no Slurm:
# mpirun with 2 ranks) on configs/demo.toml, and print where the outputs are.
#
# Usage: scripts/demo.sh [CONFIG] [slurm/run-local.sh options, e.g. --set train.steps=50 --out runs/x]
# Environment: BUILD_DIR (default build), CAIRN_CUDA (AUTO|ON|OFF, default AUTO), JOBS (build
# parallelism, default all cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

config=configs/demo.toml
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then config=$1; shift; fi
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}

echo "== 1/3 dependencies" >&2
scripts/install-deps.sh

echo "== 2/3 build ($build)" >&2
cmake -S . -B "$build" -DCAIRN_CUDA="${CAIRN_CUDA:-AUTO}" >/dev/null
# Only the tools (the test suite is README command 2's business).
targets=()
for t in sweep plan reshard train eval report; do
  [ -f "tools/$t/CMakeLists.txt" ] && targets+=(--target "cairn-$t")
done
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$build" -j "$jobs" "${targets[@]}"
fi

echo "== 3/3 pipeline on $config" >&2
export CAIRN_BIN_DIR=$root/$build/bin
exec slurm/run-local.sh "$config" --np 2 "$@"
