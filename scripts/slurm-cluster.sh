#!/usr/bin/env bash
# Starts a throwaway multi-node Slurm on this machine: each compute node a network namespace of its own.
#
#   scripts/slurm-cluster.sh run [--nodes N] [--cpus C] [--keep] -- CMD ARGS...
#       start a fresh instance, export SLURM_CONF and CAIRN_SLURM_CLUSTER_DIR, run CMD, tear everything
#       down (also on failure or Ctrl-C), exit with CMD's code. This is what tests/slurm/cluster_* use.
#   scripts/slurm-cluster.sh start [--nodes N] [--cpus C]   start and print `export SLURM_CONF=...`
#   scripts/slurm-cluster.sh stop --dir D                   cancel jobs, stop daemons, remove netns and bridge
#   scripts/slurm-cluster.sh node-kill --dir D NODE         SIGKILL every process of NODE (slurmd, steps, ranks)
#   scripts/slurm-cluster.sh node-start --dir D NODE        start NODE's slurmd again (Slurm still has it DOWN
#                                                           if it was set so: scontrol update ... state=resume)
#   scripts/slurm-cluster.sh check                          exit 0 if it can run here, else 77 saying why
#
# Default: a controller and 2 compute nodes (node1, node2) with 2 CPUs each. The controller (slurmctld, munged)
# stays in the root namespace on a private bridge (cbr-<id>, 198.18.<k>.1/24, from the benchmarking range
# 198.18.0.0/15, k chosen free); node i is the namespace cairn-<id>-n<i>: its own UTS name (node<i>), its own
# address 198.18.<k>.<i+1> on a veth into the bridge, loopback up, no default route, no NAT: nothing leaves the
# machine. Each node runs its own `slurmd -N node<i>` inside its namespace, so its job steps and ranks live
# there too: Open MPI ranks on one node share memory, ranks on different nodes talk TCP over the bridge (the
# jobs get OMPI_MCA_btl_tcp_if_include for that subnet from the TaskProlog). Munge's socket and the instance
# directory (/tmp/cairn-cluster.<id>) are the "shared file system"; each node gets a private $dir/tmp (a bind
# mount in its mount namespace: TmpFS, PMIx's and Open MPI's temp dirs are node-local, as on a real cluster) and
# a private /dev/shm.
#
# Exit 77 means "cannot run here" (not root, no ip/unshare, or the kernel/sandbox refuses namespaces); the
# reason is printed. Teardown ends every process in the instance's namespaces, then deletes them and the
# bridge; `start`/`run` first reap the namespaces, bridges and job processes of dead instances (a test killed
# with SIGKILL cannot clean up after itself). Shares packages/munge/PID helpers with slurm-local.sh.
set -euo pipefail
PROG=slurm-cluster
# shellcheck source=scripts/slurm-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm-common.sh"

GEN_ERE='slurm-(local|cluster)\.sh'
DIR_ERE='cairn-(slurm|cluster)\.[^/]*'

cannot() { note "cannot run here: $*"; exit 77; }

# Root, the tools, and namespaces the kernel lets us create (net, UTS, mount: what each node needs).
check_capable() {
  [ "$(id -u)" -eq 0 ] || cannot "needs root (network namespaces, bridges)"
  local c
  for c in ip unshare nsenter mount setpriv; do command -v "$c" >/dev/null || cannot "'$c' not found"; done
  local err
  err=$(unshare --net --uts --mount sh -c 'ip link set lo up && hostname cairn-probe && mount -t tmpfs none /mnt' 2>&1) \
    || cannot "unshare --net --uts --mount refused: $err"
}

# Instance names: id = the temp dir's suffix; interface names stay under 15 characters.
instance_id() { basename "$1" | sed 's/^cairn-cluster\.//'; }
bridge_of() { echo "cbr-$1"; }
netns_of() { echo "cairn-$1-n$2"; }
veth_of() { echo "cv-$1-$2"; }

