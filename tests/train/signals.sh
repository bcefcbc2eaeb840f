#!/usr/bin/env bash
# Stop signals at any moment of a cairn-train process (tests/train/loop_test.cpp covers the same in-process):
# start-up (right after the handlers are installed, before MPI starts), mid-run, after the last step, after
# FINISHED and just before MPI_Finalize; 1 rank directly, 2 ranks through mpirun, and the train stage of
# slurm/run-local.sh (which relays SIGTERM to mpirun). Never on a timer: tests/train's cairn-train-pausing (cairn-train's
# command line with a pausing TrainHooks::at; the installed binary has no such hook) pauses at a point named by
# CAIRNTEST_TRAIN_PAUSE and creates $CAIRNTEST_TRAIN_PAUSE_FILE.<pid>; the test signals once every rank is there
# (or, mid-run, once metrics.jsonl has 3 steps). Expected: before the first step 75 with nothing saved (STOPPED
# written), mid-run 75 with a checkpoint, from the last step on 0 with FINISHED.
# Usage: signals.sh <cairn-train-pausing>
set -euo pipefail
BIN=${CAIRN_BIN_DIR:?CAIRN_BIN_DIR must point at build/bin}
PAUSING=${1:?usage: signals.sh <cairn-train-pausing>}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d /tmp/cairn_train_signals.XXXXXX)
trap 'rm -rf "$W"' EXIT
# The tools for slurm/run-local.sh (CAIRN_BIN_DIR), with cairn-train being the pausing one.
mkdir "$W/bin"
ln -s "$BIN"/cairn-* "$W/bin/"
ln -sf "$PAUSING" "$W/bin/cairn-train"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
F=/usr/share/games/fortunes
fail() { echo "FAIL: $*" >&2; exit 1; }
"$BIN/cairn-reshard" --log-level warn --out "$W/ds" --set 'data.delimiter="%"' --set data.shards=2 \
  build "$F/fortunes" "$F/computers"
# --set only: slurm/run-local.sh passes these to the stage as they are.
MODEL=(--set "data.path=\"$W/ds\"" --set train.threads=1 --set model.layers=2 --set model.hidden=32 --set model.heads=2
       --set model.seq_len=32 --set train.global_batch=8 --set train.micro_batch=4 --set train.warmup=2
       --set train.lr=0.003 --set train.checkpoint_every=0 --set train.val_every=0 --set train.spike_zscore=0)
