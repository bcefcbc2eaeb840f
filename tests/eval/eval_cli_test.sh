#!/bin/bash
# cairn-eval end to end: a real fortunes dataset, a tiny cairn-train run, then evaluation checked against
# the trainer's own validation loss (1e-5), across 1/2/4 MPI ranks (identical), restart-safe reruns,
# output files (jsonl, h5, lm-eval JSON), and bad inputs (exit 2 with clear messages).
source "$(dirname "$0")/lib.sh"
cd "$WORK"
make_dataset "$WORK/data"
write_train_config train.toml "$WORK/run" 20 10
"$BIN/cairn-train" --config train.toml --log-level warn

# [eval.task.val32]: cairn-train's validation windows (val_batches 4 x micro 8 = the first 32).
$PY "$SRC/tests/eval/make_fortune_mc.py" --out mc.jsonl -n 40
cat > eval.toml <<TOML
[run]
dir = "$WORK/run"
[eval]
tasks = ["val32", "train_val", "docs", "mc"]
batch_size = 5
threads = 1
[eval.task.val32]
kind = "perplexity"
max_windows = 32
[eval.task.docs]
kind = "perplexity"
mode = "documents"
limit = 30
[eval.task.mc]
kind = "multiple_choice"
path = "$WORK/mc.jsonl"
TOML
"$BIN/cairn-eval" --config eval.toml > summary1.txt
grep -q "| val32" summary1.txt || fail "no summary table"
grep -q "acc_norm" summary1.txt || fail "no acc_norm in the summary"

$PY - "$WORK/run" <<'PY'
import json, sys, h5py, math
run = sys.argv[1]
val = {j["step"]: j["val_loss"] for j in map(json.loads, open(f"{run}/train/metrics.jsonl")) if j["kind"] == "val"}
rows = [json.loads(l) for l in open(f"{run}/eval/results.jsonl")]
got = {r["step"]: r["value"] for r in rows if r["task"] == "val32" and r["metric"] == "loss"}
assert sorted(got) == [10, 20], got
tv = {r["step"]: r["value"] for r in rows if r["task"] == "train_val" and r["metric"] == "loss"}
for s in got:
    assert abs(got[s] - val[s]) <= 1e-5, (s, got[s], val[s])
    assert abs(tv[s] - val[s]) <= 1e-5, (s, tv[s], val[s])
    print(f"step {s}: eval loss {got[s]:.7f} (train_val {tv[s]:.7f}) train val_loss {val[s]:.7f}")
h = h5py.File(f"{run}/eval/results.h5")
assert len(h["results/value"]) == len(rows), "h5 rows != jsonl rows"
assert "git_sha" in h.attrs and "command_line" in h.attrs
metrics = {r["metric"] for r in rows}
for m in ["loss", "perplexity", "accuracy", "bits_per_byte", "byte_perplexity", "word_perplexity", "acc", "acc_norm",
          "eval_tokens_per_s", "eval_examples_per_s"]:
    assert m in metrics, m
for r in rows:
    if r["metric"] == "perplexity":
        loss = [x for x in rows if x["step"] == r["step"] and x["task"] == r["task"] and x["metric"] == "loss"][0]
        assert abs(math.log(r["value"]) - loss["value"]) < 1e-9
lm = json.load(open(f"{run}/eval/lm_eval/step_00000020.json"))
for k in ["results", "configs", "versions", "n-samples", "config", "n-shot", "higher_is_better"]:
    assert k in lm, k
mc = lm["results"]["mc"]
assert 0 <= mc["acc,none"] <= 1 and mc["acc_stderr,none"] > 0 and "acc_norm_stderr,none" in mc
assert lm["n-samples"]["mc"]["effective"] == 40
assert lm["results"]["docs"]["word_perplexity,none"] > 1
PY

# 2 and 4 ranks: identical values (bitwise, as printed by JSON) to 1 rank.
for np in 2 4; do
  mpirun -np $np --oversubscribe "$BIN/cairn-eval" --config eval.toml --out "$WORK/run$np" \
    "$WORK/run/train/ckpt" --log-level warn > /dev/null
done
$PY - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
def vals(d):
    return {(r["step"], r["task"], r["metric"]): r["value"] for r in map(json.loads, open(f"{d}/eval/results.jsonl"))
            if not r["metric"].startswith("eval_")}