# A /24 of 198.18.0.0/16 no interface here has an address in (another instance, or anything else).
pick_subnet() {
  local used k
  used=$(ip -4 -o addr show 2>/dev/null | awk '{ print $4 }')
  for _ in $(seq 1 100); do
    k=$((RANDOM % 256))
    grep -q "^198\.18\.$k\." <<<"$used" || { echo "198.18.$k"; return 0; }
  done
  die "no free /24 in 198.18.0.0/16"
}

# Bridge in the root namespace with the controller's address, one namespace + veth per node.
net_up() {
  local dir=$1 id=$2 nodes=$3 net=$4 br ns i err
  br=$(bridge_of "$id")
  err=$(ip link add "$br" type bridge 2>&1) || cannot "cannot create a bridge: $err"
  ip addr add "$net.1/24" dev "$br"
  ip link set "$br" up
  for i in $(seq 1 "$nodes"); do
    ns=$(netns_of "$id" "$i")
    err=$(ip netns add "$ns" 2>&1) || cannot "ip netns add refused: $err"
    ip link add "$(veth_of "$id" "$i")" type veth peer name eth0 netns "$ns"
    ip link set "$(veth_of "$id" "$i")" master "$br" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$net.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
}

# Ends every process in a namespace (repeatedly: a dying step may still fork) and deletes it.
netns_kill_all() {
  local ns=$1 pids
  for _ in $(seq 1 50); do
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [ -n "${pids// }" ] || return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  note "processes left in $ns: $pids"
}

net_down() {
  local id=$1 ns
  for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep "^cairn-$id-n[0-9]*\$" || true); do
    netns_kill_all "$ns"
    ip netns del "$ns" 2>/dev/null || true   # its eth0 goes with it, and so the veth's other end
  done
  ip link del "$(bridge_of "$id")" 2>/dev/null || true
}

# An instance is alive while the script that owns it or its slurmctld runs.
instance_alive() {
  local dir=/tmp/cairn-cluster.$1 pid
  for f in "$dir/run/owner.pid" "$dir/run/slurmctld.daemon"; do
    pid=$(cat "$f" 2>/dev/null) || continue
    kill -0 "$pid" 2>/dev/null && return 0
  done
  return 1
}

# Job processes of dead instances (both scripts'), then the namespaces and bridges of dead clusters.
reap_dead_clusters() {
  reap_dead_instances "$GEN_ERE" "$DIR_ERE"
  local id
  for id in $( { ip netns list 2>/dev/null | awk '{ print $1 }' | sed -n 's/^cairn-\([A-Za-z0-9]*\)-n[0-9]*$/\1/p'
                 ip -o link show type bridge 2>/dev/null | sed -n 's/^[0-9]*: cbr-\([A-Za-z0-9]*\)[:@].*/\1/p'; } | sort -u); do
    instance_alive "$id" && continue
    note "removing the network of dead instance $id"
    net_down "$id"
  done
}

