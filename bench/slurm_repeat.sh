#!/usr/bin/env bash
# Repeats every slurm-labelled ctest N times and prints each test's pass count: the suite's reliability, not its speed.
#
# Usage: bench/slurm_repeat.sh [BUILD_DIR] [-n N] [--hog] [-R REGEX] [--keep-going]
#   BUILD_DIR     a configured and built tree (default build/release)
#   -n N          rounds (default 20); each round runs every selected test once, in ctest's order, so a
#                 change in the machine's load over time hits every test alike
#   --hog         keep one busy loop per CPU running throughout (a loaded CI machine)
#   -R REGEX      only the slurm tests whose name matches (ctest -R)
# Prints a line per finished run and then a table: test, passes/N, median and max seconds. Logs of
# failed runs are kept under a temp dir (printed). Exit 0 when every run passed, 3 when one failed
# (the reliability gate), 2 on a usage error, 1 when ctest itself cannot run.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prog=slurm_repeat
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
die() { echo "$prog: $*" >&2; exit "${2:-1}"; }

build="" rounds=20 hog=0 regex=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n) [ $# -ge 2 ] || usage; rounds=$2; shift 2 ;;
    --hog) hog=1; shift ;;
    -R) [ $# -ge 2 ] || usage; regex=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) die "unknown option '$1' (see --help)" 2 ;;
    *) [ -z "$build" ] || die "one build directory, not '$build' and '$1'" 2; build=$1; shift ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "-n wants a positive integer (got '$rounds')" 2
build=${build:-$here/build/release}
[ -f "$build/CTestTestfile.cmake" ] || die "\"$build\": not a configured build directory (no CTestTestfile.cmake)" 2
build=$(cd "$build" && pwd)

# The tests, by name, as ctest lists them.
list_args=(--test-dir "$build" -N -L slurm)
[ -n "$regex" ] && list_args+=(-R "$regex")
mapfile -t tests < <(ctest "${list_args[@]}" | sed -n 's/^ *Test *#[0-9]*: *//p')
[ ${#tests[@]} -gt 0 ] || die "no slurm-labelled test in \"$build\"${regex:+ matching '$regex'}" 2

logs=$(mktemp -d /tmp/cairn-slurm-repeat.XXXXXX)
hogs=()
stop_hogs() {
  local p
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${hogs[@]}"; do wait "$p" 2>/dev/null || true; done
  hogs=()
}
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if [ "$hog" = 1 ]; then
  for _ in $(seq 1 "$(nproc)"); do
    ( while :; do :; done ) &
    hogs+=($!)
  done
fi
echo "$prog: ${#tests[@]} tests x $rounds rounds in $build$([ "$hog" = 1 ] && echo ", with $(nproc) CPU hogs"); logs of failures in $logs"

declare -A passes=() times=()
failed=0
start=$(date +%s)
for ((r = 1; r <= rounds; r++)); do
  for t in "${tests[@]}"; do
    log=$logs/$t.$r.log
    t0=$(date +%s.%N)
    rc=0
    ctest --test-dir "$build" -R "^${t}\$" --output-on-failure > "$log" 2>&1 || rc=$?
    # A test that ctest reports as skipped (exit 77: no Slurm here) is neither a pass nor a failure.
    if grep -q "Not Run\|\*\*\*Skipped" "$log"; then verdict=skipped
    elif [ "$rc" -eq 0 ]; then verdict=pass
    else verdict=FAIL
    fi
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    times[$t]="${times[$t]:-} $secs"
    case "$verdict" in
      pass) passes[$t]=$(( ${passes[$t]:-0} + 1 )); rm -f "$log" ;;
      FAIL) failed=$((failed + 1)) ;;
      skipped) rm -f "$log" ;;
    esac
    printf '%s: round %d/%d %-16s %-7s %6ss%s\n' "$prog" "$r" "$rounds" "$t" "$verdict" "$secs" \
      "$([ "$verdict" = FAIL ] && echo "  log $log")"
  done
done
stop_hogs

echo
echo "slurm tests, $rounds rounds$([ "$hog" = 1 ] && echo " with CPU hogs"), $(( ($(date +%s) - start) / 60 )) min:"
printf '%-18s %9s %9s %9s\n' test passes median_s max_s
for t in "${tests[@]}"; do
  # shellcheck disable=SC2086
  read -r med max < <(printf '%s\n' ${times[$t]} | sort -n | awk '{ v[NR] = $1 } END { printf "%s %s\n", v[int((NR + 1) / 2)], v[NR] }')
  printf '%-18s %9s %9s %9s\n' "$t" "${passes[$t]:-0}/$rounds" "$med" "$max"
done
if [ "$failed" -gt 0 ]; then
  echo "$prog: $failed failed run(s); logs in $logs"
  exit 3
fi
rmdir "$logs" 2>/dev/null || true
exit 0
