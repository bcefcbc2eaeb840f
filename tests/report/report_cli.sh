#!/usr/bin/env bash
# CLI test of cairn-report on synthetic run directories: well-formed HTML (xmllint), every chart has
# data points, gates pass and fail as designed (planted regression), missing pieces, corrupt lines,
# and exit codes 0 / 2 / 3.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:-build/bin}
REPORT=$BIN/cairn-report
SRC=${CAIRN_SOURCE_DIR:-.}
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

gen() { $PY "$SRC/tests/report/make_runs.py" "$@"; }
gen "$T/base" --seed 1 --name base --steps 300
gen "$T/good" --seed 2 --name good --steps 300 --loss-shift 0.005 --tps-factor 0.99
gen "$T/bad" --seed 3 --name bad --steps 300 --loss-shift 0.1 --tps-factor 0.9 --busbw-factor 0.8 --wrong 2
gen "$T/partial" --seed 4 --name partial --steps 200 --without sweep,eval,plan --corrupt-lines 2 --torn-last --no-finished

cat > "$T/gates.toml" <<'EOF'
[report.gates]
val_loss = { max_increase = 0.02 }
tokens_per_s = { max_drop_pct = 5 }
busbw_allreduce = { max_drop_pct = 10 }
wrong = { max = 0 }
eval_hellaswag_acc = { max_drop = 0.005 }
EOF

# Checks a report directory: XHTML parses as XML, every chart has points, JSON/MD exist.
check_report() {
  local dir=$1
  for f in index.html summary.md summary.json; do [ -s "$dir/report/$f" ] || fail "$dir/report/$f missing"; done
  xmllint --noout "$dir/report/index.html" || fail "$dir/report/index.html is not well-formed"
  $PY - "$dir/report/index.html" "$dir/report/summary.json" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
svg = "{http://www.w3.org/2000/svg}svg"
charts = list(root.iter(svg))
assert charts, "no charts in the report"
for c in charts:
    pts = int(c.get("data-points", "0"))
    assert pts > 0, "chart %s has no data points" % c.get("id")
    # Each drawn series reports its own points; at least one must be non-empty.
    series = [int(g.get("data-points", "0")) for g in c.iter() if g.get("class", "").startswith("series")]
    assert any(series), "chart %s: no series with points" % c.get("id")
    for el in c.iter():
        for k, v in el.attrib.items():
            assert "nan" not in v.lower() or k == "aria-label", "NaN in chart %s: %s=%s" % (c.get("id"), k, v)
s = json.load(open(sys.argv[2]))
assert len(s["charts"]) == len(charts), (len(s["charts"]), len(charts))
print("%d charts, all with data points" % len(charts))
EOF
}

# 1. A good candidate passes every gate: exit 0.
"$REPORT" "$T/good" --baseline "$T/base" --config "$T/gates.toml" --log-level warn || fail "good run: exit $?"
check_report "$T/good"
$PY - "$T/good/report/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["verdict"] == "pass" and s["exit_code"] == 0, s["verdict"]
assert s["gates_total"] == 5 and s["gates_failed"] == 0
names = {r["name"] for r in s["runs"]}
assert names == {"base", "good"}, names
sections = {c["section"] for c in s["charts"]}
assert sections == {"train", "eval", "sweep", "plan", "data"}, sections
for g in s["gates"]:
    assert g["verdict"] == "pass" and g["value"] is not None, g
good = [r for r in s["runs"] if r["name"] == "good"][0]["metrics"]
assert good["mfu_peak_tflops"]["value"] == 392.857, good.get("mfu_peak_tflops")
EOF
grep -q '\*\*PASS\*\*: all 5 gate checks passed' "$T/good/report/summary.md" || fail "summary.md lacks PASS"
# A report killed while writing leaves temp copies beside its files: the next one removes those of a writer gone
# (they stayed for good), and leaves a live writer's alone.
dead=2000000000  # above any pid_max: no such process
printf x > "$T/good/report/.summary.json.tmp.$dead.1a2b3c"
printf x > "$T/good/report/.index.html.tmp.$$.4d5e6f"
"$REPORT" "$T/good" --baseline "$T/base" --config "$T/gates.toml" --log-level warn || fail "good run again: exit $?"
[ ! -e "$T/good/report/.summary.json.tmp.$dead.1a2b3c" ] || fail "a killed report's temp file was left"
[ -e "$T/good/report/.index.html.tmp.$$.4d5e6f" ] || fail "a live writer's temp file was removed"
rm -f "$T/good/report/.index.html.tmp.$$.4d5e6f"

