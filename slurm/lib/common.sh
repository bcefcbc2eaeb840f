# Shared shell functions for the stage templates, submit-pipeline.sh, nightly.sh and run-local.sh.
# shellcheck shell=bash disable=SC2034
# Sourced, never executed. Everything a stage needs to know about the config comes from a cairn
# tool's own --print-config output: this file never parses the user's TOML.
#
# Environment it honours (all optional):
#   CAIRN_HOME        the cairn checkout or install prefix (holds slurm/ and, by default, build/bin)
#   CAIRN_BIN_DIR     where the cairn-* binaries are (default: $CAIRN_HOME/build/bin, then PATH)
#   CAIRN_MODULES     environment modules to `module load` before running (sites with Lmod/Tcl modules)
#   CAIRN_ENV_FILE    a shell file sourced before running (conda/spack activation, site settings)
#   CAIRN_LAUNCHER    srun | mpirun | none (default: srun inside a Slurm job, else mpirun)
#   CAIRN_SRUN_MPI    srun's --mpi plugin (default pmix: Debian's Open MPI is built with PMIx)
#   CAIRN_SRUN_ARGS   extra srun arguments (word-split), e.g. "--cpu-bind=cores"
#   CAIRN_NP          ranks for mpirun in local mode (default 2)
#   CAIRN_MPIRUN_ARGS extra mpirun arguments (word-split), e.g. "--oversubscribe"
# The tools read every CAIRN_<SECTION>_<KEY> variable as config (CAIRN_TRAIN_STEPS=10), so the
# scripts' own variables never start with a section name (run, eval, report, ...) and CAIRN_RUN_DIR
# stays a plain shell variable, never exported.

CAIRN_STAGES=(sweep plan reshard train eval report)
# cairn-train's documented exit code for "checkpointed after SIGUSR1/SIGTERM, requeue me" (EX_TEMPFAIL).
CAIRN_EXIT_REQUEUE=75

# Prints a script's header comment (everything after line 1 up to the first non-comment line) as help.
cairn_usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1" >&2
}

# The time without a child process: scancel signals every process of the job, and a `date` it catches mid-way left
# "cairn[]" in the log.
cairn_log() {
  local now
  TZ=UTC printf -v now '%(%H:%M:%S)T' -1
  echo "cairn[$now] $*" >&2
}
cairn_die() { echo "cairn: $*" >&2; exit "${CAIRN_DIE_CODE:-1}"; }

# cairn_job_state JOB: the job's state; PURGED when the controller no longer knows the job (MinJobAge passed); "" when
# the controller did not answer (restarting, overloaded): callers ask again. Never fails (set -e, pipefail).
cairn_job_state() {
  local out
  if out=$(scontrol show job "$1" 2>&1); then
    grep -o 'JobState=[A-Z_]*' <<<"$out" | head -1 | cut -d= -f2 || true
  elif grep -q 'Invalid job id' <<<"$out"; then
    echo PURGED
  fi
}

# The settings the scripts do arithmetic or sleep with, and the launcher: a bad value is a usage error (exit 2) naming
# it, not an arithmetic error that ends a loop early (run-local.sh then said "ran nothing" and exited 0).
cairn_check_env_values() {
  local v
  for v in CAIRN_MTIME_SLACK_S CAIRN_NP CAIRN_WAIT_CONTROLLER_S; do
    [ -z "${!v:-}" ] || [[ ${!v} =~ ^[0-9]+$ ]] ||
      CAIRN_DIE_CODE=2 cairn_die "$v must be a whole number (got '${!v}')"
  done
  [ -z "${CAIRN_POLL_S:-}" ] || [[ $CAIRN_POLL_S =~ ^[0-9]+([.][0-9]+)?$ ]] ||
    CAIRN_DIE_CODE=2 cairn_die "CAIRN_POLL_S must be a number of seconds (got '$CAIRN_POLL_S')"
  # A misspelt launcher was found only when the train stage launched: exit 1, after the stages before it had run.
  case "${CAIRN_LAUNCHER:-srun}" in
    srun | mpirun | none) ;;
    *) CAIRN_DIE_CODE=2 cairn_die "CAIRN_LAUNCHER must be srun, mpirun or none (got '$CAIRN_LAUNCHER')" ;;
  esac
}

