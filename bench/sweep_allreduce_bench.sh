#!/usr/bin/env bash
# Benchmark (prints figures, not a test): cairn-sweep's allreduce busbw over MPI on 2 ranks versus
# a bare MPI_Allreduce loop (bench/sweep_bare_allreduce.cpp) on the same kind of buffers, 1 KiB to
# 256 MiB. Per size both run ROUNDS times, alternating, and the best busbw of each is compared (target:
# within 3%). Then the same sweep with and without the malloc settings that stop Open MPI's
# per-call temporary buffers from being page-faulted afresh on every call.
# Usage: bench/sweep_allreduce_bench.sh [build-dir] (default build); ROUNDS, ITERS, MAXBYTES env.
set -euo pipefail
BUILD=${1:-build}
BIN=$BUILD/bin/cairn-sweep
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-20}
MAXBYTES=${MAXBYTES:-268435456}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mpicxx -O2 -o "$TMP/bare" "$(dirname "$0")/sweep_bare_allreduce.cpp"

# The comparison runs with the malloc settings on, for both, so only the loop differs. Sizes are
# interleaved (cairn-sweep, bare, cairn-sweep, ...) so both see the same machine conditions.
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824
MALLOC=(-x MALLOC_MMAP_MAX_ -x MALLOC_TRIM_THRESHOLD_)
size=1024
while [ "$size" -le "$MAXBYTES" ]; do
  # Small sizes get more iterations so that one timed loop lasts long enough to mean something.
  n=$ITERS
  [ "$size" -le 1048576 ] && n=$((ITERS * 10))
  for r in $(seq 1 "$ROUNDS"); do
    mpirun -np 2 "${MALLOC[@]}" "$BIN" --out "$TMP/run" -b "$size" -e "$size" -n "$n" -w 5 -c 0 \
      --json "$TMP/sweep_${size}_$r.json" >/dev/null 2>&1
    mpirun -np 2 "${MALLOC[@]}" "$TMP/bare" "$size" "$size" "$n" 5 >>"$TMP/bare.txt"
  done
  size=$((size * 2))
done
unset MALLOC_MMAP_MAX_ MALLOC_TRIM_THRESHOLD_
# Page-fault effect: cairn-sweep with glibc's default malloc thresholds, large sizes.
mpirun -np 2 "$BIN" --out "$TMP/default" -b 1M -e "$MAXBYTES" -n "$ITERS" -w 5 -c 0 --json "$TMP/default.json" >/dev/null 2>&1

/usr/bin/python3 - "$TMP" "$ROUNDS" <<'PY'
import json, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
sweep, bare = {}, {}
import glob
for path in glob.glob(f"{tmp}/sweep_*.json"):
    for row in json.load(open(path))["results"]:
        sweep[row["size"]] = max(sweep.get(row["size"], 0), row["out_of_place"]["bus_bw"])
for line in open(f"{tmp}/bare.txt"):
    size, _, bw = line.split()
    bare[int(size)] = max(bare.get(int(size), 0), float(bw))
default = {row["size"]: row["out_of_place"]["bus_bw"] for row in json.load(open(f"{tmp}/default.json"))["results"]}
print(f"allreduce, MPI, 2 ranks, float32, best of {rounds} rounds (busbw GB/s)")
print(f"{'size':>12} {'cairn-sweep':>12} {'bare loop':>12} {'diff %':>8} {'default malloc':>15}")
worst = 0.0
for size in sorted(bare):
    s, b = sweep.get(size, 0.0), bare[size]
    d = 100.0 * (s - b) / b if b else 0.0
    worst = max(worst, abs(d))
    dm = f"{default[size]:15.3f}" if size in default else f"{'':>15}"
    print(f"{size:12d} {s:12.3f} {b:12.3f} {d:8.1f} {dm}")
print(f"largest |difference|: {worst:.1f}% (target 3%)")
PY