# 2. The planted regression fails exactly the gates it should: exit 3.
set +e
"$REPORT" "$T/bad" --baseline "$T/base" --config "$T/gates.toml" --out "$T/out-bad" --json "$T/bad.json" 2> "$T/bad.err"
rc=$?
set -e
[ $rc -eq 3 ] || fail "regressed run: exit $rc, expected 3"
grep -q "gates failed" "$T/bad.err" || fail "no gate summary on stderr"
check_report "$T/out-bad"
cmp -s "$T/bad.json" "$T/out-bad/report/summary.json" || fail "--json differs from summary.json"
$PY - "$T/out-bad/report/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
v = {g["metric"]: g["verdict"] for g in s["gates"]}
assert v == {"val_loss": "fail", "tokens_per_s": "fail", "busbw_allreduce": "fail", "wrong": "fail",
             "eval_hellaswag_acc": "fail"}, v
g = next(g for g in s["gates"] if g["metric"] == "wrong")
assert g["value"] == 2 and g["limit"] == 0, g  # planted: 2 wrong results at 2 KiB
EOF
grep -q 'FAIL: 5 of 5 gate checks failed' "$T/out-bad/report/index.html" || fail "HTML lacks the FAIL banner"

# 3. Missing pieces and corrupt lines: rendered, named, and gates on absent data fail with a reason.
set +e
"$REPORT" "$T/partial" --baseline "$T/base" --config "$T/gates.toml" 2> "$T/partial.err"
rc=$?
set -e
[ $rc -eq 3 ] || fail "partial run: exit $rc, expected 3"
check_report "$T/partial"
grep -q "partial/train/metrics.jsonl:6: " "$T/partial.err" || fail "corrupt line not reported with file:line"
$PY - "$T/partial/report/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
run = next(r for r in s["runs"] if r["name"] == "partial")
assert set(run["absent_stages"]) == {"sweep", "plan", "eval"}, run["absent_stages"]
assert run["problem_count"] == 3, run["problems"]  # two corrupt lines and a torn last line
assert any(":6: " in p for p in run["problems"]) and any("torn" in p for p in run["problems"])
assert run["train_finished"] is False
gates = {g["metric"]: g for g in s["gates"]}
assert gates["busbw_allreduce"]["verdict"] == "fail"
assert "has no sweep/ stage" in gates["busbw_allreduce"]["reason"], gates["busbw_allreduce"]
assert "has no eval/ stage" in gates["eval_hellaswag_acc"]["reason"]
assert gates["val_loss"]["value"] is not None
EOF
grep -q "partial/train/metrics.jsonl:6: " "$T/partial/report/summary.md" || fail "summary.md does not list the corrupt line"

# 4. Config errors exit 2: an unknown gate metric, an unknown rule, a missing run directory.
set +e
"$REPORT" "$T/good" --baseline "$T/base" --set 'report.gates.val_los={max_increase=0.02}' 2> "$T/e1"; r1=$?
"$REPORT" "$T/good" --baseline "$T/base" --set 'report.gates.val_loss={max_rise=0.02}' 2> "$T/e2"; r2=$?
"$REPORT" "$T/nope" 2> "$T/e3"; r3=$?
"$REPORT" 2> "$T/e4"; r4=$?
set -e
[ $r1 -eq 2 ] && grep -q 'unknown gate metric "val_los" (did you mean "val_loss"?)' "$T/e1" || fail "unknown metric: exit $r1 $(cat "$T/e1")"
[ $r2 -eq 2 ] && grep -qF "report.gates.val_loss: unknown key 'max_rise' (known keys: max_increase," "$T/e2" ||
  fail "unknown rule: exit $r2 $(cat "$T/e2")"
[ $r3 -eq 2 ] && grep -q "nope" "$T/e3" || fail "missing run dir: exit $r3 $(cat "$T/e3")"
[ $r4 -eq 2 ] || fail "no runs: exit $r4"

# 5. Several runs overlaid without a baseline; absolute gates still apply; --list-metrics and --help.
"$REPORT" "$T/base" "$T/good" "$T/bad" --out "$T/multi" --set 'report.gates.skipped_total={max=10}' --log-level warn
check_report "$T/multi"
grep -q 'bad' "$T/multi/report/summary.md" || fail "multi-run summary lacks a run"
# Runs that stopped at different steps: summary.md says so (the gates and table compare their last values).
gen "$T/short" --steps 120 --seed 5 --name short --no-finished
"$REPORT" "$T/base" "$T/short" --out "$T/steps" --log-level warn || true
grep -q "Note: the runs' training ended at different points (.*step 120, not finished" "$T/steps/report/summary.md" ||
  fail "summary.md does not say the runs ended at different steps: $(head -8 "$T/steps/report/summary.md")"
