#!/usr/bin/env bash
# Benchmark (prints figures, not a test): cairn-sweep's allreduce busbw over MPI on 2 ranks versus a
# bare MPI_Allreduce loop, 1 KiB to 256 MiB (target: within 3% at every size). Uses
# `cairn-sweep --bench-bare`: in ONE mpirun job, on the SAME buffers, per size it alternates many
# short rounds of cairn-sweep's own timed loop (the code path behind every busbw it reports) and a
# bare `for (i<iters) MPI_Allreduce` loop with the same barrier, timing and combine-across-ranks
# rule, so machine noise hits both alike. Then the same with glibc's default malloc, to show the
# page-fault effect of Open MPI's per-call temporary buffers (it slows both loops alike).
# Usage: bench/sweep_allreduce_bench.sh [build-dir] (default build)
# Env: REPEATS (2) runs with the malloc settings, MAX_ROUNDS (400) and SIZE_S (10) rounds and
# seconds per size, LOOP_MS (0.5) one timed loop, MAXBYTES (268435456), DEFAULT_MALLOC (1: run it).
set -euo pipefail
BUILD=${1:-build}
BIN=$BUILD/bin/cairn-sweep
REPEATS=${REPEATS:-2}
MAX_ROUNDS=${MAX_ROUNDS:-400}
SIZE_S=${SIZE_S:-10}
LOOP_MS=${LOOP_MS:-0.5}
MAXBYTES=${MAXBYTES:-268435456}
DEFAULT_MALLOC=${DEFAULT_MALLOC:-1}
[ -x "$BIN" ] || { echo "sweep_allreduce_bench: $BIN not found (build the cairn-sweep target)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
BENCH=(--bench-bare "$MAX_ROUNDS" --bench-size-s "$SIZE_S" --bench-loop-ms "$LOOP_MS" -w 5)

echo "# host: $(hostname), $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# The comparison runs with the malloc settings, so that large sizes measure the transfer rather
# than page faults (README: "Page faults and malloc settings"); -x exports them to both ranks.
for r in $(seq 1 "$REPEATS"); do
  echo "# run $r of $REPEATS: MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824"
  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824 mpirun -np 2 -x MALLOC_MMAP_MAX_ -x MALLOC_TRIM_THRESHOLD_ \
    "$BIN" --out "$TMP/run" -b 1K -e "$MAXBYTES" "${BENCH[@]}" --json "$TMP/tuned_$r.json" 2>/dev/null
done
if [ "$DEFAULT_MALLOC" = 1 ]; then
  echo "# glibc's default malloc, 1 MiB and up (10 rounds)"
  env -u MALLOC_MMAP_MAX_ -u MALLOC_TRIM_THRESHOLD_ mpirun -np 2 "$BIN" --out "$TMP/run" -b 1M -e "$MAXBYTES" \
    --bench-bare 10 --bench-size-s 2 --bench-loop-ms "$LOOP_MS" -w 2 --json "$TMP/default.json" 2>/dev/null
fi

/usr/bin/python3 - "$TMP" "$REPEATS" "$DEFAULT_MALLOC" <<'PY'
import json, sys
tmp, repeats, with_default = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
runs = [json.load(open(f"{tmp}/tuned_{r}.json")) for r in range(1, repeats + 1)]
default = {}
if with_default:
    default = {row["size"]: row for row in json.load(open(f"{tmp}/default.json"))["rows"]}
print()
print(f"allreduce, MPI, 2 ranks, float32 sum, out of place: cairn-sweep vs bare MPI_Allreduce loop, busbw GB/s")
print(f"per run: median over rounds (sweep/bare), best (sweep/bare), paired % = median ABBA-pair difference")
head = f"{'size':>10}"
for r in range(repeats):
    head += f" | {'run%d med s/b' % (r + 1):>15} {'best s/b':>13} {'paired%':>7}"
if with_default:
    head += f" | {'default malloc med s/b':>22}"
print(head)
worst = worst_med = worst_best = 0.0
for i, row in enumerate(runs[0]["rows"]):
    line = f"{row['size']:>10}"
    for run in runs:
        x = run["rows"][i]
        worst = max(worst, abs(x["diff_paired_pct"]))
        worst_med = max(worst_med, abs(x["diff_median_pct"]))
        worst_best = max(worst_best, abs(x["diff_best_pct"]))
        line += f" | {x['sweep_median']:7.3f}/{x['bare_median']:<7.3f} {x['sweep_best']:6.3f}/{x['bare_best']:<6.3f} {x['diff_paired_pct']:7.2f}"
    if row["size"] in default:
        d = default[row["size"]]
        line += f" | {d['sweep_median']:10.3f}/{d['bare_median']:<11.3f}"
    print(line)
print(f"largest |difference| over all sizes and runs (target 3%): paired {worst:.2f}%, "
      f"of medians {worst_med:.2f}%, of best {worst_best:.2f}%")
PY
