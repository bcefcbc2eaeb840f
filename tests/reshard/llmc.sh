#!/usr/bin/env bash
# llm.c conversion, both variants (gpt-2: magic 20240520 v1 uint16; llama-3: magic 20240801 v7 uint32):
# round trips cairn -> llm.c -> cairn, files byte-identical to llm.c's write_datafile with end-of-text
# before each document, 128k-vocabulary ids kept by llama-3 and refused by gpt-2 (exit 2), and a
# fineweb.py-style directory (val_000000, train_000001, ...) imported in llm.c's order with the
# documents that span files kept whole; Llama-3 files delimited by <|begin_of_text|> as fineweb.py writes them.
source "$(dirname "$0")/common.sh"
LF="$PY $HERE/llmc_files.py"

# A small dataset with the bytes tokenizer (vocabulary 257, end-of-text 256), 3 shards.
"$B" build --delimiter % --shards 3 --out "$T/ds" "${FORTUNES[@]:0:4}"

# Export: auto picks gpt-2 for a small vocabulary; llama-3 on request; both byte-exact and round trip.
"$B" convert --to llmc --out "$T/g2" "$T/ds"
$LF expect "$T/ds" "$T/g2" gpt-2
"$B" convert --to llmc --llmc-format llama-3 --out "$T/l3" "$T/ds"
$LF expect "$T/ds" "$T/l3" llama-3
# An export over an earlier one with more files: the earlier files past the new count go (llm.c's loader reads every
# shard_*.bin of the directory), said on stderr.
"$B" reshard "$T/ds" --shards 5 --out "$T/ds5"
"$B" convert --to llmc --out "$T/over" "$T/ds5"
"$B" convert --to llmc --out "$T/over" "$T/ds" 2> "$T/over.err"
[ "$(ls "$T/over" | grep -c '^shard_.*\.bin$')" = 3 ] || fail "an earlier export's files stayed: $(ls "$T/over")"
grep -q "removed 2 shard_\*.bin files of an earlier export" "$T/over.err" || fail "stale files not said: $(cat "$T/over.err")"
$LF expect "$T/ds" "$T/over" gpt-2
"$B" convert --from llmc "$T/g2" --shards 2 --out "$T/from_g2"
same_tokens "$T/ds" "$T/from_g2"
"$B" convert --from llmc "$T/l3" --shards 3 --out "$T/from_l3"
same_tokens "$T/ds" "$T/from_l3"
"$B" verify "$T/from_g2" "$T/from_l3"

# --split-docs shards: a document cut by a shard boundary continues into the next file, no delimiter.
"$B" reshard "$T/ds" --shards 4 --split-docs --out "$T/split"
"$B" convert --to llmc --out "$T/split_g2" "$T/split"
$LF expect "$T/split" "$T/split_g2" gpt-2 "$T/ds"
"$B" convert --from llmc "$T/split_g2" --shards 2 --out "$T/from_split"
same_tokens "$T/ds" "$T/from_split"