a = vals(f"{w}/run")
for np in (2, 4):
    b = vals(f"{w}/run{np}")
    assert a.keys() == b.keys(), np
    diff = [k for k in a if a[k] != b[k]]
    assert not diff, (np, diff[:3], [(a[k], b[k]) for k in diff[:3]])
print("1/2/4 ranks identical over", len(a), "values")
PY

# --print-config under mpirun: rank 0 prints the config once (each rank printed it: two [run] tables that do not
# load back), and it loads back; the second word of `--tasks val train_val` gets a hint towards the comma list.
mpirun -np 2 --oversubscribe "$BIN/cairn-eval" --config eval.toml --print-config 2>/dev/null > pc2.toml
[ "$(grep -c '^\[run\]' pc2.toml)" = 1 ] || { echo "--print-config under mpirun: $(grep -c '^\[run\]' pc2.toml) [run] tables"; exit 1; }
"$BIN/cairn-eval" --config pc2.toml --print-config > /dev/null || { echo "--print-config output does not load back"; exit 1; }
set +e
"$BIN/cairn-eval" --config eval.toml --tasks val train_val 2> tasks2.err > /dev/null
rc=$?
set -e
[ $rc = 2 ] && grep -q -- '--tasks takes one comma-separated list: --tasks val,train_val' tasks2.err ||
  { echo "--tasks val train_val: rc $rc"; cat tasks2.err; exit 1; }

CK20="$WORK/run/train/ckpt/step_00000020"
# Restart-safe: a rerun finds everything in results.jsonl and evaluates nothing.
n1=$(wc -l < run/eval/results.jsonl)
"$BIN/cairn-eval" --config eval.toml 2> rerun.err > /dev/null
grep -q "already evaluated" rerun.err || fail "rerun did not skip evaluated checkpoints"
[ "$(wc -l < run/eval/results.jsonl)" = "$n1" ] || fail "rerun changed results.jsonl"

# Provenance: every row names its writer's line in provenance.jsonl; reevaluating step 20 adds a second writer, and
# a writer no row refers to any more (all steps reevaluated) loses its line.
"$BIN/cairn-eval" --config eval.toml --set eval.reevaluate=true "$CK20" --log-level warn > /dev/null
cp run/eval/provenance.jsonl prov2.jsonl
cp run/eval/results.jsonl results2.jsonl
"$BIN/cairn-eval" --config eval.toml --set eval.reevaluate=true --set eval.batch_size=4 --log-level warn > /dev/null
$PY - "$WORK" <<'PY'
import json, sys, h5py
w = sys.argv[1]
def load(rows_path, prov_path):
    rows = [json.loads(l) for l in open(rows_path)]
    prov = {p["eval_run"]: p["provenance"] for p in map(json.loads, open(prov_path))}
    assert all(r["eval_run"] in prov for r in rows), "a row names no provenance line"
    return rows, prov
rows, prov = load(f"{w}/results2.jsonl", f"{w}/prov2.jsonl")
assert len(prov) == 2, f"two writers expected, provenance.jsonl has {len(prov)}"
by_step = {s: {r["eval_run"] for r in rows if r["step"] == s} for s in (10, 20)}
assert len(by_step[10]) == 1 and len(by_step[20]) == 1 and by_step[10] != by_step[20], by_step
p20 = prov[next(iter(by_step[20]))]
assert p20["tool"] == "cairn-eval" and "step_00000020" in p20["command_line"], p20["command_line"]
assert "reevaluate" in p20["command_line"] and "[eval]" in p20["config"] and p20["git_sha"]
rows, prov = load(f"{w}/run/eval/results.jsonl", f"{w}/run/eval/provenance.jsonl")
assert len(prov) == 1 and "batch_size=4" in next(iter(prov.values()))["command_line"], prov.keys()
h = h5py.File(f"{w}/run/eval/results.h5")
assert [x.decode() for x in h["results/eval_run"][:]] == [r["eval_run"] for r in rows]
print("provenance: 2 writers, then 1 after reevaluating every step")
PY

