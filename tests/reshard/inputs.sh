#!/usr/bin/env bash
# Streamed build inputs: JSONL/text plain, .gz and .zst give the same dataset; an input larger than a
# part streams through several parts with every document intact; threads and ranks do not change the
# output; directories, globs and @manifests; the progress line; truncated/corrupt compressed data,
# invalid UTF-8 and missing fields name file and line/offset (exit 2) or are counted with --skip-bad;
# a failed build leaves the dataset already in --out intact.
source "$(dirname "$0")/common.sh"
command -v zstd >/dev/null || fail "zstd (the command) is missing: bash scripts/install-deps.sh"

# ---- A JSONL corpus from fortunes (with some non-ASCII text), ~45 MB so it spans two 32 MB parts.
$PY - "$T" "${FORTUNES[@]}" <<'PY'
import json, os, sys
out, files = sys.argv[1], sys.argv[2:]
docs = []
for f in files:
    for d in open(f, encoding="utf-8", errors="replace").read().split("\n%\n"):
        if d.strip():
            docs.append(d)
extra = ["naïve café — ünïcödé ✓", "日本語のテキスト", "emoji 🎉 and tabs\tand \"quotes\""]
with open(os.path.join(out, "small.jsonl"), "w") as f:
    for i, d in enumerate(docs[:3000]):
        f.write(json.dumps({"id": i, "text": d + (" " + extra[i % 3] if i % 7 == 0 else "")}) + "\n")
with open(os.path.join(out, "big.jsonl"), "w") as f:
    n = 0
    while f.tell() < 45_000_000:
        for d in docs:
            f.write(json.dumps({"text": d, "n": n}, ensure_ascii=(n % 2 == 0)) + "\n")
            n += 1
PY
gzip -k "$T/small.jsonl"
zstd -q -k "$T/small.jsonl"
zstd -q -k -3 "$T/big.jsonl"

# ---- Plain, gzip and zstd inputs give the same documents, tokens and checksums.
"$B" build --shards 3 --out "$T/plain" "$T/small.jsonl"
"$B" build --shards 3 --out "$T/gz" "$T/small.jsonl.gz"
"$B" build --shards 3 --out "$T/zst" "$T/small.jsonl.zst"
same_tokens "$T/plain" "$T/gz"
same_tokens "$T/plain" "$T/zst"
xx() { $PY -c "import json,sys;print([s['xxh64'] for s in json.load(open(sys.argv[1]))['shards']])" "$1/index.json"; }
[ "$(xx "$T/plain")" = "$(xx "$T/zst")" ] && [ "$(xx "$T/plain")" = "$(xx "$T/gz")" ] || fail "checksums differ by compression"
echo "ok: plain, .gz and .zst inputs give identical datasets"
# A zstd file that starts with a skippable frame (pzstd writes one first) is zstd, given directly or in a directory.
$PY - "$T/small.jsonl.zst" "$T/skip.jsonl.zst" <<'PY'
import struct, sys
body = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(struct.pack("<II", 0x184D2A50, 4) + b"cair" + body)
PY
"$B" build --shards 3 --out "$T/skipframe" "$T/skip.jsonl.zst"
same_tokens "$T/plain" "$T/skipframe"
mkdir -p "$T/skipdir" && cp "$T/skip.jsonl.zst" "$T/skipdir/"
"$B" build --shards 3 --out "$T/skipframe_dir" "$T/skipdir"
same_tokens "$T/plain" "$T/skipframe_dir"
# Compressions cairn does not read are named, not reported as bad UTF-8 (nor skipped in a directory as binary).
if command -v xz >/dev/null; then
  xz -k "$T/small.jsonl"
  expect_exit 2 'unsupported input ".*small.jsonl.xz": compressed with xz' "$B" build --out "$T/x" "$T/small.jsonl.xz"
  mkdir -p "$T/xzdir" && mv "$T/small.jsonl.xz" "$T/xzdir/"
  expect_exit 2 'compressed with xz' "$B" build --out "$T/x" "$T/xzdir"
