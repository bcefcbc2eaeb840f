#!/usr/bin/env bash
# Safety: SIGKILL mid-reshard then rerun resumes and verifies; a run killed or failed (bad input, full disk) over a
# dataset of another plan leaves that dataset intact and resumes from what it staged; inputs are never written;
# malformed inputs give errors naming file and line/offset (or --skip-bad counts); verify catches corruption,
# of the shards or of index.json (exit 3); --json - is pure JSON; unknown subcommands are named; a second writer of
# one dataset directory is refused (exit 1), and a verify that a writer's swap overtakes says so (exit 1, not 3).
source "$(dirname "$0")/common.sh"
FAULTS="${1:?usage: safety.sh CAIRN_RESHARD_FAULTS (tests/reshard/cairn-reshard-faults)}"

# ---- SIGKILL during reshard, then rerun: complete shards are kept, the result verifies.
for i in 1 2 3 4 5 6 7 8 9 10; do cat "${FORTUNES[@]}"; done > "$T/big.txt"
"$B" build --delimiter % --shards 4 --out "$T/big" "$T/big.txt"
rm "$T/big.txt"
killed=0
for attempt in 1 2 3; do
  rm -rf "$T/out"
  "$B" reshard "$T/big" --shards 200 --threads 1 --out "$T/out" 2>/dev/null &
  pid=$!
  # Kill as soon as the first shard is in place (the run is then well under way, far from done).
  kill_once_present $pid "$T/out/shard_*.h5"
  if [ ! -f "$T/out/index.json" ]; then killed=1; break; fi
done
[ $killed = 1 ] || fail "reshard finished before it could be killed (3 attempts)"
before=$(ls "$T/out" | grep -c '^shard_' || true)
echo "ok: killed with $before complete shards and $(ls -a "$T/out" | grep -c '\.tmp\.' || true) temp files left"
# verify adds how such a directory is completed to "No such file (build one ...)".
expect_exit 3 "index.json\": No such file .*($before shard files are here without it: if a cairn-reshard writing them was interrupted, the same command rerun completes it)" \
  "$B" verify "$T/out"
"$B" reshard "$T/big" --shards 200 --threads 1 --out "$T/out" 2>"$T/rerun.log"
grep -q "already complete" "$T/rerun.log" || { cat "$T/rerun.log"; fail "rerun did not resume"; }
"$B" verify "$T/out"
[ "$(ls -a "$T/out" | grep -c '\.tmp\.' || true)" = 0 ] || fail "temp files left after the rerun"
$PY - "$T/big" "$T/out" <<'PY'
import json, os, sys, h5py, numpy as np
def stream(d):
    ix = json.load(open(os.path.join(d, "index.json")))
    return np.concatenate([h5py.File(os.path.join(d, s["file"]))["tokens"][:] for s in ix["shards"]])
assert (stream(sys.argv[1]) == stream(sys.argv[2])).all()
print("ok: resumed dataset holds exactly the input tokens")
PY
# A corrupted shard is found by verify (exit 3) and is rewritten, not reused, by a rerun.
$PY - "$T/out/shard_00003.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as h:
    off = h["tokens"].id.get_offset()
with open(sys.argv[1], "r+b") as f:
    f.seek(off + 10); b = f.read(1); f.seek(off + 10); f.write(bytes([(b[0] + 1) % 200]))
PY
expect_exit 3 'shard_00003.h5: tokens do not match' "$B" verify "$T/out"
"$B" reshard "$T/big" --shards 200 --threads 1 --out "$T/out" 2>/dev/null
"$B" verify "$T/out" >/dev/null
echo "ok: corrupted shard rewritten by the rerun"
# Out-of-vocabulary token, broken offsets, index.json mismatch: all reported with shard and document.
cp -r "$T/out" "$T/bad"
$PY - "$T/bad" <<'PY'
import json, os, sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(os.path.join(d, "shard_00001.h5"), "r+") as h:
    t = h["tokens"]; t[5] = 300                      # id >= vocab 257
with h5py.File(os.path.join(d, "shard_00002.h5"), "r+") as h:
    o = h["doc_offsets"]; o[3] = o[2] - 1 if o[2] > 0 else 0   # not monotone
ix = json.load(open(os.path.join(d, "index.json"))); ix["shards"][4]["tokens"] += 1
json.dump(ix, open(os.path.join(d, "index.json"), "w"))
PY
expect_exit 3 'shard_00001.h5: document 0, token 5: id 300 is not below the vocabulary size 257' "$B" verify "$T/bad"
grep -q 'shard_00002.h5: document 2.*not monotone' "$T/out.txt" || fail "offsets problem not reported"
grep -q 'shard_00004.h5: has .* tokens, index.json says' "$T/out.txt" || fail "index mismatch not reported"
rm -rf "$T/bad" "$T/out"

# ---- A run over a complete dataset of another plan stages what it writes (<out>/.staging) and swaps it in only once
# every shard is on disk: killed, failed or refused midway, it leaves that dataset as it was (index.json, stats.json,
# every shard byte for byte; verify passes), and the same command rerun resumes from the staged shards.
a_sums() { (cd "$1" && md5sum index.json stats.json shard_*) > "$T/a.md5"; }
a_kept() { (cd "$1" && md5sum --quiet -c "$T/a.md5") || fail "$2: the dataset already in --out changed"
  "$B" verify "$1" >/dev/null || fail "$2: the dataset already in --out no longer verifies"; }
