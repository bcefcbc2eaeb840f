# Shared helpers for the tests/slurm scripts: job-state polling without sacct, and assertions.
# shellcheck shell=bash
# Sourced by each test; expects SLURM_CONF to point at a running test cluster (scripts/slurm-local.sh).

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export BOOST_TEST_COLOR_OUTPUT=no
CAIRN_SOURCE_DIR=${CAIRN_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
CAIRN_BIN_DIR=${CAIRN_BIN_DIR:-$CAIRN_SOURCE_DIR/build/bin}
export CAIRN_SOURCE_DIR CAIRN_BIN_DIR

fail() { echo "FAIL: $*" >&2; dump_logs; exit 1; }
pass() { echo "ok: $*"; }

# Prints the Slurm daemons' log tails so a failure in CI shows why.
dump_logs() {
  local d=${CAIRN_SLURM_LOCAL_DIR:-}
  [ -n "$d" ] || return 0
  echo "---- slurmctld.log (tail) ----" >&2; tail -n 25 "$d/log/slurmctld.log" >&2 2>/dev/null || true
  echo "---- slurmd.log (tail) ----" >&2; tail -n 25 "$d/log/slurmd.log" >&2 2>/dev/null || true
}

# job_state JOBID -> PENDING/RUNNING/COMPLETED/FAILED/CANCELLED/... (from scontrol: no accounting here)
job_state() {
  scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2
}

job_field() {  # job_field JOBID Field -> value of Field=value in scontrol show job
  scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | grep "^$2=" | head -1 | cut -d= -f2-
}

# wait_job JOBID [TIMEOUT_S]: waits until the job reaches a final state; prints it.
wait_job() {
  local jid=$1 limit=${2:-600} t=0 st
  while :; do
    st=$(job_state "$jid")
    case "$st" in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) echo "$st"; return 0 ;;
    esac
    if [ "$t" -ge $((limit * 5)) ]; then echo "TIMEOUT_WAITING($st)"; return 1; fi
    sleep 0.2; t=$((t + 1))
  done
}

# wait_for DESCRIPTION TIMEOUT_S CMD...: polls CMD until it succeeds.
wait_for() {
  local what=$1 limit=$2 t=0; shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$t" -ge $((limit * 5)) ] && fail "timed out after ${limit}s waiting for $what"
    sleep 0.2; t=$((t + 1))
  done
}

have_tool() { [ -x "$CAIRN_BIN_DIR/cairn-$1" ]; }

# make_workdir NAME: a temp dir removed when the test passes and kept (path printed) when it fails.
make_workdir() {
  work=$(mktemp -d "/tmp/cairn-slurm-$1.XXXXXX")
  # shellcheck disable=SC2154  # rc is set inside the trap
  trap 'rc=$?; if [ $rc -eq 0 ]; then rm -rf "$work"; else echo "work dir kept: $work" >&2; fi; exit $rc' EXIT
}