fi
echo "ok: skippable zstd frames read; xz named"

# ---- A big input streams through several parts; every document arrives intact and in order (the
# bytes tokenizer's ids are the UTF-8 bytes, so the dataset can be checked against the text itself).
"$B" build --shards 4 --threads 2 --out "$T/big" "$T/big.jsonl.zst" 2>"$T/big.log"
cat "$T/big.log"
grep -q "reading inputs [0-9]*/[0-9]* MB .* MB/s .*documents" "$T/big.log" || fail "no progress line with MB and documents"
$PY - "$T/big.jsonl" "$T/big" <<'PY'
import json, os, sys
import h5py, numpy as np
src, ds = sys.argv[1:3]
ix = json.load(open(os.path.join(ds, "index.json")))
want = (json.loads(l)["text"].encode() for l in open(src, encoding="utf-8"))
n = 0
for s in ix["shards"]:
    with h5py.File(os.path.join(ds, s["file"])) as h:
        t, o, b = h["tokens"][:], h["doc_offsets"][:], h["doc_bytes"][:]
    for i in range(len(o) - 1):
        w = next(want)
        got = t[o[i]:o[i + 1]]
        assert got[-1] == 256 and bytes(got[:-1].astype(np.uint8)) == w and b[i] == len(w), f"document {n} differs"
        n += 1
assert next(want, None) is None, "documents missing"
print(f"ok: {n} documents of a {os.path.getsize(src) / 1e6:.0f} MB input intact across parts")
PY

# ---- Threads and ranks do not change the output (tokens, offsets, checksums, plan hashes, stats).
"$B" build --shards 4 --threads 1 --out "$T/big1" "$T/big.jsonl.zst" 2>/dev/null
mpirun -np 2 --oversubscribe "$B" build --shards 4 --threads 1 --out "$T/bigmpi" "$T/big.jsonl.zst" "$T/small.jsonl" 2>/dev/null
"$B" build --shards 4 --threads 2 --out "$T/bigcat" "$T/big.jsonl.zst" "$T/small.jsonl" 2>/dev/null
identical() {
  $PY - "$1" "$2" <<'PY' || fail "$1 and $2 differ"
import json, os, sys, h5py
a, b = sys.argv[1:3]
ia, ib = (json.load(open(os.path.join(d, "index.json"))) for d in (a, b))
for k in ("shards", "total_tokens", "total_documents", "total_bytes", "tokenizer"):
    assert ia[k] == ib[k], k
for s in ia["shards"]:
    with h5py.File(os.path.join(a, s["file"])) as x, h5py.File(os.path.join(b, s["file"])) as y:
        for d in ("tokens", "doc_offsets", "doc_bytes"):
            assert (x[d][:] == y[d][:]).all(), d
        assert x.attrs["plan_hash"] == y.attrs["plan_hash"], "plan_hash"
sa, sb = (json.load(open(os.path.join(d, "stats.json"))) for d in (a, b))
sa.pop("provenance"); sb.pop("provenance")
assert sa == sb, "stats.json"
PY
  echo "ok: $1 == $2 (byte for byte in tokens, offsets, checksums, plan hashes, stats)"
}
identical "$T/big" "$T/big1"
identical "$T/bigcat" "$T/bigmpi"
rm -rf "$T/big1" "$T/bigmpi" "$T/bigcat" "$T/big.jsonl"

