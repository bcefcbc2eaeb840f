#!/usr/bin/env bash
# Submits a cairn pipeline to Slurm: one job per stage, chained with afterok dependencies.
#
# Usage: slurm/submit-pipeline.sh CONFIG [options]
#   --set section.key=value   config override for every stage (repeatable; same as the tools' --set)
#   --out DIR                 run directory (overrides [run] dir)
#   --stages a,b,c            only these stages (default: sweep,plan,reshard,train,eval,report); a
#                             dependency on a stage not submitted is dropped (its outputs must exist)
#   --dry-run                 print the sbatch commands, submit nothing, write nothing
#   --eval-watch              run eval alongside training (cairn-eval --watch, --dependency=after:TRAIN)
#   --grace SECONDS           train gets SIGUSR1 this long before its time limit (default 300)
#   --sbatch STAGE:ARGS       extra sbatch options for one stage (or all:ARGS), word-split, repeatable,
#                             e.g. --sbatch 'train:-N 4 --time=12:00:00' --sbatch 'all:-A myproject'
#   --wait                    wait for the jobs; print each stage's end state; exit 0 if all COMPLETED,
#                             1 naming the failed stage and its log otherwise
#   --skip-missing            drop stages whose cairn-* binary is not built (default: refuse, exit 2)
#
# The run directory comes from the tools themselves (`cairn-<tool> --config CONFIG --print-config`),
# so the script never parses TOML. Jobs write their logs to <run>/logs/<stage>-<jobid>.out and the
# submission is recorded in <run>/pipeline.json (stages, job ids, dependencies, logs, config).
# Dependencies follow the data: plan after sweep; train after plan and reshard; eval after train
# (and reshard); report after everything; kill-on-invalid-dep, so a failed stage cancels its
# dependents instead of leaving them pending forever.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/common.sh"

usage() { cairn_usage "$0"; exit 2; }
# shellcheck disable=SC2034  # read by cairn_die
CAIRN_DIE_CODE=2

[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
config=$1; shift
[ -f "$config" ] || cairn_die "cannot open \"$config\": No such file or directory"
config=$(cairn_abspath "$config")

sets=() out="" stages_arg="" dry=0 watch_eval=0 grace=300 wait_jobs=0 skip_missing=0
declare -A extra_sbatch=()
while [ $# -gt 0 ]; do
  case "$1" in
    --set) [ $# -ge 2 ] || usage; sets+=(--set "$2"); shift 2 ;;
    --set=*) sets+=(--set "${1#--set=}"); shift ;;
    --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    --stages) [ $# -ge 2 ] || usage; stages_arg=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --eval-watch) watch_eval=1; shift ;;
    --grace) [ $# -ge 2 ] || usage; grace=$2; shift 2 ;;
    --sbatch) [ $# -ge 2 ] || usage
      st=${2%%:*}; [ "$st" != "$2" ] || cairn_die "--sbatch wants STAGE:ARGS (got '$2')"
      extra_sbatch[$st]="${extra_sbatch[$st]:-} ${2#*:}"; shift 2 ;;
    --wait) wait_jobs=1; shift ;;
    --skip-missing) skip_missing=1; shift ;;
    -h|--help) usage ;;
    *) cairn_die "unknown option '$1' (see --help)" ;;
  esac
done
[[ "$grace" =~ ^[0-9]+$ ]] || cairn_die "--grace wants seconds (got '$grace')"
for st in "${!extra_sbatch[@]}"; do
  [ "$st" = all ] || [[ " ${CAIRN_STAGES[*]} " == *" $st "* ]] || cairn_die "--sbatch: unknown stage '$st'"
done

# The stages to submit, in pipeline order.
selected=()
if [ -n "$stages_arg" ]; then
  IFS=, read -r -a wanted <<<"$stages_arg"
  for w in "${wanted[@]}"; do
    [[ " ${CAIRN_STAGES[*]} " == *" $w "* ]] || cairn_die "--stages: unknown stage '$w' (stages: ${CAIRN_STAGES[*]})"
  done
  for s in "${CAIRN_STAGES[@]}"; do
    [[ ",$stages_arg," == *",$s,"* ]] && selected+=("$s")
  done
else
  selected=("${CAIRN_STAGES[@]}")
fi

# Every stage needs its binary; say which are missing now rather than as failed jobs later.
kept=()
for s in "${selected[@]}"; do
  if cairn_tool "$s" >/dev/null; then kept+=("$s")
  elif [ "$skip_missing" = 1 ]; then cairn_log "skipping stage $s: cairn-$s is not built"
  else cairn_die "cairn-$s is not built (looked in ${CAIRN_BIN_DIR:-<CAIRN_BIN_DIR unset>}, $CAIRN_HOME/build/bin, PATH); build it or pass --skip-missing"
  fi