# Finds CAIRN_HOME: the env var, else the folder above this file.
cairn_find_home() {
  if [ -z "${CAIRN_HOME:-}" ]; then
    CAIRN_HOME=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  fi
  export CAIRN_HOME
}

# Site environment hook: modules and/or an env file, before any binary runs.
cairn_env_hook() {
  if [ -n "${CAIRN_MODULES:-}" ]; then
    if ! command -v module >/dev/null 2>&1 && [ -f /etc/profile.d/modules.sh ]; then
      # shellcheck disable=SC1091
      source /etc/profile.d/modules.sh
    fi
    command -v module >/dev/null 2>&1 || cairn_die "CAIRN_MODULES is set but the 'module' command is missing"
    # shellcheck disable=SC2086
    module load $CAIRN_MODULES
  fi
  if [ -n "${CAIRN_ENV_FILE:-}" ]; then
    [ -r "$CAIRN_ENV_FILE" ] || CAIRN_DIE_CODE=2 cairn_die "CAIRN_ENV_FILE \"$CAIRN_ENV_FILE\" is not a readable file"
    # A site's env file (conda, modules) is written for interactive shells: a failing test or an unset variable in it
    # must not end the job silently under this script's set -euo pipefail.
    local flags=$- env_rc=0
    set +euo pipefail
    # shellcheck disable=SC1090
    source "$CAIRN_ENV_FILE" || env_rc=$?
    set -o pipefail
    [[ $flags == *e* ]] && set -e
    [[ $flags == *u* ]] && set -u
    [ "$env_rc" -eq 0 ] || cairn_log "warning: CAIRN_ENV_FILE \"$CAIRN_ENV_FILE\" ended with status $env_rc; continuing"
    cairn_check_env_values
  fi
  # Open MPI refuses to run as root unless told; containers and CI often are root.
  if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
}

# Prints the path of cairn-<tool>, or returns 1 if it is not built/installed.
cairn_tool() {
  local name=cairn-$1 dir
  for dir in "${CAIRN_BIN_DIR:-}" "$CAIRN_HOME/build/bin"; do
    if [ -n "$dir" ] && [ -x "$dir/$name" ]; then echo "$dir/$name"; return 0; fi
  done
  command -v "$name" 2>/dev/null && return 0
  return 1
}

# Prints the first available cairn tool (every tool validates and prints the whole config).
cairn_any_tool() {
  local t
  for t in report plan train eval reshard sweep; do
    cairn_tool "$t" && return 0
  done
  return 1
}

# cairn_print_config ARGS...: the effective config as the tools see it (TOML with origin comments).
cairn_print_config() {
  local tool
  tool=$(cairn_any_tool) || cairn_die "no cairn-* binary found (looked in ${CAIRN_BIN_DIR:-<unset>}, $CAIRN_HOME/build/bin and PATH); build first"
  "$tool" "$@" --print-config
}

