# Stage body: choose the parallel layout with cairn-plan -> <run>/plan/best.toml.
# shellcheck shell=bash
# When this run's sweep measured the fabric and the config names none, the plan uses the measurement.
cairn_stage_plan() {
  local bin fabric=$CAIRN_RUN_DIR/sweep/fabric.toml configured extra=() rc=0
  bin=$(cairn_stage_tool plan plan) || return "${CAIRN_MISSING_RC:-1}"
  if [ -f "$fabric" ] && configured=$(cairn_config_value cluster fabric <<<"${CAIRN_PRINTED_CONFIG:-}") \
     && [ -z "$configured" ]; then
    # A sweep whose every fit was rejected (a busy machine: time that does not grow with size) writes a fabric
    # without tier tables; the plan then keeps the cluster file's fabric instead of failing the pipeline.
    if grep -qE '^\[(intra|inter|world)\.' "$fabric"; then
      cairn_log "plan: using this run's measured fabric $fabric"
      extra=(--set "cluster.fabric=$(cairn_toml_str "$fabric")")
    else
      cairn_log "plan: warning: $fabric has no usable collective fit (see its 'skipped' list); using the cluster file's fabric"
    fi
  fi
  cairn_stage_begin
  cairn_launch_one "$bin" "$@" "${extra[@]}" || rc=$?
  cairn_stage_check plan "$rc"
}