write_config() {
  local dir=$1 cpus=$2 port=$3 nodes=$4 net=$5 i
  # Every PMIx fence a ring over all nodes of the step. Slurm's default ("mixed") runs fences without data as its
  # tree collective, and here that completes on each node alone (slurmd debug log: "COLL_FENCE_TREE ... local
  # delivery", no children): MPI_Init's closing barrier, which Open MPI relies on, then holds only the ranks of one
  # node, so a node whose ranks are through sends to a rank of the other node still in the modex fence, whose PML
  # has not registered its handlers yet: SIGSEGV at address 0 in MPI_Init (slurm/README.md).
  printf 'PMIxCliTmpDirBase=%s\nPMIxCollFence=ring\n' "$dir/tmp" > "$dir/mpi.conf"
  # Every task gets a temp dir of its job's own in the node-local tmp (as job_container/tmpfs gives on real clusters:
  # Open MPI's session directories of jobs that start and end at the same moment on a node never share a parent),
  # and Open MPI's TCP transport the cluster's subnet only. The nodes share this machine's cores (2 nodes x 2 CPUs
  # on 2 cores in CI), so a rank waiting for a message yields its core.
  cat > "$dir/task-prolog.sh" <<EOF
#!/bin/sh
mkdir -p "$dir/tmp/job\$SLURM_JOB_ID"
echo "export TMPDIR=$dir/tmp/job\$SLURM_JOB_ID"
echo "export OMPI_MCA_btl_tcp_if_include=$net.0/24"
echo "export OMPI_MCA_oob_tcp_if_include=$net.0/24"
echo "export OMPI_MCA_mpi_yield_when_idle=\${OMPI_MCA_mpi_yield_when_idle:-1}"
EOF
  chmod 755 "$dir/task-prolog.sh"
  cat > "$dir/slurm.conf" <<EOF
# Generated by scripts/slurm-cluster.sh: a $nodes-node test cluster living in $dir and its namespaces.
ClusterName=cairn-cluster
SlurmctldHost=$(hostname -s)($net.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
# Job ids of their own (see slurm-local.sh): job-keyed paths never clash between instances.
FirstJobId=$(( (port - 10000) * 2500 + 1 ))
# $dir/tmp is a different directory on every node (a bind mount in the node's mount namespace).
TmpFS=$dir/tmp
TaskProlog=$dir/task-prolog.sh
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket.2,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
$(slurm_conf_common)
# A node that stopped responding comes back by itself once its slurmd registers again; one set DOWN by
# an admin (or a test) stays DOWN until scontrol update nodename=... state=resume.
ReturnToService=1
SlurmdTimeout=300
# A batch job submitted with --requeue is requeued when a node of its allocation fails (goes DOWN).
JobRequeue=1
EOF
  for i in $(seq 1 "$nodes"); do
    echo "NodeName=node$i NodeAddr=$net.$((i + 1)) CPUs=$cpus State=UNKNOWN" >> "$dir/slurm.conf"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$dir/slurm.conf"
}

# start_node DIR NODE: slurmd -N NODE inside the node's namespaces (its net namespace, entered with nsenter, not
# `ip netns exec`, whose fresh /sys lacks the cgroup mounts slurmd wants; then UTS for its hostname and a mount
# namespace for its private $dir/tmp and /dev/shm); its steps and ranks inherit all three. A /dev/shm of its own
# keeps Open MPI's shared-memory segments (/dev/shm/vader_segment.<host>...) node-local: not shared with nodes of
# the same name in other instances, and gone with the node when it dies (a SIGKILLed rank leaves its segment).
start_node() {
  local dir=$1 node=$2 id i
  id=$(instance_id "$dir"); i=${node#node}
  mkdir -p "$dir/nodes/$node/tmp" "$dir/spool/$node"
  chmod 1777 "$dir/nodes/$node/tmp"
  # shellcheck disable=SC2016,SC2046
  $(orphan_guard) nsenter --net="/run/netns/$(netns_of "$id" "$i")" unshare --uts --mount sh -c \
    'mount --bind "$1/nodes/$2/tmp" "$1/tmp" && mount -t tmpfs -o mode=1777 "shm-$2" /dev/shm && hostname "$2" &&
     exec slurmd -D -N "$2" -f "$1/slurm.conf"' \
    sh "$dir" "$node" >> "$dir/log/slurmd-$node.out" 2>&1 &
  echo $! > "$dir/run/slurmd-$node.daemon"
  disown $!   # node-kill may end it from another process: no "Killed" notice from this shell
}

node_states() { sinfo -h -N -o '%N %T' 2>/dev/null | sort -u; }

# Starts slurmctld and every slurmd; returns 3 when the controller's port turned out to be taken.
start_slurm() {
  local dir=$1 nodes=$2 i states="" idle
  export SLURM_CONF=$dir/slurm.conf
  # shellcheck disable=SC2046
  $(orphan_guard) slurmctld -D -i -f "$SLURM_CONF" > "$dir/log/slurmctld.out" 2>&1 &
  echo $! > "$dir/run/slurmctld.daemon"
  for i in $(seq 1 "$nodes"); do start_node "$dir" "node$i"; done
  for _ in $(seq 1 300); do
    states=$(node_states)
    idle=$(grep -c ' idle$' <<<"$states" || true)
    [ "$idle" -eq "$nodes" ] && return 0
    if ! kill -0 "$(cat "$dir/run/slurmctld.daemon")" 2>/dev/null; then
      if grep -q "Address already in use" "$dir/log/slurmctld.out" 2>/dev/null; then
        stop_daemons "$dir"; return 3
      fi
      tail -n 30 "$dir/log/slurmctld.log" "$dir/log/slurmctld.out" >&2 2>/dev/null || true
      die "slurmctld exited during startup (log above)"
    fi
    for i in $(seq 1 "$nodes"); do
      if ! kill -0 "$(cat "$dir/run/slurmd-node$i.daemon")" 2>/dev/null; then
        tail -n 30 "$dir/log/slurmd-node$i.log" "$dir/log/slurmd-node$i.out" >&2 2>/dev/null || true
        die "slurmd of node$i exited during startup (log above)"
      fi
    done
    sleep 0.2
  done
  tail -n 30 "$dir/log/slurmctld.log" >&2 2>/dev/null || true
  die "nodes not idle after 60 s: $(tr '\n' ',' <<<"$states")"
}

stop_daemons() {
  local dir=$1 f
  for f in "$dir"/run/slurmd-node*.daemon; do [ -e "$f" ] && stop_pid_file "$f"; done
  stop_pid_file "$dir/run/slurmctld.daemon"
  return 0
}

# node_kill DIR NODE: the node dies: every process in its namespace (slurmd, slurmstepd, ranks) SIGKILLed, and its
# local state (temp dir, slurmd spool) is gone, as on a node that reboots with those on tmpfs: a dead step's PMIx
# socket left in the spool (stepd.slurm.pmix.<job>.<step>) fails the next launch of that step id on the node
# ("task 1 launch failed"), and a requeued job reuses its job id.
node_kill() {
  local dir=$1 node=$2
  netns_kill_all "$(netns_of "$(instance_id "$dir")" "${node#node}")"
  rm -f "$dir/run/slurmd-$node.daemon"
  find "$dir/nodes/$node/tmp" "$dir/spool/$node" -mindepth 1 -delete 2>/dev/null || true
}

# node_start DIR NODE: its slurmd again; returns once the controller has its registration (new start time).
node_start() {
  local dir=$1 node=$2 before now
  export SLURM_CONF=$dir/slurm.conf
  before=$(scontrol show node "$node" 2>/dev/null | grep -o 'SlurmdStartTime=[^ ]*' || true)
  start_node "$dir" "$node"
  for _ in $(seq 1 300); do
    now=$(scontrol show node "$node" 2>/dev/null | grep -o 'SlurmdStartTime=[^ ]*' || true)
    if [ -n "$now" ] && [ "$now" != "$before" ] && [ "$now" != "SlurmdStartTime=None" ]; then return 0; fi
    kill -0 "$(cat "$dir/run/slurmd-$node.daemon")" 2>/dev/null || { tail -n 20 "$dir/log/slurmd-$node.out" >&2; die "slurmd of $node exited"; }
    sleep 0.2
  done
  die "$node did not register with the controller within 60 s"
}

# Everything of the instance ends: a node's slurmd, steps and ranks all live in its namespace (they cannot leave
# it), so SIGKILL to every process there ends them at once, without waiting for jobs to cancel cleanly.
stop_all() {
  local dir=$1
  net_down "$(instance_id "$dir")"
  rm -f "$dir"/run/slurmd-node*.daemon
  stop_pid_file "$dir/run/slurmctld.daemon"
  stop_pid_file "$dir/run/munged.pid"
}

start_all() {
  local dir=$1 nodes=$2 cpus=$3 id net rc
  check_capable
  [ -z "$(packages_missing)" ] || install_packages
  reap_dead_clusters
  id=$(instance_id "$dir")
  mkdir -p "$dir"/{state,spool,log,run,tmp,nodes}
  chmod 711 "$dir"
  chmod 1777 "$dir/tmp"
  net=$(pick_subnet)
  echo "$net" > "$dir/run/subnet"
  net_up "$dir" "$id" "$nodes" "$net"
  start_munge "$dir"
  for _ in 1 2 3; do
    write_config "$dir" "$cpus" "$(pick_ports)" "$nodes" "$net"
    rc=0; start_slurm "$dir" "$nodes" || rc=$?
    [ "$rc" -eq 3 ] || return "$rc"
    note "port taken, retrying with other ports"
    rm -f "$dir/log/"slurm*.log
  done
  die "could not find a free port for slurmctld"
}

new_dir() { mktemp -d /tmp/cairn-cluster.XXXXXX; }

action=${1:-}
[ -n "$action" ] && shift
dir="" cpus=2 nodes=2 keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; break ;;
    *) case "$action" in run|node-kill|node-start) break ;; esac; die "unknown option '$1'" ;;
  esac
done
[[ "$nodes" =~ ^[1-9][0-9]?$ ]] || die "--nodes wants 1..99 (got '$nodes')"
[[ "$cpus" =~ ^[1-9][0-9]*$ ]] || die "--cpus wants a positive integer (got '$cpus')"

case "$action" in
  check) check_capable; note "ok: namespaces, bridges and veths can be made here" ;;
  start)
    dir=$(new_dir)
    mkdir -p "$dir/run"
    echo $$ > "$dir/run/owner.pid"
    start_all "$dir" "$nodes" "$cpus"
    rm -f "$dir/run/owner.pid"
    note "up: $nodes nodes with $cpus CPUs each; stop with: $0 stop --dir $dir"
    echo "export SLURM_CONF=$dir/slurm.conf CAIRN_SLURM_CLUSTER_DIR=$dir"
    ;;
  stop)
    [ -n "$dir" ] || die "stop needs --dir"
    stop_all "$(cd "$dir" && pwd)"
    ;;
  node-kill|node-start)
    if [ -z "$dir" ] || [ $# -ne 1 ]; then die "$action needs --dir D and a node name"; fi
    if ! [[ "$1" =~ ^node[0-9]+$ ]] || ! grep -q "^NodeName=$1 " "$dir/slurm.conf"; then
      die "no node '$1' in $dir/slurm.conf"
    fi
    if [ "$action" = node-kill ]; then node_kill "$(cd "$dir" && pwd)" "$1"; else node_start "$(cd "$dir" && pwd)" "$1"; fi
    ;;
  run)
    [ $# -gt 0 ] || die "run needs a command after --"
    dir=$(new_dir)
    mkdir -p "$dir/run"
    echo $$ > "$dir/run/owner.pid"
    ORPHAN_GUARD=1
    cleanup() {
      local rc=$?
      stop_all "$dir"
      rm -f "$dir/run/owner.pid"
      if [ "$keep" = 1 ] || { [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; }; then
        note "state kept in $dir (logs in $dir/log)"
      else
        rm -rf "$dir"
      fi
      exit "$rc"
    }
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    start_all "$dir" "$nodes" "$cpus"
    export CAIRN_SLURM_CLUSTER_DIR=$dir CAIRN_SLURM_LOCAL_DIR=$dir
    export CAIRN_SLURM_CLUSTER=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/slurm-cluster.sh
    set +e
    "$@"
    rc=$?
    set -e
    exit "$rc"
    ;;
  *)
    awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" >&2
    exit 2
    ;;
esac