sums() { $PY -c "import json,sys;print([s['xxh64'] for s in json.load(open(sys.argv[1]))['shards']])" "$1/index.json"; }
resumed() { $PY -c "import json,sys;print(json.load(open(sys.argv[1]))['shards_resumed'])" "$1"; }
# only_shards_of DIR: DIR's shard files are exactly those its index.json names.
only_shards_of() {
  [ "$(ls "$1" | grep '^shard_' || true)" = "$($PY -c "import json,sys
print('\n'.join(sorted(s['file'] for s in json.load(open(sys.argv[1]))['shards'])))" "$1/index.json")" ] ||
    fail "$1 holds shard files its index.json does not name: $(ls "$1")"
}
# SIGKILL once the new dataset's first shard is staged (polling, as above).
killed=0
for attempt in 1 2 3; do
  rm -rf "$T/kd"
  "$B" reshard "$T/big" --shards 200 --out "$T/kd" --log-level warn
  a_sums "$T/kd"
  "$B" reshard "$T/big" --shards 150 --threads 1 --out "$T/kd" 2>/dev/null &
  pid=$!
  kill_once_present $pid "$T/kd/.staging/shard_*.h5"
  if [ -d "$T/kd/.staging" ]; then killed=1; break; fi
done
[ $killed = 1 ] || fail "the staged reshard finished (or staged nothing) before it could be killed (3 attempts)"
a_kept "$T/kd" "killed"
staged=$(ls "$T/kd/.staging" | grep -c '^shard_' || true)
"$B" reshard "$T/big" --shards 150 --threads 1 --out "$T/kd" --json "$T/kd.json" 2>/dev/null
[ "$(resumed "$T/kd.json")" -ge "$staged" ] ||
  fail "the rerun did not resume the $staged staged shards: $(cat "$T/kd.json")"
"$B" verify "$T/kd" >/dev/null
[ ! -e "$T/kd/.staging" ] || fail "staging directory left after the rerun"
[ "$(ls "$T/kd" | grep -c '^shard_')" = 150 ] || fail "the rerun left $(ls "$T/kd" | grep -c '^shard_') shards, wanted 150"
only_shards_of "$T/kd"
echo "ok: killed with $staged shard(s) staged: the old dataset intact; the rerun resumed and swapped in 150 shards"
# A crash inside the swap (the old index.json gone, some new shards in place, the others still staged, old ones
# beside them) is repaired by the same command rerun: it takes each shard from where it is and writes the index.
mv "$T/kd" "$T/b150"
"$B" reshard "$T/big" --shards 200 --out "$T/kd" --log-level warn
rm "$T/kd/index.json" "$T/kd/stats.json"
mkdir "$T/kd/.staging"
cp "$T/b150/index.json" "$T/b150/stats.json" "$T/kd/.staging/"
for k in $(seq 0 149); do
  f=$(printf 'shard_%05d.h5' "$k")
  if [ "$k" -lt 75 ]; then cp "$T/b150/$f" "$T/kd/"; else cp "$T/b150/$f" "$T/kd/.staging/"; fi
done
# verify says what happened and what completes it, naming the command the staged index.json records (it said only
# that index.json was missing, as for a directory that never held a dataset).
expect_exit 3 "a cairn-reshard was interrupted while swapping a new dataset in .*the old index.json is gone, the new one waits in $T/kd/.staging with 75 shard files not moved into place yet; rerun the same command to complete it (it was: .*reshard $T/big --shards 150 " \
  "$B" verify "$T/kd"
"$B" reshard "$T/big" --shards 150 --threads 1 --out "$T/kd" --json "$T/kd.json" 2>/dev/null
[ "$(resumed "$T/kd.json")" = 150 ] || fail "the rerun after a crash in the swap rewrote shards: $(cat "$T/kd.json")"
"$B" verify "$T/kd" >/dev/null
[ ! -e "$T/kd/.staging" ] && only_shards_of "$T/kd" && [ "$(sums "$T/kd")" = "$(sums "$T/b150")" ] ||
  fail "the rerun after a crash in the swap left $(ls -a "$T/kd" | head)"
echo "ok: a crash inside the swap is repaired by the rerun (150 shards taken from the output and its staging)"
rm -rf "$T/kd" "$T/b150"

# An input that fails its check once shards of the new dataset are written (in order, a shard is committed when its
# inputs have passed; here the last input shard is bad): exit 3 naming it, the old dataset intact, nothing staged kept.
"$B" build --log-level warn --delimiter % --shards 2 --out "$T/sa" "${FORTUNES[@]:0:8}"
"$B" build --log-level warn --delimiter % --shards 3 --out "$T/sr" "${FORTUNES[@]}"
$PY - "$T/sr/shard_00002.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as h:
    off = h["tokens"].id.get_offset() + 2 * (h["tokens"].shape[0] - 5)
with open(sys.argv[1], "r+b") as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 1]))
PY
"$B" reshard "$T/sa" --shards 8 --out "$T/keep" --log-level warn
a_sums "$T/keep"
expect_exit 3 'corrupt dataset shard ".*sr/shard_00002.h5"' \
  "$B" reshard "$T/sr" --shards 6 --threads 1 --out "$T/keep"
a_kept "$T/keep" "bad input"
[ ! -e "$T/keep/.staging" ] || fail "a reshard of a corrupt input left $(ls "$T/keep/.staging" | wc -l) staged files"
rm -rf "$T/sr" "$T/keep"

# A full disk after some shards are staged (root only: a tmpfs, as tests/train/e2e.sh): exit 1 naming the file, the
# old dataset intact; with room again (the tmpfs grown) the rerun resumes the staged shards and swaps in the new
# dataset, another tokenizer's files included, with no shard of the old one left.
write_small_bpe "$T"
cat "${FORTUNES[@]}" "${FORTUNES[@]}" > "$T/sb.txt"
"$B" build --log-level warn --delimiter % --tokenizer gpt2 --vocab "$T/encoder.json" --merges "$T/vocab.bpe" \
  --shards 3 --out "$T/sb" "$T/sb.txt"
