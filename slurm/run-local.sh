#!/usr/bin/env bash
# Runs a cairn pipeline on this machine without Slurm: the same stage bodies as the sbatch
# templates (slurm/stages/*.sh), in order, with mpirun for the multi-rank stages.
#
# Usage: slurm/run-local.sh CONFIG [options]
#   --set section.key=value   config override for every stage (repeatable)
#   --out DIR                 run directory (overrides [run] dir)
#   --stages a,b,c            only these stages (default: sweep,plan,reshard,train,eval,report)
#   --np N                    MPI ranks for sweep/reshard/train/eval (default 2; $CAIRN_NP)
#   --strict                  a stage whose binary is not built is an error (default: skipped with a note)
#
# Each stage's output is shown and also kept in <run>/logs/<stage>.log. Stops at the first failing
# stage, naming it and its log, with that stage's exit code (3 = a gate failed in report). If training
# is interrupted (Ctrl-C/SIGTERM) it checkpoints; rerunning the same command resumes it.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/common.sh"
cairn_load_stages

usage() { cairn_usage "$0"; exit 2; }
# shellcheck disable=SC2034  # read by cairn_die
CAIRN_DIE_CODE=2
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
config=$1; shift
[ -f "$config" ] || cairn_die "cannot open \"$config\": No such file or directory"
config=$(cairn_abspath "$config")

sets=() out="" stages_arg="" strict=0
export CAIRN_NP=${CAIRN_NP:-2}
while [ $# -gt 0 ]; do
  case "$1" in
    --set) [ $# -ge 2 ] || usage; sets+=(--set "$2"); shift 2 ;;
    --set=*) sets+=(--set "${1#--set=}"); shift ;;
    --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    --stages) [ $# -ge 2 ] || usage; stages_arg=$2; shift 2 ;;
    --np) [ $# -ge 2 ] || usage; CAIRN_NP=$2; shift 2 ;;
    --strict) strict=1; shift ;;
    -h|--help) usage ;;
    *) cairn_die "unknown option '$1' (see --help)" ;;
  esac
done
[[ "$CAIRN_NP" =~ ^[1-9][0-9]*$ ]] || cairn_die "--np wants a positive integer (got '$CAIRN_NP')"

selected=()
for s in "${CAIRN_STAGES[@]}"; do
  if [ -z "$stages_arg" ] || [[ ",$stages_arg," == *",$s,"* ]]; then selected+=("$s"); fi
done
if [ -n "$stages_arg" ]; then
  IFS=, read -r -a wanted <<<"$stages_arg"
  for w in "${wanted[@]}"; do
    [[ " ${CAIRN_STAGES[*]} " == *" $w "* ]] || cairn_die "--stages: unknown stage '$w' (stages: ${CAIRN_STAGES[*]})"
  done
fi

export CAIRN_LAUNCHER=${CAIRN_LAUNCHER:-mpirun}
# More ranks than cores is fine for a demo; Open MPI refuses unless told.
if [ "$CAIRN_LAUNCHER" = mpirun ] && [ "$CAIRN_NP" -gt "$(nproc)" ]; then
  CAIRN_MPIRUN_ARGS="${CAIRN_MPIRUN_ARGS:-} --oversubscribe"
fi
export CAIRN_MPIRUN_ARGS=${CAIRN_MPIRUN_ARGS:-}
cairn_env_hook

tool_args=(--config "$config" "${sets[@]}")
[ -n "$out" ] && tool_args+=(--set "run.dir=$(cairn_toml_str "$(cairn_abspath "$out")")")
cairn_resolve_run_dir "${tool_args[@]}"
run=$CAIRN_RUN_DIR
# (--set run.dir rather than --out: for cairn-reshard --out names the dataset directory.)
tool_args=(--config "$config" "${sets[@]}" --set "run.dir=$(cairn_toml_str "$run")")
mkdir -p "$run/logs"
# shellcheck disable=SC2034  # read by cairn_die
CAIRN_DIE_CODE=1
[ "$strict" = 1 ] && export CAIRN_MISSING_RC=127 || export CAIRN_MISSING_RC=200

ran=() skipped=()
cairn_log "run directory $run; stages: ${selected[*]}; $CAIRN_NP ranks ($CAIRN_LAUNCHER)"
for s in "${selected[@]}"; do
  log=$run/logs/$s.log
  cairn_log "== stage $s"
  start=$(date +%s)
  rc=0
  # The stage runs in this shell (signals reach its launcher); tee keeps a copy of its output.
  : > "$log"
  "cairn_stage_$s" "${tool_args[@]}" > >(tee -a "$log") 2> >(tee -a "$log" >&2) || rc=$?
  wait 2>/dev/null || true
  if [ "$rc" -eq 200 ]; then
    skipped+=("$s"); cairn_log "== stage $s skipped (not built yet)"; continue
  fi
  if [ "$rc" -ne 0 ]; then
    if [ "$s" = train ] && [ "$rc" -eq "$CAIRN_EXIT_REQUEUE" ]; then
      cairn_log "train stopped at a checkpoint after a signal; rerun the same command to resume"
    fi
    cairn_log "FAILED: stage $s (exit $rc); log: $log"
    exit "$rc"
  fi
  ran+=("$s")
  cairn_log "== stage $s done in $(( $(date +%s) - start )) s"
done

echo
echo "cairn pipeline finished: ran ${ran[*]:-nothing}${skipped[*]:+; skipped (not built): ${skipped[*]}}"
echo "outputs in $run:"
for s in sweep plan data train eval report; do
  [ -d "$run/$s" ] && echo "  $run/$s/"
done
[ -f "$run/report/index.html" ] && echo "report: $run/report/index.html"
echo "logs: $run/logs/"
