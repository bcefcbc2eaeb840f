#!/usr/bin/env bash
# cairn-train's Chrome trace opens cleanly in Perfetto and Chrome DevTools (tests/train/check_trace.py): integer
# microseconds, every event nested in its parent on its (rank, row), flat comm rows, the traced step numbers equal
# --trace-steps a:b (1-based steps a..b-1, as in metrics.jsonl), and a validation pass inside the range whose
# per-layer events start inside it. Layouts: pp2 (1F1B) with validation, pp2 x v2 (interleaved), tp2 (collectives
# on the comm row), dp2 with small buckets (all-reduces in flight together, each on a comm row of its own). And the
# per-kernel profile (--profile-kernels, kernel_profile.json) of a cp2 run.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:?CAIRN_BIN_DIR must point at build/bin}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /tmp/cairn_train_trace.XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$W"' EXIT  # KEEP=1 keeps the runs for a look after a failure
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe)
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN/cairn-reshard" --log-level error --out "$W/ds" --set 'data.delimiter="%"' build /usr/share/games/fortunes/fortunes
MODEL=(--data "$W/ds" --threads 1 --log-level warn --set model.layers=4 --set model.hidden=32 --set model.heads=4
       --set model.seq_len=32 --set train.global_batch=8 --set train.micro_batch=2 --set train.warmup=2
       --set train.spike_zscore=0 --set train.checkpoint_every=0 --steps 6)

run() {  # run NAME RANKS ARGS...
  local name=$1 np=$2
  shift 2
  "${MPIRUN[@]}" -np "$np" "$BIN/cairn-train" --out "$W/$name" "${MODEL[@]}" "$@" || fail "$name: cairn-train exited $?"
}

# pp2: steps 2, 3 and 4 traced; validation after step 3 (val_every = 3) lies inside the range, the one after
# step 6 outside it.
run pp2 2 --set parallel.pp=2 --set train.val_every=3 --trace-steps 2:5
"$PY" "$HERE/check_trace.py" "$W/pp2/train/trace.json" --steps 2:5 --ranks 2 --validation-after 3 --pipeline
# the traced steps are the metrics' steps of the same numbers
"$PY" - "$W/pp2/train" <<'PYEOF'
import json, sys
d = sys.argv[1]
steps = [json.loads(l)["step"] for l in open(f"{d}/metrics.jsonl") if '"train"' in l]
assert steps == [1, 2, 3, 4, 5, 6], steps
val = [json.loads(l)["step"] for l in open(f"{d}/metrics.jsonl") if '"val"' in l]
assert val == [3, 6], val
PYEOF

# pp2 x v2 (interleaved 1F1B), validation after the last traced step (the trace is written after it)
run pp2v2 2 --set parallel.pp=2 --set parallel.v=2 --set train.val_every=2 --trace-steps 1:3
"$PY" "$HERE/check_trace.py" "$W/pp2v2/train/trace.json" --steps 1:3 --ranks 2 --validation-after 2 --pipeline

# tp2: tensor-parallel collectives on the comm row, inside forward and backward
run tp2 2 --set parallel.tp=2 --set train.val_every=0 --trace-steps 5:7
"$PY" "$HERE/check_trace.py" "$W/tp2/train/trace.json" --steps 5:7 --ranks 2
grep -q '"tensor-parallel collective"' "$W/tp2/train/trace.json" || fail "tp2: no tensor-parallel collective events"

# dp2 with 4 KiB buckets: many all-reduces in flight at once
run dp2 2 --set train.bucket_mb=0.004 --set train.val_every=0 --trace-steps 3:4
"$PY" "$HERE/check_trace.py" "$W/dp2/train/trace.json" --steps 3:4 --ranks 2

