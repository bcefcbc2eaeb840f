#!/usr/bin/env bash
# cairn-train end to end: 1 vs 2 ranks (with and without ZeRO-1) reproduce the same loss curve over
# 50 steps; metrics.jsonl / tfevents / trace.json contents; SIGTERM/SIGINT -> checkpoint + exit 75 + resume (a killed
# trainer's temp files removed; a log that lost steps its checkpoint covers said so);
# damaged checkpoints: skipped and retired, or exit 1 when none is usable; one trainer per run directory;
# bad inputs exit 2 without touching existing outputs.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:?CAIRN_BIN_DIR must point at build/bin}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /tmp/cairn_train_e2e.XXXXXX)
trap 'umount "$W/full" 2> /dev/null || true; rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPIRUN="mpirun --oversubscribe"
F=/usr/share/games/fortunes
fail() { echo "FAIL: $*" >&2; exit 1; }
# Until a background run has logged 3 lines (at most 3 minutes: a slow machine, not a timed race).
wait_for_steps() {
  for _ in $(seq 1 1800); do
    [[ -f "$1/train/metrics.jsonl" && $(wc -l < "$1/train/metrics.jsonl") -ge 3 ]] && return 0
    sleep 0.1
  done
}

"$BIN/cairn-reshard" --log-level warn --out "$W/ds" --set 'data.delimiter="%"' --set data.shards=3 \
  build "$F/fortunes" "$F/computers" "$F/science"

MODEL=(--data "$W/ds" --threads 1 --log-level warn --set model.layers=2 --set model.hidden=32 --set model.heads=2
       --set model.seq_len=32 --set train.global_batch=8 --set train.warmup=5 --set train.lr=0.003
       --set train.checkpoint_every=25 --set train.val_every=25 --set train.spike_zscore=0)

# ---- data parallel parity: 1 rank (micro 4, accum 2) vs 2 ranks (micro 2), with and without ZeRO-1
"$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --steps 50 --set train.micro_batch=4
$MPIRUN -np 2 "$BIN/cairn-train" --out "$W/r2" "${MODEL[@]}" --steps 50 --set train.micro_batch=2 --trace-steps 2:4
# ZeRO-1 and the micro-batch come from a cairn-plan best.toml layered after the experiment settings.
printf '[parallel]\ndp = 2\ntp = 1\npp = 1\nv = 1\nmb = 2\nzero = 1\nrecompute = "none"\nsp = "off"\n' > "$W/best2.toml"
$MPIRUN -np 2 "$BIN/cairn-train" --out "$W/r2z" "${MODEL[@]}" --steps 50 --config "$W/best2.toml"
"$PY" - "$W" <<'PYEOF'
import json, sys
w = sys.argv[1]
def losses(run):
    return [json.loads(l)["loss"] for l in open(f"{w}/{run}/train/metrics.jsonl") if '"train"' in l]
ref = losses("r1")
assert len(ref) == 50, len(ref)
for run in ("r2", "r2z"):
    got = losses(run)
    assert len(got) == 50, (run, len(got))
    worst = max(abs(a - b) / abs(a) for a, b in zip(ref, got))
    print(f"{run}: max relative loss difference vs 1 rank over 50 steps = {worst:.2e}")
    assert worst <= 1e-5, (run, worst)
assert ref[-1] < ref[0] - 1.0, ("loss did not fall", ref[0], ref[-1])
import h5py
ck = f"{w}/r2z/train/ckpt/step_00000050"
counts = [int(h5py.File(f"{ck}/optim.rank{r:05d}.h5", "r").attrs["count"]) for r in (0, 1)]
total = int(h5py.File(f"{ck}/optim.rank00000.h5", "r").attrs["total"])
assert min(counts) > 0 and sum(counts) == total, ("ZeRO-1 optimizer shards", counts, total)
with h5py.File(f"{ck}/model.h5", "r") as m:
    assert m["params/h.0.attn.c_attn.weight"].shape == (32, 96) and m.attrs["step"] == 50
PYEOF

# ---- a 2-rank ZeRO-1 checkpoint resumes on 1 rank without ZeRO (optimizer slices are re-assembled)
"$BIN/cairn-train" --out "$W/r2z" "${MODEL[@]}" --steps 52 --set train.decay_steps=50
[[ $(grep -c '"train"' "$W/r2z/train/metrics.jsonl") == 52 ]] || fail "ZeRO-1 -> 1 rank resume"

