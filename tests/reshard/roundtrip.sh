#!/usr/bin/env bash
# Round trips on fortunes: text -> shards -> Megatron -> shards and -> llm.c -> shards keep every token;
# reshard 8 -> 3 -> 5 keeps documents (and order without --seed); MPI ranks/threads give identical shards.
source "$(dirname "$0")/common.sh"

# --out names the dataset itself here, and --help says so where it lists the option (not the common "run directory").
"$B" --help | grep -q -- "--out DIR *output dataset directory" || fail "--help does not describe --out as the dataset"
"$B" build --delimiter % --shards 8 --out "$T/d8" "${FORTUNES[@]}"
"$B" verify "$T/d8"
docs=$($PY -c "import json;print(json.load(open('$T/d8/index.json'))['total_documents'])")
[ "$docs" -gt 15000 ] || fail "only $docs documents from fortunes"

# 8 -> 3 -> 5 keeps the order; with --seed the multiset, in another order; balanced within 1%.
"$B" reshard "$T/d8" --shards 3 --out "$T/d3"
"$B" reshard "$T/d3" --shards 5 --out "$T/d5"
same_tokens "$T/d8" "$T/d5"
"$B" reshard "$T/d3" --shards 5 --seed 42 --out "$T/s5"
cmp <($DUMP "$T/d8" | sort) <($DUMP "$T/s5" | sort) || fail "shuffled reshard changed the documents"
! cmp -s <($DUMP "$T/d8") <($DUMP "$T/s5") || fail "--seed did not change the order"
"$B" verify "$T/d5" "$T/s5"
$PY - "$T/d5/stats.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
t = s["tokens_per_shard"]; mean = sum(t) / len(t)
assert len(t) == 5 and max(abs(x - mean) for x in t) / mean < 0.01, t
assert s["documents"] > 15000 and 0.9 < s["bytes_per_token"] < 1.1 and sum(s["doc_length_histogram"]["counts"]) == s["documents"]
print("ok: balanced within 1%:", t)
PY
# Several inputs are concatenated in order (same tokenizer); different tokenizers are refused.
"$B" reshard "$T/d3" "$T/d5" --shards 4 --out "$T/merged"
cmp <($DUMP "$T/merged") <(cat <($DUMP "$T/d3") <($DUMP "$T/d5")) || fail "merged reshard is not d3 then d5"
echo "ok: two datasets merged in order"
# --split-docs balances to the token and keeps the token stream.
"$B" reshard "$T/d8" --shards 7 --split-docs --out "$T/split7"
$PY - "$T/split7/index.json" <<'PY'
import json, sys
t = [s["tokens"] for s in json.load(open(sys.argv[1]))["shards"]]
assert max(t) - min(t) <= 1, t
print("ok: split-docs shards", t)
PY
cmp <($DUMP "$T/d8" | tr '\n' ' ') <($DUMP "$T/split7" | tr '\n' ' ') || fail "split-docs changed the token stream"

# Megatron: export, check the files with an independent reader (Megatron's layout), import back.
"$B" convert --to megatron --out "$T/meg/fortunes_text_document" "$T/d8"
"$B" convert --from megatron "$T/meg/fortunes_text_document" --shards 4 --out "$T/from_meg" 2> "$T/from_meg.err"
# The import shows its reading of the .bin (it was silent for about a minute per billion tokens).
grep -q "reading $T/meg/fortunes_text_document.bin \([0-9]*\)/\1 tokens (100.0%)" "$T/from_meg.err" ||
  fail "no reading progress: $(cat "$T/from_meg.err")"
# --out naming a directory: the files are named after the dataset, as Megatron's preprocess_data.py names them (it
# wrote DIR/.bin and DIR/.idx).
mkdir -p "$T/megdir"
"$B" convert --to megatron --out "$T/megdir/" "$T/d8" 2>/dev/null
cmp -s "$T/megdir/d8_text_document.bin" "$T/meg/fortunes_text_document.bin" &&
  cmp -s "$T/megdir/d8_text_document.idx" "$T/meg/fortunes_text_document.idx" ||
  fail "convert --to megatron --out DIR/: $(ls -A "$T/megdir")"