# Bad inputs: exit 2 with clear messages.
CK="$WORK/run/train/ckpt/step_00000020"
expect_exit 2 "another model shape" "$BIN/cairn-eval" --config eval.toml --out bad1 "$CK" --set model.layers=3
expect_exit 2 "index.json" "$BIN/cairn-eval" --config eval.toml --out bad2 --data "$WORK/nonexistent" "$CK"
# --backend cuda where it cannot run (no GPU, or a build without CUDA): a usage error naming the backend, nothing
# written (on a GPU machine bench/train_gpu_check.sh checks cairn-eval on CUDA instead)
if ! nvidia-smi -L >/dev/null 2>&1; then
  expect_exit 2 'backend = "cuda"' "$BIN/cairn-eval" --config eval.toml --out bad_cuda --backend cuda "$CK"
  [ ! -e bad_cuda/eval/results.jsonl ] || fail "--backend cuda without a GPU wrote results"
fi
cp -r "$WORK/data" data_notok
$PY - data_notok/index.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["tokenizer"] = {"type": "gpt2", "files": {"vocab": "tokenizer/encoder.json", "merges": "tokenizer/vocab.bpe"}}
json.dump(d, open(sys.argv[1], "w"))
PY
expect_exit 2 "cannot load the tokenizer" "$BIN/cairn-eval" --config eval.toml --out bad3 --data "$WORK/data_notok" "$CK"
# Data of another tokenizer with as many ids (a byte-level BPE, 256 bytes in another order + end-of-text) is refused:
# the checkpoint records its data's tokenizer. It was scored, with plausible losses.
$PY - hf257.json <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
vocab = {chr(c): 255 - b for b, c in zip(bs, cs)}
vocab["<|endoftext|>"] = 256
json.dump({"version": "1.0", "added_tokens": [{"id": 256, "content": "<|endoftext|>", "special": True}],
           "normalizer": None, "post_processor": None, "decoder": {"type": "ByteLevel"},
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
           "model": {"type": "BPE", "vocab": vocab, "merges": []}}, open(sys.argv[1], "w"))
PY
"$BIN/cairn-reshard" build /usr/share/games/fortunes/fortunes --delimiter % --shards 2 --tokenizer hf \
  --tokenizer-json hf257.json --out "$WORK/data_hf" --log-level warn
expect_exit 2 "(hf:[0-9a-f]*) is not the one the checkpoint's run trained with (bytes)" "$BIN/cairn-eval" \
  --config eval.toml --out bad_tok --data "$WORK/data_hf" "$CK"
# Tasks prepared for a checkpoint that records no tokenizer (an older cairn-train's) are prepared again, with the
# check, for a later one that does: the second checkpoint of one call is refused on that data (it was scored too).
mkdir -p noid
cp -r "$WORK/run/train/ckpt/step_00000010" noid/
$PY - noid/step_00000010 <<'PY'
import ctypes, json, sys, h5py
d = sys.argv[1]
with h5py.File(f"{d}/model.h5", "r+") as f:
    state = json.loads(f.attrs["train_state"])
    del state["tokenizer_id"]
    f.attrs["train_state"] = json.dumps(state)
xxh = ctypes.CDLL("libxxhash.so.0")
xxh.XXH64.restype, xxh.XXH64.argtypes = ctypes.c_uint64, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
done = json.load(open(f"{d}/DONE"))
for name, entry in done["files"].items():
    data = open(f"{d}/{name}", "rb").read()
    entry["bytes"], entry["xxh64"] = len(data), "%016x" % xxh.XXH64(data, len(data), 0)
json.dump(done, open(f"{d}/DONE", "w"))
PY
expect_exit 2 "(hf:[0-9a-f]*) is not the one the checkpoint's run trained with (bytes)" "$BIN/cairn-eval" \
  --config eval.toml --out bad_tok2 --data "$WORK/data_hf" noid/step_00000010 "$CK" --tasks val32
# The same tokens resharded: another validation tail, so train_val is not the run's val_loss: said, and scored.
"$BIN/cairn-reshard" reshard "$WORK/data" --shards 3 --out "$WORK/data_3" --log-level warn
"$BIN/cairn-eval" --config eval.toml --out other_data --data "$WORK/data_3" "$CK" > /dev/null 2> other_data.err ||
  fail "train_val on resharded data: $(cat other_data.err)"
