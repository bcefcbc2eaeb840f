#!/usr/bin/env bash
# `cairn-reshard mix` on three datasets built from disjoint parts of fortunes: exact per-source token
# and document counts (each mixed document traced back to its source), weights over every training
# window as stats.json reports them (recomputed independently), repeated epochs of the small source,
# same seed -> identical shards, other seed -> other order, verify, stats, cairn-train, cairn-report,
# bad input exiting 2 naming the key and source (max_epochs before planning), an output too large for its disk
# refused with exit 1 before anything is written, and sizes too large to plan refused at once.
source "$(dirname "$0")/common.sh"
FAULTS="${1:?usage: mix.sh CAIRN_RESHARD_FAULTS (tests/reshard/cairn-reshard-faults)}"
TRAIN="${CAIRN_BIN_DIR}/cairn-train"
REPORT="${CAIRN_BIN_DIR}/cairn-report"

# Three sources of distinct documents (fortunes split at % lines, duplicates dropped): large, medium,
# small (the small one has to repeat).
$PY - "$T" "${FORTUNES[@]}" <<'PY'
import sys
out, files = sys.argv[1], sys.argv[2:]
docs, seen = [], set()
for f in files:
    text = open(f, encoding="utf-8", errors="replace").read()
    for d in text.split("\n%\n"):
        d = d.strip("\n%")
        if d and d not in seen:
            seen.add(d)
            docs.append(d)
size = sum(len(d) for d in docs)
parts, cur, acc = {"web": [], "code": [], "books": []}, "web", 0
for d in docs:
    acc += len(d)
    cur = "web" if acc < 0.55 * size else "code" if acc < 0.97 * size else "books"
    parts[cur].append(d)
for name, ds in parts.items():
    with open(f"{out}/{name}.txt", "w", encoding="utf-8") as fh:
        fh.write("\n%\n".join(ds) + "\n")
print({k: (len(v), sum(len(d) for d in v)) for k, v in parts.items()})
PY
for s in web code books; do "$B" build --log-level warn --delimiter % --shards 2 --out "$T/$s" "$T/$s.txt"; done

SEQ=64
MIX=(mix "$T/web" "$T/code" "$T/books" --weights 0.6,0.3,0.1 --seq-len $SEQ --shards 3)
"$B" "${MIX[@]}" --seed 7 --out "$T/m7" --json "$T/m7.json" 2>"$T/m7.err"
cat "$T/m7.err"
"$B" verify "$T/m7"

# Independent check (h5py): every mixed document is found in exactly one source; per-source tokens
# and documents, epochs, the greedy prefix bound and the windows' worst deviation recomputed.
$PY - "$T" $SEQ <<'PY'
import json, os, sys
import h5py, numpy as np
t, seq = sys.argv[1], int(sys.argv[2])
def docs(ds):
    ix = json.load(open(os.path.join(ds, "index.json")))
    out, shard_of = [], []
    for k, s in enumerate(ix["shards"]):
        with h5py.File(os.path.join(ds, s["file"]), "r") as h:
            tok, off = h["tokens"][:], h["doc_offsets"][:]
        for i in range(len(off) - 1):
            out.append(tok[off[i]:off[i + 1]].tobytes())
            shard_of.append(k)
    return out, shard_of, ix