# ---- --resume auto passes over a corrupt newest checkpoint (reported) and uses the previous one
cp -r "$W/r1" "$W/r1c"
printf 'garbage' | dd of="$W/r1c/train/ckpt/step_00000050/model.h5" bs=1 seek=4000 conv=notrunc status=none
err=$("$BIN/cairn-train" --out "$W/r1c" "${MODEL[@]}" --steps 50 --set train.micro_batch=4 2>&1 >/dev/null)
grep -q 'step_00000050.*checksum mismatch' <<<"$err" || fail "corrupt checkpoint not reported: $err"
! grep -q "will not be written again" <<<"$err" || fail "a log past the checkpoint called short: $err"
[[ $(grep -c '"train"' "$W/r1c/train/metrics.jsonl") == 50 ]] || fail "resume from step 25 should rewrite 26..50"
"$PY" - "$W" <<'PYEOF'
import json, sys
w = sys.argv[1]
a = [json.loads(l)["loss"] for l in open(f"{w}/r1/train/metrics.jsonl") if '"train"' in l]
b = [json.loads(l)["loss"] for l in open(f"{w}/r1c/train/metrics.jsonl") if '"train"' in l]
assert a == b, "resumed steps 26..50 must repeat the original losses bitwise"
PYEOF
# TensorBoard shows each step once: the resumed run's event file starts with a SessionLog START at step 26, which drops
# the copied run's steps 26-50 (read as TensorBoard reads a run directory; with TensorBoard installed, by it too).
"$PY" "$HERE/../libcommon/metrics/read_tfevents.py" "$W/r1c/train" --run --tensorboard > "$W/r1c_tb.jsonl" ||
  fail "resumed run's tfevents"
"$PY" - "$W" <<'PYEOF'
import json, sys
w = sys.argv[1]
ev = [json.loads(l) for l in open(f"{w}/r1c_tb.jsonl")]
loss = {l["step"]: l["loss"] for l in map(json.loads, open(f"{w}/r1c/train/metrics.jsonl")) if l["kind"] == "train"}
steps = [e["step"] for e in ev if "train/loss" in e["scalars"]]
assert steps == list(range(1, 51)), ("each step once, in order", steps)
for e in ev:
    if "train/loss" in e["scalars"]:
        assert abs(e["scalars"]["train/loss"] - loss[e["step"]]) <= 1e-6 * abs(loss[e["step"]]), e