done
selected=("${kept[@]}")
[ ${#selected[@]} -gt 0 ] || cairn_die "no stage to submit"

tool_args=(--config "$config" "${sets[@]}")
[ -n "$out" ] && tool_args+=(--set "run.dir=$(cairn_toml_str "$(cairn_abspath "$out")")")
cairn_resolve_run_dir "${tool_args[@]}"
run=$CAIRN_RUN_DIR
# sbatch reads its --output as a pattern: a backslash anywhere turns the patterns off (no %j: one log for every
# requeue, in a directory with the backslash dropped) and % starts one. The log path escapes % as %%; a backslash
# cannot be escaped, so such a run directory is refused before anything is submitted.
case "$run" in *\\*) CAIRN_DIE_CODE=2 cairn_die "run directory \"$run\" contains a backslash, which sbatch's --output cannot take (its log files would be lost): choose another" ;; esac
log_dir=${run//\%/%%}/logs
# Every job gets the absolute run directory: jobs may start in another directory or days later.
# (--set run.dir rather than --out: for cairn-reshard --out names the dataset directory.)
tool_args=(--config "$config" "${sets[@]}" --set "run.dir=$(cairn_toml_str "$run")")

# Which selected stages each stage waits for (afterok), following the data between them.
deps_of() {
  case "$1" in
    sweep|reshard) echo "" ;;
    plan) echo "sweep" ;;
    train) echo "plan reshard" ;;
    eval) echo "train reshard" ;;
    report) echo "sweep plan reshard train eval" ;;
  esac
}
is_selected() { [[ " ${selected[*]} " == *" $1 "* ]]; }

command -v sbatch >/dev/null || [ "$dry" = 1 ] || cairn_die "sbatch not found: is this a Slurm login node? (slurm/run-local.sh runs the pipeline without Slurm)"
# One submission at a time per run directory: a second one while the first's jobs are queued or running re-ran
# sweep, plan and reshard over outputs the first's training was reading. Jobs that ended (or that the controller
# no longer knows) do not count, so resubmitting after a failure or a cancel is fine. The check and the submission
# hold <run>/logs/.submit.lock until pipeline.json is written: two submissions started together both passed the check
# before either had written it.
if [ "$dry" = 0 ]; then
  mkdir -p "$run/logs"
  exec {submit_lock}>>"$run/logs/.submit.lock"
  flock -w "${CAIRN_SUBMIT_LOCK_S:-120}" "$submit_lock" ||
    cairn_die "run directory \"$run\" is being submitted to by another submit-pipeline.sh (lock $run/logs/.submit.lock held for ${CAIRN_SUBMIT_LOCK_S:-120} s)"
fi
if [ "$dry" = 0 ] && [ -f "$run/pipeline.json" ] && command -v squeue >/dev/null; then
  prev=$(sed -n 's/.*"job_id": \([0-9][0-9]*\).*/\1/p' "$run/pipeline.json" | paste -sd,)
  live=""
  [ -n "$prev" ] && live=$(squeue -h -o '%i %T' -j "$prev" \
    --states=PENDING,RUNNING,REQUEUED,SUSPENDED,CONFIGURING,COMPLETING,RESIZING,SIGNALING,STAGE_OUT 2>/dev/null |
    awk '{printf "%s%s (%s)", sep, $1, $2; sep=", "}') || true
  [ -z "$live" ] || cairn_die "run directory \"$run\" has jobs of an earlier submission still queued or running: $live; wait for them, scancel them, or choose another --out"
fi