wait_until() {  # wait_until WHAT CMD...: polls CMD (at most 5 minutes)
  local what=$1; shift
  for _ in $(seq 1 3000); do "$@" && return 0; sleep 0.1; done
  fail "timed out waiting for $what"
}
paused() { local n; n=$(find "$W" -maxdepth 1 -name "pause_$1.*" | wc -l); [[ $n -ge $2 ]]; }
logged() { [[ -f "$1/train/metrics.jsonl" ]] && (( $(grep -c '"train"' "$1/train/metrics.jsonl") >= 3 )); }
n=0
# case NAME NP POINT SIGNAL WANT_RC STEPS -- COMMAND...: runs COMMAND in the background with the pause point set,
# signals it when NP processes are paused there (POINT "mid": when 3 steps are logged), checks the exit code.
case_() {
  local name=$1 np=$2 point=$3 sig=$4 want=$5 steps=$6; shift 7
  n=$((n + 1))
  local run=$W/run$n pid rc=0
  CAIRNTEST_TRAIN_PAUSE=$point CAIRNTEST_TRAIN_PAUSE_FILE=$W/pause_$n "$@" --out "$run" "${MODEL[@]}" --set "train.steps=$steps" \
    > "$W/out$n" 2>&1 &
  pid=$!
  if [[ $point == mid ]]; then wait_until "$name: 3 steps" logged "$run"
  else wait_until "$name: $np processes at $point" paused "$n" "$np"; fi
  kill -s "$sig" "$pid"
  wait "$pid" || rc=$?
  [[ $rc == "$want" ]] || { cat "$W/out$n" >&2; fail "$name: exit $rc, expected $want"; }
  case $want in
    75) [[ -f $run/train/STOPPED && ! -e $run/train/FINISHED ]] || fail "$name: STOPPED missing or FINISHED present"
        if [[ $point == startup || $point == first_step ]]; then
          [[ -z $(ls "$run/train/ckpt" 2>/dev/null) ]] || fail "$name: a checkpoint before the first step"
        else
          ls "$run"/train/ckpt/step_*/DONE > /dev/null 2>&1 || fail "$name: no checkpoint"
        fi ;;
    0) [[ -f $run/train/FINISHED && ! -e $run/train/STOPPED ]] || fail "$name: FINISHED missing or STOPPED present"
       [[ -f $(printf '%s/train/ckpt/step_%08d/DONE' "$run" "$steps") ]] || fail "$name: no final checkpoint" ;;
  esac
  echo "ok: $name (exit $rc)"
}
T=("$W/bin/cairn-train")
M=(mpirun --oversubscribe -np 2 "$W/bin/cairn-train")
case_ "1 rank, SIGTERM at start-up"        1 startup  TERM 75 4      -- "${T[@]}"
case_ "1 rank, SIGUSR1 at start-up"        1 startup  USR1 75 4      -- "${T[@]}"
case_ "1 rank, SIGTERM mid-run"            1 mid      TERM 75 100000 -- "${T[@]}"
case_ "1 rank, SIGTERM after the last step" 1 last_step TERM 0 4     -- "${T[@]}"
case_ "1 rank, SIGUSR1 after FINISHED"     1 finished USR1 0  4      -- "${T[@]}"
case_ "1 rank, SIGTERM before MPI_Finalize" 1 exit    TERM 0  4      -- "${T[@]}"
case_ "mpirun 2 ranks, SIGUSR1 at start-up" 2 startup USR1 75 4      -- "${M[@]}"
case_ "mpirun 2 ranks, SIGUSR1 mid-run"    2 mid      USR1 75 100000 -- "${M[@]}"
case_ "mpirun 2 ranks, SIGUSR1 after the last step" 2 last_step USR1 0 4 -- "${M[@]}"
case_ "mpirun 2 ranks, SIGUSR1 before MPI_Finalize" 2 exit USR1 0 4  -- "${M[@]}"
# Preempted in model-parallel layouts: pipeline sends in flight, tensor-parallel groups, ZeRO-3 shards.
M4=(mpirun --oversubscribe -np 4 "$W/bin/cairn-train")
case_ "mpirun 4 ranks tp2 x pp2, SIGUSR1 mid-run" 4 mid USR1 75 100000 -- "${M4[@]}" --set parallel.tp=2 \
  --set parallel.pp=2
case_ "mpirun 4 ranks dp2 x pp2 ZeRO-3, SIGUSR1 mid-run" 4 mid USR1 75 100000 -- "${M4[@]}" --set parallel.dp=2 \
  --set parallel.pp=2 --set parallel.zero=3 --set train.micro_batch=2
# A signal that reaches one rank only (a node's share of srun's SIGTERM arriving first): every rank stops after the
# step with 75, and rank 0's STOPPED and log name the signal rank 1 got (they used to say "test hook").
run=$W/one_rank
"${M[@]}" --out "$run" "${MODEL[@]}" --set train.steps=100000 > "$W/one_rank.out" 2>&1 &
pid=$!
wait_until "one rank: 3 steps" logged "$run"
rank1=""
for p in $(pgrep -P "$pid"); do grep -qzx 'OMPI_COMM_WORLD_RANK=1' "/proc/$p/environ" && rank1=$p; done
[[ -n $rank1 ]] || fail "one rank: no rank 1 among mpirun's children"
kill -TERM "$rank1"
rc=0; wait "$pid" || rc=$?
[[ $rc == 75 ]] || { cat "$W/one_rank.out" >&2; fail "one rank: exit $rc, expected 75"; }
grep -q '"signal": "SIGTERM"' "$run/train/STOPPED" || fail "one rank: STOPPED does not name SIGTERM: $(cat "$run/train/STOPPED")"
grep -q 'stop requested (SIGTERM)' "$W/one_rank.out" || fail "one rank: the log does not name SIGTERM"
echo "ok: mpirun 2 ranks, SIGTERM to rank 1 only mid-run (exit 75)"
# slurm/run-local.sh's train stage: SIGTERM to the script, relayed to mpirun (the documented code must survive it).
LOCAL=(env CAIRN_BIN_DIR="$W/bin" CAIRN_NP=2 "$ROOT/slurm/run-local.sh" "$ROOT/configs/demo.toml" --stages train)
case_ "run-local.sh, SIGTERM at start-up"  2 startup  TERM 75 4      -- "${LOCAL[@]}"
case_ "run-local.sh, SIGTERM mid-run"      2 mid      TERM 75 100000 -- "${LOCAL[@]}"
case_ "run-local.sh, SIGTERM after the last step" 2 last_step TERM 0 4 -- "${LOCAL[@]}"
echo "train signals: all checks passed"