grep -q "Note: the runs' training ended" "$T/multi/report/summary.md" &&
  fail "runs of the same length and finished got the note"
# eval_<task>_<metric> names are open-ended: a misspelt one fails its gate naming the closest the run has.
rc=0; "$REPORT" "$T/good" --set 'report.gates.eval_hellaswag_ac={min=0}' --out "$T/evtypo" --log-level warn \
  2> "$T/evtypo.err" || rc=$?
[ $rc = 3 ] && grep -q "no eval/results.jsonl records for eval_hellaswag_ac (did you mean eval_hellaswag_acc?)" \
  "$T/evtypo.err" || fail "a misspelt eval gate: exit $rc $(cat "$T/evtypo.err")"
# A relative rule against the metric's direction is said (it bounds an improvement, not a regression).
"$REPORT" "$T/good" --baseline "$T/base" --set 'report.gates.val_loss={max_drop_pct=5}' --out "$T/dir" \
  --log-level warn 2> "$T/dir.err" || true
grep -q "report.gates.val_loss.max_drop_pct: val_loss is better lower.*did you mean max_increase_pct" "$T/dir.err" ||
  fail "a rule against the metric's direction was not flagged: $(cat "$T/dir.err")"
"$REPORT" --list-metrics | grep -q 'busbw_<coll>\[_<tier>\]' || fail "--list-metrics"
# --list-metrics --json -: the catalog as one JSON document alone on stdout (it printed the text, ignoring --json)
"$REPORT" --list-metrics --json - | /usr/bin/python3 -c "
import json, sys
d = json.load(sys.stdin)
names = {m['name'] for m in d['metrics']}
assert 'val_loss' in names and 'tokens_per_s' in names, sorted(names)
assert 'allreduce' in d['collectives'] and 'max_increase' in d['rules'], d
" || fail "--list-metrics --json -"
"$REPORT" --help | grep -q 'eval_<task>_<metric>' || fail "--help does not document metric names"
# 6. Garbage input: binary bytes as metrics.jsonl and an empty one are rendered (bad lines skipped and
# counted); a sweep.json or plans.json of the wrong shape is bad input: exit 2 naming the file and key.
mkdir -p "$T/junk/train" "$T/empty/train" "$T/shape/sweep" "$T/pshape/plan"
head -c 4000 /dev/urandom > "$T/junk/train/metrics.jsonl"
: > "$T/empty/train/metrics.jsonl"
echo '{"results":"x","fits":[{"collective":3}],"wrong":"many"}' > "$T/shape/sweep/sweep.json"
echo '{"plans":[{"dp":8,"mfu":1e999999}]}' > "$T/pshape/plan/plans.json"
"$REPORT" "$T/junk" "$T/empty" --out "$T/garbage" --log-level error || fail "garbage input: exit $?"
set +e
"$REPORT" "$T/junk" "$T/shape" --out "$T/garbage2" 2> "$T/e5"; r5=$?
"$REPORT" "$T/pshape" --out "$T/garbage3" 2> "$T/e6"; r6=$?
set -e
[ $r5 -eq 2 ] && grep -qF "malformed sweep file \"$T/shape/sweep/sweep.json\": key \"wrong\": expected" "$T/e5" ||
  fail "sweep.json of the wrong shape: exit $r5 $(cat "$T/e5")"
[ $r6 -eq 2 ] && grep -qF "malformed plan file \"$T/pshape/plan/plans.json\": invalid JSON: number overflow" "$T/e6" ||
  fail "plans.json with 1e999999: exit $r6 $(cat "$T/e6")"
[ ! -e "$T/garbage2/report" ] || fail "a refused sweep.json left a report directory"
xmllint --noout "$T/garbage/report/index.html" || fail "garbage input: HTML not well-formed"
$PY -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['runs'][0]['problem_count'] > 0" "$T/garbage/report/summary.json"
grep -q "empty/train/metrics.jsonl (no train or val records)" "$T/garbage/report/summary.md" || fail "empty file not named"
# 7. sweep.json layouts: the flat layout written before nccl-tests' version 3 (cairn's fields beside
# nccl-tests') reads as the same numbers as version 3 (cairn's fields under "cairn"), planted wrong
# results included; version 3's nccl-tests average_bus_bandwidth is not taken for cairn's avg_busbw.
gen "$T/flat" --seed 3 --name flat --steps 50 --busbw-factor 0.8 --wrong 2 --sweep-layout flat --without train,eval,plan,data
gen "$T/v3" --seed 3 --name v3 --steps 50 --busbw-factor 0.8 --wrong 2 --without train,eval,plan,data
"$REPORT" "$T/flat" "$T/v3" --out "$T/layouts" --log-level warn || fail "layouts: exit $?"
check_report "$T/layouts"
$PY - "$T/layouts/report/summary.json" "$T/v3/sweep/sweep.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
v3 = json.load(open(sys.argv[2]))
assert v3["version"] == 3 and "collective" not in v3["results"][0], "make_runs.py did not write version 3"
runs = {r["name"]: r for r in s["runs"]}
flat = {k: v["value"] for k, v in runs["flat"]["metrics"].items()}
new = {k: v["value"] for k, v in runs["v3"]["metrics"].items()}
assert flat == new, sorted(set(flat.items()) ^ set(new.items()))
for k in ("busbw_allreduce", "busbw_allgather_intra", "alpha_allreduce", "fit_busbw_allgather", "avg_busbw"):
    assert new.get(k) is not None, k