# cairn_config_value SECTION KEY < printed-config: prints the value of SECTION.KEY from a tool's
# --print-config output (strings unquoted; empty when declared but unset). Returns 1 if the key is
# not declared (not printed) at all.
cairn_config_value() {
  awk -v want="[$1]" -v key="$2" '
    /^[[:space:]]*\[/ { sub(/[[:space:]]*#.*/, ""); gsub(/[[:space:]]/, ""); insec = ($0 == want); next }
    insec {
      line = $0
      # a declared key without a value prints as "# key = (unset)"
      if (match(line, "^#[[:space:]]*\"?" key "\"?[[:space:]]*=[[:space:]]*\\(unset\\)")) { print ""; found = 1; exit }
      if (match(line, "^[[:space:]]*\"?" key "\"?[[:space:]]*=[[:space:]]*")) {
        v = substr(line, RLENGTH + 1)
        if (v ~ /^"/) {
          out = ""; i = 2
          while (i <= length(v)) {
            c = substr(v, i, 1)
            if (c == "\\") {
              i++; c = substr(v, i, 1)
              if (c == "n") c = "\n"; else if (c == "t") c = "\t"; else if (c == "r") c = "\r"
              else if (c == "b") c = "\b"; else if (c == "f") c = "\f"; else if (c == "e") c = "\033"
              else if (c == "u" && substr(v, i + 1, 2) == "00") {  # a control character the printer escaped
                h = tolower(substr(v, i + 3, 2)); n = 0
                for (k = 1; k <= 2; k++) n = n * 16 + index("0123456789abcdef", substr(h, k, 1)) - 1
                c = sprintf("%c", n); i += 4
              }
            }
            else if (c == "\"") break
            out = out c; i++
          }
          print out
        } else {
          sub(/[[:space:]]*#.*/, "", v); sub(/[[:space:]]+$/, "", v); print v
        }
        found = 1; exit
      }
    }
    END { exit found ? 0 : 1 }'
}

# A TOML basic string for --set values, so a path is never read as a number, date or boolean.
cairn_toml_str() {
  local s=$1
  s=${s//\\/\\\\}; s=${s//\"/\\\"}
  # Control characters (a tab, ESC, CR or newline in a path) as TOML's \uXXXX: raw, the value would not parse.
  if [[ $s == *[[:cntrl:]]* ]]; then
    local out="" c i
    for ((i = 0; i < ${#s}; i++)); do
      c=${s:i:1}
      if [[ $c == [[:cntrl:]] ]]; then printf -v c '\\u%04x' "'$c"; fi
      out+=$c
    done
    s=$out
  fi
  printf '"%s"' "$s"
}

# Makes a path absolute (relative to the current directory) without requiring it to exist.
cairn_abspath() {
  case "$1" in
    /*) echo "$1" ;;
    *) echo "$(pwd)/${1#./}" ;;
  esac
}

# cairn_resolve_run_dir ARGS...: sets CAIRN_RUN_DIR from the tools' view of [run] dir.
cairn_resolve_run_dir() {
  local printed dir
  printed=$(cairn_print_config "$@") || cairn_die "the config is not valid (see the tool's message above)"
  dir=$(cairn_config_value run dir <<<"$printed") || cairn_die "--print-config output has no [run] dir"
  CAIRN_RUN_DIR=$(cairn_abspath "$dir")
  CAIRN_PRINTED_CONFIG=$printed
}

# Which launcher: srun inside an allocation, mpirun otherwise.
cairn_launcher() {
  if [ -n "${CAIRN_LAUNCHER:-}" ]; then echo "$CAIRN_LAUNCHER"
  elif [ -n "${SLURM_JOB_ID:-}" ]; then echo srun
  else echo mpirun
  fi
}

# cairn_run_relaying_signals [--as SIG] [--repeat] CMD...: runs CMD in the background and relays SIGUSR1, SIGUSR2
# and SIGTERM to it, so a batch shell that Slurm signals (--signal=B:USR1@grace, scancel --signal=USR1 --batch)
# passes the signal to srun, which forwards it to every rank. Returns CMD's exit code.
#   --as SIG   USR1 and TERM reach CMD as SIG (USR2 as itself)
#   --repeat   once one has come, send it again every 2 s until CMD exits (a launcher that has not started its
#              ranks yet drops a signal)
# The traps go in before CMD starts: a signal in between is recorded and relayed as soon as CMD's pid is known,
# never lost. So is one the batch shell recorded earlier (CAIRN_SIGNAL_PENDING, see cairn_batch_prologue).
cairn_run_relaying_signals() {
  local rc=0 tick=0 sig pending
  CAIRN_RELAY_AS="" CAIRN_RELAY_REPEAT=0 CAIRN_RELAY_PID="" CAIRN_RELAY_GOT=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --as) CAIRN_RELAY_AS=$2; shift 2 ;;
      --repeat) CAIRN_RELAY_REPEAT=1; shift ;;
      *) break ;;
    esac
  done
  CAIRN_LAST_LAUNCHER=${1##*/}
  trap 'cairn_relay_signal USR1' USR1
  trap 'cairn_relay_signal USR2' USR2
  trap 'cairn_relay_signal TERM' TERM
  "$@" &
  CAIRN_RELAY_PID=$!
  # Signals recorded before the pid was known (here or in the batch prologue) are passed on now.
  pending=${CAIRN_SIGNAL_PENDING:-}
  CAIRN_SIGNAL_PENDING=""
  for sig in $pending; do cairn_relay_signal "$sig"; done
  if [ "$CAIRN_RELAY_REPEAT" = 1 ]; then
    # Polls rather than waits: the loop must wake up to repeat the signal (traps run between commands).
    while kill -0 "$CAIRN_RELAY_PID" 2>/dev/null; do
      if [ -n "$CAIRN_RELAY_GOT" ]; then
        tick=$((tick + 1))
        if [ $((tick % 10)) -eq 0 ]; then kill -s "${CAIRN_RELAY_AS:-USR1}" "$CAIRN_RELAY_PID" 2>/dev/null || true; fi
      fi
      sleep 0.2
    done
    wait "$CAIRN_RELAY_PID" || rc=$?
  else
    while :; do
      rc=0
      wait "$CAIRN_RELAY_PID" || rc=$?
      # wait returns early (status > 128) when a trapped signal arrives; keep waiting while it runs.
      kill -0 "$CAIRN_RELAY_PID" 2>/dev/null || break
    done
  fi
  CAIRN_RELAY_PID=""
  trap 'CAIRN_SIGNAL_PENDING=USR1' USR1
  trap 'CAIRN_SIGNAL_PENDING=TERM' TERM
  trap - USR2
  return "$rc"
}

# cairn_relay_signal SIG: the trap body of cairn_run_relaying_signals. Before the command's pid is known it only
# records SIG (CAIRN_SIGNAL_PENDING, a list); after, it sends SIG (or --as's signal) to the command.
cairn_relay_signal() {
  local sig=$1 to=$1
  if [ -z "${CAIRN_RELAY_PID:-}" ]; then
    CAIRN_SIGNAL_PENDING="${CAIRN_SIGNAL_PENDING:+$CAIRN_SIGNAL_PENDING }$sig"
    return 0
  fi
  if [ "$sig" != USR2 ]; then
    [ -n "${CAIRN_RELAY_AS:-}" ] && to=$CAIRN_RELAY_AS
    CAIRN_RELAY_GOT=1
    cairn_log "relaying SIG$sig to the ranks${CAIRN_RELAY_AS:+ as SIG$to}"
  fi
  kill -s "$to" "$CAIRN_RELAY_PID" 2>/dev/null || true
}

# Threads per rank follow the allocation's --cpus-per-task: srun does not bind ranks the way mpirun
# does, and OpenMP's default (every core of the node per rank) oversubscribes the node, which costs
# 10-50x with spinning threads. Since Slurm 22.05 srun also no longer inherits --cpus-per-task.
cairn_srun_environment() {
  if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}
    export SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK:-$SLURM_CPUS_PER_TASK}
  fi
}

# OpenMP threads wait for each other at the end of every parallel region (hundreds per training step). By default
# they spin there; when anything else wants the cores (another job on a shared node, a compile, the rank's own
# loader thread) the spinning thread holds the core the late one needs. Measured on 2 cores with one competing
# process, cairn-train at threads = 0 (2 threads): 2486 tokens/s spinning, 4006 passive; under heavier load 495-847
# against 1985. Idle, passive costs about 2 %. libgomp reads the policy when it loads, so the launcher sets it; a
# value the caller exported wins.
cairn_thread_environment() {
  export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
}

# cairn_srun_argv: sets CAIRN_SRUN_ARGV to the srun that starts a tool's ranks: PMIx wiring, and the whole step ended
# as soon as one rank exits non-zero or dies (--kill-on-bad-exit): a rank that crashed in MPI_Init otherwise leaves
# the others blocked in MPI until the job's time limit (seen on the test cluster). Ranks leave together through
# MPI_Finalize (a fence) on every planned exit, requeue (75) included, so none is cut short by it.
cairn_srun_argv() {
  # shellcheck disable=SC2206
  CAIRN_SRUN_ARGV=(srun --mpi="${CAIRN_SRUN_MPI:-pmix}" --kill-on-bad-exit=1 ${CAIRN_SRUN_ARGS:-})
}

# cairn_launch_argv: sets CAIRN_LAUNCH_ARGV to the command that starts a tool's ranks before the tool's own words:
# srun over the allocation, mpirun with CAIRN_NP local ranks, or nothing (launcher none); exports the thread settings.
cairn_launch_argv() {
  local launcher
  launcher=$(cairn_launcher)
  cairn_thread_environment
  # The launchers' extra arguments are word-split on purpose.
  # shellcheck disable=SC2206
  case "$launcher" in
    srun) cairn_srun_environment; cairn_srun_argv; CAIRN_LAUNCH_ARGV=("${CAIRN_SRUN_ARGV[@]}") ;;
    mpirun) CAIRN_LAUNCH_ARGV=(mpirun -np "${CAIRN_NP:-2}" -x OMP_WAIT_POLICY ${CAIRN_MPIRUN_ARGS:-}) ;;
    none) CAIRN_LAUNCH_ARGV=() ;;
    *) cairn_die "CAIRN_LAUNCHER must be srun, mpirun or none (got '$launcher')" ;;
  esac
}

# cairn_launch CMD...: runs CMD on every rank of the allocation (srun) or on CAIRN_NP local ranks.
cairn_launch() {
  cairn_launch_argv
  cairn_run_relaying_signals "${CAIRN_LAUNCH_ARGV[@]}" "$@"
}

# cairn_launch_one CMD...: a single-process tool (plan, report). Under Slurm it still goes through
# srun -n 1 so MPI initialises the same way on every site.
cairn_launch_one() {
  cairn_thread_environment
  case "$(cairn_launcher)" in
    srun)
      cairn_srun_environment
      cairn_srun_argv
      cairn_run_relaying_signals "${CAIRN_SRUN_ARGV[@]}" --ntasks=1 --nodes=1 "$@" ;;
    *) cairn_run_relaying_signals "$@" ;;
  esac
}

