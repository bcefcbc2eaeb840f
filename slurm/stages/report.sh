# Stage body: render the run's report with cairn-report -> <run>/report/; with CAIRN_BASELINE_DIR
# shellcheck shell=bash
# set, compares against that run and applies [report.gates] (exit 3 when a gate fails).
cairn_stage_report() {
  local bin extra=() rc=0
  bin=$(cairn_stage_tool report report) || return "${CAIRN_MISSING_RC:-1}"
  if [ -n "${CAIRN_BASELINE_DIR:-}" ]; then
    extra=(--baseline "$CAIRN_BASELINE_DIR")
  fi
  # The run directory first: --set takes every word after it.
  cairn_stage_begin
  cairn_launch_one "$bin" "$CAIRN_RUN_DIR" "$@" "${extra[@]}" || rc=$?
  cairn_stage_check report "$rc"
}
