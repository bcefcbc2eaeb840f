# Shared helpers for the tests/slurm/cluster_* scripts, which run under scripts/slurm-cluster.sh run --.
# shellcheck shell=bash
# Sources lib.sh (job polling, assertions) and adds what a multi-node cluster needs: its daemons' logs on
# failure, node names, killing and restarting a node, the bytes that crossed the bridge.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ -n "${SLURM_CONF:-}" ] && [ -n "${CAIRN_SLURM_CLUSTER_DIR:-}" ] \
  || fail "SLURM_CONF/CAIRN_SLURM_CLUSTER_DIR not set: run under scripts/slurm-cluster.sh run --"
cluster=$CAIRN_SLURM_CLUSTER_DIR

# lib.sh's dump_logs knows one slurmd; here every node has its own log.
dump_logs() {
  local f
  for f in "$cluster/log/slurmctld.log" "$cluster"/log/slurmd-node*.log; do
    [ -f "$f" ] || continue
    echo "---- $(basename "$f") (tail) ----" >&2; tail -n 20 "$f" >&2
  done
}

cluster_script() { "${CAIRN_SLURM_CLUSTER:-$CAIRN_SOURCE_DIR/scripts/slurm-cluster.sh}" "$@"; }
node_kill() { cluster_script node-kill --dir "$cluster" "$1"; }
node_start() { cluster_script node-start --dir "$cluster" "$1"; }
node_state() { sinfo -h -n "$1" -o %T 2>/dev/null | head -1; }

# veth_bytes: bytes the nodes sent into the bridge (rx of the host end of every node's veth), summed: what
# crossed from one node's namespace to another's (or to the controller) went through them.
veth_bytes() {
  local id f sum=0
  id=$(basename "$cluster"); id=${id#cairn-cluster.}
  for f in /sys/class/net/cv-"$id"-*/statistics/rx_bytes; do
    [ -r "$f" ] && sum=$((sum + $(cat "$f")))
  done
  echo "$sum"
}