# cairn_stage_outputs STAGE: prints, one per line, the files STAGE's tool always writes when it succeeds; a
# leading "+" marks one it rewrites on every successful run (so one older than the stage's start is stale).
# Uses CAIRN_RUN_DIR and, for the dataset directory, CAIRN_PRINTED_CONFIG ([data] path, else <run>/data).
cairn_stage_outputs() {
  local run=$CAIRN_RUN_DIR data f
  case "$1" in
    sweep) for f in fabric.toml sweep.json; do echo "+$run/sweep/$f"; done ;;
    plan) for f in best.toml plans.json; do echo "+$run/plan/$f"; done ;;
    # cairn-reshard removes index.json first and writes it last, once every shard is complete.
    reshard)
      data=$(cairn_config_value data path <<<"${CAIRN_PRINTED_CONFIG:-}") || data=""
      echo "+$(cairn_abspath "${data:-$run/data}")/index.json" ;;
    # FINISHED is rewritten by every run that ends with 0 (even one that resumes at the last step); every run
    # appends a provenance line to metrics.jsonl.
    train) echo "+$run/train/FINISHED"; echo "$run/train/metrics.jsonl" ;;
    # A rerun that finds every checkpoint already evaluated leaves results.jsonl as it was.
    eval) echo "$run/eval/results.jsonl" ;;
    report) for f in index.html summary.md summary.json; do echo "+$run/report/$f"; done ;;
    *) return 1 ;;
  esac
}