grep -q "task train_val: dataset \"$WORK/data_3\" is not the data the checkpoint's run trained on (fingerprint [0-9a-f]*, the run's [0-9a-f]*): its validation split is not the run's, so this loss is not the run's val_loss" other_data.err ||
  fail "no warning for train_val on other data: $(cat other_data.err)"
head -2 mc.jsonl > broken.jsonl
echo '{"context": "x", "choices": ["a", "b"], "label": 5}' >> broken.jsonl
echo '{"context": "unterminated' >> broken.jsonl
sed -n 3,4p mc.jsonl >> broken.jsonl
expect_exit 2 "broken.jsonl:3: label 5 is out of range" "$BIN/cairn-eval" --config eval.toml --out bad4 \
  "$CK" --tasks mc --set 'eval.task.mc={kind="multiple_choice", path="'"$WORK"'/broken.jsonl"}'
printf '{"context": "x", "choices": ["a", "b"], "label": "1"}\n' > strlabel.jsonl
expect_exit 2 'strlabel.jsonl:1: "label" must be an integer (the index of the right choice, from 0), got "1"' \
  "$BIN/cairn-eval" --config eval.toml --out bad5 "$CK" --tasks mc \
  --set 'eval.task.mc={kind="multiple_choice", path="'"$WORK"'/strlabel.jsonl"}'
"$BIN/cairn-eval" --config eval.toml --out skip "$CK" --tasks mc --skip-bad \
  --set 'eval.task.mc={kind="multiple_choice", path="'"$WORK"'/broken.jsonl"}' > skip.txt 2> skip.err || fail "--skip-bad failed"
$PY -c "import json,sys; d=json.load(open('skip/eval/lm_eval/step_00000020.json')); n=d['n-samples']['mc']; assert n=={'original':6,'effective':4}, n"
# A label past int64 is named as written, not as the negative number it wraps to.
printf '{"context": "x", "choices": ["a", "b"], "label": 18446744073709551615}\n' > huge_label.jsonl
expect_exit 2 "huge_label.jsonl:1: label 18446744073709551615 is out of range for 2 choices" "$BIN/cairn-eval" \
  --config eval.toml --out bad4b "$CK" --tasks mc --set 'eval.task.mc={kind="multiple_choice", path="'"$WORK"'/huge_label.jsonl"}'
# A model.h5 whose header describes a far larger model than the file holds is damaged (exit 1 at once), not built at
# that size first (layers = 1000000: minutes of allocation before the tensors were found missing).
mkdir -p huge_header
cp "$CK/model.h5" huge_header/model.h5
$PY -c "import h5py, sys; h5py.File(sys.argv[1], 'r+').attrs['layers'] = 1000000" huge_header/model.h5
expect_exit 1 "model.h5 has [0-9]* bytes, too few for the .* parameters of the model its header describes (layers 1000000" \
  timeout 60 "$BIN/cairn-eval" --config eval.toml --out bad4c huge_header/model.h5 --tasks val32
: > empty.jsonl
expect_exit 2 "empty task" "$BIN/cairn-eval" --config eval.toml --out bad5 \
  "$CK" --tasks mc --set 'eval.task.mc={kind="multiple_choice", path="'"$WORK"'/empty.jsonl"}'
expect_exit 2 "unknown task" "$BIN/cairn-eval" --config eval.toml --out bad6 "$CK" --tasks nosuch
expect_exit 2 "No such file" "$BIN/cairn-eval" --config eval.toml --out bad7 "$WORK/run/train/ckpt/step_00000099"
# Task tables: an unknown key is a config error naming the file and line with a suggestion, a key of the other
# kind is refused, a directory as a multiple-choice path is named as a directory, and a quoted task name with a
# dot in it is one task.
MC='kind="multiple_choice", path="'"$WORK"'/mc.jsonl"'
expect_exit 2 "eval.task.mc: unknown key 'pth' (did you mean 'path'?)" "$BIN/cairn-eval" --config eval.toml --out bad8 \
  "$CK" --tasks mc --set 'eval.task.mc={kind="multiple_choice", pth="x.jsonl"}'
printf '[eval.task.mc]\nkind = "multiple_choice"\npath = "%s"\nlimt = 3\n' "$WORK/mc.jsonl" > typo.toml
expect_exit 2 "typo.toml:4:1: eval.task.mc: unknown key 'limt' (did you mean 'limit'?)" "$BIN/cairn-eval" \
  --config eval.toml --config typo.toml --out bad9 "$CK" --tasks mc