# ---- Directories, globs (quoted: expanded by cairn, as from a config) and @manifests.
mkdir -p "$T/tree/a" "$T/tree/b"
cp "$T/small.jsonl.gz" "$T/tree/a/1.jsonl.gz"
cp "$T/small.jsonl.zst" "$T/tree/b/2.jsonl.zst"
"$B" build --shards 2 --out "$T/list" "$T/tree/a/1.jsonl.gz" "$T/tree/b/2.jsonl.zst"
"$B" build --shards 2 --out "$T/dir" "$T/tree"
"$B" build --shards 2 --out "$T/glob" "$T/tree/*/*.jsonl.*"
printf '# inputs of the test\n\na/1.jsonl.gz\n  b/*.zst  \n' > "$T/tree/list.txt"
"$B" build --shards 2 --out "$T/manifest" "@$T/tree/list.txt"
for d in dir glob manifest; do identical "$T/list" "$T/$d"; done
expect_exit 2 'no input matches ".*nothing\*.jsonl"' "$B" build --out "$T/x" "$T/nothing*.jsonl"
printf 'a/1.jsonl.gz\nmissing.jsonl\n' > "$T/tree/bad-list.txt"
expect_exit 2 'cannot open input ".*missing.jsonl": No such file or directory (listed in .*bad-list.txt:2)' \
  "$B" build --out "$T/x" "@$T/tree/bad-list.txt"
expect_exit 2 'cannot read manifest' "$B" build --out "$T/x" "@$T/no-such-list.txt"
# A delimiter holding a line break can never match a line (every document would run to the end of its file).
expect_exit 2 'delimiter (--delimiter) holds a line break' "$B" build --delimiter "$(printf 'a\nb')" --out "$T/x" \
  "$T/small.jsonl"
# A directory's dangling symbolic link is said (it was skipped silently), and so are its binary files, counted.
mkdir -p "$T/dl"
cp "$T/small.jsonl" "$T/dl/a.jsonl"
ln -sf "$T/nowhere.jsonl" "$T/dl/b.jsonl"
printf 'bin\0ary' > "$T/dl/c.dat"
"$B" build --out "$T/dlout" "$T/dl" 2> "$T/dl.err" || fail "a directory with a dangling link: exit $?"
grep -qF "skipping \"$T/dl/b.jsonl\": a symbolic link to nothing" "$T/dl.err" || fail "dangling link not said"
grep -qF "skipped 1 file(s) that are not text" "$T/dl.err" || fail "binary files not counted: $(cat "$T/dl.err")"

# ---- "-" with stdin closed (`<&-`): exit 2, not the tool's own lock file (the lowest free descriptor) read as stdin.
expect_exit 2 'input "-" reads standard input, which is closed' bash -c '"$0" build --out "$1" - <&-' "$B" "$T/closed"
[ ! -e "$T/closed/index.json" ] || fail "a build from a closed stdin wrote a dataset"

# ---- An input path that is not UTF-8 (a Latin-1 directory name): the build finishes with its index.json (the JSON
# writer used to throw on the command line and input list once every shard was written, exit 1, no index).
lat=$'lat\xe9'
mkdir -p "$T/corp_$lat" && cp "${FORTUNES[0]}" "$T/corp_$lat/f.txt"
"$B" build --log-level warn --out "$T/latin" "$T/corp_$lat" 2>/dev/null || fail "a non-UTF-8 input path failed the build"
$PY -c "import json,sys; json.load(open(sys.argv[1]))" "$T/latin/index.json" || fail "index.json of a non-UTF-8 path"

# ---- Out of file descriptors (every shard is kept open): the process's limit named (exit 1), not a corrupt shard
# (exit 3); a soft limit below the hard one is raised at start, so the same run then works.
"$B" build --log-level warn --set data.shards=120 --out "$T/many" "${FORTUNES[@]}" 2>/dev/null
expect_exit 1 "reached its limit of 48 open files" bash -c 'ulimit -n 48; "$0" reshard --out "$1" --set data.shards=2 "$2"' \
  "$B" "$T/many2" "$T/many"
bash -c 'ulimit -S -n 48; "$0" reshard --log-level warn --out "$1" --set data.shards=2 "$2"' "$B" "$T/many2" "$T/many" ||
  fail "a soft open-file limit below the hard one was not raised"