# --profile-kernels on cp2 (ring): every rank's op table in kernel_profile.json, the block counts of the ring exact
# (per layer and micro-batch: step 0 is one causal call over the rank's own chunks of both sequences; at step 1 each
# rank's query chunks meet 2 earlier held chunks per sequence, forward and backward, each merged into its output),
# the time inside the wall time of the steps.
run cp2prof 2 --set parallel.cp=2 --set 'parallel.cp_comm="p2p"' --set train.val_every=0 --profile-kernels
"$PY" - "$W/cp2prof/train" <<'PYEOF'
import json, sys
d = sys.argv[1]
doc = json.load(open(f"{d}/kernel_profile.json"))
assert doc["kind"] == "kernel_profile" and doc["steps"] == 6 and doc["world_size"] == 2, doc
assert doc["provenance"]["tool"] == "cairn-train", doc["provenance"]
assert [r["rank"] for r in doc["ranks"]] == [0, 1], doc["ranks"]
walls = sum(json.loads(l)["time_s"]["total"] for l in open(f"{d}/metrics.jsonl") if '"train"' in l)
for r in doc["ranks"]:
    ops = {o["op"]: o for o in r["ops"]}
    blocks = 6 * 4 * 4 * (1 + 2 * 2)  # steps x micro-batches x layers x (step 0 + sequences x step-1 blocks)
    merges = 6 * 4 * 4 * 2 * 2  # the step-1 blocks
    assert ops["attention_forward_block"]["calls"] == blocks, (r["rank"], ops["attention_forward_block"])
    assert ops["attention_backward_block"]["calls"] == blocks, (r["rank"], ops["attention_backward_block"])
    assert ops["attention_merge"]["calls"] == merges, (r["rank"], ops["attention_merge"])
    assert "attention_forward" not in ops, "cp2 ran whole-sequence attention"
    assert ops["matmul_forward"]["calls"] > 0 and ops["adamw_update"]["calls"] > 0, ops.keys()
    total = sum(o["seconds"] for o in r["ops"])
    assert 0 < total < walls + 1.0, (r["rank"], total, walls)  # + initialisation's kernels
PYEOF
# cairn-report shows the profile: the same per-op sums over both ranks in summary.json, the table in summary.md and
# index.html (well-formed), the longest op first.
"$BIN/cairn-report" "$W/cp2prof" --out "$W/cp2prof" --log-level warn || fail "cairn-report on the profile: exit $?"
xmllint --noout "$W/cp2prof/report/index.html" || fail "cp2prof: index.html is not well-formed"
"$PY" - "$W/cp2prof" <<'PYEOF'
import json, sys
d = sys.argv[1]
prof = json.load(open(f"{d}/train/kernel_profile.json"))
want = {}
for r in prof["ranks"]:
    for o in r["ops"]:
        c, s = want.get(o["op"], (0, 0.0))
        want[o["op"]] = (c + o["calls"], s + o["seconds"])
kp = json.load(open(f"{d}/report/summary.json"))["runs"][0]["kernel_profile"]
assert kp["ranks"] == 2 and kp["steps"] == 6, kp
got = {o["op"]: (o["calls"], o["seconds"]) for o in kp["ops"]}
assert got.keys() == want.keys(), (got.keys(), want.keys())
for op, (c, s) in want.items():
    assert got[op][0] == c and abs(got[op][1] - s) <= 1e-9 * max(1.0, s), (op, got[op], (c, s))
secs = [o["seconds"] for o in kp["ops"]]
assert secs == sorted(secs, reverse=True), "ops not longest first"
md = open(f"{d}/report/summary.md").read()
assert "### Kernel time" in md and "| `attention_forward_block` | 960 |" in md, md[md.find("### Kernel"):][:600]
html = open(f"{d}/report/index.html").read()
assert 'id="kernels"' in html and ">attention_backward_block<" in html, "no kernel table in index.html"
PYEOF

# A run resumed inside its trace range (a requeued job; here a run extended from 4 to 6 steps) keeps the steps the
# run before it traced: 2..4 from the first run, 5 from the second, one file, its header naming both segments. Then
# a rollback to the step-2 checkpoint traces 3..5 again, and the first run's events of steps 3 and 4 give way.
RES=(--set train.checkpoint_every=2 --set train.val_every=0 --set train.decay_steps=6 --trace-steps 2:6)
run res 1 "${RES[@]}" --set train.steps=4
run res 1 "${RES[@]}"
"$PY" "$HERE/check_trace.py" "$W/res/train/trace.json" --steps 2:6 --ranks 1
run res 1 "${RES[@]}" --resume "$W/res/train/ckpt/step_00000002"
"$PY" "$HERE/check_trace.py" "$W/res/train/trace.json" --steps 2:6 --ranks 1
"$PY" - "$W/res/train/trace.json" <<'PYEOF'
import json, sys
other = json.load(open(sys.argv[1]))["otherData"]
segs = [(s["first_step"], s["last_step"], s.get("resumed_at", 0)) for s in other["segments"]]
assert segs == [(2, 2, 0), (3, 5, 2)], segs
PYEOF

# a range starting at step 0 names a step that does not exist: exit 2 with the convention in the message
set +e
err=$("$BIN/cairn-train" --out "$W/bad" "${MODEL[@]}" --trace-steps 0:2 2>&1); rc=$?
set -e
[[ $rc == 2 ]] || fail "--trace-steps 0:2: exit $rc, expected 2"
grep -q "1 <= a < b" <<<"$err" || fail "--trace-steps 0:2: message does not state the 1-based convention: $err"
echo "trace checks passed"
