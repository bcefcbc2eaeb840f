# Stage body: train with cairn-train on every rank -> <run>/train/ (metrics, checkpoints, FINISHED).
# shellcheck shell=bash
# Layers this run's plan (<run>/plan/best.toml, a [parallel] section) after the experiment config.
# cairn-train resumes from the newest complete checkpoint by itself (--resume auto), and on
# SIGUSR1/SIGTERM checkpoints and exits with CAIRN_EXIT_REQUEUE (75); the caller decides what then.
#
# Signals and the launcher: a signal that reached the batch shell before the ranks start
# (CAIRN_SIGNAL_PENDING, trapped from the first line of train.sbatch) means do not start: return 75
# (requeue; nothing to save). Once started, SIGTERM and SIGUSR1 both reach the launcher as SIGUSR1,
# repeated every 2 s until it exits (cairn_run_relaying_signals --as USR1 --repeat): mpirun SIGKILLs the
# ranks a moment after forwarding SIGTERM and exits 1 (the checkpoint may be torn), but forwards SIGUSR1
# and exits with the ranks' code; a launcher that has not started its ranks yet drops a signal, so it is
# sent again (cairn-train treats both signals alike, and one more is harmless). cairn-train's
# <run>/train/STOPPED (written when it stops on a signal) restores 75 should a launcher still lose it, and ranks
# ended by the relayed signal itself (exit 138 or 143: it came before cairn-train's main installed its handlers)
# are a stop too.
# A launcher that returns 0 without FINISHED and metrics (a task launch that failed) fails the stage.
cairn_stage_train() {
  local bin best=$CAIRN_RUN_DIR/plan/best.toml extra=() rc=0 stopped=$CAIRN_RUN_DIR/train/STOPPED launch=()
  bin=$(cairn_stage_tool train train) || return "${CAIRN_MISSING_RC:-1}"
  if [ -f "$best" ] && [ "${CAIRN_USE_PLAN:-1}" = 1 ]; then
    cairn_log "train: layering the plan $best"
    extra=(--config "$best")
  fi
  if [ -n "${CAIRN_SIGNAL_PENDING:-}" ]; then
    cairn_log "train: SIG${CAIRN_SIGNAL_PENDING%% *} arrived before training started: not starting; exit $CAIRN_EXIT_REQUEUE (requeue)"
    CAIRN_SIGNAL_PENDING=""
    return "$CAIRN_EXIT_REQUEUE"
  fi
  # The launcher as cairn_launch (slurm/lib/common.sh) builds it.
  cairn_launch_argv
  launch=("${CAIRN_LAUNCH_ARGV[@]}")
  rm -f "$stopped"
  cairn_stage_begin
  cairn_run_relaying_signals --as USR1 --repeat "${launch[@]}" "$bin" "$@" "${extra[@]}" || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne "$CAIRN_EXIT_REQUEUE" ] && [ -f "$stopped" ]; then
    cairn_log "train: the launcher exited $rc but cairn-train stopped on a signal ($stopped); exit $CAIRN_EXIT_REQUEUE"
    rc=$CAIRN_EXIT_REQUEUE
  elif [ -n "${CAIRN_RELAY_GOT:-}" ] && { [ "$rc" -eq $((128 + 10)) ] || [ "$rc" -eq $((128 + 15)) ]; }; then
    # A stop signal relayed while the ranks were still loading (the first tens of milliseconds, before cairn-train's
    # main installs its handlers) ends them by the signal's default action: nothing was trained or written, so this
    # is a stop like any other (the job failed instead of being requeued when a preemption met a fresh start).
    cairn_log "train: the ranks ended by the relayed stop signal (exit $rc) before they could handle it: nothing was trained; exit $CAIRN_EXIT_REQUEUE"
    rc=$CAIRN_EXIT_REQUEUE
  fi
  cairn_stage_check train "$rc"
}