assert new["wrong"] == 2, new["wrong"]
assert abs(new["avg_busbw"] - v3["cairn"]["avg_busbw"]) < 1e-9, new["avg_busbw"]
assert len(runs["v3"]["sweep_fits"]) == len(runs["flat"]["sweep_fits"]) == 4
charts = {c["id"]: c for c in s["charts"] if c["section"] == "sweep"}
assert len(charts) == 4, sorted(charts)
for c in charts.values():  # per run: measured points and a fitted curve
    assert sum(1 for x in c["series"] if x.startswith("v3")) == 2, c["series"]
    assert sum(1 for x in c["series"] if x.startswith("flat")) == 2, c["series"]
print("layouts: flat and version-3 sweep.json read alike")
EOF
# nccl-tests prints what it could not compute as text ("nan"): that measure is not measured, the run still read.
cp -r "$T/v3" "$T/v3nan"
$PY - "$T/v3nan/sweep/sweep.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["results"][0]["out_of_place"]["bus_bw"] = "nan"
d["results"][0]["in_place"]["time"] = "-nan"
json.dump(d, open(sys.argv[1], "w"))
EOF
"$REPORT" "$T/v3nan" --out "$T/v3nan_out" --log-level warn || fail "a sweep.json with nccl-tests' \"nan\" text: exit $?"
check_report "$T/v3nan_out"
# 8. The common options' outputs are checked before any run is read (exit 2, naming the path): --out naming a
# regular file (or a path under one), --json naming a directory; --json - leaves the JSON alone on stdout;
# a NaN gate amount is shown as nan; a quoted gate key (a dot inside) is one key, not a section.
: > "$T/afile"; mkdir -p "$T/jdir"
set +e
"$REPORT" "$T/good" --baseline "$T/base" --out "$T/afile" 2> "$T/e7"; r7=$?
"$REPORT" "$T/good" --baseline "$T/base" --out "$T/afile/sub" 2> "$T/e8"; r8=$?
"$REPORT" "$T/good" --baseline "$T/base" --out "$T/jout" --json "$T/jdir" 2> "$T/e9"; r9=$?
"$REPORT" "$T/good" --baseline "$T/base" --set 'report.gates.val_loss={max_increase=nan}' --out "$T/nan" 2> "$T/e10"; r10=$?
printf '[report.gates]\n"val.loss" = { max = 1 }\n' > "$T/dotg.toml"
"$REPORT" "$T/good" --baseline "$T/base" --config "$T/dotg.toml" --out "$T/dotg" 2> "$T/e11"; r11=$?
set -e
[ $r7 -eq 2 ] && grep -qF "cairn-report: --out: cannot use run directory \"$T/afile\": Not a directory" "$T/e7" ||
  fail "--out FILE: exit $r7 $(cat "$T/e7")"
[ $r8 -eq 2 ] && grep -qF "\"$T/afile/sub\": Not a directory" "$T/e8" || fail "--out FILE/sub: exit $r8 $(cat "$T/e8")"
[ $r9 -eq 2 ] && grep -qF "cairn-report: --json: cannot write \"$T/jdir\": Is a directory" "$T/e9" ||
  fail "--json DIR: exit $r9 $(cat "$T/e9")"
[ ! -e "$T/jout/report" ] || fail "--json DIR: the report was written before the error"
[ $r10 -eq 2 ] && grep -qF "max_increase: expected a number, got nan" "$T/e10" || fail "nan gate: exit $r10 $(cat "$T/e10")"
[ $r11 -eq 2 ] && grep -qF 'report.gates."val.loss": unknown gate metric "val.loss"' "$T/e11" ||
  fail "quoted gate key: exit $r11 $(cat "$T/e11")"