same_tokens "$T/d8" "$T/from_meg"
# A --split-docs dataset ends shards inside documents: Megatron gets each document whole, so the export is the one of
# the unsplit dataset byte for byte (as pieces, the first piece of each had no end-of-text and Megatron's shuffle ran
# it into another document).
"$B" convert --to megatron --out "$T/meg/split_text_document" "$T/split7" 2> /dev/null
cmp -s "$T/meg/split_text_document.bin" "$T/meg/fortunes_text_document.bin" &&
  cmp -s "$T/meg/split_text_document.idx" "$T/meg/fortunes_text_document.idx" ||
  fail "a --split-docs dataset's Megatron export differs from the unsplit one's"
# llm.c: export, independent check, import back.
"$B" convert --to llmc --out "$T/llmc" "$T/d8"
"$B" convert --from llmc "$T/llmc" --shards 2 --out "$T/from_llmc"
same_tokens "$T/d8" "$T/from_llmc"
# The exports' formats have no room for provenance: it is written beside them (the same document as --json), with
# what the tokens are (the tokenizer, which the formats do not record) and the dataset they came from, by absolute
# path and content fingerprint.
for f in "$T/meg/fortunes_text_document.provenance.json" "$T/llmc/provenance.json"; do
  $PY -c "import json, sys; d = json.load(open(sys.argv[1])); p = d['provenance']; s = d['dataset']
ix = json.load(open(sys.argv[2] + '/index.json'))
assert p['tool'] == 'cairn-reshard' and 'convert' in p['command_line'] and p['git_sha'] and d['tokens'] > 0, d
assert d['input'] == sys.argv[2] and s['tokenizer'] == ix['tokenizer']['id'] and s['eot_id'] == ix['eot_id'], d
assert s['total_tokens'] == ix['total_tokens'] and len(s['content_fingerprint']) == 16, s" "$f" "$T/d8" ||
    fail "no provenance beside the export: $f"
done
$PY - "$T/meg/fortunes_text_document" "$T/llmc" "$T/d8" <<'PY'
import glob, json, os, struct, sys
import numpy as np, h5py
prefix, llmc, ds = sys.argv[1:4]
ix = json.load(open(os.path.join(ds, "index.json")))
docs = []
for s in ix["shards"]:
    with h5py.File(os.path.join(ds, s["file"])) as h:
        t, o = h["tokens"][:], h["doc_offsets"][:]
        docs += [t[o[i]:o[i + 1]] for i in range(len(o) - 1)]
