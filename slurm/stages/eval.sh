# Stage body: evaluate checkpoints with cairn-eval -> <run>/eval/.
# shellcheck shell=bash
# With CAIRN_WATCH_EVAL=1 it follows a running training job (--watch <run>/train: each new complete
# checkpoint, until train/FINISHED or [eval] idle_timeout); otherwise it evaluates the checkpoints
# present now. Checkpoints already in eval/results.jsonl are skipped, so a rerun or requeue resumes.
cairn_stage_eval() {
  local bin train=$CAIRN_RUN_DIR/train rc=0 guard=""
  bin=$(cairn_stage_tool eval eval) || return "${CAIRN_MISSING_RC:-1}"
  cairn_stage_begin
  if [ "${CAIRN_WATCH_EVAL:-0}" != 1 ]; then
    # Positionals first: --set takes every word after it.
    cairn_launch "$bin" "$train/ckpt" "$@" || rc=$?
    cairn_stage_check eval "$rc"
    return
  fi
  mkdir -p "$train" "$CAIRN_RUN_DIR/logs"
  # Following a Slurm job (submit-pipeline.sh --eval-watch passes its id): if training ends without
  # finishing (failed, cancelled, timed out for good), stop watching instead of idling for an hour. That stop is
  # the watch's end, not an eval failure: the job ends COMPLETED with what it evaluated (it ended FAILED, killed,
  # and --wait listed eval beside the training that actually failed).
  local stopped=$CAIRN_RUN_DIR/logs/.eval-watch-stopped.$$
  rm -f "$stopped"
  if [ -n "${CAIRN_WATCH_JOB:-}" ] && command -v scontrol >/dev/null; then
    cairn_watch_guard "$CAIRN_WATCH_JOB" "$$" "$stopped" &
    guard=$!
  fi
  cairn_launch "$bin" "$@" --watch "$train" || rc=$?
  if [ -n "$guard" ]; then kill "$guard" 2>/dev/null || true; fi
  if [ -s "$stopped" ]; then
    cairn_log "eval: stopped watching: the training job $CAIRN_WATCH_JOB ended $(cat "$stopped"); checkpoints evaluated before that are in $CAIRN_RUN_DIR/eval/results.jsonl"
    rm -f "$stopped"
    return 0
  fi
  cairn_stage_check eval "$rc"
}

# cairn_watch_guard JOBID PID MARKER: once JOBID is in a final state other than COMPLETED, writes that state to
# MARKER and sends PID (the eval stage's shell, which relays it to the launcher) SIGTERM. A controller that does not
# answer is asked again (one silent poll ended the guard, and a training failure after it left eval idling for
# [eval] idle_timeout); a job the controller no longer knows ends it.
cairn_watch_guard() {
  local st
  while sleep "${CAIRN_POLL_S:-10}"; do
    st=$(cairn_job_state "$1")
    case "$st" in
      FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)
        cairn_log "eval: the training job $1 ended $st; stopping the watch"
        echo "$st" > "$3"
        kill -TERM "$2" 2>/dev/null
        return 0 ;;
      COMPLETED|PURGED) return 0 ;;
    esac
  done
}
