# Stage body: measure the fabric with cairn-sweep on every rank -> <run>/sweep/fabric.toml.
# shellcheck shell=bash
# Sourced by slurm/sweep.sbatch and slurm/run-local.sh; "$@" are the tool args (--config/--set/--out).
cairn_stage_sweep() {
  local bin rc=0
  bin=$(cairn_stage_tool sweep sweep) || return "${CAIRN_MISSING_RC:-1}"
  cairn_stage_begin
  cairn_launch "$bin" "$@" || rc=$?
  cairn_stage_check sweep "$rc"
}