rm "$T/sb.txt"
NEW=(reshard "$T/sb" --shards 6 --seed 5)
"$B" reshard "$T/sa" --shards 8 --out "$T/a_ref" --log-level warn
"$B" "${NEW[@]}" --out "$T/b_ref" --log-level warn
a_bytes=$(du -sb "$T/a_ref" | cut -f1) b_bytes=$(du -sb "$T/b_ref" | cut -f1)
mkdir -p "$T/full"
trap 'umount "$T/full" 2>/dev/null || true; rm -rf "$T"' EXIT
# Room for the old dataset and half of the new one: the run fails after staging some of its shards.
if [[ $(id -u) == 0 ]] && mount -t tmpfs -o size=$(((a_bytes + b_bytes / 2) / 1024))k tmpfs "$T/full" 2>/dev/null; then
  "$B" reshard "$T/sa" --shards 8 --out "$T/full/ds" --log-level warn
  a_sums "$T/full/ds"
  expect_exit 1 'cannot [a-z ]* "[^"]*/full/ds/\.staging/[^"]*": .*No space left on device' \
    "$B" "${NEW[@]}" --out "$T/full/ds"
  a_kept "$T/full/ds" "full disk"
  staged=$(ls "$T/full/ds/.staging" | grep -c '^shard_' || true)
  [ "$staged" -ge 1 ] && [ "$staged" -lt 6 ] || fail "full disk: $staged shards staged, wanted some of 6"
  [ "$(ls -a "$T/full/ds/.staging" | grep -c '\.tmp\.' || true)" = 0 ] || fail "full disk: temp files left"
  mount -o remount,size=$(((a_bytes + b_bytes) / 1024 + 1024))k "$T/full"
  "$B" "${NEW[@]}" --out "$T/full/ds" --json "$T/b.json" 2>/dev/null
  [ "$(resumed "$T/b.json")" = "$staged" ] ||
    fail "full disk: the rerun did not resume the $staged staged shards: $(cat "$T/b.json")"
  "$B" verify "$T/full/ds" >/dev/null
  [ ! -e "$T/full/ds/.staging" ] || fail "full disk: staging directory left after the rerun"
  only_shards_of "$T/full/ds"
  same_tokens "$T/b_ref" "$T/full/ds"
  [ "$(sums "$T/full/ds")" = "$(sums "$T/b_ref")" ] || fail "full disk: the resumed dataset's shards differ"
  diff -r "$T/b_ref/tokenizer" "$T/full/ds/tokenizer" || fail "full disk: the new tokenizer files were not swapped in"
  echo "ok: a full disk after $staged staged shards left the old dataset intact; the rerun resumed and swapped in"
  umount "$T/full"
else
  echo "skip: full-disk reshard check (needs root to mount a tmpfs)"
fi
trap 'rm -rf "$T"' EXIT
rm -rf "$T/sa" "$T/sb" "$T/a_ref" "$T/b_ref" "$T/full"

# ---- An interrupted build keeps the parts of the inputs it finished: a bad last file stops the
# build after five good ones; once fixed, the rerun reuses those five and tokenizes only the last. Small inputs
# share parts (the unit of reuse) up to data.part_mb: by default these six are one group, and nothing is kept.
mkdir -p "$T/resume"
for i in 0 1 2 3 4; do cp "${FORTUNES[$i]}" "$T/resume/a_$i.txt"; done
printf 'bad \xff\n' > "$T/resume/z_bad.txt"
expect_exit 2 'z_bad.txt": line 1 (byte offset 4): invalid UTF-8' "$B" build --delimiter % --out "$T/rg" "$T/resume"
[ "$(ls "$T/rg/.build-parts" | grep -c '^part_.*\.h5$' || true)" = 0 ] || fail "a failed group kept its parts"
tiny=(--set data.part_mb=0.0001)  # every input its own group
expect_exit 2 'z_bad.txt": line 1 (byte offset 4): invalid UTF-8' "$B" build "${tiny[@]}" --delimiter % --out "$T/rb" "$T/resume"
[ "$(ls "$T/rb/.build-parts" | grep -c '^part_.*\.h5$')" = 5 ] || fail "parts of the finished inputs were not kept"
printf 'fixed\n' > "$T/resume/z_bad.txt"
"$B" build "${tiny[@]}" --delimiter % --out "$T/rb" "$T/resume" 2>"$T/log.txt"
grep -q "5 inputs unchanged since an interrupted run" "$T/log.txt" || { cat "$T/log.txt"; fail "build did not reuse parts"; }
[ ! -e "$T/rb/.build-parts" ] || fail "parts left after a successful build"
"$B" verify "$T/rb" >/dev/null
echo "ok: interrupted build resumed from its parts"

# ---- Inputs are never written: refuse output directories that are or overlap inputs.
cp "${FORTUNES[0]}" "$T/in.txt"
expect_exit 2 'refusing to write into' "$B" build --delimiter % --out "$T" "$T/in.txt"
mkdir -p "$T/corpus"; cp "${FORTUNES[1]}" "$T/corpus/"
expect_exit 2 'refusing to write into' "$B" build --delimiter % --out "$T/corpus/data" "$T/corpus"
"$B" build --delimiter % --shards 2 --out "$T/ds" "$T/in.txt"
expect_exit 2 'refusing to write into' "$B" reshard "$T/ds" --shards 3 --out "$T/ds"
"$B" verify "$T/ds" >/dev/null
# An --out under a regular file is a usage error before any input is read (it was exit 1 once all were tokenized).
: > "$T/afile"
expect_exit 2 '--out: cannot write ".*afile/ds": Not a directory' "$B" build --delimiter % --out "$T/afile/ds" "$T/in.txt"
expect_exit 2 '--out: cannot write ".*afile": Not a directory' "$B" reshard "$T/ds" --shards 3 --out "$T/afile"
expect_exit 2 '--out: cannot write ".*afile/m": Not a directory' "$B" convert --to megatron --out "$T/afile/m" "$T/ds"

# ---- In a group of small inputs, an earlier input's bad record comes before a later input's open or read error.
if command -v xz >/dev/null; then
  printf 'good\n%%\nbad \xff\n' > "$T/g_a.txt"; printf 'x\n' | xz > "$T/g_b.xz"
  expect_exit 2 'g_a.txt": line 3 (byte offset 11): invalid UTF-8' "$B" build --delimiter % --out "$T/x" "$T/g_a.txt" "$T/g_b.xz"