"$REPORT" "$T/good" --baseline "$T/base" --config "$T/gates.toml" --out "$T/jstdout" --json - > "$T/j.out" 2> "$T/j.err" ||
  fail "--json -: exit $?"
cmp -s "$T/j.out" "$T/jstdout/report/summary.json" || fail "--json -: stdout is not exactly summary.json"
# 9. bench/layout_predict.sh's table (a real run of it, kept in bench/results): every layout a row of the Layouts
# table in summary.md with its step error and the spread between the bench's rounds, the summary line, and the rows
# in summary.json; the HTML well-formed.
LP=$SRC/bench/results/layout_predict_2026-12-04b.json
mkdir -p "$T/lp"
cp "$LP" "$T/lp/layout_predict.json"
"$REPORT" "$T/lp" --out "$T/lpout" --log-level warn 2> "$T/lp.err" || fail "layout table: exit $? $(cat "$T/lp.err")"
xmllint --noout "$T/lpout/report/index.html" || fail "layout table: index.html is not well-formed"
$PY - "$T/lp/layout_predict.json" "$T/lpout/report/summary.md" "$T/lpout/report/summary.json" <<'EOF'
import json, sys
lp, md, sj = json.load(open(sys.argv[1])), open(sys.argv[2]).read(), json.load(open(sys.argv[3]))
section = md.split("### Layouts: predicted vs measured", 1)[1].split("\n### ", 1)[0]
lines = [l for l in section.splitlines() if l.startswith("|")]
head, rule, body = lines[0], lines[1], lines[2:]
cols = [c.strip() for c in head.strip("|").split("|")]
assert "spread (rounds)" in cols and rule.count("|") == head.count("|"), (head, rule)
assert len(body) == len(lp["rows"]), (len(body), len(lp["rows"]))
for row, line in zip(lp["rows"], body):
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[0] == row["layout"], (cells[0], row["layout"])
    err = float(cells[cols.index("error")].rstrip("%"))
    assert abs(err - row["step_error_pct"]) < 0.05, (row["layout"], err, row["step_error_pct"])
    spread = cells[cols.index("spread (rounds)")]
    if row.get("round_spread_pct") is None:
        assert spread == "n/a", (row["layout"], spread)
    else:
        assert abs(float(spread.rstrip("%")) - row["round_spread_pct"]) < 0.05 * max(1, row["round_spread_pct"]), spread
st = lp["summary"]["step"]
assert f"{st['within_target']}/{st['n']} within" in section, section[:300]
assert len(sj["runs"][0]["layout_predict"]["rows"]) == len(lp["rows"])
print(f"layout table: {len(body)} rows of {sys.argv[1].rsplit('/', 1)[-1]} with their errors and spreads")
EOF
# A run with the bench's learned prediction (LEARN: calibrate --from-runs on its 2-rank layouts): the "learned error"
# column holds each row's learned_step_error_pct and the summary line names the fit (its factors and the GEMM table's
# learned shapes) and its held-out figures.
LP=$SRC/bench/results/layout_predict_2026-12-04n.json
mkdir -p "$T/lpl"
cp "$LP" "$T/lpl/layout_predict.json"
"$REPORT" "$T/lpl" --out "$T/lplout" --log-level warn 2> "$T/lpl.err" || fail "learned layout table: exit $?"
$PY - "$T/lpl/layout_predict.json" "$T/lplout/report/summary.md" <<'EOF'
import json, sys
lp, md = json.load(open(sys.argv[1])), open(sys.argv[2]).read()
section = md.split("### Layouts: predicted vs measured", 1)[1].split("\n### ", 1)[0]
lines = [l for l in section.splitlines() if l.startswith("|")]
cols = [c.strip() for c in lines[0].strip("|").split("|")]
for row, line in zip(lp["rows"], lines[2:]):
    cells = [c.strip() for c in line.strip("|").split("|")]
    got = float(cells[cols.index("learned error")].rstrip("%"))
    assert abs(got - row["learned_step_error_pct"]) < 0.05, (row["layout"], got, row["learned_step_error_pct"])
