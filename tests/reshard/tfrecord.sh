#!/usr/bin/env bash
# TFRecord inputs of tf.train.Example: files written here by an independent writer (Python: CRC32C and
# protobuf wire format by hand, no TensorFlow) give the same documents as the JSONL of the same texts;
# the feature name follows --jsonl-field; bad payload CRCs, bad length CRCs, truncation, missing
# features and payloads that are not Examples are named with file, record and byte offset (exit 2) or
# skipped and counted with --skip-bad.
source "$(dirname "$0")/common.sh"

$PY - "$T" "${FORTUNES[@]}" <<'PY'
import json, os, struct, sys
out, files = sys.argv[1], sys.argv[2:]
docs = []
for f in files[:6]:
    docs += [d for d in open(f, encoding="utf-8", errors="replace").read().split("\n%\n") if d.strip()]
docs = docs[:1500] + ["naïve café ✓ 日本語 🎉"]

# CRC32C (Castagnoli, reflected 0x82F63B78) and TFRecord's mask.
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TABLE.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = TABLE[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
def masked(b):
    c = crc32c(b)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF

# Protobuf wire format: tf.train.Example{features=1: Features{feature=1: map<string, Feature>}},
# Feature{bytes_list=1: BytesList{value=1}, int64_list=3: Int64List{value=1 packed}}.
def varint(n):
    o = b""
    while True:
        b = n & 0x7F; n >>= 7
        if n: o += bytes([b | 0x80])
        else: return o + bytes([b])
def ld(field, payload): return varint(field << 3 | 2) + varint(len(payload)) + payload
def bytes_feature(v): return ld(1, ld(1, v))
def int64_feature(v): return ld(3, ld(1, varint(v)))
def example(feats):
    entries = b"".join(ld(1, ld(1, k.encode()) + ld(2, f)) for k, f in feats)
    return ld(1, entries)
def frame(payload, bad_len_crc=False, bad_data_crc=False):
    n = struct.pack("<Q", len(payload))
    lc, dc = masked(n), masked(payload)
    return n + struct.pack("<I", lc ^ bad_len_crc) + payload + struct.pack("<I", dc ^ bad_data_crc)

def write(name, records):
    with open(os.path.join(out, name), "wb") as f:
        offsets = []
        for r in records:
            offsets.append(f.tell()); f.write(r)
    return offsets

good = [frame(example([("id", int64_feature(i)), ("text", bytes_feature(d.encode()))])) for i, d in enumerate(docs)]
write("docs.tfrecord", good)
with open(os.path.join(out, "docs.jsonl"), "w") as f:
    for d in docs:
        f.write(json.dumps({"text": d}) + "\n")
write("body.tfrecord", [frame(example([("body", bytes_feature(d.encode()))])) for d in docs[:50]])
o = write("bad-data-crc.tfrecord", good[:2] + [frame(example([("text", bytes_feature(b"x"))]), bad_data_crc=True)] + good[2:10])
open(os.path.join(out, "bad-data-crc.offset"), "w").write(str(o[2]))
o = write("bad-len-crc.tfrecord", good[:2] + [frame(example([("text", bytes_feature(b"x"))]), bad_len_crc=True)] + good[2:10])
open(os.path.join(out, "bad-len-crc.offset"), "w").write(str(o[2]))
o = write("nofeature.tfrecord", good[:3] + [frame(example([("id", int64_feature(5))]))] + good[3:5])
open(os.path.join(out, "nofeature.offset"), "w").write(str(o[3]))
write("notexample.tfrecord", good[:1] + [frame(b"\xff\xff\xff\xff garbage")])
write("badutf8.tfrecord", [frame(example([("text", bytes_feature(b"ok \xc3\x28"))]))])
data = b"".join(good[:20])
open(os.path.join(out, "cut.tfrecord"), "wb").write(data[: len(data) - 7])
PY

# Same documents as the JSONL of the same texts; compressed TFRecord files too.
"$B" build --shards 3 --out "$T/tf" "$T/docs.tfrecord"
"$B" build --shards 3 --out "$T/js" "$T/docs.jsonl"
same_tokens "$T/tf" "$T/js"
gzip -k "$T/docs.tfrecord"
zstd -q -k "$T/docs.tfrecord"
"$B" build --shards 3 --out "$T/tfgz" "$T/docs.tfrecord.gz"
"$B" build --shards 3 --out "$T/tfzst" "$T/docs.tfrecord.zst"
same_tokens "$T/tf" "$T/tfgz"
same_tokens "$T/tf" "$T/tfzst"
# TensorFlow's ZLIB option compresses the whole file: named, not read as one corrupt record (nor dropped by --skip-bad).
$PY -c "import sys, zlib; open(sys.argv[2], 'wb').write(zlib.compress(open(sys.argv[1], 'rb').read()))" \
  "$T/docs.tfrecord" "$T/zlib.tfrecord"
expect_exit 2 'unsupported TFRecord input ".*zlib.tfrecord": it starts with a zlib header' "$B" build --out "$T/x" "$T/zlib.tfrecord"
expect_exit 2 'zlib header' "$B" build --skip-bad --out "$T/x" "$T/zlib.tfrecord"
# A directory holding TFRecord files reads them (binary by nature, not skipped).
mkdir -p "$T/tfdir"; cp "$T/docs.tfrecord" "$T/tfdir/"
"$B" build --shards 3 --out "$T/tfd" "$T/tfdir"
same_tokens "$T/tf" "$T/tfd"
# The feature name is --jsonl-field (default text).
expect_exit 2 'bad input ".*body.tfrecord": record 1 (byte offset 0): no bytes feature "text"' "$B" build --out "$T/x" "$T/body.tfrecord"
"$B" build --jsonl-field body --out "$T/body" "$T/body.tfrecord" 2>/dev/null
[ "$($PY -c "import json;print(json.load(open('$T/body/index.json'))['total_documents'])")" = 50 ] || fail "--jsonl-field body"

# Corrupt payload: that record only (the framing holds); --skip-bad skips it and keeps the rest.
expect_exit 2 "bad input \".*bad-data-crc.tfrecord\": record 3 (byte offset $(cat "$T/bad-data-crc.offset")): the payload's CRC does not match" \
  "$B" build --out "$T/x" "$T/bad-data-crc.tfrecord"
"$B" build --skip-bad --out "$T/s1" "$T/bad-data-crc.tfrecord" 2>/dev/null
[ "$($PY -c "import json;d=json.load(open('$T/s1/index.json'));print(d['total_documents'], d['skipped_records'])")" = "10 1" ] || fail "--skip-bad on a bad payload CRC"
# Corrupt length: the records after it cannot be found; --skip-bad keeps those before it.
expect_exit 2 "corrupt TFRecord input \".*bad-len-crc.tfrecord\": record 3 at byte offset $(cat "$T/bad-len-crc.offset"): the length's CRC does not match" \
  "$B" build --out "$T/x" "$T/bad-len-crc.tfrecord"
"$B" build --skip-bad --out "$T/s2" "$T/bad-len-crc.tfrecord" 2>/dev/null
[ "$($PY -c "import json;d=json.load(open('$T/s2/index.json'));print(d['total_documents'], d['skipped_records'])")" = "2 1" ] || fail "--skip-bad on a bad length CRC"
expect_exit 2 "bad input \".*nofeature.tfrecord\": record 4 (byte offset $(cat "$T/nofeature.offset")): no bytes feature \"text\"" \
  "$B" build --out "$T/x" "$T/nofeature.tfrecord"
expect_exit 2 'bad input ".*notexample.tfrecord": record 2 .*not a tf.train.Example' "$B" build --out "$T/x" "$T/notexample.tfrecord"
expect_exit 2 'bad input ".*badutf8.tfrecord": record 1 (byte offset 0): invalid UTF-8 at byte 3 of feature "text"' \
  "$B" build --out "$T/x" "$T/badutf8.tfrecord"
expect_exit 2 'truncated TFRecord input ".*cut.tfrecord": record 20 at byte offset [0-9]*: the file ends inside its' \
  "$B" build --out "$T/x" "$T/cut.tfrecord"
"$B" build --skip-bad --out "$T/s3" "$T/cut.tfrecord" 2>/dev/null
[ "$($PY -c "import json;d=json.load(open('$T/s3/index.json'));print(d['total_documents'], d['skipped_records'])")" = "19 1" ] || fail "--skip-bad on a truncated TFRecord"
echo PASS