fi
# Plain text that starts like a bzip2 header is text.
printf 'BZh9 is how every bzip2 stream begins\n' > "$T/bzh.txt"
"$B" build --out "$T/bzh" "$T/bzh.txt" 2>/dev/null || fail "a text starting with BZh9 was refused"

# ---- Malformed inputs: file and line (or offset) in the error; --skip-bad counts instead.
printf 'good one\n%%\nbad \xff byte\n%%\nlast\n' > "$T/bad_utf8.txt"
expect_exit 2 'bad_utf8.txt": line 3 (byte offset 15): invalid UTF-8' "$B" build --delimiter % --out "$T/x" "$T/bad_utf8.txt"
"$B" build --delimiter % --skip-bad --shards 1 --out "$T/skipped" "$T/bad_utf8.txt" 2>"$T/log.txt"
grep -q "skipped 1 bad records" "$T/log.txt" || fail "--skip-bad did not count the record"
[ "$($PY -c "import json;d=json.load(open('$T/skipped/index.json'));print(d['total_documents'], d['skipped_records'])")" = "2 1" ] || fail "skip-bad counts"
printf '{"text": "fine"}\n{"text": "broken\n{"other": 1}\n' > "$T/bad.jsonl"
expect_exit 2 'bad.jsonl": line 2 (byte offset 17): broken JSON line' "$B" build --out "$T/x" "$T/bad.jsonl"
printf '{"text": "fine"}\n{"other": 1}\n' > "$T/nofield.jsonl"
expect_exit 2 'nofield.jsonl": line 2 .*no string field "text"' "$B" build --out "$T/x" "$T/nofield.jsonl"
"$B" build --skip-bad --out "$T/x2" "$T/bad.jsonl" 2>"$T/log.txt"
grep -q "skipped 2 bad records" "$T/log.txt" || fail "--skip-bad JSONL count"
# More shards than documents: the empty shards are said (a loader giving each rank its shards gives some nothing).
printf '{"text": "one document"}\n{"text": "another one"}\n{"text": "and a third"}\n' > "$T/three.jsonl"
"$B" build --shards 8 --out "$T/eight" "$T/three.jsonl" 2>"$T/log.txt" || fail "build of 3 documents into 8 shards"
grep -q "5 of 8 shards are empty" "$T/log.txt" || fail "empty shards not said: $(cat "$T/log.txt")"
printf '\x1f\x8b\x08\x00garbage' > "$T/corrupt.gz"
expect_exit 2 'corrupt.gz' "$B" build --out "$T/x" "$T/corrupt.gz"
expect_exit 2 'No such file' "$B" build --out "$T/x" "$T/missing.txt"