names = ["web", "code", "books"]
owner, size, ndocs = {}, [], []
for i, n in enumerate(names):
    d, _, _ = docs(os.path.join(t, n))
    assert len(set(d)) == len(d), f"{n}: duplicate documents"
    for x in d:
        assert x not in owner, "a document is in two sources"
        owner[x] = (i, len(owner))
    size.append(sum(len(x) // 2 for x in d)); ndocs.append(len(d))
mix, shard_of, ix = docs(os.path.join(t, "m7"))
st = json.load(open(os.path.join(t, "m7", "stats.json")))
m = st["mixture"]
w = [s["weight"] for s in m["sources"]]
assert [s["path"] for s in m["sources"]] == [os.path.join(t, n) for n in names]
assert abs(sum(w) - 1) < 1e-12 and abs(w[0] - 0.6) < 1e-12 and abs(w[2] - 0.1) < 1e-12, w
src = [owner[x][0] for x in mix]
lens = [len(x) // 2 for x in mix]
tokens = [sum(l for s, l in zip(src, lens) if s == i) for i in range(3)]
documents = [src.count(i) for i in range(3)]
total = sum(lens)
assert total == ix["total_tokens"] == m["tokens"] == st["tokens"] and total >= m["target_tokens"]
assert total - m["target_tokens"] < max(lens), "overshoots the target by more than a document"
# Target = 1 epoch of the largest source (web) / its weight.
assert m["target_tokens"] == -(-size[0] * 10 // 6) or abs(m["target_tokens"] - size[0] / 0.6) <= 1, m["target_tokens"]
for i in range(3):
    s = m["sources"][i]
    assert s["tokens"] == tokens[i] and s["documents"] == documents[i], (i, s, tokens[i], documents[i])
    assert s["source_tokens"] == size[i] and s["source_documents"] == ndocs[i]
    assert abs(s["epochs"] - tokens[i] / size[i]) < 1e-12
    assert abs(s["realised_weight"] - tokens[i] / total) < 1e-12
    assert abs(s["realised_weight"] - w[i]) < 0.002, (i, s["realised_weight"], w[i])
print("ok: exact per-source tokens", tokens, "documents", documents,
      "epochs", [round(s["epochs"], 3) for s in m["sources"]])
# Epochs: books repeats; each full pass holds each of its documents once, in a fresh order.
e = [s["epochs"] for s in m["sources"]]
assert e[2] > 2.5 and e[1] < 1 and abs(e[0] - 1) < 0.01, e
books = [owner[x][1] for x, s in zip(mix, src) if s == 2]
n = ndocs[2]
passes = [books[k * n:(k + 1) * n] for k in range(len(books) // n)]
assert len(passes) >= 2 and all(sorted(p) == sorted(passes[0]) and len(set(p)) == n for p in passes)
assert passes[0] != passes[1], "a repeated epoch came in the same order"
web = [owner[x][1] for x, s in zip(mix, src) if s == 0]
assert len(set(web)) == len(web), "web (one epoch) repeated a document"
print(f"ok: books repeats {len(passes)} full passes (+{len(books) - len(passes) * n} documents), each a fresh permutation")
# Greedy bound at every document boundary: -max_len <= tokens_i - w_i x prefix <= (K-1) max_len.
lmax = max(lens)
cum, pre = [0, 0, 0], 0
worst_lag = [0.0] * 3
for s, l in zip(src, lens):
    cum[s] += l; pre += l
    for i in range(3):
        lag = cum[i] - w[i] * pre
        worst_lag[i] = max(worst_lag[i], abs(lag))
        assert -lmax - 1e-6 <= lag <= 2 * lmax + 1e-6, (lag, lmax)
for i in range(3):
    assert abs(worst_lag[i] - m["sources"][i]["max_prefix_lag_tokens"]) < 1e-6 * max(1, worst_lag[i])
print("ok: every prefix within", [round(x) for x in worst_lag], "tokens of its share (longest document", lmax, ")")
# Windows as cairn-train cuts them: per shard, (n - 1) // T windows of T tokens at stride T.
label = np.concatenate([np.full(l, s, np.int8) for s, l in zip(src, lens)])
bounds = np.cumsum([0] + [s["tokens"] for s in ix["shards"]])
assert m["seq_len"] == seq
for win in m["windows"]:
    k = win["sequences"]; width = k * seq
    devs = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        nseq = (b - a - 1) // seq if b - a > seq else 0
        for j in range(0, nseq - k + 1, k):
            lab = label[a + j * seq: a + j * seq + width]
            share = np.bincount(lab, minlength=3) / width
            devs.append(float(np.max(np.abs(share - np.array(w)))))
    assert win["windows"] == len(devs), (win["windows"], len(devs))
    assert abs(win["worst_deviation"] - max(devs)) < 1e-9 and abs(win["mean_deviation"] - np.mean(devs)) < 1e-9
    print(f"ok: {len(devs)} windows of {k} x {seq} tokens: worst deviation {max(devs):.4f}, mean {np.mean(devs):.4f}")
big = m["windows"][-1]
assert big["sequences"] == 1024 and big["windows"] >= 10 and big["worst_deviation"] < 0.05, big
PY

# Same seed -> the same tokens, offsets and byte counts (the files differ only in their provenance
# attributes: time, command line); another seed -> another order of the same kind of mix.
"$B" "${MIX[@]}" --seed 7 --out "$T/m7b" --log-level warn 2>/dev/null
$PY - "$T/m7" "$T/m7b" <<'PY' || fail "same seed, different shard contents"
import json, os, sys
import h5py, numpy as np
a, b = sys.argv[1:3]
for s in json.load(open(os.path.join(a, "index.json")))["shards"]:
    with h5py.File(os.path.join(a, s["file"]), "r") as x, h5py.File(os.path.join(b, s["file"]), "r") as y:
        for k in ("tokens", "doc_offsets", "doc_bytes"):
            assert np.array_equal(x[k][:], y[k][:]), (s["file"], k)
        assert x.attrs["tokens_xxh64"] == y.attrs["tokens_xxh64"] and x.attrs["plan_hash"] == y.attrs["plan_hash"]
PY
$PY -c "
import json,sys
a,b=[json.load(open(f'$T/{d}/index.json')) for d in ('m7','m7b')]
assert [s['xxh64'] for s in a['shards']]==[s['xxh64'] for s in b['shards']]
sa,sb=[json.load(open(f'$T/{d}/stats.json'))['mixture'] for d in ('m7','m7b')]
assert sa==sb
" || fail "same seed, different checksums or stats"
echo "ok: same seed -> identical shards, checksums and mixture stats"
"$B" "${MIX[@]}" --seed 8 --out "$T/m8" --log-level warn 2>/dev/null
! cmp -s <($DUMP "$T/m7") <($DUMP "$T/m8") || fail "--seed 8 gave the order of --seed 7"
$PY -c "
import json
a,b=[json.load(open(f'$T/{d}/stats.json'))['mixture']['sources'] for d in ('m7','m8')]
assert all(abs(x['realised_weight']-y['realised_weight'])<0.002 for x,y in zip(a,b))
" || fail "--seed 8 realised another mix"
echo "ok: another seed -> another order, same realised weights"
# MPI ranks write the same shards.
mpirun -np 2 "$B" "${MIX[@]}" --seed 7 --out "$T/m7mpi" --log-level warn 2>/dev/null
cmp <($PY -c "import json;print([s['xxh64'] for s in json.load(open('$T/m7/index.json'))['shards']])") \
    <($PY -c "import json;print([s['xxh64'] for s in json.load(open('$T/m7mpi/index.json'))['shards']])") \
  || fail "2 MPI ranks wrote other shards"
echo "ok: 2 MPI ranks -> identical shards"

# --tokens sets the size exactly (first document end at or past it); [data.mix] in a config file works.
cat > "$T/mix.toml" <<EOF
[data]
shards = 2
seed = 3
[data.mix]
sources = ["$T/web", "$T/books"]
weights = [3, 1]
tokens = 200000
max_epochs = 3
EOF
"$B" mix --config "$T/mix.toml" --out "$T/mt" --log-level warn 2>/dev/null
# --print-config shows the source datasets given as arguments (not config keys) on its comment line.
"$B" mix "$T/web" "$T/books" --config "$T/mix.toml" --print-config > "$T/pc.toml"
grep -qxF "# positional arguments (not config keys: give them again with --config): [\"$T/web\", \"$T/books\"]" \
  "$T/pc.toml" || fail "--print-config does not show the sources: $(head -3 "$T/pc.toml")"
$PY -c "
import json
m=json.load(open('$T/mt/stats.json'))['mixture']
assert m['target_tokens']==200000 and 200000<=m['tokens']<200000+20000, m['tokens']
assert [s['weight'] for s in m['sources']]==[0.75,0.25] and [s['weight_given'] for s in m['sources']]==[3,1]
assert m['seed']==3
" || fail "config-file mixture"
"$B" verify "$T/mt" >/dev/null
echo "ok: [data.mix] from a config file, --tokens target"

# stats keeps the mixture description and prints the per-source table.
"$B" stats "$T/m7" >"$T/stats.txt"
grep -q "books" "$T/stats.txt" || fail "stats does not show the mixture"
$PY -c "import json;m=json.load(open('$T/m7/stats.json'));assert m['mixture']['windows'][0]['sequences']==1" \
  || fail "stats dropped the mixture"
echo "ok: stats keeps and shows the mixture"

# cairn-train reads the mixture (in the run's data/, where cairn-report looks); cairn-report shows its
# per-source table.
mkdir -p "$T/run" && cp -r "$T/m7" "$T/run/data"
"$TRAIN" --out "$T/run" --data "$T/run/data" --threads 1 --log-level warn --set model.layers=1 --set model.hidden=32 \
  --set model.heads=2 --set model.seq_len=$SEQ --set train.global_batch=4 --set train.micro_batch=4 --steps 3 \
  --set train.val_every=0 --set train.checkpoint_every=0
[ "$(grep -c '"train"' "$T/run/train/metrics.jsonl")" = 3 ] || fail "cairn-train did not train 3 steps"
echo "ok: cairn-train trained 3 steps on the mixture"
"$REPORT" "$T/run" --log-level warn >/dev/null || fail "cairn-report exit $?"
grep -q "Mixture: " "$T/run/report/index.html" || fail "report has no mixture table"
grep -q "### Data mixture" "$T/run/report/summary.md" || fail "summary.md has no mixture table"
xmllint --noout "$T/run/report/index.html" || fail "report HTML is not well-formed"
$PY -c "
import json
s=json.load(open('$T/run/report/summary.json'))
r=s['runs'][0]
assert len(r['data_mixture']['sources'])==3
assert r['metrics']['data_mix_deviation']['value']<5 and r['metrics']['data_mix_max_epochs']['value']>2.5
" || fail "summary.json lacks the mixture"
echo "ok: cairn-report shows the per-source table and mixture metrics"

# Bad input: exit 2 naming the key and the source.
expect_exit 2 'weights\[1\] = 0 (source "[^"]*code")' "$B" mix "$T/web" "$T/code" --weights 1,0 --out "$T/bad"
expect_exit 2 'weights\[0\] = -1' "$B" mix "$T/web" "$T/code" --weights=-1,2 --out "$T/bad"
expect_exit 2 'weights has 2 value(s) but there are 3 sources' "$B" mix "$T/web" "$T/code" "$T/books" \
  --weights 1,2 --out "$T/bad"
expect_exit 2 'sources\[1\].*cannot open dataset.*nope' "$B" mix "$T/web" "$T/nope" --weights 1,1 --out "$T/bad"
expect_exit 2 'tokens and epochs are both set' "$B" mix "$T/web" "$T/code" --weights 1,1 --tokens 1000 \
  --epochs 2 --out "$T/bad"
expect_exit 2 'max_epochs = 2: source "[^"]*books" (sources\[1\]) would be repeated' "$B" mix "$T/web" \
  "$T/books" --weights 1,1 --max-epochs 2 --out "$T/bad"
# ... refused from the sources' sizes and weights alone, before the mixture is planned (whose progress line, at the
# default log level, says it was).
! grep -q "planning the mixture" "$T/err.txt" || fail "max_epochs was checked after planning the mixture"
echo "ok: max_epochs refused before planning"
# The output must fit on its disk: a mixture whose shards (tokens x width, the index, the tokenizer copy) clearly need
# more than the free space is refused with exit 1 before anything is written, naming the output, the estimate and the
# free space. cairn-reshard-faults (the tool's command line with --free-disk-bytes standing in for the free space):
# below what the same mixture took ($T/m7) it is refused; with half as much again it is written (the estimate is not
# far above the truth).
m7_bytes=$($PY -c "import os,sys; print(sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(sys.argv[1]) for f in fs))" "$T/m7")
expect_exit 1 \
  "cannot write the mixture to \"$T/nodisk\": it needs about .* MB (.* tokens of 2 bytes, and the index), but the disk there has .* MB free" \
  "$FAULTS" --free-disk-bytes $((m7_bytes * 9 / 10)) "${MIX[@]}" --seed 7 --out "$T/nodisk"
[ ! -e "$T/nodisk" ] || fail "a mixture refused for lack of disk space left $T/nodisk behind"
! grep -q "planning the mixture" "$T/err.txt" || fail "the disk space was checked after planning the mixture"
"$FAULTS" --free-disk-bytes $((m7_bytes * 3 / 2)) "${MIX[@]}" --seed 7 --out "$T/disk_ok" --log-level warn \
  || fail "a mixture with 1.5x its size free was refused"
# Over a complete dataset the new one is staged beside it (the old one stays until the swap), so the old shards are
# not room: with 0.9x the mixture free and a dataset of its size already there, it is refused and the dataset kept.
cp -r "$T/m7" "$T/over"
tree_sum() { (cd "$1" && find . -type f | sort | xargs md5sum) | md5sum; }
before=$(tree_sum "$T/over")
expect_exit 1 "cannot write the mixture to \"$T/over\": .*; the dataset already there stays until the new one is written" \
  "$FAULTS" --free-disk-bytes $((m7_bytes * 9 / 10)) "${MIX[@]}" --seed 8 --out "$T/over"
[ "$(tree_sum "$T/over")" = "$before" ] && [ ! -e "$T/over/.staging" ] ||
  fail "a mixture refused for lack of disk space changed the dataset in its output"
echo "ok: a mixture that does not fit on its disk is refused before anything is written ($m7_bytes bytes written)"
expect_exit 2 'refusing to write into' "$B" mix "$T/web" "$T/code" --weights 1,1 --out "$T/web/mixed"
printf '[data.mix]\nweight = [1, 2]\n' > "$T/typo.toml"
expect_exit 2 'weight' "$B" mix "$T/web" "$T/code" --config "$T/typo.toml" --out "$T/bad"
# Another tokenizer (a small GPT-2-style byte-level BPE: 256 bytes, two merges) is refused, naming it.
write_small_bpe "$T"
"$B" build --log-level warn --delimiter % --tokenizer gpt2 --vocab "$T/encoder.json" --merges "$T/vocab.bpe" \
  --shards 1 --out "$T/books_hf" "$T/books.txt"
expect_exit 2 'sources\[1\] "[^"]*books_hf": tokenizer .* differs from sources\[0\]' "$B" mix "$T/web" \
  "$T/books_hf" --weights 1,1 --out "$T/bad"
# A dataset without tokens (an empty shard, index.json saying so) is refused, naming it.
$PY - "$T/books" "$T/empty" <<'PY'
import json, os, shutil, sys
import h5py, numpy as np
src, dst = sys.argv[1:3]
os.makedirs(dst)
ix = json.load(open(os.path.join(src, "index.json")))
with h5py.File(os.path.join(src, ix["shards"][0]["file"]), "r") as a, h5py.File(os.path.join(dst, "shard_00000.h5"), "w") as b:
    for k, v in a.attrs.items():
        b.attrs[k] = v
    for k in a.keys():
        b.create_dataset(k, data=a[k][:0] if k != "doc_offsets" else a[k][:1])
    b.attrs["num_tokens"] = 0
    b.attrs["num_documents"] = 0
    b.attrs["shard_count"] = 1
ix["shards"] = [{"file": "shard_00000.h5", "tokens": 0, "documents": 0, "xxh64": "ef46db3751d8e999"}]
ix["total_tokens"] = ix["total_documents"] = ix["total_bytes"] = 0
json.dump(ix, open(os.path.join(dst, "index.json"), "w"))
PY
expect_exit 2 'sources\[1\] "[^"]*empty": the dataset holds no tokens' "$B" mix "$T/web" "$T/empty" \
  --weights 1,1 --out "$T/bad"
# An absurd size is refused at once (exit 2 naming the option, the size and the memory there is),
# before any shard is read or the plan allocated; run under a 2 GB address-space limit and a timeout,
# so that a regression fails here instead of growing until the machine runs out of memory. A
# demanding but real size (the small source upsampled tens of epochs) runs under the same limit.
bounded() { (ulimit -v 2000000; exec timeout 120 "$@"); }
expect_exit 2 '\[data.mix\] tokens = 1000000000000 (--tokens): a mixture of 1e+12 tokens would hold about .* documents; planning them needs .* of memory, more than the .* available (MemAvailable, cgroup limit, ulimit -v).*; at most about .* tokens fit' \
  bounded "$B" mix "$T/web" "$T/books" --weights 1,1 --tokens 1000000000000 --out "$T/bad"
expect_exit 2 '\[data.mix\] epochs = 1e+09 (--epochs): a mixture of .* tokens would hold about .*; at most about .* epochs (--epochs) fit' \
  bounded "$B" mix "$T/web" "$T/books" --weights 1,1 --epochs 1e9 --out "$T/bad"
expect_exit 2 '\[data.mix\] weights\[0\] = 1e-12 (one epoch of the largest source "[^"]*web").*epochs (--epochs) fit' \
  bounded "$B" mix "$T/web" "$T/books" --weights 1e-12,1 --out "$T/bad"
bounded "$B" mix "$T/web" "$T/books" --weights 1,1 --tokens 20000000 --seed 5 --shards 2 --out "$T/up" 2>"$T/up.err" \
  || { cat "$T/up.err"; fail "a 2e7-token upsampled mixture failed under ulimit -v 2000000"; }
grep -q "planning the mixture" "$T/up.err" || fail "mix showed no planning progress"
"$B" verify "$T/up" >/dev/null
$PY -c "
import json
m = json.load(open('$T/up/stats.json'))['mixture']
assert 2e7 <= m['tokens'] < 2e7 + 20000 and m['sources'][1]['epochs'] > 20, (m['tokens'], m['sources'][1]['epochs'])
" || fail "upsampled mixture"
echo "ok: absurd sizes refused at once, a 2e7-token mixture repeating books $($PY -c "import json;print(round(json.load(open('$T/up/stats.json'))['mixture']['sources'][1]['epochs']))") epochs made"
[ ! -e "$T/bad" ] || fail "a refused mixture left $T/bad behind"
echo "mix: all checks passed"