# ---- Bad input: exit 2 naming file and line/offset; --skip-bad counts and keeps the rest.
docs_of() { $PY -c "import json,sys;d=json.load(open(sys.argv[1]));print(d['total_documents'], d['skipped_records'])" "$1/index.json"; }
total=$(docs_of "$T/plain" | cut -d' ' -f1)
# Truncated zstd and gzip: the error gives the compressed byte where the file ends.
size=$(stat -c %s "$T/small.jsonl.zst")
head -c $((size / 2)) "$T/small.jsonl.zst" > "$T/cut.jsonl.zst"
expect_exit 2 "truncated zstd input \".*cut.jsonl.zst\": the file ends at compressed byte $((size / 2)) inside a zstd frame" \
  "$B" build --out "$T/x" "$T/cut.jsonl.zst"
"$B" build --skip-bad --out "$T/cutskip" "$T/cut.jsonl.zst" 2>"$T/log.txt"
grep -q "truncated zstd input" "$T/log.txt" || fail "--skip-bad did not warn about the truncated input"
read -r got skipped <<<"$(docs_of "$T/cutskip")"
[ "$skipped" = 1 ] && [ "$got" -gt 100 ] && [ "$got" -lt "$total" ] || fail "truncated .zst with --skip-bad: $got documents, $skipped skipped"
echo "ok: truncated .zst kept its first $got of $total documents with --skip-bad"
size=$(stat -c %s "$T/small.jsonl.gz")
head -c $((size / 2)) "$T/small.jsonl.gz" > "$T/cut.jsonl.gz"
expect_exit 2 "truncated gzip input \".*cut.jsonl.gz\": the file ends at compressed byte $((size / 2))" \
  "$B" build --out "$T/x" "$T/cut.jsonl.gz"
"$B" build --skip-bad --out "$T/cutgz" "$T/cut.jsonl.gz" 2>/dev/null
read -r got skipped <<<"$(docs_of "$T/cutgz")"
[ "$skipped" = 1 ] && [ "$got" -gt 100 ] && [ "$got" -lt "$total" ] || fail "truncated .gz with --skip-bad: $got documents"
# Corrupt zstd data (bytes flipped inside the frame) names the compressed offset.
cp "$T/small.jsonl.zst" "$T/rot.jsonl.zst"
printf '\xde\xad\xbe\xef\xde\xad\xbe\xef' | dd of="$T/rot.jsonl.zst" bs=1 seek=$((size / 3)) conv=notrunc 2>/dev/null
expect_exit 2 'corrupt zstd input ".*rot.jsonl.zst": in compressed bytes [0-9]*\.\.[0-9]*: ' "$B" build --out "$T/x" \
  "$T/rot.jsonl.zst"
# With --skip-bad a corrupt stream keeps every document decoded before the damage, as `zstd -d` and zlib recover
# them (the decoder's output of the failing call was dropped: up to 1 MiB of compressed input, often everything).
want=$( (zstd -dc "$T/rot.jsonl.zst" 2>/dev/null || true) | wc -l)
"$B" build --skip-bad --out "$T/rotskip" "$T/rot.jsonl.zst" 2>/dev/null || fail "corrupt .zst with --skip-bad failed"
read -r got skipped <<<"$(docs_of "$T/rotskip")"
[ "$skipped" = 1 ] && [ "$got" -ge "$want" ] && [ "$got" -gt 100 ] && [ "$got" -lt "$total" ] ||
  fail "corrupt .zst with --skip-bad: $got documents, zstd -d recovers $want"