expect_exit 2 "key 'mode' is not a key of kind = \"multiple_choice\" tasks" "$BIN/cairn-eval" --config eval.toml \
  --out bad10 "$CK" --tasks mc --set "eval.task.mc={$MC, mode=\"documents\"}"
expect_exit 2 "cannot open \"$WORK\": Is a directory" "$BIN/cairn-eval" --config eval.toml --out bad11 "$CK" --tasks mc \
  --set 'eval.task.mc={kind="multiple_choice", path="'"$WORK"'"}'
# A refused evaluation leaves no eval/ directory behind (it made eval/ and eval/lm_eval before reading its input).
for d in bad1 bad2 bad8 bad9 bad10 bad11; do [ ! -e "$d/eval" ] || fail "$d: eval/ made despite exit 2"; done
printf '[eval]\ntasks = ["fortunes.mc"]\n[eval.task."fortunes.mc"]\n%s\nlimit = 5\n' "${MC//, /$'\n'}" > dotted.toml
"$BIN/cairn-eval" --config eval.toml --config dotted.toml --out dotted "$CK" > dotted.txt 2> dotted.err ||
  { cat dotted.err >&2; fail "quoted dotted task name"; }
$PY -c "
import json
rows = [json.loads(l) for l in open('dotted/eval/results.jsonl')]
assert {r['task'] for r in rows} == {'fortunes.mc'}, {r['task'] for r in rows}
assert any(r['metric'] == 'acc' and r['n'] == 5 for r in rows), rows"

# A task table's bad value names where the table was set, and --print-config refuses what the evaluation would.
printf '[eval]\ntasks = ["x"]\n[eval.task.x]\nkind = "bogus"\n' > badkind.toml
expect_exit 2 'badkind.toml:3:[0-9]*: \[eval.task.x\] kind = "bogus": expected' "$BIN/cairn-eval" --config badkind.toml \
  --print-config
# --print-config shows the checkpoints given as arguments (not config keys) on its comment line.
"$BIN/cairn-eval" --config eval.toml "$CK" --print-config > pc.toml || fail "--print-config: exit $?"
grep -qxF "# positional arguments (not config keys: give them again with --config): [\"$CK\"]" pc.toml ||
  fail "--print-config does not show the checkpoints: $(head -3 pc.toml)"

# Outputs of the common options are checked before any work; --json - (also with --reevaluate, which prints the
# summary table) leaves stdout to the JSON document alone.
expect_exit 2 "--json: cannot write \"$WORK\": Is a directory" "$BIN/cairn-eval" --config eval.toml --out bad12 "$CK" \
  --tasks mc --json "$WORK"
[ ! -e bad12/eval ] || fail "--json DIR: evaluated before the error"
"$BIN/cairn-eval" --config eval.toml --config dotted.toml --out dotted "$CK" --reevaluate --json - > re.json 2> re.err ||
  { cat re.err >&2; fail "--reevaluate --json -"; }
grep -q "fortunes.mc" re.err || fail "--reevaluate --json -: the summary table is not on stderr"
$PY -c "
import json, sys
d = json.load(open('re.json'))
assert d['checkpoints_evaluated'] == 1 and {r['task'] for r in d['results']} == {'fortunes.mc'}, d" ||
  fail "--reevaluate --json -: stdout is not the JSON document alone: $(head -c 300 re.json)"
# A step scored under another task definition is scored again: rows under an earlier one are not "already
# evaluated" (a lifted --limit or an edited task file kept the stale rows). A task listed twice is refused on such a
# rerun as on a first run. A task name holding '/' and '..' writes its samples inside <eval>/, not outside it.
"$BIN/cairn-eval" --config eval.toml --out lim "$CK" --tasks mc --limit 3 > /dev/null 2>&1 || fail "--limit 3"
"$BIN/cairn-eval" --config eval.toml --out lim "$CK" --tasks mc > /dev/null 2> lim.err || fail "--limit lifted"
! grep -q "already evaluated" lim.err || fail "a lifted --limit was skipped as already evaluated"
# Scoring shows its progress on stderr (a task of thousands of items ran for minutes with no word): 40 items of 4
# choices are 160 requests.
grep -q "task mc 160/160 requests (100.0%)" lim.err || fail "no progress line for task mc: $(cat lim.err)"
# A context above the model's seq_len is said to be capped (it was capped silently).
"$BIN/cairn-eval" --config eval.toml --out ctx "$CK" --tasks mc --limit 2 --context 500 > /dev/null 2> ctx.err ||
  fail "--context 500: $(cat ctx.err)"
