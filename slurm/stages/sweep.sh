# Stage body: measure the fabric with cairn-sweep on every rank -> <run>/sweep/fabric.toml.
# shellcheck shell=bash
# Sourced by slurm/sweep.sbatch and slurm/run-local.sh; "$@" are the tool args (--config/--set/--out).
cairn_stage_sweep() {
  local bin
  bin=$(cairn_stage_tool sweep sweep) || return "${CAIRN_MISSING_RC:-1}"
  cairn_launch "$bin" "$@"
}