held = lp["summary"]["learned"]["step_held_out"]
factors = ", ".join(f"{k} x{v:.3g}" for k, v in sorted(lp["summary"]["learned"]["factors"].items()))
assert lp["summary"]["learned"]["gemm_shapes"] > 0, lp["summary"]["learned"]
factors += f", GEMM table at {lp['summary']['learned']['gemm_shapes']} shapes"
want = f"learned from {lp['summary']['learned']['fit_on']} (calibrate --from-runs: {factors}), the other layouts' step time"
assert want in section and f"{held['within_target']}/{held['n']} within" in section, section[:600]
print(f"learned layout table: {len(lines) - 2} rows, held-out {held['within_target']}/{held['n']} within the target")
EOF
# A pipelined run (train lines with per-stage splits): the stage table in all three outputs, stage 1 critical on 3 of
# every 4 steps (it then computes 0.5 s against stage 0's 0.4 s), and the pipeline gates.
mkdir -p "$T/pp/train"
$PY - "$T/pp/train/metrics.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for s in range(1, 41):
        busy1 = 0.5 if s % 4 else 0.3
        t0 = {"forward": 0.1, "backward": 0.3, "tp_comm": 0, "cp_comm": 0, "zero_comm": 0, "pp_wait": 0.2, "total": 0.7}
        t1 = dict(t0, forward=busy1 / 3, backward=2 * busy1 / 3, pp_wait=0.1)
        f.write(json.dumps({"kind": "train", "step": s, "loss": 3.0 - s / 100, "time_s": t0,
                            "stages": [{"stage": 0, "rank": 0, "time_s": t0}, {"stage": 1, "rank": 1, "time_s": t1}]}) + "\n")
EOF
printf '[report.gates]\npipeline_wait_s = { max = 0.05 }\nstage_imbalance = { max = 30 }\n' > "$T/ppgates.toml"
rc=0
"$REPORT" "$T/pp" --out "$T/ppout" --config "$T/ppgates.toml" --log-level error > /dev/null 2>&1 || rc=$?
[[ $rc == 3 ]] || fail "pipeline gates: exit $rc, expected 3 (pipeline_wait_s above its maximum)"
check_report "$T/ppout"
$PY - "$T/ppout/report" <<'EOF'
import json, sys
d = sys.argv[1]
sj = json.load(open(f"{d}/summary.json"))
st = sj["runs"][0]["pipeline_stages"]
assert [s["stage"] for s in st] == [0, 1], st
assert abs(st[0]["compute_s"] - 0.4) < 1e-9 and abs(st[1]["compute_s"] - 0.5) < 1e-9, st
assert abs(st[1]["critical_pct"] - 75) < 5 and abs(st[0]["critical_pct"] + st[1]["critical_pct"] - 100) < 1e-9, st
m = sj["runs"][0]["metrics"]
assert abs(m["pipeline_wait_s"]["value"] - 0.1) < 1e-9 and abs(m["stage_imbalance"]["value"] - 25) < 1e-6, m
gates = {g["metric"]: g["verdict"] == "pass" for g in sj["gates"]}
assert gates == {"pipeline_wait_s": False, "stage_imbalance": True}, sj["gates"]
md = open(f"{d}/summary.md").read()
assert "### Pipeline stages (" in md, md
print([l for l in md.splitlines() if l.startswith("| 1 |")])
assert "Pipeline stages: " in open(f"{d}/index.html").read()
print(f"pipeline stages: {st}")
EOF

# --print-config shows the run directories given as arguments (not config keys) on its comment line.
"$REPORT" "$T/good" "$T/bad" --print-config > "$T/pc.toml" || fail "--print-config: exit $?"
grep -qxF "# positional arguments (not config keys: give them again with --config): [\"$T/good\", \"$T/bad\"]" \
  "$T/pc.toml" || fail "--print-config does not show the run directories: $(head -3 "$T/pc.toml")"

# 9b. A run as cairn-train leaves it has no <run>/config.toml: its name comes from train/config.toml, the effective
# config cairn-train writes (it used to be ignored, so [run] name and [data] path never reached the report).
mkdir -p "$T/trained/train"
printf '# effective config of cairn-train\n[run]\nname = "named-in-train-config"\n' > "$T/trained/train/config.toml"
for s in 1 2 3; do echo "{\"kind\": \"train\", \"step\": $s, \"loss\": 3.$s}"; done > "$T/trained/train/metrics.jsonl"
"$REPORT" "$T/trained" --out "$T/trained_out" 2>/dev/null || fail "report over a run with train/config.toml only"
grep -q "named-in-train-config" "$T/trained_out/report/summary.md" || fail "train/config.toml's [run] name not used"

# 9c. val_loss over other windows than the baseline's (another val_batches, or an older cairn-train's count) is not
# compared: the gate fails saying so, instead of a false regression (+0.027 on a run whose training loss was equal).
for w in 16 32; do
  mkdir -p "$T/vw$w/train"
  { echo '{"kind": "train", "step": 10, "loss": 2.9}'
    echo "{\"kind\": \"val\", \"step\": 10, \"val_loss\": 2.7$((w / 16)), \"val_windows\": $w}"; } > "$T/vw$w/train/metrics.jsonl"