grep -qF "[eval] context 500 is above the checkpoint's seq_len 64: rows hold at most 64 tokens" ctx.err ||
  fail "no warning for --context 500: $(cat ctx.err)"
$PY -c "
import json
rows = [json.loads(l) for l in open('lim/eval/results.jsonl') if '\"acc\"' in l]
assert [r['n'] for r in rows] == [40] and rows[0]['task_config'], rows"
"$BIN/cairn-eval" --config eval.toml --out lim "$CK" --tasks mc 2> lim2.err > /dev/null || fail "rerun"
grep -q "already evaluated" lim2.err || fail "an unchanged task was evaluated again"
# A quick --limit look at a step scored in full prints its numbers (and --json) but leaves the record's fuller rows
# and their writer's provenance line (it replaced the 40-item score with a 4-item one, silently).
cp lim/eval/results.jsonl lim-full.jsonl
cp lim/eval/provenance.jsonl lim-prov.jsonl
"$BIN/cairn-eval" --config eval.toml --out lim "$CK" --tasks mc --limit 4 --json lim4.json 2> lim5.err > lim5.out ||
  fail "--limit 4 over a full score: $(cat lim5.err)"
grep -qF "task mc: results.jsonl keeps its score over 40 examples; this one over 4 (a limit) is printed, not recorded" \
  lim5.err || fail "--limit 4 over a full score, no warning: $(cat lim5.err)"
cmp -s lim-full.jsonl lim/eval/results.jsonl && cmp -s lim-prov.jsonl lim/eval/provenance.jsonl ||
  fail "--limit 4 changed the record of a full score"
# ... and so does the task's own limit ([eval.task.mc] limit; it replaced the full score without a word).
"$BIN/cairn-eval" --config eval.toml --out lim "$CK" --tasks mc --set eval.task.mc.limit=4 2> lim6.err > /dev/null ||
  fail "eval.task.mc.limit=4 over a full score: $(cat lim6.err)"
grep -qF "task mc: results.jsonl keeps its score over 40 examples; this one over 4 (a limit)" lim6.err ||
  fail "eval.task.mc.limit=4 over a full score, no warning: $(cat lim6.err)"
cmp -s lim-full.jsonl lim/eval/results.jsonl || fail "eval.task.mc.limit=4 changed the record of a full score"
# A fuller score of the task as defined before its file was edited is stale, not fuller: the quick look replaces it
# (it was printed only, under "keeps its score over 40 examples").
cp -r lim lim_edit
sed -n 2,40p mc.jsonl > mc_edit.jsonl
"$BIN/cairn-eval" --config eval.toml --out lim_edit "$CK" --tasks mc --limit 4 \
  --set eval.task.mc.path="$WORK/mc_edit.jsonl" 2> lim7.err > /dev/null || fail "--limit 4, task edited: $(cat lim7.err)"
! grep -q "keeps its score" lim7.err || fail "a score of the task before its edit kept as fuller: $(cat lim7.err)"
$PY -c "
import json
rows = [json.loads(l) for l in open('lim_edit/eval/results.jsonl') if '\"acc\"' in l]
assert [r['n'] for r in rows] == [4], rows" || fail "--limit 4, task edited: not recorded"
$PY -c "
import json
d = json.load(open('lim4.json'))
assert {r['n'] for r in d['results'] if r['metric'] == 'acc'} == {4}, d['results']" || fail "--limit 4: --json"
# Rows of an older cairn-eval (no task_config): kept as scored, and said (a changed definition kept them silently).
$PY -c "
import json
p = 'lim/eval/results.jsonl'
rows = [json.loads(l) for l in open(p)]
for r in rows: r.pop('task_config', None)
open(p, 'w').write(''.join(json.dumps(r) + '\\n' for r in rows))"
"$BIN/cairn-eval" --config eval.toml --out lim "$CK" --tasks mc --limit 5 2> lim3.err > /dev/null || fail "legacy rows"
grep -q "already evaluated" lim3.err || fail "rows without task_config were evaluated again"
grep -q "record no task definition: they are kept as scored under the current one; --reevaluate" lim3.err ||
  fail "rows without task_config kept without a word: $(cat lim3.err)"