# Truncated / corrupt Megatron and llm.c files.
"$B" convert --to megatron --out "$T/meg/m" "$T/ds"
# A killed export's temp files (a full-size copy each) go with the next export; a live writer's would stay.
printf 'x' > "$T/meg/.m.bin.tmp.999999999.abcdef"; printf 'x' > "$T/meg/.m.idx.tmp.999999999.abcdef"
"$B" convert --to megatron --out "$T/meg/m" "$T/ds" 2>/dev/null || fail "re-export over a killed export's temps"
! compgen -G "$T/meg/.m.*.tmp.*" > /dev/null || fail "a killed export's temp files stayed: $(ls -a "$T/meg")"
# convert --json: a summary with provenance, as build and reshard write (it was silently ignored).
"$B" convert --to megatron --out "$T/meg/j" "$T/ds" --json - 2>/dev/null | $PY -c "
import json, sys
j = json.load(sys.stdin)
assert j['format'] == 'megatron' and j['documents'] > 0 and j['bin'].endswith('j.bin'), j
assert j['provenance']['tool'] == 'cairn-reshard', j" || fail "convert --to megatron --json -"
"$B" convert --to llmc --out "$T/llmc" "$T/ds"
head -c 100 "$T/meg/m.idx" > "$T/meg/t.idx"; cp "$T/meg/m.bin" "$T/meg/t.bin"
expect_exit 2 't.idx.*truncated' "$B" convert --from megatron "$T/meg/t" --out "$T/x"
cp "$T/meg/m.idx" "$T/meg/w.idx"; cp "$T/meg/m.bin" "$T/meg/w.bin"; printf 'XXIDIDX' | dd of="$T/meg/w.idx" conv=notrunc 2>/dev/null
expect_exit 2 'w.idx.*at byte offset 0: wrong magic' "$B" convert --from megatron "$T/meg/w" --out "$T/x"
# A sequence count of 2^61 in the header: refused as more than the file holds, its count as written (no wrapped sum).
cp "$T/meg/m.idx" "$T/meg/h.idx"; cp "$T/meg/m.bin" "$T/meg/h.bin"
printf '\x00\x00\x00\x00\x00\x00\x00\x20' | dd of="$T/meg/h.idx" bs=1 seek=18 conv=notrunc 2>/dev/null
expect_exit 2 'h.idx.*at byte offset 18: header declares 2305843009213693952 sequences' "$B" convert --from megatron "$T/meg/h" --out "$T/x"
cp "$T/meg/m.idx" "$T/meg/s.idx"; head -c 50 "$T/meg/m.bin" > "$T/meg/s.bin"
expect_exit 2 's.bin.*index describes' "$B" convert --from megatron "$T/meg/s" --out "$T/x"
# A multimodal index (a mode byte per sequence after the document index) is not text: refused, not read.
cp "$T/meg/m.idx" "$T/meg/mm.idx"; cp "$T/meg/m.bin" "$T/meg/mm.bin"; printf '\x00\x01' >> "$T/meg/mm.idx"
expect_exit 2 'mm.idx.*2 bytes after the document index' "$B" convert --from megatron "$T/meg/mm" --out "$T/x"
# int64 ids are checked whole: 2^32 + 5 is not 5. And an index of no documents names its file.
$PY - "$T/meg" <<'PY'
import struct, sys
d = sys.argv[1]
def index(name, code, lengths, docs):
    with open(f"{d}/{name}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(lengths), len(docs)))
        f.write(struct.pack(f"<{len(lengths)}i", *lengths))
        item = {5: 8, 8: 2}[code]
        ptrs, p = [], 0
        for n in lengths:
            ptrs.append(p); p += n * item
        f.write(struct.pack(f"<{len(lengths)}q", *ptrs) + struct.pack(f"<{len(docs)}q", *docs))
index("big", 5, [3], [0, 1])
open(f"{d}/big.bin", "wb").write(struct.pack("<3q", 72, 2**32 + 5, 73))
index("none", 8, [], [0])
open(f"{d}/none.bin", "wb").close()
PY
expect_exit 2 'big.bin.*token id 4294967301 is not below' "$B" convert --from megatron "$T/meg/big" --out "$T/x"
expect_exit 2 'no documents: ".*none"' "$B" convert --from megatron "$T/meg/none" --out "$T/x"
# A refused import leaves no --out it created (the lock file and part directory went with it).
expect_exit 2 'big.bin.*token id 4294967301' "$B" convert --from megatron "$T/meg/m" "$T/meg/big" --out "$T/imp_new"
[ ! -e "$T/imp_new" ] || fail "a refused import left $T/imp_new: $(ls -A "$T/imp_new")"
f=$(ls "$T/llmc"/*.bin | head -1)
head -c 1500 "$f" > "$T/trunc.bin"
expect_exit 2 'trunc.bin.*header says' "$B" convert --from llmc "$T/trunc.bin" --out "$T/x"
printf '\x01\x02\x03\x04' | cat - <(tail -c +5 "$f") > "$T/magic.bin"
expect_exit 2 'magic.bin.*at byte offset 0: wrong magic' "$B" convert --from llmc "$T/magic.bin" --out "$T/x"
# A directory that is not a dataset (no index.json) fails verification; a path that is not there
# or not a directory names nothing to verify (usage, exit 2).
expect_exit 3 'cannot open dataset ".*meg/index.json": No such file' "$B" verify "$T/meg"
expect_exit 2 'cannot verify ".*nowhere": No such file or directory' "$B" verify "$T/nowhere"
expect_exit 2 'cannot verify ".*m.idx": not a directory' "$B" verify "$T/meg/m.idx"
expect_exit 2 'exactly one of --from' "$B" convert --out "$T/x" "$T/ds"

# ---- Corruption is caught, not copied: reshard/convert of a dataset that fails verify exit 3 naming
# the shard and write nothing; an index without shards or with a wrong checksum is refused too.
cp -r "$T/ds" "$T/rot"
$PY - "$T/rot/shard_00001.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as h:
    off = h["tokens"].id.get_offset()
with open(sys.argv[1], "r+b") as f:
    f.seek(off + 6); b = f.read(1); f.seek(off + 6); f.write(bytes([b[0] ^ 1]))
PY
expect_exit 3 'corrupt dataset shard ".*shard_00001.h5": tokens hash to' "$B" reshard "$T/rot" --shards 3 --out "$T/laundered"
[ ! -e "$T/laundered/index.json" ] && [ -z "$(ls "$T/laundered" 2>/dev/null | grep shard_ || true)" ] || fail "reshard wrote output from a corrupt input"
# Shuffled, the inputs are loaded into memory and checked in that pass: the same refusal.
expect_exit 3 'corrupt dataset shard ".*shard_00001.h5": tokens hash to' "$B" reshard "$T/rot" --shards 3 --seed 7 --out "$T/laundered-shuffled"
[ -z "$(ls "$T/laundered-shuffled" 2>/dev/null | grep -E 'shard_|index.json' || true)" ] || fail "shuffled reshard wrote output from a corrupt input"
expect_exit 3 'shard_00001.h5' "$B" convert --to llmc --out "$T/laundered-llmc" "$T/rot"
# stats checks the checksums too (exit 3 naming the shard) and leaves stats.json as it was.
cp "$T/rot/stats.json" "$T/rot-stats.before"
expect_exit 3 'corrupt dataset shard ".*shard_00001.h5": tokens hash to' "$B" stats "$T/rot"
cmp -s "$T/rot/stats.json" "$T/rot-stats.before" || fail "stats rewrote stats.json of a corrupt dataset"
"$B" stats "$T/ds" > /dev/null || fail "stats failed on an intact dataset"
# stats of a directory that holds no dataset fails (exit 2) and leaves nothing in it (no lock file).
mkdir -p "$T/notds"
expect_exit 2 'cannot open dataset ".*notds/index.json"' "$B" stats "$T/notds"
[ -z "$(ls -A "$T/notds")" ] || fail "stats wrote into a directory that holds no dataset: $(ls -A "$T/notds")"
[ -z "$(ls "$T/laundered-llmc" 2>/dev/null || true)" ] || fail "convert wrote output from a corrupt input"
# A reshard that fails before it replaces a shard leaves the dataset already in its --out as it was, index.json
# included: here a rerun of a finished reshard (every shard kept as complete) whose input has rotted since.
"$B" reshard "$T/ds" --shards 2 --out "$T/kept" 2>/dev/null
(cd "$T/kept" && md5sum index.json stats.json shard_*) > "$T/kept.md5"
expect_exit 3 'corrupt dataset shard ".*shard_00001.h5"' "$B" reshard "$T/rot" --shards 2 --out "$T/kept"
(cd "$T/kept" && md5sum --quiet -c "$T/kept.md5") || fail "a failed reshard changed the dataset already in its --out"
"$B" verify "$T/kept" >/dev/null
cp -r "$T/ds" "$T/wrongsum"
$PY -c "import json,sys; p=sys.argv[1]; ix=json.load(open(p)); ix['shards'][0]['xxh64']='%016x' % (int(ix['shards'][0]['xxh64'],16)^1); json.dump(ix,open(p,'w'))" "$T/wrongsum/index.json"
expect_exit 3 'shard_00000.h5": tokens hash to .* but index.json says' "$B" reshard "$T/wrongsum" --shards 2 --out "$T/x3"
$PY -c "import json,sys; p=sys.argv[1]; ix=json.load(open(p)); ix['shards']=[]; json.dump(ix,open(p,'w'))" "$T/wrongsum/index.json"
expect_exit 2 'key "shards": expected a non-empty array' "$B" reshard "$T/wrongsum" --shards 2 --out "$T/x3"
$PY -c "import json,sys; p=sys.argv[1]; ix=json.load(open(p)); ix['vocab_size']=None; json.dump(ix,open(p,'w'))" "$T/wrongsum/index.json"
expect_exit 3 'key "vocab_size": expected an integer in \[0, 4294967295\], got null' "$B" verify "$T/wrongsum"
# The tokenizer entry may be a description (what cairn writes), its id alone or absent: reshard keeps it as it is in
# its output (it took the entry apart as a description, and died on a raw JSON exception for the other two).
for entry in '"bytes"' none; do
  rm -rf "$T/tokin" "$T/tokout"
  cp -r "$T/ds" "$T/tokin"
  $PY -c "import json,sys; p=sys.argv[1]; ix=json.load(open(p)); e=sys.argv[2]
if e == 'none': del ix['tokenizer']
else: ix['tokenizer'] = json.loads(e)
json.dump(ix, open(p, 'w'))" "$T/tokin/index.json" "$entry"
  "$B" reshard "$T/tokin" --shards 2 --out "$T/tokout" 2>"$T/err.txt" || { cat "$T/err.txt"; fail "reshard of a dataset whose tokenizer entry is $entry"; }
  $PY -c "import json,sys; ix=json.load(open(sys.argv[1])); e=sys.argv[2]
assert ix.get('tokenizer', 'none') == (e if e == 'none' else json.loads(e)), ix.get('tokenizer')" \
    "$T/tokout/index.json" "$entry" || fail "tokenizer entry $entry not kept"
done
# ---- A damaged index.json fails verification (exit 3) naming the file and what is wrong, whatever
# the damage; the other datasets given are still checked and reported.
cp -r "$T/ds" "$T/ix"
good_index="$(cat "$T/ds/index.json")"
damage_index() { printf '%s' "$good_index" > "$T/ix/index.json"; $PY -c "$1" "$T/ix/index.json"; }
damage_index "import sys; p=sys.argv[1]; t=open(p).read(); open(p,'w').write(t[:len(t)//2])"
expect_exit 3 'malformed dataset index ".*ix/index.json": invalid JSON' "$B" verify "$T/ix"
damage_index "import sys; open(sys.argv[1],'w').write('shards: 2\n')"
expect_exit 3 'malformed dataset index ".*ix/index.json": invalid JSON' "$B" verify "$T/ix"
damage_index "import sys; open(sys.argv[1],'w').write('')"
expect_exit 3 'malformed dataset index ".*ix/index.json"' "$B" verify "$T/ix"
damage_index "import sys; open(sys.argv[1],'w').write('[1, 2]')"
expect_exit 3 'ix/index.json' "$B" verify "$T/ix"
damage_index "import json,sys; p=sys.argv[1]; ix=json.load(open(p)); ix['shards']='shard_00000.h5'; json.dump(ix,open(p,'w'))"
expect_exit 3 'ix/index.json.*key "shards"' "$B" verify "$T/ix"
damage_index "import json,sys; p=sys.argv[1]; ix=json.load(open(p)); ix['shards'][1]['xxh64']='xyz'; json.dump(ix,open(p,'w'))"
expect_exit 3 'ix/index.json.*shards\[1\].*xxh64' "$B" verify "$T/ix"
damage_index "import json,sys; p=sys.argv[1]; ix=json.load(open(p)); ix['shards'][0]['file']='../../etc/passwd'; json.dump(ix,open(p,'w'))"
expect_exit 3 'ix/index.json.*shards\[0\].*file' "$B" verify "$T/ix"
damage_index "import json,sys; p=sys.argv[1]; ix=json.load(open(p)); ix['shards'][1]['file']='shard_00009.h5'; json.dump(ix,open(p,'w'))"
expect_exit 3 'ix/shard_00009.h5: .*No such file' "$B" verify "$T/ix"
grep -q 'ix/shard_00001.h5: shard file not listed in index.json' "$T/out.txt" || fail "unlisted shard not reported"
rm "$T/ix/index.json"
expect_exit 3 'cannot open dataset ".*ix/index.json": No such file' "$B" verify "$T/ds" "$T/ix"
grep -q "^$T/ds: OK" "$T/out.txt" && grep -q "^$T/ix: FAILED" "$T/out.txt" || fail "per-dataset verdicts: $(cat "$T/out.txt")"
# A shard cut short (a copy that ran out of space) is one more problem naming it.
printf '%s' "$good_index" > "$T/ix/index.json"
head -c 3000 "$T/ds/shard_00001.h5" > "$T/ix/shard_00001.h5"
expect_exit 3 'ix/shard_00001.h5: ' "$B" verify "$T/ix"
# A damaged HDF5 global heap (where the string attributes live) or array length fails verify naming the shard:
# HDF5 1.10 itself trusts both (a segfault in H5Aread, std::bad_alloc before).
for damage in "heap 1" "dims 3"; do
  rm -rf "$T/hdr"; cp -r "$T/ds" "$T/hdr"
  $PY - "$T/hdr/shard_00000.h5" $damage <<'PY'
import struct, sys, h5py
path, what, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
with h5py.File(path, "r") as h:
    n = h["doc_offsets"].shape[0]
    first = min(h[d].id.get_offset() for d in ("tokens", "doc_offsets", "doc_bytes"))
    end = max(h[d].id.get_offset() + h[d].id.get_storage_size() for d in ("tokens", "doc_offsets", "doc_bytes"))
data = bytearray(open(path, "rb").read())
if what == "heap":  # byte k of the size of the collection's second object (the tokenizer id)
    c = data.index(b"GCOL", end)
    second = c + 32 + (struct.unpack_from("<Q", data, c + 24)[0] + 7) // 8 * 8
    at = second + 8 + k
else:  # byte k of /doc_offsets' length in its dataspace message
    at = data.index(struct.pack("<Q", n), 0, first) + k
data[at] ^= 0xFF
open(path, "wb").write(data)
PY
  expect_exit 3 'hdr/shard_00000.h5": .*damaged' timeout 60 "$B" verify "$T/hdr"
done
# A flipped byte inside a string attribute's text (the tokenizer id, now not UTF-8) is named escaped: the terminal
# gets no raw bytes and --json - stays valid JSON (it used to carry the raw byte).
rm -rf "$T/hdr"; cp -r "$T/ds" "$T/hdr"
$PY - "$T/hdr/shard_00000.h5" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
c = data.index(b"GCOL")
data[data.index(b"bytes", c)] ^= 0xFF
open(path, "wb").write(data)
PY
expect_exit 3 'tokenizer attribute "\\x9dytes" differs' "$B" verify "$T/hdr"
rc=0; "$B" verify "$T/hdr" --json - >"$T/v.json" 2>/dev/null || rc=$?
[ $rc = 3 ] && $PY -c "
import json, sys
j = json.load(open(sys.argv[1], encoding='utf-8'))
assert any('\\\\x9dytes' in p for p in j['problems']), j['problems']
" "$T/v.json" || fail "verify --json - of a damaged tokenizer attribute: exit $rc, $(head -c 300 "$T/v.json")"
echo "ok: damaged index.json and shards fail verify (exit 3) naming the file"

# ---- --json - puts only JSON on stdout (the human report goes to stderr), pass or fail.
"$B" verify "$T/ds" --json - 2>/dev/null | $PY -c "
import json, sys
j = json.load(sys.stdin)
assert j['ok'] is True and j['problems'] == [] and j['datasets'][0]['ok'] is True, j
" || fail "verify --json - is not pure JSON"
rc=0; "$B" verify "$T/ds" "$T/ix" --json - >"$T/v.json" 2>"$T/v.err" || rc=$?
[ $rc = 3 ] || fail "verify --json - of a damaged dataset exit $rc, wanted 3"
$PY -c "
import json, sys
j = json.load(open(sys.argv[1]))
assert j['ok'] is False and [d['ok'] for d in j['datasets']] == [True, False], j
assert any('shard_00001.h5' in p for p in j['problems']), j['problems']
" "$T/v.json" || fail "verify --json - of a damaged dataset is not pure JSON: $(head -c 300 "$T/v.json")"
grep -q "ix: FAILED" "$T/v.err" || fail "verify --json - dropped the human report from stderr"
"$B" stats "$T/ds" --json - 2>"$T/s.err" | $PY -c "
import json, sys
j = json.load(sys.stdin)
assert j['tokens'] > 0 and j['documents'] > 0, j
" || fail "stats --json - is not pure JSON"
grep -q "tokens" "$T/s.err" || fail "stats --json - dropped the human summary from stderr"
cp -r "$T/ds" "$T/ds2"
"$B" stats "$T/ds" "$T/ds2" --json - 2>/dev/null | $PY -c "
import json, sys
j = json.load(sys.stdin)
assert isinstance(j, list) and len(j) == 2 and j[0]['tokens'] == j[1]['tokens'] > 0, j
" || fail "stats --json - of two datasets is not one JSON array"
echo "ok: verify and stats --json - write pure JSON to stdout"

# ---- An unknown subcommand is named, with the closest valid one and the list of them.
expect_exit 2 'unknown subcommand "frobnicate"; the subcommands are build, reshard, convert, mix, verify, stats' \
  "$B" frobnicate "$T/ds"
expect_exit 2 'unknown subcommand "verfy" (did you mean "verify"?)' "$B" verfy "$T/ds"
expect_exit 2 'unknown subcommand "frobnicate"' "$B" --log-level warn frobnicate
expect_exit 2 'a subcommand is required: one of build, reshard' "$B"
expect_exit 2 'a subcommand is required: one of build, reshard' "$B" --out "$T/nosub"
# --print-config needs no subcommand: every one reads the same config (configs/demo.toml's header says so).
printf '[data]\nshards = 3\n' > "$T/pc.toml"
"$B" --config "$T/pc.toml" --print-config > "$T/pc.txt" 2>&1 || fail "--print-config without a subcommand: $(head -2 "$T/pc.txt")"
grep -q '^shards = 3 .*pc.toml' "$T/pc.txt" || fail "--print-config without a subcommand: [data] shards not shown"
expect_exit 2 'shards' "$B" reshard "$T/ds" --shards
echo "ok: unknown or missing subcommands exit 2 naming the valid ones"

# ---- One writer per dataset directory. While another process holds <out>/.reshard.lock (flock(1) stands in for a
# running cairn-reshard: no timing involved), build, reshard, mix and stats refuse at once with exit 1 naming the
# holder, and write nothing; on 2 ranks every rank stops with rank 0's message. With the holder gone the same
# command runs.
mkdir -p "$T/locked"
L="$T/locked/.reshard.lock"
echo "pid 4242 on node7 (started 2026-12-05T00:00:00Z)" > "$L"
taken='another cairn-reshard is writing "[^"]*locked": pid 4242 on node7 (started 2026-12-05T00:00:00Z) holds'
expect_exit 1 "$taken" flock -n "$L" "$B" reshard "$T/ds" --shards 3 --out "$T/locked"
expect_exit 1 "$taken" flock -n "$L" "$B" build --delimiter % --shards 2 --out "$T/locked" "$T/in.txt"
expect_exit 1 "$taken" flock -n "$L" "$B" mix "$T/ds" "$T/ds" --weights 1,1 --out "$T/locked"
expect_exit 1 "$taken" flock -n "$L" mpirun -np 2 --oversubscribe "$B" reshard "$T/ds" --shards 3 --out "$T/locked"
[ "$(ls -A "$T/locked")" = .reshard.lock ] || fail "a refused run wrote into the locked directory: $(ls -A "$T/locked")"
"$B" reshard "$T/ds" --shards 3 --out "$T/locked" 2>/dev/null
"$B" verify "$T/locked" >/dev/null
[ ! -s "$L" ] || fail "the lock file still names a holder after the run: $(cat "$L")"
# stats rewrites stats.json: refused over a dataset being written, the dataset left as it was.
(cd "$T/locked" && md5sum index.json stats.json shard_*) > "$T/locked.md5"
echo "pid 4242 on node7 (started 2026-12-05T00:00:00Z)" > "$L"
expect_exit 1 "$taken" flock -n "$L" "$B" stats "$T/locked"
(cd "$T/locked" && md5sum -c --quiet "$T/locked.md5") || fail "a refused stats changed the dataset"
echo "ok: a dataset directory being written is refused to a second cairn-reshard (exit 1, holder named)"

# ---- verify overtaken by a writer: a cairn-reshard that swaps another dataset in (renames over the shards, then
# index.json) while verify reads the old one makes it look damaged. That is no finding about the dataset: verify
# ends with exit 1 (run it again), reporting no problem. cairn-reshard-faults' --verify-after-open does the swap
# between verify's read of index.json and of the shards, so no timing is involved.
rm -rf "$T/vs" "$T/vs_new"
"$B" reshard "$T/ds" --shards 3 --out "$T/vs" 2>/dev/null
"$B" reshard "$T/ds" --shards 2 --seed 5 --out "$T/vs_new" 2>/dev/null
"$FAULTS" --verify-after-open true verify "$T/vs" >/dev/null || fail "verify with a no-op hook failed"
expect_exit 1 'cannot verify "[^"]*vs": its index.json was replaced or removed while verify read it' \
  "$FAULTS" --verify-after-open "mv $T/vs_new/shard_* $T/vs/ && mv $T/vs_new/index.json $T/vs/index.json" verify "$T/vs"
! grep -q 'tokens do not match\|FAILED' "$T/out.txt" "$T/err.txt" || fail "verify reported the swap as damage"
echo "ok: a verify overtaken by a writer's swap exits 1 without reporting damage"

# A killed run's index.json/stats.json temp files are removed by the next run, in the old names and the new, also
# those a run on another node left (the next one holds the dataset's lock, so no other run is writing there).
mkdir -p "$T/stale"
touch "$T/stale/.index.json.tmp.999999999.abcdef" "$T/stale/.stats.json.tmp.999999999.123456" "$T/stale/.shard_00000.h5.tmp.999999999.1"
touch "$T/stale/.shard_00001.h5.tmp.other-node7.1.a1b2c3" "$T/stale/.index.json.tmp.other-node7.$$.1"
"$B" reshard "$T/ds" --shards 2 --out "$T/stale" 2>/dev/null
[ "$(ls -a "$T/stale" | grep -c '\.tmp\.' || true)" = 0 ] || fail "stale temp files survived the next run: $(ls -a "$T/stale")"
"$B" verify "$T/stale" >/dev/null
echo "ok: corrupt inputs refused, nothing written; stale temp files removed"

# Permissions as another user sees them (root reads anything): an unreadable input directory is named (it was "no
# input files", or a filesystem error naming no path), and a read-only dataset still gets its statistics.
if [ "$(id -u)" = 0 ] && command -v runuser > /dev/null && runuser -u nobody -- "$B" --version > /dev/null 2>&1; then
  P=$(mktemp -d /tmp/cairn-perm.XXXXXX)
  mkdir -p "$P/in/locked"
  printf 'a document\n' > "$P/in/a.txt"; printf 'another\n' > "$P/in/locked/b.txt"
  chmod 000 "$P/in/locked"; chmod 777 "$P"
  expect_exit 2 'cannot read directory ".*locked": Permission denied' runuser -u nobody -- "$B" build --out "$P/o" "$P/in"
  expect_exit 2 'cannot read directory ".*locked": Permission denied' runuser -u nobody -- "$B" build --out "$P/o2" "$P/in/locked"
  cp -r "$T/ds" "$P/ro"; chmod -R a+rX,a-w "$P/ro"
  # An --out in a directory this user cannot write: exit 2 before the inputs are read (was exit 1 after the work).
  mkdir -p "$P/in2"; printf 'a document\n' > "$P/in2/a.txt"; chmod -R a+rX "$P/in2"
  for sub in "build $P/in2" "reshard $P/ro --shards 1" "mix $P/ro --weights 1" "convert --to llmc $P/ro"; do
    # shellcheck disable=SC2086
    expect_exit 2 "--out: cannot write \".*ro/out\": cannot write in \".*ro\": Permission denied" \
      runuser -u nobody -- "$B" $sub --out "$P/ro/out"
  done
  [ ! -e "$P/ro/out" ] || fail "a refused --out was created"
  runuser -u nobody -- "$B" stats "$P/ro" > "$P/stats.txt" 2> "$P/stats.err" || { chmod -R u+w "$P"; fail "stats of a read-only dataset: $(cat "$P/stats.err")"; }
  grep -q "tokens" "$P/stats.txt" && grep -q "not writable here" "$P/stats.err" || { chmod -R u+w "$P"; fail "read-only stats: $(cat "$P/stats.err")"; }
  chmod -R u+rwx "$P"; rm -rf "$P"
  echo "ok: unreadable directories named; a read-only dataset's stats printed"
else
  echo "skip: permission checks (need root, runuser and a binary user nobody can run)"
fi
echo PASS