export CAIRN_HOME
[ -z "${CAIRN_BIN_DIR:-}" ] || export CAIRN_BIN_DIR
declare -A job_of=() log_of=() dep_of=()
cmds=()
# Stopped while submitting (a cron `timeout` reaching nightly.sh, Ctrl-C), before pipeline.json names the jobs: the
# jobs already submitted are cancelled and named, and their ids left in <run>/logs/.submitted.<pid> for nightly.sh
# (it used to leave them queued and say no job was submitted). A signal during sbatch acts once sbatch returns, so its
# job ($jid) is cancelled too.
submitted=$run/logs/.submitted.$$
jid=""
# cancel_submitted: cancels the jobs submitted so far (and $jid, submitted but not yet recorded); prints their ids.
cancel_submitted() {
  local ids
  ids=$(printf '%s\n' "${job_of[@]}" "${jid%%;*}" | { grep -E '^[0-9]+$' || true; } | sort -un | paste -sd' ')
  # shellcheck disable=SC2086  # one word per job id
  [ -z "$ids" ] || scancel $ids 2>/dev/null || true
  echo "$ids"
}
stop_submission() {
  trap - TERM INT HUP
  local ids
  ids=$(cancel_submitted)
  if [ -n "$ids" ]; then
    # shellcheck disable=SC2086  # one word per job id
    printf '%s\n' $ids > "$submitted"
    CAIRN_DIE_CODE=1 cairn_die "submit-pipeline.sh stopped by SIG$1 while submitting; cancelled the jobs already submitted: $ids"
  fi
  CAIRN_DIE_CODE=1 cairn_die "submit-pipeline.sh stopped by SIG$1 before any job was submitted"
}
[ "$dry" = 1 ] || { trap 'stop_submission TERM' TERM; trap 'stop_submission INT' INT; trap 'stop_submission HUP' HUP; }
for s in "${selected[@]}"; do
  dep=""
  for d in $(deps_of "$s"); do
    is_selected "$d" || continue
    kind=afterok
    [ "$s" = eval ] && [ "$d" = train ] && [ "$watch_eval" = 1 ] && kind=after
    dep+="${dep:+,}$kind:${job_of[$d]}"
  done
  args=(sbatch --parsable --job-name="cairn-$s" --output="$log_dir/$s-%j.out")
  [ -n "$dep" ] && args+=(--dependency="$dep" --kill-on-invalid-dep=yes)
  [ "$s" = train ] && args+=(--signal="B:USR1@$grace" --requeue --open-mode=append)
  # shellcheck disable=SC2206
  [ -n "${extra_sbatch[all]:-}" ] && args+=(${extra_sbatch[all]})
  # shellcheck disable=SC2206
  [ -n "${extra_sbatch[$s]:-}" ] && args+=(${extra_sbatch[$s]})
  # CAIRN_HOME and CAIRN_BIN_DIR travel through the environment (exported above), not in --export's list, which
  # splits at commas: a checkout path with a comma broke every job.
  exports=ALL
  if [ "$s" = eval ] && [ "$watch_eval" = 1 ]; then
    exports+=,CAIRN_WATCH_EVAL=1
    is_selected train && exports+=,CAIRN_WATCH_JOB=${job_of[train]}
  fi
  args+=(--export="$exports" "$CAIRN_HOME/slurm/$s.sbatch" "${tool_args[@]}")
  if [ "$dry" = 1 ]; then
    job_of[$s]="\$JOB_${s^^}"
    echo "JOB_${s^^}=\$($(cairn_shell_words "${args[@]}"))"
    continue
  fi
  if ! jid=$("${args[@]}"); then
    # Never leave half a pipeline queued.
    cancel_submitted > /dev/null
    CAIRN_DIE_CODE=1 cairn_die "sbatch failed for stage $s; cancelled the jobs already submitted"
  fi
  jid=${jid%%;*}
  echo "$jid" >> "$submitted"
  job_of[$s]=$jid
  log_of[$s]="$run/logs/$s-$jid.out"
  dep_of[$s]=$dep
  cmds+=("$(cairn_shell_words "${args[@]}")")
  echo "submitted $s as job $jid${dep:+ ($dep)}; log $run/logs/$s-$jid.out"
done
[ "$dry" = 1 ] && exit 0

ids=$(IFS=,; for s in "${selected[@]}"; do printf '%s\n' "${job_of[$s]}"; done | paste -sd,)
watch="squeue -j $ids -o '%.10i %.14j %.9T %.10M %.20R'"