# A Llama-3-sized vocabulary (128256 ids, merged tokens above 65535, end-of-text 128001).
$LF widetok "$T/wide.json"
W=(--tokenizer hf --tokenizer-json "$T/wide.json")
"$B" build "${W[@]}" --delimiter % --shards 2 --out "$T/wide" "${FORTUNES[@]:0:2}"
$PY - "$T/wide/index.json" <<'PY'
import json, sys
ix = json.load(open(sys.argv[1]))
assert ix["vocab_size"] == 128256 and ix["eot_id"] == 128001 and ix["token_dtype"] == "uint32", ix
PY
max=$($LF maxid "$T/wide")
[ "$max" -gt 65535 ] || fail "the wide tokenizer produced no id above 65535 (max $max)"
# auto: llama-3. With Llama 3's tokenizer each document starts with <|begin_of_text|> (128000), as llm.c's
# Llama-3 scripts write them; the bytes tokenizer above has none, so end-of-text stands there.
"$B" convert --to llmc --out "$T/wide_l3" "$T/wide" --json "$T/wide_l3.json"
$LF expect "$T/wide" "$T/wide_l3" llama-3 "" 128000
$PY - "$T/wide_l3.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "llmc" and j["variant"] == "llama-3" and j["document_start_token"] == 128000, j
assert j["provenance"]["tool"] == "cairn-reshard" and j["tokens"] > 0, j
PY
"$B" convert --from llmc "${W[@]}" "$T/wide_l3" --shards 3 --out "$T/from_wide"
same_tokens "$T/wide" "$T/from_wide"
[ "$($LF maxid "$T/from_wide")" = "$max" ] || fail "ids above 65535 did not survive the llama-3 round trip"
echo "ok: ids up to $max (not end-of-text) survive llama-3"
# Megatron files whose documents end in Llama 3 Instruct's <|eot_id|> (--append-eod with that eos): imported with
# the tokenizer's <|end_of_text|>, each gets it appended, with a warning naming --eot-token; with --eot-token
# '<|eot_id|>' they keep their ends and nothing is added.
"$B" build "${W[@]}" --eot-token '<|eot_id|>' --delimiter % --shards 1 --out "$T/wide_eot" "${FORTUNES[0]}"
"$B" convert --to megatron --out "$T/meg_eot/text_document" "$T/wide_eot"
"$B" convert --from megatron "${W[@]}" "$T/meg_eot/text_document" --out "$T/from_eot_default" 2> "$T/eot.err"
grep -q "end in <|eot_id|> (128009).*--eot-token '<|eot_id|>'" "$T/eot.err" ||
  fail "no warning for documents ending in <|eot_id|>: $(cat "$T/eot.err")"
"$B" convert --from megatron "${W[@]}" --eot-token '<|eot_id|>' "$T/meg_eot/text_document" \
  --out "$T/from_eot" 2> "$T/eot2.err"
! grep -q "added end-of-text\|end in <|eot_id|>" "$T/eot2.err" || fail "--eot-token '<|eot_id|>': $(cat "$T/eot2.err")"
same_tokens "$T/wide_eot" "$T/from_eot"
echo "ok: Megatron documents ending in <|eot_id|> named, and kept with --eot-token"
expect_exit 2 "gpt-2 format holds uint16 tokens.*128256" \
  "$B" convert --to llmc --llmc-format gpt-2 --out "$T/wide_g2" "$T/wide"
[ ! -e "$T/wide_g2/shard_000000.bin" ] || fail "a refused gpt-2 export left files"
expect_exit 2 "llmc-format applies to convert --to llmc" \
  "$B" convert --to megatron --llmc-format llama-3 --out "$T/m/x" "$T/ds"