done
# not_comparable NAME GATE EXPECT: the gate GATE on vw32 against vw16 fails (exit 3) with the reason EXPECT.
not_comparable() {
  local rc=0
  "$REPORT" "$T/vw32" --baseline "$T/vw16" --out "$T/$1_out" --set "report.gates.$2={max_increase=0.02}" \
    2> "$T/$1.err" || rc=$?
  [ $rc -eq 3 ] || fail "$1: exit $rc, expected 3: $(cat "$T/$1.err")"
  grep -q "not comparable: $3" "$T/$1.err" || fail "$1: no reason: $(cat "$T/$1.err")"
}
not_comparable vw val_loss "the run's val_loss averages 32 windows, the baseline's 16"
cp -r "$T/vw16" "$T/vw16b"
"$REPORT" "$T/vw16b" --baseline "$T/vw16" --out "$T/vw_same" --set 'report.gates.val_loss={max_increase=0.02}' \
  2>/dev/null || fail "val_loss over the same windows: the gate failed"
# ... but cairn-eval's scores are compared by their own examples (n), whatever the trainer's windows: its val task
# scores the whole split, so the two runs above score alike (a nightly against an older baseline was refused).
# Another n (--limit, another split) is refused naming it.
for w in 16 32; do
  mkdir -p "$T/vw$w/eval"
  echo '{"step": 10, "task": "val", "metric": "loss", "value": 2.7, "n": 75}' > "$T/vw$w/eval/results.jsonl"
done
"$REPORT" "$T/vw32" --baseline "$T/vw16" --out "$T/vw_eval" --set 'report.gates.eval_val_loss={max_increase=0.02}' \
  2> "$T/vw_eval.err" || fail "eval_val_loss over the same examples: refused: $(cat "$T/vw_eval.err")"
echo '{"step": 10, "task": "val", "metric": "loss", "value": 2.7, "n": 60}' > "$T/vw32/eval/results.jsonl"
not_comparable vw_eval2 eval_val_loss "the run's eval_val_loss averages 60 examples, the baseline's 75"

# 9d. A run resumed by another build with another val_batches (an upgrade mid-run): the report names both builds and
# says that the val_loss curve mixes 8- and 16-window sums (cairn-train's warning went to stderr only).
mkdir -p "$T/upg/train"
{ echo '{"kind": "provenance", "provenance": {"tool": "cairn-train", "git_sha": "9de865ae1b93"}}'
  echo '{"kind": "train", "step": 20, "loss": 2.9}'
  echo '{"kind": "val", "step": 20, "val_loss": 2.8, "val_windows": 8}'
  echo '{"kind": "provenance", "provenance": {"tool": "cairn-train", "git_sha": "433e3aaab850"}}'
  echo '{"kind": "train", "step": 40, "loss": 2.7}'
  echo '{"kind": "val", "step": 40, "val_loss": 2.6, "val_windows": 16}'; } > "$T/upg/train/metrics.jsonl"
"$REPORT" "$T/upg" --out "$T/upg_out" 2>/dev/null || fail "report over a run of two builds: exit $?"
$PY - "$T/upg_out/report/summary.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
assert r["trained_by_builds"] == ["9de865ae1b93", "433e3aaab850"], r["trained_by_builds"]
assert any("val_loss averages 8 windows to step 20, 16 from step 40" in p for p in r["problems"]), r["problems"]
EOF
grep -q "2 builds" "$T/upg_out/report/summary.md" || fail "summary.md does not say the run was trained by 2 builds"

# 10. Gates a run must fail. (a) Its loss went NaN: cairn-train writes null, and the gates used to take the last
# finite values before it and pass. (b) A stage imbalance past 150 %: the fraction was read as a percent above 1.5.
# (c) A value just past its limit prints with the digits that tell them apart. (d) A misspelled gate is refused by
# --print-config too (nightly.sh checks its config so), naming where it was set.
mkdir -p "$T/nan/train" "$T/imb/train" "$T/near/train"
$PY - "$T" <<'EOF'
import json, sys
t = sys.argv[1]
def write(run, lines):
    with open(f"{t}/{run}/train/metrics.jsonl", "w") as f:
        f.writelines(json.dumps(l) + "\n" for l in lines)
write("nan", [{"kind": "train", "step": s, "loss": 3.0 if s < 50 else None} for s in range(1, 101)] +
      [{"kind": "val", "step": 40, "val_loss": 3.1}, {"kind": "val", "step": 100, "val_loss": None}])