# pipeline.json: what was submitted, so scripts (nightly.sh, tests, people) can follow the run.
{
  echo "{"
  echo "  \"submitted_at\": $(cairn_json_str "$(date -u +%Y-%m-%dT%H:%M:%SZ)"),"
  echo "  \"config\": $(cairn_json_str "$config"),"
  printf '  "sets": ['; sep=""
  for ((i = 1; i < ${#sets[@]}; i += 2)); do printf '%s%s' "$sep" "$(cairn_json_str "${sets[$i]}")"; sep=", "; done
  echo "],"
  echo "  \"run_dir\": $(cairn_json_str "$run"),"
  echo "  \"cluster\": $(cairn_json_str "${SLURM_CLUSTER_NAME:-$(scontrol show config 2>/dev/null | sed -n 's/^ClusterName *= *//p')}"),"
  echo "  \"eval_watch\": $([ "$watch_eval" = 1 ] && echo true || echo false),"
  echo "  \"stages\": ["
  n=${#selected[@]}; i=0
  for s in "${selected[@]}"; do
    i=$((i + 1))
    printf '    {"stage": %s, "job_id": %s, "dependency": %s, "log": %s, "command": %s}%s\n' \
      "$(cairn_json_str "$s")" "${job_of[$s]}" "$(cairn_json_str "${dep_of[$s]}")" \
      "$(cairn_json_str "${log_of[$s]}")" "$(cairn_json_str "${cmds[$((i - 1))]}")" "$([ $i -lt $n ] && echo ,)"
  done
  echo "  ],"
  echo "  \"watch\": $(cairn_json_str "$watch")"
  echo "}"
} > "$run/pipeline.json.tmp"
# An earlier submission's record is kept in logs/ (a resubmission of some stages used to overwrite the history).
if [ -f "$run/pipeline.json" ]; then
  mv "$run/pipeline.json" "$run/logs/pipeline-$(date -u +%Y%m%dT%H%M%SZ)-$$.json" 2>/dev/null || true
fi
mv "$run/pipeline.json.tmp" "$run/pipeline.json"
trap - TERM INT HUP
rm -f "$submitted"
exec {submit_lock}>&-
echo "run directory $run (pipeline.json written)"
echo "watch: $watch"

[ "$wait_jobs" = 1 ] || exit 0

# --wait: follow the jobs through squeue/scontrol (no accounting database needed).
job_exit() { scontrol show job "$1" 2>/dev/null | grep -o ' ExitCode=[0-9:]*' | head -1 | cut -d= -f2 || true; }
final_state() {
  case "$1" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) return 0 ;; esac
  return 1
}
declare -A state_of=()
poll=${CAIRN_POLL_S:-2}
# How long the controller may stay silent before --wait gives up (the jobs may still be running).
silent_limit=${CAIRN_WAIT_CONTROLLER_S:-900}
silent_since=""
while :; do
  pending=0 unanswered=0
  for s in "${selected[@]}"; do
    [ -n "${state_of[$s]:-}" ] && continue
    st=$(cairn_job_state "${job_of[$s]}")
    if [ -z "$st" ]; then
      unanswered=1 pending=$((pending + 1))
    elif [ "$st" = PURGED ]; then
      state_of[$s]=UNKNOWN   # purged from the controller (MinJobAge passed): nothing more to learn
    elif final_state "$st"; then
      state_of[$s]=$st
      echo "$s (job ${job_of[$s]}): $st$([ "$st" != COMPLETED ] && echo " exit $(job_exit "${job_of[$s]}")")"
    else
      pending=$((pending + 1))
    fi
  done
  if [ "$unanswered" = 1 ]; then
    if [ -z "$silent_since" ]; then
      silent_since=$SECONDS
      echo "the Slurm controller does not answer (scontrol show job); still waiting"
    elif [ $((SECONDS - silent_since)) -ge "$silent_limit" ]; then
      echo "INFRA: the Slurm controller has not answered for $((SECONDS - silent_since)) s (CAIRN_WAIT_CONTROLLER_S=$silent_limit); the jobs may still be running: $watch"
      exit 1
    fi
  elif [ -n "$silent_since" ]; then
    echo "the Slurm controller answers again (after $((SECONDS - silent_since)) s)"
    silent_since=""
  fi
  [ "$pending" -eq 0 ] && break
  sleep "$poll"
done

rc=0 failed="" cancelled=""
for s in "${selected[@]}"; do
  case "${state_of[$s]}" in
    COMPLETED) ;;
    CANCELLED) cancelled+=" $s"; rc=1 ;;
    *) failed+=" $s"; rc=1 ;;
  esac
done
for s in $failed; do
  echo "FAILED: stage $s (job ${job_of[$s]}, ${state_of[$s]}, exit $(job_exit "${job_of[$s]}")); log: ${log_of[$s]}"
  # The tool's own message (cairn-<tool>: ...) or the stage's (cairn <stage>: ..., e.g. a launcher that returned 0
  # having run nothing) says why; the log's end says how it ended.
  # On a multi-rank job the error carries its rank ([r0/2 host] cairn-train: ...), rank 0's log lines do not.
  { grep -E '^(\[r[0-9]+/[0-9]+ [^]]*\] )?cairn[- ][a-z]+: ' "${log_of[$s]}" | awk '!seen[$0]++' | tail -n 3
    tail -n 3 "${log_of[$s]}"; } 2>/dev/null | awk '!seen[$0]++ { print "  | " $0 }' || true
done
[ -n "$cancelled" ] && echo "cancelled:$cancelled (a stage they depend on failed, or scancel)"
[ "$rc" -eq 0 ] && echo "pipeline COMPLETED: $run"
exit "$rc"