cp "$T/small.jsonl.gz" "$T/rot.jsonl.gz"
gsize=$(stat -c %s "$T/rot.jsonl.gz")
printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of="$T/rot.jsonl.gz" bs=1 seek=$((gsize / 2)) conv=notrunc 2>/dev/null
want=$($PY -c "
import sys, zlib
d, out, data = zlib.decompressobj(31), b'', open(sys.argv[1], 'rb').read()
try:
    for i in range(0, len(data), 512): out += d.decompress(data[i:i + 512])
except zlib.error: pass
print(out.count(b'\n'))" "$T/rot.jsonl.gz")
"$B" build --skip-bad --out "$T/rotgz" "$T/rot.jsonl.gz" 2>/dev/null || fail "corrupt .gz with --skip-bad failed"
read -r got skipped <<<"$(docs_of "$T/rotgz")"
[ "$skipped" = 1 ] && [ "$got" -ge "$want" ] && [ "$got" -gt 100 ] ||
  fail "corrupt .gz with --skip-bad: $got documents, zlib recovers $want"
echo "ok: corrupt .zst and .gz keep the documents before the damage with --skip-bad ($got of $total from the .gz)"
# Invalid UTF-8 and a line without the field, in a compressed input: line and decompressed offset.
printf '{"text": "one"}\n{"text": "two"}\n{"text": "bad \xc3\x28 byte"}\n{"body": "no text"}\n{"text": "last"}\n' > "$T/mixed.jsonl"
zstd -q "$T/mixed.jsonl" -o "$T/mixed.jsonl.zst"
expect_exit 2 'bad input ".*mixed.jsonl.zst": line 3 (byte offset 46 of the decompressed stream): invalid UTF-8' \
  "$B" build --out "$T/x" "$T/mixed.jsonl.zst"
expect_exit 2 'bad input ".*mixed.jsonl": line 3 (byte offset 46): invalid UTF-8' "$B" build --out "$T/x" "$T/mixed.jsonl"
sed -i '3d' "$T/mixed.jsonl"
expect_exit 2 'bad input ".*mixed.jsonl": line 3 (byte offset 32): no string field "text"' "$B" build --out "$T/x" "$T/mixed.jsonl"
"$B" build --skip-bad --out "$T/mixskip" "$T/mixed.jsonl.zst" 2>"$T/log.txt"
grep -q "skipped 2 bad records" "$T/log.txt" || fail "--skip-bad did not count 2 records"
[ "$(docs_of "$T/mixskip")" = "3 2" ] || fail "--skip-bad kept $(docs_of "$T/mixskip") (documents skipped)"
# The first bad record is reported whatever the thread count (batches are tokenized in parallel):
# two bad lines far apart, ~100 batches of 10 KB, the later one in an earlier-finishing batch.
$PY - "$T/two-bad.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(1, 20001):
        f.write('{"text": 1}\n' if i in (12000, 700) else json.dumps({"text": f"document {i} " * (1 + i % 5)}) + "\n")
PY
for th in 1 2 3; do
  expect_exit 2 'bad input ".*two-bad.jsonl": line 700 (byte offset [0-9]*): no string field' \
    "$B" build --threads $th --set data.batch_mb=0.01 --out "$T/x" "$T/two-bad.jsonl"
done

# ---- A failed build leaves the dataset already in --out intact (it fails before writing shards).
"$B" build --shards 2 --out "$T/keep" "$T/small.jsonl" 2>/dev/null
expect_exit 2 'truncated zstd input' "$B" build --shards 5 --out "$T/keep" "$T/small.jsonl" "$T/cut.jsonl.zst"
"$B" verify "$T/keep" >/dev/null || fail "the earlier dataset was damaged by a failed build"
same_tokens "$T/plain" "$T/keep"
# Inputs without a document: exit 2, and the --out this run created is gone (it kept .build-parts/ and the lock).
: > "$T/empty.txt"
expect_exit 2 'the inputs contain no documents' "$B" build --out "$T/none" "$T/empty.txt"
[ ! -e "$T/none" ] || fail "an empty build left $(ls -A "$T/none") in its new --out"
# ... and so does a bad input before any group of inputs finished (nothing a rerun could reuse).
expect_exit 2 'truncated zstd input' "$B" build --out "$T/badnew" "$T/small.jsonl" "$T/cut.jsonl.zst"
[ ! -e "$T/badnew" ] || fail "a failed build left $(ls -A "$T/badnew") in its new --out"
echo PASS
