#!/usr/bin/env bash
# Benchmark of cairn-report: RUNS synthetic runs of STEPS logged steps each (all stages), one report
# with a baseline and gates. Prints the wall time of the report (target: 20 x 10,000 in < 2 s).
#   bash bench/report_bench.sh [BUILD_DIR] [RUNS] [STEPS]
set -euo pipefail
BUILD=${1:-build}
RUNS=${2:-20}
STEPS=${3:-10000}
SRC=$(cd "$(dirname "$0")/.." && pwd)
T=${BENCH_DIR:-$(mktemp -d)}
[ -n "${BENCH_DIR:-}" ] || trap 'rm -rf "$T"' EXIT
dirs=()
for i in $(seq 1 "$RUNS"); do
  d="$T/run$(printf %02d "$i")"
  [ -f "$d/train/metrics.jsonl" ] || /usr/bin/python3 "$SRC/tests/report/make_runs.py" "$d" --seed "$i" --steps "$STEPS" \
    --loss-shift "0.00$((i % 7))" --tps-factor "1.0$((i % 5))" &
  dirs+=("$d")
  if (( i % 4 == 0 )); then wait; fi
done
wait
lines=$(cat "$T"/run*/train/metrics.jsonl | wc -l)
bytes=$(cat "$T"/run*/train/metrics.jsonl | wc -c)
echo "report_bench: $RUNS runs x $STEPS steps ($lines metrics lines, $((bytes / 1048576)) MiB)"
best=""
for rep in 1 2 3; do
  t0=$(date +%s.%N)
  "$BUILD/bin/cairn-report" "${dirs[@]:1}" --baseline "${dirs[0]}" --out "$T/out" --log-level warn \
    --set 'report.gates.val_loss={max_increase=0.05}' --set 'report.gates.tokens_per_s={max_drop_pct=10}' || [ $? -eq 3 ]
  t1=$(date +%s.%N)
  s=$(echo "$t1 - $t0" | bc -l)
  echo "report_bench: run $rep: $(printf %.3f "$s") s"
  if [ -z "$best" ] || (( $(echo "$s < $best" | bc -l) )); then best=$s; fi
done
size=$(stat -c %s "$T/out/report/index.html")
echo "report_bench: best $(printf %.3f "$best") s for $RUNS runs x $STEPS steps; index.html $((size / 1024)) KiB"
