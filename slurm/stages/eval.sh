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
  mkdir -p "$train"
  # Following a Slurm job (submit-pipeline.sh --eval-watch passes its id): if training ends without
  # finishing (failed, cancelled, timed out for good), stop watching instead of idling for an hour.
  if [ -n "${CAIRN_WATCH_JOB:-}" ] && command -v scontrol >/dev/null; then
    cairn_watch_guard "$CAIRN_WATCH_JOB" "$$" &
    guard=$!
  fi
  cairn_launch "$bin" "$@" --watch "$train" || rc=$?
  if [ -n "$guard" ]; then kill "$guard" 2>/dev/null || true; fi
  cairn_stage_check eval "$rc"
}

# cairn_watch_guard JOBID PID: sends PID SIGTERM once JOBID is in a final state other than COMPLETED.
cairn_watch_guard() {
  local st
  while sleep "${CAIRN_POLL_S:-10}"; do
    st=$(scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2)
    case "$st" in
      FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)
        cairn_log "eval: the training job $1 ended $st; stopping the watch"
        kill -TERM "$2" 2>/dev/null
        return 0 ;;
      ""|COMPLETED) return 0 ;;
    esac
  done
}