stages = [{"stage": 0, "rank": 0, "time_s": {"forward": 1.3, "backward": 1.3, "pp_wait": 0.1}},
          {"stage": 1, "rank": 1, "time_s": {"forward": 0.5, "backward": 0.5, "pp_wait": 0.5}}]
write("imb", [{"kind": "train", "step": s, "loss": 3.0, "stages": stages, "time_s": {"total": 3.0}} for s in range(1, 11)])
write("near", [{"kind": "train", "step": s, "loss": 3.0200001} for s in range(1, 11)])
EOF
set +e
"$REPORT" "$T/nan" --set 'report.gates.loss={max=4}' --set 'report.gates.val_loss={max=4}' --out "$T/nanr" 2> "$T/e12"
r12=$?
"$REPORT" "$T/imb" --set 'report.gates.stage_imbalance={max=50}' --out "$T/imbr" 2> "$T/e13"; r13=$?
"$REPORT" "$T/near" --set 'report.gates.loss={max=3.02}' --out "$T/nearr" 2> "$T/e14"; r14=$?
printf '[report.gates]\nval_los = { max = 4 }\n' > "$T/typo.toml"
"$REPORT" --config "$T/typo.toml" --print-config > /dev/null 2> "$T/e15"; r15=$?
set -e
[ $r12 -eq 3 ] && grep -qF 'loss is not finite at its last step 100 (last finite value 3 at step 49): the run diverged' \
  "$T/e12" && grep -qF 'val_loss is not finite at its last step 100 (last finite value 3.1 at step 40)' "$T/e12" ||
  fail "a diverged run: exit $r12 $(cat "$T/e12")"
[ $r13 -eq 3 ] && grep -qF '160% is above the maximum 50%' "$T/e13" || fail "160 % imbalance: exit $r13 $(cat "$T/e13")"
[ $r14 -eq 3 ] && grep -qF '| **FAIL** | `loss` | near | `max = 3.02` | n/a | 3.0200001 | <= 3.02 |' \
  "$T/nearr/report/summary.md" || fail "a value just over its limit: exit $r14 $(grep FAIL "$T/nearr/report/summary.md")"
[ $r15 -eq 2 ] && grep -qF "$T/typo.toml:2:1: report.gates.val_los: unknown gate metric \"val_los\" (did you mean" \
  "$T/e15" || fail "--print-config with a misspelled gate: exit $r15 $(cat "$T/e15")"
grep -qF '_cairn-report ' "$T/nearr/report/summary.md" || fail "summary.md does not say which cairn-report wrote it"

# A run on a read-only mount (an archived run) with no --out: exit 2 before any run is read, naming the run and
# --out (it was exit 1 when the report was written, after the work).
mkdir -p "$T/romnt"
if mount -t tmpfs -o size=64m tmpfs "$T/romnt" 2>/dev/null; then
  cp -r "$T/good" "$T/romnt/good"
  mount -o remount,ro "$T/romnt"
  set +e
  "$REPORT" "$T/romnt/good" 2> "$T/e16"; r16=$?
  set -e
  umount "$T/romnt"
  [ $r16 -eq 2 ] && grep -qF "cannot write the report into run directory \"$T/romnt/good\": \"$T/romnt/good/report\" is on a read-only file system (--out DIR writes it elsewhere)" "$T/e16" ||
    fail "a read-only run without --out: exit $r16 $(cat "$T/e16")"
elif [ "$(id -u)" != 0 ]; then
  cp -r "$T/good" "$T/rogood" && chmod -R a-w "$T/rogood"
  set +e
  "$REPORT" "$T/rogood" 2> "$T/e16"; r16=$?
  set -e
  chmod -R u+w "$T/rogood"
  [ $r16 -eq 2 ] && grep -qF "cannot write the report into run directory" "$T/e16" ||
    fail "an unwritable run without --out: exit $r16 $(cat "$T/e16")"
else
  echo "report_cli: no read-only mount here (root without mount rights): the read-only run case is not checked"
fi

# Two ranks (mpirun -np 2) write one report: rank 1 leaves the work to rank 0, and the bad run's gate still fails.
set +e
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 "$REPORT" "$T/bad" --baseline "$T/base" \
  --config "$T/gates.toml" --out "$T/out-mpi" --log-level warn > "$T/mpi.out" 2> "$T/mpi.err"
rm=$?
set -e
[ $rm -eq 3 ] && [ "$(grep -c "cairn-report: runs as one process" "$T/mpi.err")" = 1 ] && [ -s "$T/out-mpi/report/index.html" ] ||
  fail "mpirun -np 2: exit $rm $(cat "$T/mpi.err")"
echo "report_cli: all checks passed"
