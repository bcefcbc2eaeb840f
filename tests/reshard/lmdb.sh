#!/usr/bin/env bash
# LMDB inputs: an environment (directory with data.mdb, or a single .mdb file) written here by
# python3-lmdb gives, value by value in key order, the same documents as the JSONL of the same texts;
# raw-text values by default, JSON values with --format jsonl; a directory tree holding an environment
# reads it as one input; bad values name the entry (exit 2) or are counted with --skip-bad; the
# environment is not written (no lock file appears).
source "$(dirname "$0")/common.sh"
$PY -c "import lmdb" 2>/dev/null || fail "python3-lmdb missing: bash scripts/install-deps.sh"

$PY - "$T" "${FORTUNES[@]}" <<'PY'
import json, os, sys, lmdb
out, files = sys.argv[1], sys.argv[2:]
docs = []
for f in files[:5]:
    docs += [d for d in open(f, encoding="utf-8", errors="replace").read().split("\n%\n") if d.strip()]
docs = docs[:1200] + ["naïve café ✓ 日本語 🎉"]
with open(os.path.join(out, "docs.jsonl"), "w") as f:
    for d in docs:
        f.write(json.dumps({"text": d}) + "\n")
def env(path, items, subdir=True):
    e = lmdb.open(path, map_size=1 << 28, subdir=subdir)
    with e.begin(write=True) as t:
        for k, v in items:
            t.put(k, v)
    e.close()
keys = [b"doc-%08d" % i for i in range(len(docs))]   # key order = document order
env(os.path.join(out, "raw"), [(k, d.encode()) for k, d in zip(keys, docs)])
env(os.path.join(out, "json"), [(k, json.dumps({"id": i, "text": d}).encode()) for i, (k, d) in enumerate(zip(keys, docs))])
env(os.path.join(out, "single.mdb"), [(k, d.encode()) for k, d in zip(keys, docs)], subdir=False)
env(os.path.join(out, "bad"), [(b"a", b"fine"), (b"b", b"also fine"), (b"c", b"bad \xff byte"), (b"d", b"last")])
env(os.path.join(out, "badjson"), [(b"a", b'{"text": "x"}'), (b"b", b'{"body": "y"}'), (b"c", b'{"text": "z"}')])
# Named sub-databases (py-lmdb's open_db): the main database then holds their 48-byte records, not documents.
e = lmdb.open(os.path.join(out, "named"), map_size=1 << 24, max_dbs=2)
for name in (b"train", b"val"):
    db = e.open_db(name)
    with e.begin(write=True, db=db) as t:
        for k, d in zip(keys[:20], docs[:20]):
            t.put(k, d.encode())
e.close()
# lock.mdb files of the writes are removed: reading must not need (or create) one
for d in ("raw", "json", "bad", "badjson", "named"):
    os.remove(os.path.join(out, d, "lock.mdb"))
os.remove(os.path.join(out, "single.mdb-lock"))
PY
chmod -R a-w "$T/raw"  # inputs are only read

"$B" build --shards 3 --out "$T/js" "$T/docs.jsonl"
"$B" build --shards 3 --out "$T/l-raw" "$T/raw" 2>"$T/log.txt"
grep -q "reading inputs .*kB.*documents" "$T/log.txt" || { cat "$T/log.txt"; fail "no progress over the LMDB input"; }
same_tokens "$T/js" "$T/l-raw"
[ ! -e "$T/raw/lock.mdb" ] || fail "reading created a lock file in the input"
"$B" build --shards 3 --format jsonl --out "$T/l-json" "$T/json"
same_tokens "$T/js" "$T/l-json"
"$B" build --shards 3 --out "$T/l-single" "$T/single.mdb"
same_tokens "$T/js" "$T/l-single"
# In a directory tree the environment is one input, between the files in path order.
mkdir -p "$T/tree"
cp "$T/docs.jsonl" "$T/tree/a.jsonl"; cp -r "$T/raw" "$T/tree/b-env"; cp "$T/docs.jsonl" "$T/tree/c.jsonl"
"$B" build --shards 3 --out "$T/l-tree" "$T/tree"
"$B" build --shards 3 --out "$T/l-list" "$T/docs.jsonl" "$T/raw" "$T/docs.jsonl"
cmp <($DUMP "$T/l-tree") <(cat <($DUMP "$T/js") <($DUMP "$T/js") <($DUMP "$T/js")) || fail "tree with an LMDB environment"
echo "ok: an LMDB environment in a directory tree is one input in path order"

expect_exit 2 'bad input ".*bad": entry 3: invalid UTF-8' "$B" build --out "$T/x" "$T/bad"
"$B" build --skip-bad --out "$T/s1" "$T/bad" 2>/dev/null
[ "$($PY -c "import json;d=json.load(open('$T/s1/index.json'));print(d['total_documents'], d['skipped_records'])")" = "3 1" ] || fail "--skip-bad on LMDB"
expect_exit 2 'bad input ".*badjson": entry 2: no string field "text"' "$B" build --format jsonl --out "$T/x" "$T/badjson"
mkdir -p "$T/notenv"; echo "not lmdb" > "$T/notenv/data.mdb"
expect_exit 2 'cannot open LMDB input ".*notenv"' "$B" build --out "$T/x" "$T/notenv"
expect_exit 2 'unsupported LMDB input ".*named": it holds the named database "train"' "$B" build --out "$T/x" "$T/named"
chmod -R u+w "$T/raw"
echo PASS
