# Functions shared by scripts/slurm-local.sh and scripts/slurm-cluster.sh (sourced; the caller sets PROG first).
# shellcheck shell=bash
# Packages, free ports, munged, stopping daemons by PID file, and finding the job processes of an instance
# by the SLURM_CONF in their environment (never by name machine-wide).

SLURM_PACKAGES=(slurmctld slurmd slurm-client munge)

die() { echo "$PROG: $*" >&2; exit 1; }
note() { echo "$PROG: $*" >&2; }

# The slurm.conf settings every throwaway instance shares (slurm-local.sh, slurm-cluster.sh add their nodes,
# ports, paths and failure policy around them).
slurm_conf_common() {
  cat <<'EOF'
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# No cgroups in containers: track processes by parent PID, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# Debian's Open MPI is built against PMIx; srun --mpi=pmix wires it up.
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The node may declare more CPUs than the machine has (tests run several ranks on 2 cores).
SlurmdParameters=config_overrides
# A job whose dependency can never be satisfied is cancelled instead of pending forever.
DependencyParameters=kill_invalid_depend
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=2
# Keep finished jobs visible to squeue/scontrol for 10 minutes (there is no sacct here).
MinJobAge=600
KillWait=5
InactiveLimit=0
EOF
}

packages_missing() {
  local p
  for p in "${SLURM_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# Installs the Slurm and munge packages; package scripts must not start system daemons (containers
# have no init, and a real host must keep its own), so a policy-rc.d denies them for the install.
install_packages() {
  local missing
  missing=$(packages_missing | tr '\n' ' ')
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    note "missing packages: $missing (install them as root: apt-get install --no-install-recommends $missing)"
    exit 77
  fi
  note "installing $missing"
  local made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  local ok=1
  # shellcheck disable=SC2086
  if ! apt-get install -y -qq --no-install-recommends $missing >&2; then
    # shellcheck disable=SC2086
    { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends $missing >&2; } || ok=0
  fi
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ "$ok" = 1 ] || die "could not install $missing (apt-get failed; see above)"
  return 0
}

# A port is free when nothing listens on it and no socket (TIME_WAIT included) holds it.
port_free() {
  if command -v ss >/dev/null; then
    ! ss -Htan "( sport = :$1 )" 2>/dev/null | grep -q .
  else
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}

# Two consecutive free TCP ports below Linux's ephemeral range (32768+), so neither concurrent
# instances, a real slurm on 6817/6818 nor outgoing connections clash with them.
pick_ports() {
  local base
  for _ in $(seq 1 50); do
    base=$(( 10000 + (RANDOM % 11000) * 2 ))
    if port_free "$base" && port_free $((base + 1)); then
      echo "$base"; return 0
    fi
  done
  die "no free TCP port pair found"
}


# In `run` mode the daemons get SIGTERM if this script dies without its cleanup (SIGKILL, e.g. a
# ctest timeout), so no slurmctld/slurmd/munged outlives it. `start` leaves them running on purpose.
orphan_guard() {
  if [ "${ORPHAN_GUARD:-0}" = 1 ] && setpriv --help 2>/dev/null | grep -q -- --pdeathsig; then
    echo "setpriv --pdeathsig TERM"
  fi
}

