#!/usr/bin/env bash
# slurm/nightly.sh on a real Slurm: against a baseline run of the same config it exits 0 (CPU training
# is deterministic, so the gated numbers match); against a baseline with a planted regression (its
# validation loss lowered by 0.5, so tonight's looks worse) it exits 3; a missing baseline exits 1.
# Run under scripts/slurm-local.sh run --.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -n "${SLURM_CONF:-}" ] || fail "SLURM_CONF not set: run under scripts/slurm-local.sh run --"

work="" ; make_workdir nightly
cd "$CAIRN_SOURCE_DIR"
config=tests/slurm/tiny.toml
export CAIRN_POLL_S=1

rc=0
slurm/nightly.sh "$config" "$work/none" --set "run.dir=\"$work/nightly\"" > "$work/missing.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$work/missing.out"; fail "missing baseline: exit $rc, expected 1"; }
pass "missing baseline -> exit 1"

# The baseline: the same pipeline, run once (no report: its relative gates need a baseline themselves).
slurm/submit-pipeline.sh "$config" --out "$work/baseline" --stages sweep,plan,reshard,train,eval --wait > "$work/baseline.out" 2>&1 \
  || { cat "$work/baseline.out"; fail "baseline pipeline failed"; }

rc=0
slurm/nightly.sh "$config" "$work/baseline" --set "run.dir=\"$work/nightly\"" > "$work/pass.out" 2>&1 || rc=$?
cat "$work/pass.out"
[ "$rc" -eq 0 ] || fail "nightly against a matching baseline exited $rc, expected 0"
tail -n 1 "$work/pass.out" | grep -q "nightly: PASS" || fail "last line is not the PASS verdict"
[ -L "$work/nightly/latest" ] && [ -f "$work/nightly/latest/report/summary.md" ] || fail "no latest/report"
pass "matching baseline -> exit 0"

# Planted regression: a baseline whose validation loss was 0.5 lower than tonight's.
cp -r "$work/baseline" "$work/better"
/usr/bin/python3 - "$work/better/train/metrics.jsonl" <<'PY'
import json, sys
path = sys.argv[1]
out = []
for line in open(path):
    rec = json.loads(line)
    if rec.get("kind") == "val":
        rec["val_loss"] -= 0.5
    out.append(json.dumps(rec))
open(path, "w").write("\n".join(out) + "\n")
PY
rc=0
slurm/nightly.sh "$config" "$work/better" --set "run.dir=\"$work/nightly\"" > "$work/regress.out" 2>&1 || rc=$?
cat "$work/regress.out"
[ "$rc" -eq 3 ] || fail "nightly against a planted regression exited $rc, expected 3"
tail -n 1 "$work/regress.out" | grep -q "nightly: REGRESSION" || fail "last line is not the REGRESSION verdict"
grep -q "val_loss" "$work/nightly/latest/report/summary.md" || fail "summary.md does not name the failed gate"
pass "planted regression -> exit 3"