# fineweb.py's layout: val_000000 then train_000001..; every shard boundary cuts a document. The
# directory is read in the order llm.c wrote it (val_000000 first, though it sorts after train_* by name).
for model in gpt-2 llama-3; do
  $LF fineweb "$T/ds" "$T/fw_$model" $model 20000 > "$T/fw_$model.txt"
  nfiles=$(grep -c '\.bin$' "$T/fw_$model.txt")
  [ "$nfiles" -ge 3 ] || fail "fineweb layout made only $nfiles files"
  grep -q "inside a document after shard: 0 " "$T/fw_$model.txt" || fail "no document spans val_000000 -> train_000001"
  "$B" convert --from llmc "$T/fw_$model" --shards 2 --out "$T/from_fw_$model" 2> "$T/fw_$model.err"
  same_tokens "$T/ds" "$T/from_fw_$model"
  # Validation and training splits in one directory: imported (a round trip), with a warning that says so.
  grep -q "holds llm.c's validation split (1 file(s), fineweb_val_000000.bin ...) and its training split" \
    "$T/fw_$model.err" || fail "no warning for val and train splits imported together: $(cat "$T/fw_$model.err")"
  ! grep -q "starts inside a document" "$T/fw_$model.err" || fail "$model: val + train said to start inside a document"
  # The train files alone start inside the document the val file cut: imported, and said.
  "$B" convert --from llmc "$T/fw_$model"/*train*.bin --shards 1 --out "$T/fw_${model}_train" \
    2> "$T/fw_${model}_train.err" || fail "$model train files alone: $(cat "$T/fw_${model}_train.err")"
  grep -q "train_000001.bin\" starts inside a document" "$T/fw_${model}_train.err" ||
    fail "$model train files alone: no word of the document cut at their start"
  echo "ok: $model directory of $nfiles files imported in llm.c's order, documents spanning files kept whole"
done
# fineweb.py's Llama-3 files: <|begin_of_text|> (128000) before each document instead of end-of-text. Imported with
# the Llama-3-sized tokenizer, the documents come back as they were built (each ending with <|end_of_text|>, 128001).
$LF fineweb "$T/wide" "$T/fw_bos" llama-3 3000 128000 > "$T/fw_bos.txt"
grep -q "inside a document after shard: 0 " "$T/fw_bos.txt" || fail "no document spans the first two Llama-3 files"
"$B" convert --from llmc "${W[@]}" "$T/fw_bos" --shards 2 --out "$T/from_fw_bos" 2> "$T/fw_bos.err"
grep -q "documents begin with <|begin_of_text|> (128000)" "$T/fw_bos.err" || fail "no note of the Llama-3 delimiter"
same_tokens "$T/wide" "$T/from_fw_bos"
echo "ok: llm.c Llama-3 files split at <|begin_of_text|>"
# The train shards alone (without the val shard 0): the stream starts inside the document shard 0 cut, so its first
# token is not <|begin_of_text|>; the Llama-3 files are still split at it (they once became one document).
train=($(ls "$T/fw_bos"/*.bin | grep -v "_000000\.bin$" | sort))
"$B" convert --from llmc "${W[@]}" "${train[@]}" --shards 1 --out "$T/fw_bos_train" 2> "$T/fw_bos_train.err"
grep -q "documents begin with <|begin_of_text|> (128000)" "$T/fw_bos_train.err" || fail "train shards: not split at <|begin_of_text|>"
grep -q "starts inside a document (its first token is not the <|begin_of_text|>" "$T/fw_bos_train.err" ||
  fail "train shards: the document cut at their start was imported without a word"
$PY - "$T/fw_bos_train" "$T/wide" <<'PY' || fail "train shards: documents differ"
import json, os, sys, h5py, numpy as np
def docs(d):
    out = []
    for s in json.load(open(os.path.join(d, "index.json")))["shards"]:
        with h5py.File(os.path.join(d, s["file"])) as h:
            t, o = h["tokens"][()], h["doc_offsets"][()]
            out += [tuple(t[o[i]:o[i + 1]]) for i in range(len(o) - 1)]
    return out
got, want = docs(sys.argv[1]), docs(sys.argv[2])
assert len(got) > 10 and all(128000 not in d for d in got), (len(got), [d for d in got if 128000 in d][:1])
# The first is the tail of a document; every other one is a whole document of the original, in order.
tail = len(want) - len(got) + 1
assert got[1:] == want[tail:], (len(got), len(want))
assert got[0] == want[tail - 1][-len(got[0]):]
print(f"ok: {len(got)} documents from the train shards alone")
PY

# The same files given one by one in name order (train_* before val) are a different stream.
files=($(ls "$T/fw_gpt-2"/*.bin | sort))
"$B" convert --from llmc "${files[@]}" --shards 1 --out "$T/from_fw_names"
! cmp -s <($DUMP "$T/ds") <($DUMP "$T/from_fw_names") || fail "name order should not have reproduced the stream"

# Header checks: a magic/version pair llm.c never writes, and a truncated llama-3 file.
f="$T/l3/shard_000000.bin"
printf '\x01\x00\x00\x00' | cat <(head -c 4 "$f") - <(tail -c +9 "$f") > "$T/badver.bin"
expect_exit 2 'badver.bin.*at byte offset 4: unsupported version 1 for magic 20240801' \
  "$B" convert --from llmc "$T/badver.bin" --out "$T/x"
head -c 3000 "$f" > "$T/trunc_l3.bin"
expect_exit 2 'trunc_l3.bin.*header says' "$B" convert --from llmc "$T/trunc_l3.bin" --out "$T/x"
# Ids beyond the import tokenizer's vocabulary are named.
expect_exit 2 'token id .* is not below' "$B" convert --from llmc --tokenizer bytes "$T/wide_l3" --out "$T/x"
echo PASS
