#!/bin/bash
# cairn-eval's files are lm-evaluation-harness's files: results_<date_id>.json under lm_eval/<model>/ that the
# harness's get_results_filenames() finds, its result dict (sample_len, metric_list, n-samples under --limit,
# the top-level keys simple_evaluate and the tracker write), --log-samples in its sample schema with its hashes,
# all read back with its own rules (harness_read.py, re-implemented from its source), and the files cairn's own
# readers use (results.jsonl, lm_eval/step_*.json, samples/step_*) kept; temp copies a killed writer left of them go.
source "$(dirname "$0")/lib.sh"
cd "$WORK"
make_dataset "$WORK/data"
write_train_config train.toml "$WORK/run" 10 10
"$BIN/cairn-train" --config train.toml --log-level warn
$PY "$SRC/tests/eval/make_fortune_mc.py" --out mc.jsonl -n 20
# A doc with non-ASCII text, a control character and an extra field: doc_hash is json.dumps(doc, indent=2,
# ensure_ascii=False) of the doc as the file gives it (key order kept).
$PY - >> mc.jsonl <<'PY'
import json
print(json.dumps({"id": "x1", "context": "Café \u00e9t\u00e9\t\u2014 \"quoted\"\\", "choices": ["oui", "non", "\u00fc\u0001"],
                  "label": 1, "meta": {"score": 0.25, "tags": [], "deep": {}}}, ensure_ascii=False))
PY
cat > eval.toml <<TOML
[run]
dir = "$WORK/run"
[eval]
tasks = ["val", "docs", "mc"]
batch_size = 4
threads = 1
[eval.task.docs]
kind = "perplexity"
mode = "documents"
[eval.task.mc]
kind = "multiple_choice"
path = "$WORK/mc.jsonl"
TOML
"$BIN/cairn-eval" --config eval.toml --limit 6 --log-samples > summary.txt
CK=run/train/ckpt/step_00000010
ls -R run/eval
# The full sizes under --limit: the validation windows and documents of the split, the task file's lines.
read -r VAL_N DOC_N < <($PY - "$WORK/run" <<'PY'
import json, sys
d = json.load(open(f"{sys.argv[1]}/eval/lm_eval/step_00000010.json"))
print(d["configs"]["val"]["windows"], d["n-samples"]["docs"]["original"])
PY
)
[ "$VAL_N" = 6 ] || fail "val: $VAL_N windows scored under --limit 6"
$PY "$SRC/tests/eval/harness_read.py" run/eval/lm_eval --expect-tasks val,docs,mc \
  --limit-task mc:21:6 --limit-task docs:"$DOC_N":6 > read1.txt || { cat read1.txt; fail "harness reading rules"; }
cat read1.txt
[ "$DOC_N" -gt 6 ] || fail "docs: original $DOC_N is not the split's document count"
grep -q "samples_mc_.*6 samples, hashes verified" read1.txt || fail "mc samples not read"
grep -q "samples_docs_.*6 samples, hashes verified" read1.txt || fail "docs samples not read"
$PY - "$WORK/run" <<'PY'
import glob, json, os, sys
run = sys.argv[1]
val_total = None
# The val window count of the whole split: n-samples.original of val must exceed the 6 scored.
d = json.load(open(f"{run}/eval/lm_eval/step_00000010.json"))
assert d["n-samples"]["val"]["effective"] == 6 and d["n-samples"]["val"]["original"] > 6, d["n-samples"]["val"]
# lm_eval/step_*.json is the very results file (a hard link where the filesystem allows).
res = glob.glob(f"{run}/eval/lm_eval/*/results_*.json")
assert len(res) == 1, res
assert os.path.samefile(res[0], f"{run}/eval/lm_eval/step_00000010.json") or \
    open(res[0]).read() == open(f"{run}/eval/lm_eval/step_00000010.json").read()