assert [e["step"] for e in ev if "val/loss" in e["scalars"]] == [25, 50]
PYEOF
# The skipped step 50 was retired, not left to outrank (and be kept by pruning over) what the resumed run wrote.
ls "$W"/r1c/train/retired/*/step_00000050/model.h5 > /dev/null 2>&1 || fail "damaged step_00000050 not retired"
# A metrics.jsonl that ends before the checkpoint's step (its tail never reached the disk: a node crash kept the fsynced
# checkpoint, not the log's last page): the resume says which records are lost for good (it said nothing).
cp -r "$W/r1" "$W/r1t"
"$PY" - "$W/r1t/train/metrics.jsonl" <<'PYEOF'
import json, sys
p = sys.argv[1]
lines = [l for l in open(p) if json.loads(l).get("step", 0) <= 40]
open(p, "w").writelines(lines)
PYEOF
err=$("$BIN/cairn-train" --out "$W/r1t" "${MODEL[@]}" --steps 52 --set train.micro_batch=4 \
  --set train.decay_steps=50 2>&1 >/dev/null) || fail "resume over a short log: $err"
want="\"$W/r1t/train/metrics.jsonl\" ends at step 40, before step 50 of the checkpoint this run resumes from"
want+=" (\"$W/r1t/train/ckpt/step_00000050\"): the records of steps 41-50 are not in it (lost with its tail,"
grep -qF "$want" <<<"$err" && grep -q "will not be written again" <<<"$err" ||
  fail "a log short of the checkpoint's step, resumed without a word: $err"
[[ $(grep -c '"train"' "$W/r1t/train/metrics.jsonl") == 42 ]] || fail "short log: steps 1-40 and 51-52 expected"
# Every sealed checkpoint damaged: exit 1 naming the folder, no fresh start over the run's metrics.
cp -r "$W/r1" "$W/r1d"
for d in "$W"/r1d/train/ckpt/step_*; do
  printf 'garbage' | dd of="$d/model.h5" bs=1 seek=4000 conv=notrunc status=none
done
lines=$(wc -l < "$W/r1d/train/metrics.jsonl")
rc=0; err=$("$BIN/cairn-train" --out "$W/r1d" "${MODEL[@]}" --steps 60 --set train.micro_batch=4 2>&1 >/dev/null) || rc=$?
[[ $rc == 1 ]] || fail "all checkpoints damaged: expected exit 1, got $rc"
grep -q 'no usable checkpoint in ".*r1d/train/ckpt"' <<<"$err" || fail "all damaged: unclear message: $err"
[[ $(wc -l < "$W/r1d/train/metrics.jsonl") == "$lines" ]] || fail "all damaged: metrics.jsonl was rewritten"
# Named with --resume DIR, a damaged checkpoint is damaged data too (exit 1), not a usage error.
rc=0; err=$("$BIN/cairn-train" --out "$W/r1d" "${MODEL[@]}" --steps 60 --set train.micro_batch=4 \
  --resume "$W/r1d/train/ckpt/step_00000025" 2>&1 >/dev/null) || rc=$?
[[ $rc == 1 ]] || fail "--resume DIR damaged: expected exit 1, got $rc ($err)"
grep -q 'cannot resume from ".*step_00000025": model.h5 checksum mismatch' <<<"$err" || fail "--resume DIR damaged: $err"

# ---- observability: metrics lines, tfevents (independent reader), Chrome trace
"$PY" - "$W/r2/train" "$HERE/../libcommon/metrics/read_tfevents.py" <<'PYEOF'
import glob, json, subprocess, sys
d, reader = sys.argv[1], sys.argv[2]
lines = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
train = [l for l in lines if l["kind"] == "train"]
prov = [l for l in lines if l["kind"] == "provenance"]
assert prov and prov[0]["provenance"]["tool"] == "cairn-train" and prov[0]["provenance"]["git_sha"], prov
assert "--out" in prov[0]["provenance"]["command_line"] and "[train]" in prov[0]["provenance"]["config"]
# The peak the lines' mfu divides by (measured on a CPU at each start): tflops / mfu gives it back.
peak = prov[0]["peak_tflops"]
assert peak > 0 and abs(train[-1]["tflops"] / train[-1]["mfu"] - peak) <= 1e-3 * peak, (peak, train[-1])
assert open(f"{d}/config.toml").read().startswith("# effective config of cairn-train")
val = [l for l in lines if l["kind"] == "val"]
keys = {"kind", "step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "tflops", "skipped",
        "skipped_total", "time_s", "wall_time"}
assert keys <= set(train[0]), keys - set(train[0])
assert set(train[0]["time_s"]) >= {"data", "forward", "backward", "comm", "optimizer", "total"}
assert [l["step"] for l in train] == list(range(1, 51))
assert train[-1]["tokens"] == 50 * 8 * 32
assert [l["step"] for l in val] == [25, 50] and all(set(l) >= {"step", "tokens", "val_loss"} for l in val)
files = glob.glob(f"{d}/events.out.tfevents.*")
assert len(files) == 1, files
out = subprocess.run(["/usr/bin/python3", reader, files[0], "--tensorboard"], check=True, capture_output=True, text=True).stdout
events = [json.loads(l) for l in out.splitlines()]
assert events[0]["file_version"] == "brain.Event:2"
texts = [e["texts"]["provenance"] for e in events if "provenance" in e.get("texts", {})]
assert len(texts) == 1 and "**cairn-train**" in texts[0] and "--out" in texts[0] and "[train]" in texts[0], texts
assert "MFU divides by a peak of" in texts[0], texts
tb = {e["step"]: e["scalars"]["train/loss"] for e in events if "train/loss" in e.get("scalars", {})}
for l in train:
    assert abs(tb[l["step"]] - l["loss"]) <= 1e-6 * abs(l["loss"]), (l["step"], tb[l["step"]], l["loss"])
tbval = {e["step"]: e["scalars"]["val/loss"] for e in events if "val/loss" in e.get("scalars", {})}
assert sorted(tbval) == [25, 50]
trace = json.load(open(f"{d}/trace.json"))
ev = [e for e in trace["traceEvents"] if e["ph"] == "X"]
assert {e["pid"] for e in ev} == {0, 1}, "one process row per rank"
names = {e["name"] for e in ev}
# --trace-steps 2:4 = steps 2 and 3, numbered as in metrics.jsonl
for n in ("forward", "backward", "optimizer", "comm (exposed)", "backward h.0", "backward h.1", "forward h.0", "forward h.1", "forward embeddings", "forward head/loss", "step 2", "step 3"):
    assert n in names, (n, names)
assert "step 4" not in names and "step 1" not in names
assert all(type(e["ts"]) is int and type(e["dur"]) is int and e["dur"] >= 0 for e in ev)
print("metrics.jsonl, tfevents and trace.json check out")
PYEOF
"$PY" "$HERE/check_trace.py" "$W/r2/train/trace.json" --steps 2:4 --ranks 2

# One run in DIR, sent SIG once it has logged steps: it must finish the step, checkpoint and exit 75.
stop_with() {
  "$BIN/cairn-train" --out "$2" "${MODEL[@]}" --steps 100000 --set train.checkpoint_every=0 --set train.val_every=0 &
  local pid=$! rc=0
  wait_for_steps "$2"
  kill -"$1" $pid
  wait $pid || rc=$?
  [[ $rc == 75 ]] || fail "SIG$1: expected exit 75, got $rc"
}

# ---- SIGTERM: finish the step, checkpoint, exit 75; rerunning resumes and finishes
stop_with TERM "$W/sig"
last=$(tail -n 1 "$W/sig/train/metrics.jsonl" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["step"])')
ckpt=$(printf "%s/sig/train/ckpt/step_%08d" "$W" "$last")
[[ -f "$ckpt/DONE" && -f "$ckpt/model.h5" && -f "$ckpt/optim.rank00000.h5" ]] || fail "no complete checkpoint $ckpt"
[[ ! -e "$W/sig/train/FINISHED" ]] || fail "FINISHED after a stop"
# Temp copies a killed trainer left of the files it replaces whole (STOPPED, FINISHED, config.toml: a kill inside their
# write kept them for good): the next run removes a dead writer's and leaves a live one's ($$: this shell).
dead=2000000000  # above any pid_max: no such process
for f in STOPPED FINISHED config.toml; do printf x > "$W/sig/train/.$f.tmp.$dead.1a2b3c"; done
printf x > "$W/sig/train/.FINISHED.tmp.$$.4d5e6f"
err=$("$BIN/cairn-train" --out "$W/sig" "${MODEL[@]}" --steps $((last + 3)) --set train.decay_steps=100000 \
  --set train.checkpoint_every=0 --set train.val_every=0 2>&1 >/dev/null) || fail "resume after SIGTERM: $err"
! grep -q "will not be written again" <<<"$err" || fail "a whole log called short: $err"
[[ -f "$W/sig/train/FINISHED" ]] || fail "resumed run did not finish"
! compgen -G "$W/sig/train/.*.tmp.$dead.*" > /dev/null || fail "a killed trainer's temp files were left: $(ls -a "$W/sig/train")"
[[ -e "$W/sig/train/.FINISHED.tmp.$$.4d5e6f" ]] || fail "a live writer's temp file was removed"
rm "$W/sig/train/.FINISHED.tmp.$$.4d5e6f"
[[ $(grep -c '"train"' "$W/sig/train/metrics.jsonl") == $((last + 3)) ]] || fail "resumed metrics have gaps or repeats"

# ---- Ctrl-C (SIGINT) stops like SIGTERM: checkpoint, exit 75, STOPPED names the signal
stop_with INT "$W/int"
grep -q '"SIGINT"' "$W/int/train/STOPPED" || fail "SIGINT: STOPPED does not name the signal"
last=$(tail -n 1 "$W/int/train/metrics.jsonl" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["step"])')
[[ -f $(printf "%s/int/train/ckpt/step_%08d/DONE" "$W" "$last") ]] || fail "SIGINT: no checkpoint at step $last"

# ---- SIGUSR1 through mpirun (which forwards it to every rank): same checkpoint + exit 75
$MPIRUN -np 2 "$BIN/cairn-train" --out "$W/usr1" "${MODEL[@]}" --steps 100000 --set train.checkpoint_every=0 \
  --set train.val_every=0 2>/dev/null &
pid=$!
for _ in $(seq 1 1800); do
  [[ -f "$W/usr1/train/metrics.jsonl" && $(wc -l < "$W/usr1/train/metrics.jsonl") -ge 3 ]] && break
  sleep 0.1
done
kill -USR1 $pid
rc=0; wait $pid || rc=$?
[[ $rc == 75 ]] || fail "SIGUSR1 under mpirun: expected exit 75, got $rc"
ls "$W"/usr1/train/ckpt/step_*/optim.rank00001.h5 > /dev/null || fail "SIGUSR1: no 2-rank checkpoint"

