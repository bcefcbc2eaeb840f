# Stage body: train with cairn-train on every rank -> <run>/train/ (metrics, checkpoints, FINISHED).
# shellcheck shell=bash
# Layers this run's plan (<run>/plan/best.toml, a [parallel] section) after the experiment config.
# cairn-train resumes from the newest complete checkpoint by itself (--resume auto), and on
# SIGUSR1/SIGTERM checkpoints and exits with CAIRN_EXIT_REQUEUE (75); the caller decides what then.
cairn_stage_train() {
  local bin best=$CAIRN_RUN_DIR/plan/best.toml extra=()
  bin=$(cairn_stage_tool train train) || return "${CAIRN_MISSING_RC:-1}"
  if [ -f "$best" ] && [ "${CAIRN_USE_PLAN:-1}" = 1 ]; then
    cairn_log "train: layering the plan $best"
    extra=(--config "$best")
  fi
  cairn_launch "$bin" "$@" "${extra[@]}"
}