# cairn_stage_begin: marks the start of a stage's tool in the run directory (CAIRN_STAGE_MARK), so that
# cairn_stage_check can tell this run's outputs from an earlier run's. The mark is a file on the run
# directory's file system, so its time comes from the same clock as the outputs' (a shared file system's
# server may be seconds apart from this node).
cairn_stage_begin() {
  mkdir -p "$CAIRN_RUN_DIR/logs"
  CAIRN_STAGE_MARK=$(mktemp "$CAIRN_RUN_DIR/logs/.stage-start.XXXXXX") || CAIRN_STAGE_MARK=""
}

# cairn_stage_check STAGE RC: the verdict on a stage whose tool (through its launcher) returned RC. A non-zero
# RC is returned as it is. With 0 every output of cairn_stage_outputs STAGE must exist, be non-empty and (those
# marked "+") not predate cairn_stage_begin by more than CAIRN_MTIME_SLACK_S (default 5) seconds; otherwise
# it says which and returns 1. A launcher can return 0 having run nothing (srun: "task 0 launch failed:
# Unspecified error"), and a job that did nothing must not end COMPLETED.
cairn_stage_check() {
  local stage=$1 rc=$2 out path fresh mark=${CAIRN_STAGE_MARK:-} bad="" t_mark="" t_path
  CAIRN_STAGE_MARK=""
  if [ -n "$mark" ]; then
    t_mark=$(stat -c %Y "$mark" 2>/dev/null) || t_mark=""
    rm -f "$mark"
  fi
  [ "$rc" -eq 0 ] || return "$rc"
  while IFS= read -r out; do
    fresh=0 path=$out
    if [ "${out:0:1}" = + ]; then fresh=1 path=${out:1}; fi
    if [ ! -e "$path" ]; then bad="\"$path\" is missing"
    elif [ ! -s "$path" ]; then bad="\"$path\" is empty"
    elif [ "$fresh" = 1 ] && [ -n "$t_mark" ]; then
      t_path=$(stat -c %Y "$path" 2>/dev/null) || t_path=0
      if [ $((t_path + ${CAIRN_MTIME_SLACK_S:-5})) -lt "$t_mark" ]; then
        bad="\"$path\" was not rewritten (it is from $(date -u -d "@$t_path" +%Y-%m-%dT%H:%M:%SZ), before this stage started)"
      fi
    fi
    if [ -n "$bad" ]; then break; fi
  done < <(cairn_stage_outputs "$stage")
  if [ -z "$bad" ]; then return 0; fi
  echo "cairn $stage: ${CAIRN_LAST_LAUNCHER:-the launcher} returned 0 but $bad" >&2
  return 1
}