# ---- one trainer per run directory: a second one, alone or under mpirun, exits 1 at once naming the run and the
# holder's pid, writing nothing; a SIGKILLed holder leaves no stale lock
"$BIN/cairn-train" --out "$W/lock" "${MODEL[@]}" --steps 100000 --set train.checkpoint_every=0 --set train.val_every=0 &
pid=$!
wait_for_steps "$W/lock"
for launch in "" "$MPIRUN -np 2"; do
  rc=0; err=$($launch "$BIN/cairn-train" --out "$W/lock" "${MODEL[@]}" --steps 5 2>&1 >/dev/null) || rc=$?
  [[ $rc == 1 ]] || fail "second trainer (${launch:-1 rank}): expected exit 1, got $rc: $err"
  grep -q "another cairn-train is running in \".*/lock\": pid $pid on " <<<"$err" ||
    fail "second trainer (${launch:-1 rank}): unclear message: $err"
done
[[ $(grep -c '"provenance"' "$W/lock/train/metrics.jsonl") == 1 ]] || fail "a refused trainer wrote metrics.jsonl"
kill -KILL $pid
wait $pid || true
"$BIN/cairn-train" --out "$W/lock" "${MODEL[@]}" --steps 2 || fail "a killed trainer's lock blocked the next run"

# ---- a full disk while writing a checkpoint: exit 1 naming the file, the sealed checkpoints stay and resume. It used to
# segfault at exit (HDF5 keeps a file it could not close, and its own clean-up then crashed on it). Root only: a tmpfs.
mkdir -p "$W/full"
if [[ $(id -u) == 0 ]] && mount -t tmpfs -o size=3M tmpfs "$W/full" 2> /dev/null; then
  FULL=()  # MODEL without its log level: the resume below logs at info
  for a in "${MODEL[@]}"; do [[ $a == --log-level || $a == warn ]] || FULL+=("$a"); done
  FULL+=(--set model.hidden=64 --set train.checkpoint_every=2 --set train.keep_checkpoints=10 --set train.val_every=0
         --set train.tensorboard=false --set train.decay_steps=41)  # one schedule over the runs of 2, 40, 41 steps
  # 1 rank writes its own files; tp2 assembles whole tensors on rank 0 while rank 1 joins the gathers (rank 0 keeps
  # gathering after the failed write, so no rank waits forever).
  for launch in "" "$MPIRUN -np 2"; do
    run=$W/full/run${launch:+_tp2}
    layout=()
    [[ -z $launch ]] || layout=(--set parallel.tp=2)
    # shellcheck disable=SC2086
    $launch "$BIN/cairn-train" --out "$run" "${FULL[@]}" "${layout[@]}" --log-level warn --steps 2 ||
      fail "full disk (${launch:-1 rank}): the first checkpoint did not fit"
    rc=0
    # shellcheck disable=SC2086
    err=$($launch "$BIN/cairn-train" --out "$run" "${FULL[@]}" "${layout[@]}" --log-level warn --steps 40 2>&1 >/dev/null) ||
      rc=$?
    [[ $rc == 1 ]] || fail "full disk (${launch:-1 rank}): expected exit 1, got $rc: $err"
    grep -q "cannot write \".*/full/run.*/train/ckpt/.tmp_step_.*No space left on device" <<<"$err" ||
      fail "full disk (${launch:-1 rank}): unclear message: $err"
    [[ -f $run/train/ckpt/step_00000002/DONE ]] || fail "full disk (${launch:-1 rank}): the sealed step 2 was lost"
    # The partial checkpoint is gone with the failure: the resumed run needs the space it took.
    ! compgen -G "$run/train/ckpt/.tmp_step_*" > /dev/null ||
      fail "full disk (${launch:-1 rank}): the partial checkpoint stayed"
    # shellcheck disable=SC2086
    err=$($launch "$BIN/cairn-train" --out "$run" "${FULL[@]}" "${layout[@]}" --steps 41 \
      --set train.checkpoint_every=0 2>&1 >/dev/null) || true
    grep -q "resuming from \".*/full/run.*/train/ckpt/step_000000[0-9][0-9]\"" <<<"$err" ||
      fail "full disk (${launch:-1 rank}): no resume: $err"
    rm -rf "$run"
  done
  umount "$W/full"