# Megatron MMIDIDX v1: magic, version, dtype code, counts, sizes, pointers, document index.
b = open(prefix + ".idx", "rb").read()
assert b[:9] == b"MMIDIDX\x00\x00"
version, = struct.unpack("<Q", b[9:17]); code = b[17]
nseq, ndoc = struct.unpack("<QQ", b[18:34])
assert version == 1 and code == 8 and nseq == len(docs) and ndoc == len(docs) + 1
sizes = np.frombuffer(b, np.int32, nseq, 34)
ptrs = np.frombuffer(b, np.int64, nseq, 34 + 4 * nseq)
doc_idx = np.frombuffer(b, np.int64, ndoc, 34 + 12 * nseq)
assert 34 + 12 * nseq + 8 * ndoc == len(b)
assert (doc_idx == np.arange(ndoc)).all() and ptrs[0] == 0 and (np.diff(ptrs) == sizes[:-1] * 2).all()
bin_ = np.memmap(prefix + ".bin", np.uint16, "r")
for i in (0, 1, len(docs) // 2, len(docs) - 1):
    assert (bin_[ptrs[i] // 2: ptrs[i] // 2 + sizes[i]] == docs[i]).all()
# llm.c: 256 x int32 header (magic 20240520, version 1, token count), then uint16 tokens, end-of-text
# before each document (as llm.c's scripts write it) instead of after.
eot = ix["eot_id"]
toks = []
for f in sorted(glob.glob(os.path.join(llmc, "*.bin"))):
    h = np.fromfile(f, np.int32, 256)
    assert h[0] == 20240520 and h[1] == 1
    t = np.fromfile(f, np.uint16, offset=1024)
    assert len(t) == h[2]
    toks.append(t)
assert (np.concatenate(toks) == np.concatenate([np.concatenate([[eot], d[:-1]]) for d in docs])).all()
print("ok: Megatron and llm.c files match their formats and the tokens")
PY

# Same shards whatever the ranks and threads: compare index.json checksums.
sums() { $PY -c "import json,sys;print([s['xxh64'] for s in json.load(open(sys.argv[1]))['shards']])" "$1/index.json"; }
mpirun -np 2 --oversubscribe "$B" reshard "$T/d8" --shards 5 --seed 9 --threads 1 --out "$T/mpi5"
"$B" reshard "$T/d8" --shards 5 --seed 9 --threads 3 --out "$T/thr5"
[ "$(sums "$T/mpi5")" = "$(sums "$T/thr5")" ] || fail "MPI and threaded reshard differ"
mpirun -np 2 --oversubscribe "$B" build --set data.batch_mb=0.2 --delimiter % --shards 8 --threads 1 --out "$T/mpi_d8" "${FORTUNES[@]}"
[ "$(sums "$T/mpi_d8")" = "$(sums "$T/d8")" ] || fail "MPI build differs from the single-process build"
# Small inputs share part files (one group here); with tiny parts every input is its own group, spread over the
# ranks. Neither changes a shard, nor the plan hash that resume matches on.
plan_hashes() { $PY -c "import h5py,sys;print([h5py.File(f,'r').attrs['plan_hash'] for f in sys.argv[1:]])" "$1"/shard_*.h5; }
mpirun -np 2 --oversubscribe "$B" build --set data.part_mb=0.001 --delimiter % --shards 8 --threads 1 --out "$T/mpi_tiny" "${FORTUNES[@]}"
"$B" build --set data.part_mb=0.001 --delimiter % --shards 8 --threads 2 --out "$T/tiny" "${FORTUNES[@]}"
for d in mpi_tiny tiny; do
  [ "$(sums "$T/$d")" = "$(sums "$T/d8")" ] || fail "build with one part per input ($d) differs from the grouped build"
  [ "$(plan_hashes "$T/$d")" = "$(plan_hashes "$T/d8")" ] || fail "plan hashes depend on how inputs were grouped ($d)"
done
echo "ok: identical shards with 2 ranks, 1 rank x 3 threads"
# 2 ranks over a dataset of another plan (d8's 8 shards) that a failed run of this plan left two shards staged for,
# one of each rank: both ranks agree to stage, resume those, and rank 0 swaps the rest in after both are done.
cp -r "$T/d8" "$T/over"
mkdir "$T/over/.staging"
cp "$T/thr5/shard_00001.h5" "$T/thr5/shard_00004.h5" "$T/over/.staging/"
mpirun -np 2 --oversubscribe "$B" reshard "$T/d8" --shards 5 --seed 9 --threads 1 --out "$T/over" --json "$T/over.json"
[ "$(sums "$T/over")" = "$(sums "$T/thr5")" ] || fail "MPI reshard over another dataset differs"
[ "$($PY -c "import json,sys;print(json.load(open(sys.argv[1]))['shards_resumed'])" "$T/over.json")" = 2 ] ||
  fail "MPI reshard did not resume the staged shards: $(cat "$T/over.json")"
# The --json summary carries provenance, as every result a tool writes does.
$PY -c "import json,sys;p=json.load(open(sys.argv[1]))['provenance'];assert p['tool']=='cairn-reshard' and p['git_sha'],p" \
  "$T/over.json" || fail "reshard --json has no provenance: $(cat "$T/over.json")"
[ ! -e "$T/over/.staging" ] && [ "$(ls "$T/over" | grep -c '^shard_')" = 5 ] || fail "MPI reshard left $(ls -a "$T/over")"
"$B" verify "$T/over" >/dev/null
echo "ok: 2 ranks staged over another dataset, resumed 2 staged shards and swapped in 5"

# Directory input (skips fortune's binary .dat indexes), stdin, gzip and JSONL inputs.
"$B" build --delimiter % --shards 2 --out "$T/dir" /usr/share/games/fortunes
[ "$($PY -c "import json;print(json.load(open('$T/dir/index.json'))['total_documents'])")" = "$docs" ] || fail "directory input differs"
gzip -c "${FORTUNES[0]}" > "$T/one.gz"
"$B" build --delimiter % --shards 1 --out "$T/gz" "$T/one.gz"
cat "${FORTUNES[0]}" | "$B" build --delimiter % --shards 1 --out "$T/stdin" -
"$B" build --delimiter % --shards 1 --out "$T/plain" "${FORTUNES[0]}"
same_tokens "$T/plain" "$T/gz"
same_tokens "$T/plain" "$T/stdin"
$PY - "${FORTUNES[0]}" "$T/docs.jsonl" <<'PY'
import json, sys
docs, cur = [], []
for line in open(sys.argv[1], encoding="utf-8").read().splitlines(keepends=True):
    if line.rstrip("\r\n") == "%":
        if cur: docs.append("".join(cur))
        cur = []
    else:
        cur.append(line)
if cur: docs.append("".join(cur))
with open(sys.argv[2], "w") as f:
    for d in docs: f.write(json.dumps({"id": 1, "body": d}) + "\n")
PY
"$B" build --jsonl-field body --shards 1 --out "$T/jsonl" "$T/docs.jsonl"
same_tokens "$T/plain" "$T/jsonl"
"$B" stats "$T/d8" | grep -q "bytes/token" || fail "stats output"

# Long passes show progress on stderr, within one shard too (a multi-GB shard was verified, and 300 M documents counted
# for a Megatron export, without a word): CAIRN_PROGRESS_INTERVAL=0 prints every update, so the lines are there without
# waiting on a timer. The results are those of a run that prints none (--log-level warn). One shard of a few M tokens:
# updates come every 1 M tokens.
"$B" reshard "$T/d8" --shards 1 --out "$T/one" 2>/dev/null
# moved LOG LABEL UNIT: LOG has a progress line of LABEL inside the pass (0 < done < total) and its last (done = total).
moved() {
  grep -o -- "$2 [0-9]*/[0-9]* $3 (" "$1" | grep -o "[0-9]*/[0-9]* $3 (" | cut -d' ' -f1 |
    awk -F/ '$1 > 0 && $1 < $2 { inside = 1 } $1 == $2 { last = 1 } END { exit !(inside && last) }' ||
    fail "no progress of '$2' within the pass: $(cat "$1")"
}
# no_provenance STATS_JSON: the file without its provenance (which names the run).
no_provenance() { $PY -c "import json,sys;s=json.load(open(sys.argv[1]));s.pop('provenance');print(json.dumps(s))" "$1"; }
CAIRN_PROGRESS_INTERVAL=0 "$B" verify "$T/one" >"$T/one_verify.out" 2>"$T/one_verify.err"
moved "$T/one_verify.err" "verifying $T/one" tokens
cmp "$T/one_verify.out" <("$B" verify "$T/one" --log-level warn) || fail "verify's report changed with progress lines"
CAIRN_PROGRESS_INTERVAL=0 "$B" stats "$T/one" >"$T/one_stats.out" 2>"$T/one_stats.err"
moved "$T/one_stats.err" "checking $T/one" tokens
grep -q "reading document lengths of $T/one \([0-9]*\)/\1 documents (100.0%)" "$T/one_stats.err" ||
  fail "stats showed no progress over the documents: $(cat "$T/one_stats.err")"
no_provenance "$T/one/stats.json" >"$T/one_stats.json"
"$B" stats "$T/one" --log-level warn >"$T/one_stats_quiet.out"
cmp "$T/one_stats.out" "$T/one_stats_quiet.out" && cmp "$T/one_stats.json" <(no_provenance "$T/one/stats.json") ||
  fail "stats changed with progress lines"
CAIRN_PROGRESS_INTERVAL=0 "$B" convert --to megatron --out "$T/meg/one_text_document" "$T/one" 2>"$T/one_meg.err"
moved "$T/one_meg.err" "checking $T/one" tokens
grep -q "counting documents of $T/one \([0-9]*\)/\1 documents (100.0%)" "$T/one_meg.err" &&
  grep -q "writing $T/meg/one_text_document.idx \([0-9]*\)/\1 entries (100.0%)" "$T/one_meg.err" ||
  fail "convert --to megatron showed no progress counting documents or writing the .idx: $(cat "$T/one_meg.err")"
cmp -s "$T/meg/one_text_document.bin" "$T/meg/fortunes_text_document.bin" &&
  cmp -s "$T/meg/one_text_document.idx" "$T/meg/fortunes_text_document.idx" ||
  fail "the Megatron export changed with progress lines"
CAIRN_PROGRESS_INTERVAL=0 "$B" reshard "$T/one" --shards 3 --seed 42 --out "$T/one_s3" 2>"$T/one_s3.err"
moved "$T/one_s3.err" "checking $T/one" tokens
"$B" reshard "$T/one" --shards 3 --seed 42 --out "$T/one_s3_quiet" --log-level warn
[ "$(sums "$T/one_s3")" = "$(sums "$T/one_s3_quiet")" ] || fail "the shuffled reshard changed with progress lines"
echo "ok: verify, stats, convert --to megatron and a shuffled reshard show progress within one shard; same results"
echo PASS