# cairn_stage_tool STAGE TOOL: prints the binary path; when it is missing, says so and returns 1
# (run-local.sh treats that as "skip this stage" while tools are still landing).
cairn_stage_tool() {
  local path
  if path=$(cairn_tool "$2"); then echo "$path"; return 0; fi
  cairn_log "stage $1: cairn-$2 is not built (looked in ${CAIRN_BIN_DIR:-<CAIRN_BIN_DIR unset>}, $CAIRN_HOME/build/bin, PATH)"
  return 1
}

# Sources every stage body (each defines cairn_stage_<name> "ARGS...").
cairn_load_stages() {
  local s
  for s in "${CAIRN_STAGES[@]}"; do
    # shellcheck disable=SC1090
    source "$CAIRN_HOME/slurm/stages/$s.sh"
  done
}

# Prints a command line that a shell reads back as the same words; plain words stay unquoted, and so do a
# --dry-run's $JOB_X placeholders (followed by a comma or the word's end), so that they expand when pasted. Any
# other $ is quoted: a run directory named "a$b" must not become "a" in the pasted command.
cairn_shell_words() {
  local w out="" plain='^([][A-Za-z0-9_./:=,@%+-]|[$]JOB_[A-Z]+(,|$))+$'
  for w in "$@"; do
    if [[ "$w" =~ $plain ]]; then out+="$w "
    else out+="'${w//\'/\'\\\'\'}' "
    fi
  done
  echo "${out% }"
}

# Escapes a string for a JSON document.
cairn_json_str() {
  local s=$1
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; s=${s//$'\r'/\\r}
  printf '"%s"' "$s"
}

# Common prologue of every sbatch template: find CAIRN_HOME even though Slurm runs a copy of the
# script from its spool directory, load the site environment, resolve the run directory.
cairn_batch_prologue() {
  # Until a stage's command runs, remember USR1/TERM instead of dying of them (bash's default).
  trap 'CAIRN_SIGNAL_PENDING=USR1' USR1
  trap 'CAIRN_SIGNAL_PENDING=TERM' TERM
  cairn_env_hook
  cairn_resolve_run_dir "$@"
  mkdir -p "$CAIRN_RUN_DIR/logs"
  cairn_log "job ${SLURM_JOB_ID:-local} (${SLURM_JOB_NAME:-}) on ${SLURM_JOB_NODELIST:-$(hostname)}: ${SLURM_NTASKS:-?} tasks, restart ${SLURM_RESTART_COUNT:-0}, run dir $CAIRN_RUN_DIR"
}

cairn_find_home
cairn_check_env_values
