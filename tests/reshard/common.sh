# Shared setup of the cairn-reshard script tests: binary, python with h5py, fortunes, a temp dir.
set -euo pipefail
B="${CAIRN_BIN_DIR:?}/cairn-reshard"
PY=/usr/bin/python3
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DUMP="$PY $HERE/dump_dataset.py"
# Debian fortunes: the text files (not the .dat indexes or .u8 links).
FORTUNES=()
for f in /usr/share/games/fortunes/*; do
  case "$f" in *.dat|*.u8) continue ;; esac
  [ -f "$f" ] && [ ! -L "$f" ] && FORTUNES+=("$f")
done
[ ${#FORTUNES[@]} -gt 0 ] || { echo "fortunes package missing (/usr/share/games/fortunes)" >&2; exit 1; }
T="$(mktemp -d "${TMPDIR:-/tmp}/cairn-reshard-test.XXXXXX")"
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

fail() { echo "FAIL: $*" >&2; exit 1; }
# expect_exit CODE PATTERN cmd...: the command must exit with CODE and print PATTERN on stderr.
expect_exit() {
  local code="$1" pattern="$2"; shift 2
  local rc=0
  "$@" >"$T/out.txt" 2>"$T/err.txt" || rc=$?
  [ "$rc" = "$code" ] || { cat "$T/err.txt" >&2; fail "exit $rc, wanted $code: $*"; }
  grep -q -- "$pattern" "$T/err.txt" "$T/out.txt" || { cat "$T/err.txt" >&2; fail "no '$pattern' in output of: $*"; }
  echo "ok: exit $code with '$pattern'"
}
# same_tokens A B: the two datasets hold identical documents in the same order.
same_tokens() { cmp <($DUMP "$1") <($DUMP "$2") || fail "datasets $1 and $2 differ"; echo "ok: $1 == $2"; }
# check_like_lenml LENML NAME TOKENIZER_JSON INPUT...: cairn-reshard build's tokens of the inputs equal those of
# @lenml/tokenizers (LENML: its package directory, a JavaScript port of Hugging Face's tokenizers), document for
# document (tests/reshard/hf_reference.js).
check_like_lenml() {
  local lenml="$1" name="$2" json="$3"
  shift 3
  check_like_reference "@lenml/tokenizers" "$name" "$json" "$@" -- "$lenml" "$json"
}
# check_like_hf_rust RUST NAME TOKENIZER_JSON INPUT...: the same against Hugging Face's Rust library itself (RUST:
# the npm `tokenizers` package directory, tests/reshard/setup_hf_tokenizers.sh).
check_like_hf_rust() {
  local rust="$1" name="$2" json="$3"
  shift 3
  check_like_reference "Hugging Face tokenizers (Rust)" "$name" "$json" "$@" -- --rust "$rust" "$json"
}
# check_like_reference LABEL NAME TOKENIZER_JSON INPUT... -- HF_REFERENCE_ARGS...
check_like_reference() {
  local label="$1" name="$2" json="$3" inputs=() ref=()
  shift 3
  while [ "$1" != "--" ]; do inputs+=("$1"); shift; done
  shift
  ref=("$@")
  "$B" build --delimiter % --shards 2 --out "$T/$name" --tokenizer hf --tokenizer-json "$json" "${inputs[@]}" \
    2>"$T/err.txt" || { cat "$T/err.txt" >&2; fail "$name: cairn-reshard build failed"; }
  node "$HERE/hf_reference.js" "${ref[@]}" "${inputs[@]}" > "$T/$name.ref" || fail "$name: the reference failed"
  $DUMP "$T/$name" --no-eot > "$T/$name.cairn"
  if ! cmp -s "$T/$name.ref" "$T/$name.cairn"; then
    diff <(nl -ba "$T/$name.ref") <(nl -ba "$T/$name.cairn") | head -6 | cut -c1-300 >&2
    fail "$name: tokens differ from $label"
  fi
  echo "ok: $name: $(wc -l < "$T/$name.cairn") documents tokenized exactly like $label"
}

# write_small_bpe DIR: a small GPT-2-style byte-level BPE (256 bytes, two merges, <|endoftext|>) as DIR/encoder.json
# and DIR/vocab.bpe, for a dataset of another tokenizer.
write_small_bpe() {
  $PY - "$1" <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
vocab.update({"\u0120t": 256, "he": 257, "<|endoftext|>": 258})
json.dump(vocab, open(f"{sys.argv[1]}/encoder.json", "w"))
open(f"{sys.argv[1]}/vocab.bpe", "w").write("#version: 0.2\n\u0120 t\nh e\n")
PY
}

# kill_once_present PID GLOB: SIGKILL the background job PID as soon as a file matching GLOB exists (or it ended).
kill_once_present() {
  for _ in $(seq 2000); do
    compgen -G "$2" >/dev/null && break
    kill -0 "$1" 2>/dev/null || break
    sleep 0.005
  done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