# munged refuses insecure paths: its dir must belong to the munge user and not be group/other
# writable, and every parent must be traversable by it.
start_munge() {
  local dir=$1 user=munge
  id "$user" >/dev/null 2>&1 || user=$(id -un)
  mkdir -p "$dir/munge"
  chmod 755 "$dir/munge"
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 600 "$dir/munge/munge.key"
  if [ "$(id -u)" -eq 0 ]; then
    chown -R "$user:" "$dir/munge"
  fi
  local cmd=(munged -F --socket="$dir/munge/munge.socket.2" --key-file="$dir/munge/munge.key"
             --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log"
             --seed-file="$dir/munge/munged.seed")
  # shellcheck disable=SC2046
  if [ "$(id -u)" -eq 0 ] && [ "$user" != root ]; then
    setpriv --reuid="$user" --regid="$user" --init-groups $(orphan_guard) "${cmd[@]}" >/dev/null 2>&1 &
  else
    $(orphan_guard) "${cmd[@]}" >/dev/null 2>&1 &
  fi
  echo $! > "$dir/run/munged.pid"
  for _ in $(seq 1 100); do
    if munge -n -S "$dir/munge/munge.socket.2" 2>/dev/null | unmunge -S "$dir/munge/munge.socket.2" >/dev/null 2>&1; then
      return 0
    fi
    kill -0 "$(cat "$dir/run/munged.pid")" 2>/dev/null || break
    sleep 0.1
  done
  cat "$dir/munge/munged.log" >&2 2>/dev/null || true
  die "munged did not come up (log above)"
}

stop_pid_file() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# instance_procs CONF: the pids of slurmstepd and job processes (SLURM_JOB_ID in their environment) whose
# environment has SLURM_CONF=CONF; never this script or its ancestors. slurmstepd inherits slurmd's
# SLURM_CONF, and jobs the submitter's (sbatch exports it), so this finds one instance's processes only.
instance_procs() {
  local conf=$1 f pid skip=" $$ " p=$$
  while [ "$p" -gt 1 ] 2>/dev/null; do
    p=$(awk '{ print $4 }' "/proc/$p/stat" 2>/dev/null) || break
    skip+="$p "
  done
  # (grep exits 2 when a process ends while it reads: not an error here.)
  { grep -lzsx -F "SLURM_CONF=$conf" /proc/[0-9]*/environ 2>/dev/null || true; } | while IFS= read -r f; do
    pid=${f#/proc/}; pid=${pid%/environ}
    [[ "$skip" == *" $pid "* ]] && continue
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmstepd ] || grep -qzs '^SLURM_JOB_ID=' "$f"; then
      echo "$pid"
    fi
  done
}

# kill_instance_procs CONF: SIGTERM to the instance's slurmstepd and job processes, SIGKILL after 5 s.
kill_instance_procs() {
  local conf=$1 pids left
  pids=$(instance_procs "$conf" | tr '\n' ' ')
  [ -n "${pids// }" ] || return 0
  note "ending $(wc -w <<<"$pids") leftover job process(es) of $(dirname "$conf"): $pids"
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 1 50); do
    left=""
    for p in $pids; do kill -0 "$p" 2>/dev/null && left+="$p "; done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -KILL $left 2>/dev/null || true
}

# Ends the job processes of instances whose daemons are gone: their config is one this script wrote
# (or its temp dir was removed) and no slurmctld of theirs is alive.
#   reap_dead_instances [GENERATOR_ERE [DIR_ERE]]: whose configs count (the header line's script name, and a
#   removed instance's temp dir name); by default slurm-local.sh's alone.
reap_dead_instances() {
  local conf d pid gen=${1:-slurm-local\.sh} dirs=${2:-cairn-slurm\.[^/]*}
  { grep -hzso '^SLURM_CONF=.*' /proc/[0-9]*/environ 2>/dev/null || true; } | tr '\0' '\n' | sed 's/^SLURM_CONF=//' | sort -u |
  while IFS= read -r conf; do
    d=$(dirname "$conf")
    if [ -f "$conf" ]; then
      grep -Eq "^# Generated by scripts/($gen)" "$conf" 2>/dev/null || continue
      pid=$(cat "$d/run/slurmctld.daemon" 2>/dev/null) || pid=""
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then continue; fi
      # Not yet started (munged up, slurmctld not yet): it has no jobs, and so nothing to reap.
      [ -f "$d/run/munged.pid" ] && [ ! -f "$d/log/slurmctld.out" ] && continue
    else
      [[ "$conf" =~ /($dirs)/slurm\.conf$ ]] || continue
    fi
    kill_instance_procs "$conf"
  done
}
