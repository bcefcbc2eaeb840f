#!/usr/bin/env bash
# Nightly regression: runs the pipeline for CONFIG on Slurm, waits, then gates it against a baseline.
#
# Usage: slurm/nightly.sh CONFIG BASELINE_DIR [--set k=v ...] [--out DIR] [other submit-pipeline.sh options]
#
# Runs every stage but the report with slurm/submit-pipeline.sh --wait into a fresh run directory
# (<[run] dir>/<UTC date-time> unless --out is given; <[run] dir>/latest points at it), then
# cairn-report on that run with --baseline BASELINE_DIR and the config's [report.gates].
# Exit code (for cron and CI): 0 all gates pass, 3 a gate failed (regression), 1 infrastructure
# failure (a job failed, a tool is missing, the baseline is missing, ...), 2 usage error or a config the tools
# reject (a misspelled key or gate), found before anything is submitted.
# Output is plain timestamped lines, one per event, safe to mail from cron.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib/common.sh"
source "$here/stages/report.sh"

say() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) nightly: $*"; }
finish() { say "$2"; exit "$1"; }

if [ $# -lt 2 ] || [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  cairn_usage "$0"; exit 2
fi
config=$1 baseline=$2; shift 2
[ -f "$config" ] || finish 2 "USAGE: cannot open \"$config\": No such file or directory"
config=$(cairn_abspath "$config")
[ -d "$baseline" ] || finish 1 "INFRA-FAILURE: baseline \"$baseline\" is not a directory"
# Resolved (pwd -P): a baseline given as <base>/latest must stay the run it points at now, not follow `latest` to
# tonight's run when it is repointed below (the run was then compared with itself).
baseline=$(cd "$baseline" && pwd -P)

sets=() out="" passthrough=()
while [ $# -gt 0 ]; do
  case "$1" in
    --set) [ $# -ge 2 ] || finish 2 "USAGE: --set needs a value"; sets+=(--set "$2"); shift 2 ;;
    --out) [ $# -ge 2 ] || finish 2 "USAGE: --out needs a value"; out=$2; shift 2 ;;
    --stages|--dry-run|--wait) finish 2 "USAGE: nightly.sh chooses $1 itself" ;;
    --grace|--sbatch) [ $# -ge 2 ] || finish 2 "USAGE: $1 needs a value"; passthrough+=("$1" "$2"); shift 2 ;;
    *) passthrough+=("$1"); shift ;;
  esac
done

cairn_env_hook
# The config as cairn-report sees it: every tool checks every section, and cairn-report also checks its gates, so a
# misspelled gate stops the nightly here, before anything is submitted, instead of after the whole pipeline ran.
report_tool=$(cairn_tool report) || report_tool=$(cairn_any_tool) ||
  finish 1 "INFRA-FAILURE: no cairn-* binary found (looked in ${CAIRN_BIN_DIR:-<unset>}, $CAIRN_HOME/build/bin and PATH)"
printed=$("$report_tool" --config "$config" "${sets[@]}" --print-config 2>&1) ||
  finish 2 "CONFIG-ERROR: the config is rejected: $printed"
[ -d "$baseline/train" ] || [ -d "$baseline/sweep" ] ||
  finish 1 "INFRA-FAILURE: baseline \"$baseline\" holds no run (no train/ or sweep/ directory): give a run directory of an earlier nightly or pipeline"
base=$(cairn_config_value run dir <<<"$printed") || finish 1 "INFRA-FAILURE: no [run] dir in the printed config"
base=$(cairn_abspath "$base")
if [ -n "$out" ]; then out=$(cairn_abspath "$out"); parent=$(dirname "$out"); else parent=$base; fi
stages=()
for s in "${CAIRN_STAGES[@]}"; do [ "$s" = report ] || stages+=("$s"); done
stages_csv=$(IFS=,; echo "${stages[*]}")
# submit-pipeline.sh's own options (--grace, --sbatch, ...) checked by a dry run before anything is created: a bad
# one used to end the nightly with exit 1 after making an empty run directory and pointing `latest` at it.
if ! dry=$("$here/submit-pipeline.sh" "$config" "${sets[@]}" --out "${out:-$base/nightly-dry-run}" --stages "$stages_csv" \
      --dry-run "${passthrough[@]}" 2>&1 9>&-); then
  why=$(grep -E '^cairn: ' <<<"$dry" | tail -n 1 | sed 's/^cairn: //')
  case "$why" in
    *"is not built"*|*"not found"*) finish 1 "INFRA-FAILURE: $why" ;;
    *) finish 2 "USAGE: ${why:-$dry}" ;;
  esac
