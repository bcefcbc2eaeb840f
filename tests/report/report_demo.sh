#!/usr/bin/env bash
# Renders the report for a run directory produced by the real tools on configs/demo.toml (shortened:
# 20 training steps), then checks well-formed HTML, data points in every chart, the gates' verdicts,
# and a planted regression against the run itself as baseline (exit 3).
# Exit 77 (ctest: skipped) when a stage's binary is not built.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:-build/bin}
SRC=${CAIRN_SOURCE_DIR:-.}
PY=/usr/bin/python3
for t in sweep plan reshard train eval report; do
  [ -x "$BIN/cairn-$t" ] || { echo "report_demo: $BIN/cairn-$t not built; skipped" >&2; exit 77; }
done
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
RUN=$T/demo
CONFIG=${CAIRN_DEMO_CONFIG:-$SRC/configs/demo.toml}
CAIRN_BIN_DIR=$BIN bash "$SRC/slurm/run-local.sh" "$CONFIG" --out "$RUN" --strict \
  --set train.steps=20 --set train.warmup=4 --set train.val_every=10 --set train.checkpoint_every=10 \
  --set train.log_every=2 --set 'report.gates.val_loss={max=10}' > "$T/pipeline.log" 2>&1 \
  || { tail -40 "$T/pipeline.log" >&2; echo "FAIL: demo pipeline" >&2; exit 1; }
xmllint --noout "$RUN/report/index.html"
$PY - "$RUN/report/index.html" "$RUN/report/summary.json" <<'PYEOF'
import json, sys, xml.etree.ElementTree as ET
charts = list(ET.parse(sys.argv[1]).getroot().iter("{http://www.w3.org/2000/svg}svg"))
bad = [c.get("id") for c in charts if int(c.get("data-points", "0")) <= 0]
assert charts and not bad, ("charts without points", bad)
s = json.load(open(sys.argv[2]))
run = s["runs"][0]
assert set(run["stages"]) == {"sweep", "plan", "data", "train", "eval"}, run["stages"]
assert not run["missing"] and run["problem_count"] == 0, (run["missing"], run["problems"])
sections = {c["section"] for c in s["charts"]}
assert {"train", "sweep", "plan", "data"} <= sections, sections
m = run["metrics"]
for k in ("loss", "val_loss", "tokens_per_s", "step_time_s", "busbw_allreduce", "wrong", "plan_step_time_s",
          "data_tokens", "eval_val_loss"):
    assert m.get(k, {}).get("value") is not None, k
assert s["verdict"] == "pass", s["gates"]
print("demo report: %d charts, metrics ok" % len(charts))
PYEOF
# Planted regression: a copy of the run against the run, demanding a 0.01 improvement in val_loss.
cp -r "$RUN" "$T/copy"
set +e
"$BIN/cairn-report" "$T/copy" --baseline "$RUN" --config "$CONFIG" \
  --set 'report.gates.val_loss={max_increase=-0.01}' 2> "$T/self.err"
rc=$?
set -e
[ $rc -eq 3 ] || { cat "$T/self.err" >&2; echo "FAIL: planted regression exit $rc, expected 3" >&2; exit 1; }
grep -q "val_loss \[demo (copy)\] 0 vs baseline" "$T/self.err" || { cat "$T/self.err" >&2; exit 1; }
grep -q "FAIL: 1 of 2 gate checks failed" "$T/copy/report/index.html"
echo "report_demo: ok"
