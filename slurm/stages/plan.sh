# Stage body: choose the parallel layout with cairn-plan -> <run>/plan/best.toml.
# shellcheck shell=bash
# When this run's sweep measured the fabric and the config names none, the plan uses the measurement.
cairn_stage_plan() {
  local bin fabric=$CAIRN_RUN_DIR/sweep/fabric.toml configured extra=()
  bin=$(cairn_stage_tool plan plan) || return "${CAIRN_MISSING_RC:-1}"
  if [ -f "$fabric" ] && configured=$(cairn_config_value cluster fabric <<<"${CAIRN_PRINTED_CONFIG:-}") \
     && [ -z "$configured" ]; then
    cairn_log "plan: using this run's measured fabric $fabric"
    extra=(--set "cluster.fabric=$(cairn_toml_str "$fabric")")
  fi
  cairn_launch_one "$bin" "$@" "${extra[@]}"
}