fi
mkdir -p "$parent" || finish 1 "INFRA-FAILURE: cannot create \"$parent\""

# One nightly at a time per run directory base (cron may start the next before this one ends). The lock lives
# next to the run (with --out the config's [run] dir need not exist), and is taken before the run directory is
# made and `latest` repointed, so a nightly refused here changes nothing.
lock=$parent/.nightly.lock
if command -v flock >/dev/null; then
  exec 9>"$lock" || finish 1 "INFRA-FAILURE: cannot create \"$lock\""
  flock -n 9 || finish 1 "INFRA-FAILURE: another nightly.sh holds $lock"
fi
if [ -z "$out" ]; then
  # One directory per nightly, even for two started within the same second.
  out=$base/$(date -u +%Y%m%dT%H%M%SZ)
  n=1; stem=$out
  while [ -e "$out" ]; do n=$((n + 1)); out=$stem-$n; done
fi
mkdir -p "$out" || finish 1 "INFRA-FAILURE: cannot create \"$out\""
if [ "$(dirname "$out")" = "$base" ]; then ln -sfn "$(basename "$out")" "$base/latest" 2>/dev/null || true; fi

say "config $config; baseline $baseline; run $out"
export CAIRN_POLL_S=${CAIRN_POLL_S:-5}
# In the background, so a signal (a cron `timeout`, Ctrl-C) reaches the trap while the jobs run: it stops the
# waiting, cancels the jobs this nightly submitted and says so. In the foreground bash held the trap until the
# pipeline ended, and a killed nightly left the waiting processes behind, holding the lock (fd 9, now closed
# for them) and printing after it had exited.
{
  "$here/submit-pipeline.sh" "$config" "${sets[@]}" --out "$out" --stages "$stages_csv" --wait "${passthrough[@]}" 2>&1 \
    | while IFS= read -r line; do say "$line"; done
  exit "${PIPESTATUS[0]}"
} 9>&- &
waiter=$!
stopped_by() {
  trap - TERM INT HUP
  # submit-pipeline.sh and the line reader; the waiter ends with them. While it is still submitting, submit-pipeline
  # cancels what it submitted and leaves the ids in logs/.submitted.<pid> (pipeline.json is written after the last
  # sbatch): waiting for it lets this trap name them (it said "no job was submitted" with two jobs queued).
  pkill -TERM -P "$waiter" 2>/dev/null
  wait "$waiter" 2>/dev/null
  local ids
  ids=$({ sed -n 's/.*"job_id": \([0-9][0-9]*\).*/\1/p' "$out/pipeline.json" 2>/dev/null
          cat "$out"/logs/.submitted.* 2>/dev/null; } | sort -un | paste -sd' ')
  rm -f "$out"/logs/.submitted.*
  # shellcheck disable=SC2086  # one word per job id
  [ -n "$ids" ] && scancel $ids 2>/dev/null
  if [ -n "$ids" ]; then finish 1 "INFRA-FAILURE: nightly.sh stopped by SIG$1; cancelled its jobs $ids"; fi
  finish 1 "INFRA-FAILURE: nightly.sh stopped by SIG$1; no job was submitted"
}
trap 'stopped_by TERM' TERM
trap 'stopped_by INT' INT
trap 'stopped_by HUP' HUP
rc=0
wait "$waiter" || rc=$?
trap - TERM INT HUP
[ "$rc" -eq 0 ] || finish 1 "INFRA-FAILURE: the pipeline did not complete (exit $rc); see the FAILED line above and $out/logs/"

say "pipeline completed; running cairn-report against the baseline"
export CAIRN_LAUNCHER=none CAIRN_BASELINE_DIR=$baseline
# shellcheck disable=SC2034  # read by the stage body
CAIRN_RUN_DIR=$out
mkdir -p "$out/logs"
cairn_stage_report --config "$config" "${sets[@]}" --set "run.dir=$(cairn_toml_str "$out")" > "$out/logs/report.log" 2>&1 9>&-
rc=$?
sed 's/^/  | /' "$out/logs/report.log"
summary=$out/report/summary.md
case "$rc" in
  0) finish 0 "PASS: every gate passed against $baseline (report $out/report/index.html)" ;;
  3) finish 3 "REGRESSION: a gate failed against $baseline; see $summary and $out/report/index.html" ;;
  *) finish 1 "INFRA-FAILURE: cairn-report exited $rc; log $out/logs/report.log" ;;
esac