assert os.path.basename(os.path.dirname(res[0])) == "run__step_00000010", res
s = glob.glob(f"{run}/eval/lm_eval/run__step_00000010/samples_mc_*.jsonl")
assert len(s) == 1 and open(s[0]).read() == open(f"{run}/eval/samples/step_00000010_mc.jsonl").read()
# results.jsonl: the record cairn-report reads; the scored-token count is no metric row there either.
rows = [json.loads(l) for l in open(f"{run}/eval/results.jsonl")]
assert {r["task"] for r in rows} == {"val", "docs", "mc"}
assert "tokens" not in {r["metric"] for r in rows}, "tokens row in results.jsonl"
assert d["cairn"]["performance"]["val"]["tokens_scored"] == 6 * 64
# Harness-schema multiple-choice sample: arguments (context, " " + choice), resps [[loglik, is_greedy]], target.
mc = [json.loads(l) for l in open(f"{run}/eval/samples/step_00000010_mc.jsonl")]
first = mc[0]
doc = json.loads(open(f"{os.path.dirname(run)}/mc.jsonl").readline())
assert first["doc"] == doc and first["target"] == str(doc["label"]), first
assert first["arguments"]["gen_args_1"] == {"arg_0": doc["context"], "arg_1": " " + doc["choices"][1]}
assert first["resps"][0][0][1] in ("True", "False") and first["filter"] == "none"
lls = [float(r[0]) for r in first["filtered_resps"]]
assert lls == first["cairn"]["lls"], (lls, first["cairn"]["lls"])
print("step_00000010: harness files and cairn's files agree")
PY
# --limit off, the exotic doc included: its doc_hash too; a second run writes a second results file for the
# step (the harness's latest-file rule picks it) and keeps the step link on it.
sleep 1
# Temp copies a killed cairn-eval left of the harness files and their links (a kill inside their write kept them for
# good): the next write removes a dead writer's, in every directory they go to (another checkpoint's too), and those
# of the step links that versions before the pid in the name left, and leaves a live one's ($$: this shell) and
# another host's.
dead=2000000000  # above any pid_max: no such process
HOST_TAG=$(hostname | cut -d. -f1 | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n-' '-' | cut -c1-32)  # as temp_host_tag()
L=run/eval/lm_eval
mkdir -p "$L/run__step_00000099"
DEAD=("$L/run__step_00000010/.results_2026-01-01T00-00-00.000000.json.tmp.$dead.1a2b3c"
      "$L/run__step_00000010/.samples_mc_2026-01-01T00-00-00.000000.jsonl.tmp.$dead.1a2b3c"
      "$L/run__step_00000099/.results_2026-01-01T00-00-00.000000.json.tmp.$dead.1a2b3c"
      "$L/.step_00000010.json.tmp.$dead.1a2b3c" "run/eval/samples/.step_00000010_mc.jsonl.tmp.$dead.1a2b3c"
      "$L/.step_00000010.json.tmp.$HOST_TAG.$dead.1a2b3c"
      "$L/step_00000010.json.link.tmp" "run/eval/samples/step_00000010_mc.jsonl.link.tmp")  # before the pid was in it
# Another node's temp on a shared filesystem: its pid says nothing here.
LIVE=("$L/run__step_00000010/.results_2026-01-01T00-00-00.000000.json.tmp.$$.4d5e6f"
      "$L/.step_00000010.json.tmp.$$.4d5e6f" "run/eval/samples/.step_00000010_mc.jsonl.tmp.$$.4d5e6f"
      "$L/.step_00000010.json.tmp.$HOST_TAG.$$.4d5e6f" "$L/.step_00000010.json.tmp.other-node7.$dead.1a2b3c")
for f in "${DEAD[@]}" "${LIVE[@]}"; do printf x > "$f"; done
"$BIN/cairn-eval" --config eval.toml --tasks mc --reevaluate --log-samples "$CK" > /dev/null
for f in "${DEAD[@]}"; do [ ! -e "$f" ] || fail "a killed writer's temp file was left: $f"; done
for f in "${LIVE[@]}"; do [ -e "$f" ] || fail "a live writer's temp file was removed: $f"; done
rm -r "${LIVE[@]}" "$L/run__step_00000099"
[ -z "$(find run/eval -name '*tmp*')" ] || fail "temp files left: $(find run/eval -name '*tmp*')"
$PY "$SRC/tests/eval/harness_read.py" run/eval/lm_eval --expect-tasks val,docs,mc --limit-task mc:21:21 \
  > read2.txt || { cat read2.txt; fail "harness reading rules (second run)"; }
grep -q "samples_mc_.*21 samples, hashes verified" read2.txt || { cat read2.txt; fail "mc samples (21) not read"; }
[ "$(ls run/eval/lm_eval/run__step_00000010/results_*.json | wc -l)" = 2 ] || fail "second run: not two results files"
$PY - "$WORK/run" <<'PY'
import glob, json, os, sys
run = sys.argv[1]
latest = max(glob.glob(f"{run}/eval/lm_eval/*/results_*.json"), key=lambda f: f[f.rfind("_") + 1:])
assert open(latest).read() == open(f"{run}/eval/lm_eval/step_00000010.json").read(), "step file is not the latest"
mc = [json.loads(l) for l in open(f"{run}/eval/samples/step_00000010_mc.jsonl")]
assert mc[-1]["doc"]["id"] == "x1" and list(mc[-1]["doc"]) == ["id", "context", "choices", "label", "meta"]
PY
echo "eval_harness: OK"