else
  echo "skip: full-disk checkpoint check (needs root to mount a tmpfs)"
fi

# ---- bad input: exit 2, a clear message, nothing overwritten
expect2() {  # expect2 <message fragment> <command...>
  local want=$1; shift
  local rc=0 err
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  [[ $rc == 2 ]] || fail "expected exit 2, got $rc from: $* ($err)"
  grep -qi -- "$want" <<<"$err" || fail "message lacks '$want': $err"
}
before=$(md5sum "$W/r1/train/metrics.jsonl")
expect2 "index.json" "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --set "data.path=\"$W/nope\""
expect2 "vocab" "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --set model.vocab=128
expect2 "seq_len" "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --set model.seq_len=4000000
expect2 "divisible" $MPIRUN -np 2 "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --set train.global_batch=3
# --config - under a launcher: stdin reaches rank 0 only; refused naming it (it was "the config differs").
printf '[train]\nsteps = 3\n' > "$W/stdin.toml"
expect2 "--config - is a stream, which a launcher gives to rank 0 only" \
  bash -c '"$@" < "$0"' "$W/stdin.toml" $MPIRUN -np 2 "$BIN/cairn-train" --config - --out "$W/r1" "${MODEL[@]}"
# Ranks given different configs (MPMD here; a node-local config or a CAIRN_* variable on one node) used to hang in
# mismatched collectives (other steps) or crash (another model size): now exit 2 naming the key, nothing written.
expect2 "rank 1: the config differs from rank 0's: train.steps = 7 here, train.steps = 6 on rank 0" \
  $MPIRUN -np 1 "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --steps 6 : -np 1 "$BIN/cairn-train" --out "$W/r1" \
  "${MODEL[@]}" --steps 7
