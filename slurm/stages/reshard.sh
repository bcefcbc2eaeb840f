# Stage body: tokenize the corpus named in [data] into shards with cairn-reshard -> <run>/data/
# shellcheck shell=bash
# (or [data] path). Ranks split the output shards; a rerun skips shards already complete.
cairn_stage_reshard() {
  local bin rc=0
  bin=$(cairn_stage_tool reshard reshard) || return "${CAIRN_MISSING_RC:-1}"
  cairn_stage_begin
  # The common options belong to the main command, before the subcommand.
  cairn_launch "$bin" "$@" build || rc=$?
  cairn_stage_check reshard "$rc"
}
