#!/usr/bin/env bash
# cairn-train with activation recomputation: recompute = "gelu" / "full" ([train] or cairn-plan's
# [parallel]) reproduce the losses, gradient norms, validation losses and checkpoints of "none" bitwise
# on 1 and 2 ranks (ZeRO-1), also resuming a none checkpoint with full; "selective" runs as none; conflicting keys exit 2.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:?CAIRN_BIN_DIR must point at build/bin}
PY=/usr/bin/python3
W=$(mktemp -d /tmp/cairn_train_recompute.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN/cairn-reshard" --log-level error --out "$W/ds" --set 'data.delimiter="%"' build /usr/share/games/fortunes/fortunes

MODEL=(--data "$W/ds" --threads 1 --set model.layers=3 --set model.hidden=32 --set model.heads=2
       --set model.seq_len=32 --set train.global_batch=4 --set train.micro_batch=2 --set train.warmup=2
       --set train.lr=0.003 --set train.checkpoint_every=4 --set train.val_every=4 --set train.spike_zscore=0)
Q=(--log-level warn)
plan() { printf '[parallel]\ndp = %s\ntp = 1\npp = 1\nv = 1\nmb = 2\nzero = %s\nrecompute = "%s"\nsp = "off"\n' "$@"; }

"$BIN/cairn-train" --out "$W/none" "${MODEL[@]}" "${Q[@]}" --steps 8
"$BIN/cairn-train" --out "$W/gelu" "${MODEL[@]}" "${Q[@]}" --steps 8 --set 'train.recompute="gelu"'
plan 1 0 full > "$W/full.toml"  # full recompute chosen by a cairn-plan best.toml
"$BIN/cairn-train" --out "$W/full" "${MODEL[@]}" "${Q[@]}" --steps 8 --config "$W/full.toml"
# the none run's step-4 checkpoint resumed with full recompute (the step-8 one removed): steps 5..8 again
cp -r "$W/none" "$W/resumed"
rm -rf "$W/resumed/train/ckpt/step_00000008" "$W/resumed/train/FINISHED"
"$BIN/cairn-train" --out "$W/resumed" "${MODEL[@]}" "${Q[@]}" --steps 8 --set 'train.recompute="full"'
# 2 ranks with ZeRO-1: none vs full
plan 2 1 none > "$W/p2none.toml"
plan 2 1 full > "$W/p2full.toml"
mpirun --oversubscribe -np 2 "$BIN/cairn-train" --out "$W/r2none" "${MODEL[@]}" "${Q[@]}" --steps 8 --config "$W/p2none.toml"
mpirun --oversubscribe -np 2 "$BIN/cairn-train" --out "$W/r2full" "${MODEL[@]}" "${Q[@]}" --steps 8 --config "$W/p2full.toml"

"$PY" - "$W" <<'PYEOF'
import json, sys
import h5py, numpy as np
w = sys.argv[1]
def lines(run, kind):
    return [l for l in map(json.loads, open(f"{w}/{run}/train/metrics.jsonl")) if l["kind"] == kind]
def curve(run):
    return ([(l["step"], l["loss"], l["grad_norm"]) for l in lines(run, "train")],
            [(l["step"], l["val_loss"]) for l in lines(run, "val")])
def params(run):
    with h5py.File(f"{w}/{run}/train/ckpt/step_00000008/model.h5", "r") as f:
        out = {}
        f["params"].visititems(lambda k, d: out.__setitem__(k, d[()]) if isinstance(d, h5py.Dataset) else None)
        return out
for ref, runs in (("none", ("gelu", "full", "resumed")), ("r2none", ("r2full",))):
    want, want_p = curve(ref), params(ref)
    assert len(want[0]) == 8 and len(want[1]) == 2, want
    for run in runs:
        got = curve(run)
        assert got == want, (run, "losses / grad norms / val losses differ from recompute = none", got, want)
        got_p = params(run)
        assert sorted(got_p) == sorted(want_p) and all(np.array_equal(got_p[k], want_p[k]) for k in want_p), run
    print(f"{ref}: {', '.join(runs)} give bitwise the same 8 losses, grad norms, 2 val losses and step-8 parameters")
full = lines("full", "train")
assert all("hfu" in l and l["hfu"] > l["mfu"] > 0 for l in full), full[0]
assert all("hfu" not in l for l in lines("none", "train"))
PYEOF

# "selective" is accepted and runs as none (with the reason in the log)
plan 1 0 selective > "$W/sel.toml"
err=$("$BIN/cairn-train" --out "$W/sel" "${MODEL[@]}" --log-level info --steps 2 --config "$W/sel.toml" 2>&1 >/dev/null)
grep -q 'selective.*log-sum-exp' <<<"$err" || fail "no note on selective recompute: $err"
# the full run reported its activation saving
err=$("$BIN/cairn-train" --out "$W/fullinfo" "${MODEL[@]}" --log-level info --steps 1 --config "$W/full.toml" 2>&1 >/dev/null)
grep -q 'recompute = "full": activations .* MiB per rank instead of' <<<"$err" || fail "no activation note: $err"

# [train] and [parallel] asking for different modes: usage error, nothing written
set +e
err=$("$BIN/cairn-train" --out "$W/conflict" "${MODEL[@]}" "${Q[@]}" --steps 2 --config "$W/full.toml" \
  --set 'train.recompute="gelu"' 2>&1)
rc=$?
set -e
[[ $rc == 2 ]] || fail "conflicting recompute keys: exit $rc, expected 2: $err"
grep -q 'recompute = "gelu" and \[parallel\] recompute = "full" disagree' <<<"$err" || fail "unclear message: $err"
[[ ! -e "$W/conflict/train/metrics.jsonl" ]] || fail "a rejected config wrote metrics"
echo "recompute e2e: ok"