# A record whose last line was cut short (a kill during an append): that line is dropped with a warning, not the
# "malformed record, move the file away" of a damaged line; the next write leaves a whole record.
printf '{"kind":"eval","step":99,"ta' >> lim/eval/results.jsonl
"$BIN/cairn-eval" --config eval.toml --out lim "$CK" --tasks mc --reevaluate 2> lim4.err > /dev/null ||
  fail "a cut-short last line: $(cat lim4.err)"
grep -q "the last line is cut short" lim4.err || fail "a cut-short last line was dropped without a word"
$PY -c "import json; [json.loads(l) for l in open('lim/eval/results.jsonl')]" || fail "the record is still cut short"
# A cut inside one checkpoint's rows (its append spans pages; a kill keeps the first ones): the rows written with the
# cut line go too and the checkpoint is scored again. Kept, they marked it scored, and the cut rows were lost.
whole=$(wc -l < lim/eval/results.jsonl)
$PY -c "
p = 'lim/eval/results.jsonl'
lines = open(p).read().splitlines(True)
assert len(lines) >= 2, lines
open(p, 'w').write(''.join(lines[:-2]) + lines[-2][:len(lines[-2]) // 2])"
"$BIN/cairn-eval" --config eval.toml --out lim "$CK" --tasks mc 2> lim5.err > /dev/null ||
  fail "a cut inside a checkpoint's rows: $(cat lim5.err)"
grep -q "the last line is cut short (a write interrupted); dropped with the [0-9]* rows written with it" lim5.err ||
  fail "a cut inside a checkpoint's rows: no word of the rows dropped with it: $(cat lim5.err)"
[ "$(wc -l < lim/eval/results.jsonl)" -eq "$whole" ] ||
  fail "a cut inside a checkpoint's rows: $(wc -l < lim/eval/results.jsonl) rows, not the $whole before the cut"
$PY -c "import json; [json.loads(l) for l in open('lim/eval/results.jsonl')]" || fail "the record is still cut short"
# The same cut at a line's end leaves no torn line: the rows after it were lost without a word (the checkpoint counted
# as scored). Each row records how many its write added, so the short write is dropped and the checkpoint scored again.
cp lim/eval/results.jsonl lim-whole.jsonl
head -n $((whole - 2)) lim-whole.jsonl > lim/eval/results.jsonl
"$BIN/cairn-eval" --config eval.toml --out lim "$CK" --tasks mc 2> lim8.err > /dev/null ||
  fail "a cut at a line's end inside a checkpoint's rows: $(cat lim8.err)"
grep -q "the record ends after [0-9]* of the [0-9]* rows written together for step [0-9]* (a write interrupted at a line's end); they are dropped, and the checkpoint is scored again" lim8.err ||
  fail "a cut at a line's end inside a checkpoint's rows: no word of it: $(cat lim8.err)"
$PY - lim-whole.jsonl lim/eval/results.jsonl <<'PY' || fail "a cut at a line's end inside a checkpoint's rows: not scored again"
import json, sys
key = lambda r: (r["step"], r["task"], r["metric"])
whole, now = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert sorted(map(key, now)) == sorted(map(key, whole)), (len(now), len(whole))
last = [r for r in now if r["wall_time"] == now[-1]["wall_time"]]
assert all(r["rows_in_write"] == len(last) for r in last), last
PY
expect_exit 2 'lists "mc" twice' "$BIN/cairn-eval" --config eval.toml --out lim "$CK" --tasks mc,mc
mkdir -p esc/deep
(cd esc/deep && "$BIN/cairn-eval" --config "$WORK/eval.toml" --out "$WORK/esc/deep/run" "$CK" --log-samples \
  --tasks 'x/../../../out' --set 'eval.task."x/../../../out"={kind="multiple_choice", path="'"$WORK"'/mc.jsonl"}' \
  --limit 2 > /dev/null 2>&1) || fail "a task name with / and .."
[ -z "$(find esc -name '*.jsonl' -not -path 'esc/deep/run/eval/*')" ] ||
  fail "samples written outside <eval>/: $(find esc -name '*.jsonl' -not -path 'esc/deep/run/eval/*')"
[ "$(find esc/deep/run/eval/samples -name 'step_00000020_x__..__..__..__out.jsonl' | wc -l)" = 1 ] ||
  fail "no samples file for the task: $(ls esc/deep/run/eval/samples)"

# Two checkpoints of one step in one call (two runs' step 10): results.jsonl keeps one row per step and task, so
# one would replace the other's rows unsaid; refused naming both. Result paths that are not files are refused before
# any work (a directory as results.jsonl failed only after the whole evaluation).
write_train_config train2.toml "$WORK/run2" 10 10
"$BIN/cairn-train" --config train2.toml --log-level warn --set train.seed=7
expect_exit 2 "are both step 10" "$BIN/cairn-eval" --config eval.toml --out twin \
  "$WORK/run/train/ckpt/step_00000010" "$WORK/run2/train/ckpt/step_00000010"
[ ! -e twin/eval/results.jsonl ] || fail "a refused call wrote results"
mkdir -p dirres/eval/results.jsonl dirprov/eval/provenance.jsonl
expect_exit 2 "results.jsonl.*exists and is not a regular file" "$BIN/cairn-eval" --config eval.toml --out dirres \
  "$WORK/run/train/ckpt/step_00000010"
expect_exit 2 "provenance.jsonl.*exists and is not a regular file" "$BIN/cairn-eval" --config eval.toml \
  --out dirprov "$WORK/run/train/ckpt/step_00000010"

# A full disk while writing results: exit 1 naming the file, never an unreadable results.h5 put in place (HDF5's
# write errors were only a return code of its close, and the crash at exit followed), no temp files piling up,
# and a rerun with room scores what is missing. Root only: a tmpfs.
mkdir -p full/eval
if [[ $(id -u) == 0 ]] && mount -t tmpfs -o size=56k tmpfs full/eval 2> /dev/null; then
  rc=0
  "$BIN/cairn-eval" --config eval.toml --out full --log-level warn "$WORK/run/train/ckpt" > /dev/null 2> full.err ||
    rc=$?
  [ $rc = 1 ] && grep -q "No space left\|errno = 28" full.err || { umount full/eval; fail "full disk: exit $rc: $(cat full.err)"; }
  if [ -e full/eval/results.h5 ]; then
    $PY -c "import h5py; h5py.File('full/eval/results.h5')['results/step'][:]" ||
      { umount full/eval; fail "full disk: results.h5 left unreadable"; }
  fi
  # Wherever the disk filled, every row on disk still finds its writer's provenance line.
  if [ -e full/eval/results.jsonl ]; then
    $PY - full/eval <<'PYEOF' || fail "full disk: a row without its provenance line"
import json, sys
d = sys.argv[1]
prov = {json.loads(l)["eval_run"] for l in open(f"{d}/provenance.jsonl")}
assert all(json.loads(l)["eval_run"] in prov for l in open(f"{d}/results.jsonl"))
PYEOF
  fi
  umount full/eval
  "$BIN/cairn-eval" --config eval.toml --out full --log-level warn "$WORK/run/train/ckpt" > /dev/null 2> full2.err ||
    fail "full disk: the rerun with room failed: $(cat full2.err)"
  $PY - full/eval <<'PYEOF' || fail "full disk: the rerun's results disagree"
import h5py, json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/results.jsonl")]
with h5py.File(f"{d}/results.h5") as f:
    assert len(f["results/step"]) == len(rows) > 0, (len(f["results/step"]), len(rows))
assert len({(r["step"], r["task"], r["metric"]) for r in rows}) == len(rows), "duplicate rows"
prov = {json.loads(l)["eval_run"] for l in open(f"{d}/provenance.jsonl")}
assert prov == {r["eval_run"] for r in rows}, (prov, {r["eval_run"] for r in rows})
PYEOF
  ! compgen -G "full/eval/.results.*.tmp.*" > /dev/null || fail "full disk: temp files left: $(ls -a full/eval)"
else
  echo "skip: full-disk results check (needs root to mount a tmpfs)"
fi
echo "eval_cli: OK"