expect2 "model.hidden = 64 here, model.hidden = 32 on rank 0" $MPIRUN -np 1 "$BIN/cairn-train" --out "$W/r1" \
  "${MODEL[@]}" : -np 1 "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --set model.hidden=64
expect2 "tp\*pp = 2\*1" "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --set parallel.tp=2  # 1 rank cannot hold tp = 2
printf '[parallel]\ndp = 4\ntp = 1\npp = 1\nv = 1\nmb = 2\nzero = 1\nrecompute = "none"\nsp = "off"\n' > "$W/best.toml"
expect2 "dp\*tp\*pp = 4\*1\*1 = 4 does not match the 1 MPI ranks" "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --config "$W/best.toml"
expect2 "/dev/null" "$BIN/cairn-train" --out /dev/null/run "${MODEL[@]}"
# A plan's mb that the experiment's micro_batch would silently replace: refused, naming both.
expect2 "micro_batch = 4 and \[parallel\] mb = 2 disagree" "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" \
  --set train.micro_batch=4 --config "$W/best2.toml"
# A vocabulary tp does not divide: refused before the run directory is touched (no LOCK left), with Megatron's padding.
expect2 "vocab = 321 .*not divisible by \[parallel\] tp = 2.*vocab = 512" $MPIRUN -np 2 "$BIN/cairn-train" \
  --out "$W/vocab_tp" "${MODEL[@]}" --set parallel.tp=2 --set model.vocab=321
[[ ! -e "$W/vocab_tp/train/LOCK" ]] || fail "a refused vocabulary left $W/vocab_tp/train/LOCK"
expect2 "existing checkpoints" "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --resume none
expect2 "cannot resume from \"$W/nope\": no such checkpoint directory" \
  "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --resume "$W/nope"
expect2 "cannot resume from \"$W/ds\": no DONE marker" "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --resume "$W/ds"
# The learning-rate schedule: min_lr above lr refused; resuming r1 (50 steps, cosine over 50) with more steps would
# re-time its decay and jump the rate: refused, naming the key that keeps the run's schedule.
expect2 'key "train.min_lr": 0.01 is above the peak rate train.lr = 0.003' "$BIN/cairn-train" --out "$W/r1" \
  "${MODEL[@]}" --set train.min_lr=0.01
expect2 "another learning-rate schedule: decay over 50 steps .now 60.*step 51 would run at learning rate.*--set train.decay_steps=50" \
  "$BIN/cairn-train" --out "$W/r1" "${MODEL[@]}" --steps 60
# The two rates it names are printed apart even when they agree to 4 digits: a decay 1.2x longer, early on
# (0.0029999 against 0.0029998, which %.4g printed as 0.003 twice).
"$BIN/cairn-train" --out "$W/early" "${MODEL[@]}" --steps 10 --set train.decay_steps=1000 --set train.checkpoint_every=10
"$BIN/cairn-train" --out "$W/early" "${MODEL[@]}" --steps 12 --set train.decay_steps=1200 2> "$W/rates.err" || true
rates=$(grep -o "learning rate [0-9.e+-]* where the run's schedule gives [0-9.e+-]*" "$W/rates.err" || true)
read -r _ _ now _ _ _ _ _ then <<< "$rates"
[[ -n "$now" && "$now" != "$then" ]] || fail "schedule refusal names equal-looking rates: '$rates'"
# Inside both warmups the next rate is the same: the refusal names the first step where the schedules part (it named
# two equal rates as a jump).
"$BIN/cairn-train" --out "$W/warm" "${MODEL[@]}" --steps 4 --set train.warmup=20 --set train.decay_steps=40 \
  --set train.checkpoint_every=4
expect2 "step 5 runs at the same rate, [0-9.e-]*, but step 22 would run at [0-9.e-]* where the run's schedule gives" \
  "$BIN/cairn-train" --out "$W/warm" "${MODEL[@]}" --steps 8 --set train.warmup=20 --set train.decay_steps=50
[[ $(md5sum "$W/r1/train/metrics.jsonl") == "$before" ]] || fail "a failed run changed metrics.jsonl"
# A constant schedule has no decay to re-time: extending it is no change.
"$BIN/cairn-train" --out "$W/const" "${MODEL[@]}" --steps 4 --set train.schedule='"constant"' --set train.warmup=2
"$BIN/cairn-train" --out "$W/const" "${MODEL[@]}" --steps 6 --set train.schedule='"constant"' --set train.warmup=2 ||
  fail "extending a constant schedule was refused"
# Past both decays every remaining step runs at min_lr, whatever decay_steps says: another decay length changes no rate
# (it was refused, with an empty clause where the effect belongs).
"$BIN/cairn-train" --out "$W/past" "${MODEL[@]}" --steps 6 --set train.warmup=1 --set train.decay_steps=4 \
  --set train.checkpoint_every=6
"$BIN/cairn-train" --out "$W/past" "${MODEL[@]/warn/info}" --steps 8 --set train.warmup=1 --set train.decay_steps=5 \
  2> "$W/past.err" || fail "a decay change past both decays was refused: $(cat "$W/past.err")"
grep -q "gives every step from 7 on the same rate" "$W/past.err" || fail "past both decays: no note: $(cat "$W/past.err")"
# Extended with the run's decay length: min_lr (lr/10) from step 51 on. On a new schedule only when asked, with a
# warning; the checkpoint then records the new one.
cp -r "$W/r1" "$W/r1x"
"$BIN/cairn-train" --out "$W/r1x" "${MODEL[@]}" --steps 52 --set train.decay_steps=50
"$BIN/cairn-train" --out "$W/r1x" "${MODEL[@]}" --steps 54 --set train.on_schedule_change='"continue"' 2> "$W/sched.err"
grep -q 'on another learning-rate schedule .*decay over 50 steps (now 54' "$W/sched.err" || fail "no warning: $(cat "$W/sched.err")"
"$PY" - "$W/r1x/train/metrics.jsonl" <<'PYEOF'
import json, math, sys
lr = {r["step"]: r["lr"] for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "train"}
assert lr[51] == lr[52] == 0.003 / 10, (lr[50], lr[51], lr[52])
# steps 53, 54 on cosine over 54 steps after a warmup of 5: step k at min + (max - min)(1 + cos(pi (k-1-5)/(54-5)))/2
want = lambda k: 0.0003 + 0.5 * (0.003 - 0.0003) * (1 + math.cos(math.pi * (k - 1 - 5) / 49))
assert all(abs(lr[k] - want(k)) < 1e-12 for k in (53, 54)), (lr[53], want(53), lr[54], want(54))
PYEOF
echo "train e2e: all checks passed"
