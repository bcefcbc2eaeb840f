#!/usr/bin/env bash
# Benchmark (prints figures; not a test): cairn's BPE against the issue's anchor, OpenAI's tiktoken, natively.
# Builds tiktoken's Rust core (src/lib.rs of a checkout you give: GitHub is out of reach of CI machines) against
# Debian's Rust crates (librust-fancy-regex-dev & co., offline: no crates.io), loads its GPT-2 (r50k) and cl100k
# ranks from the npm package `tiktoken` (the same files its WASM build ships), and times one thread of each on
# the fortunes documents, pinned to core 0, next to cairn-reshard-bench-tokenizer's GPT-2 and Llama 3 (cl100k's
# pre-tokenizer regex with a 128k vocabulary) on the same documents, cold, interleaved ROUNDS times.
# usage: bench/tiktoken_anchor.sh TIKTOKEN_SRC [BUILD_DIR]    (env: ROUNDS=2 SECONDS_PER_RUN=3)
#   TIKTOKEN_SRC: a work tree or a bare clone of github.com/openai/tiktoken (HEAD is used)
# Caveat printed with the figures: Debian 12's fancy-regex 0.7 / regex 1.7 are older than tiktoken pins.
set -euo pipefail
SRC=${1:?usage: bench/tiktoken_anchor.sh TIKTOKEN_SRC [BUILD_DIR]}
BUILD=$(cd "${2:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-2} SECS=${SECONDS_PER_RUN:-3}
# A work tree, or a bare clone / mirror (its HEAD's src/lib.rs).
lib_rs() { if [ -f "$SRC/src/lib.rs" ]; then cat "$SRC/src/lib.rs"; else git -C "$SRC" show HEAD:src/lib.rs; fi; }
lib_rs > /dev/null 2>&1 || { echo "tiktoken_anchor: no src/lib.rs in $SRC (a checkout or clone of openai/tiktoken)" >&2; exit 2; }
command -v cargo > /dev/null || { echo "tiktoken_anchor: cargo missing" >&2; exit 2; }
REG=/usr/share/cargo/registry
if ! ls -d "$REG"/fancy-regex-* "$REG"/regex-1* "$REG"/rustc-hash-* "$REG"/bstr-* > /dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q librust-fancy-regex-dev librust-regex-dev \
    librust-rustc-hash-dev librust-bstr-dev > /dev/null
fi
version() { ls -d "$REG/$1"-[0-9]* | sed "s|.*/$1-||" | sort -V | tail -1; }
W=$BUILD/tiktoken-anchor
rm -rf "$W/tiktoken" "$W/anchor/src"
mkdir -p "$W/tiktoken/src" "$W/anchor/src" "$W/anchor/.cargo"
lib_rs > "$W/tiktoken/src/lib.rs"
# tiktoken's Python binding (pyo3) stays off: only the core is built.
cat > "$W/tiktoken/Cargo.toml" <<TOML
[package]
name = "tiktoken"
version = "0.0.0"
edition = "2024"
[features]
python = []
[dependencies]
fancy-regex = "=$(version fancy-regex)"
regex = "=$(version regex)"
rustc-hash = "=$(version rustc-hash)"
bstr = "=$(version bstr)"
TOML
cp "$ROOT/bench/tiktoken_anchor/main.rs" "$W/anchor/src/main.rs"
cat > "$W/anchor/Cargo.toml" <<TOML
[package]
name = "tiktoken-anchor"
version = "0.0.0"
edition = "2024"
[dependencies]
tiktoken = { path = "../tiktoken" }
[profile.release]
lto = true
codegen-units = 1
TOML
printf '[source.crates-io]\nreplace-with = "debian"\n[source.debian]\ndirectory = "%s"\n[net]\noffline = true\n' "$REG" \
  > "$W/anchor/.cargo/config.toml"
(cd "$W/anchor" && cargo build --release -q)
A=$W/anchor/target/release/tiktoken-anchor
# Ranks and patterns from npm `tiktoken` (its encoders/*.json: one "! START" group of base64 tokens per run of ranks).
if [ ! -f "$W/npm/node_modules/tiktoken/encoders/gpt2.json" ]; then
  rm -rf "$W/npm"; mkdir -p "$W/npm/node_modules/tiktoken"
  (cd "$W/npm" && npm pack --silent tiktoken@1.0.22 > /dev/null)
  tar -xzf "$W/npm/tiktoken-1.0.22.tgz" -C "$W/npm/node_modules/tiktoken" --strip-components=1
fi
for enc in gpt2 cl100k_base; do
  node -e '
const [json, out] = process.argv.slice(1), fs = require("fs"), j = JSON.parse(fs.readFileSync(json, "utf8"));
const parts = j.bpe_ranks.split(" "); let rank = 0; const lines = [];
for (let i = 0; i < parts.length; i++) {
  if (parts[i] === "!") { rank = Number(parts[++i]); continue; }
  if (parts[i]) lines.push(`${parts[i]} ${rank++}`);
}
fs.writeFileSync(out + ".tiktoken", lines.join("\n") + "\n"); fs.writeFileSync(out + ".pattern", j.pat_str);' \
    "$W/npm/node_modules/tiktoken/encoders/$enc.json" "$W/$enc"
done
FORTUNES=()
for f in /usr/share/games/fortunes/*; do
  case "$f" in *.dat|*.u8) continue ;; esac
  [ -f "$f" ] && [ ! -L "$f" ] && FORTUNES+=("$f")
done
export CAIRN_BUILD_DIR=$BUILD
G=$(bash "$ROOT/tests/reshard/setup_gpt2.sh")
L3=$(bash "$ROOT/tests/reshard/setup_llama3.sh")
PIN=()
command -v taskset > /dev/null && PIN=(taskset -c 0)
TB=$BUILD/bin/cairn-reshard-bench-tokenizer
echo "tiktoken core: $SRC ($(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')); Debian crates:" \
  "fancy-regex $(version fancy-regex), regex $(version regex) (tiktoken pins newer ones)"
for r in $(seq "$ROUNDS"); do
  echo "-- round $r (one thread, core 0; cairn cold: an empty word cache every pass)"
  "${PIN[@]}" "$A" "$W/gpt2.tiktoken" "$W/gpt2.pattern" "$SECS" "${FORTUNES[@]}"
  echo "cairn GPT-2:   $("${PIN[@]}" "$TB" gpt2 "${FORTUNES[@]}" --vocab "$G/encoder.json" --merges "$G/vocab.bpe" \
    --threads 1 --seconds "$SECS" | tail -1)"
  "${PIN[@]}" "$A" "$W/cl100k_base.tiktoken" "$W/cl100k_base.pattern" "$SECS" "${FORTUNES[@]}"
  echo "cairn Llama 3: $("${PIN[@]}" "$TB" hf "${FORTUNES[@]}" --tokenizer-json "$L3/models/tokenizer.json" \
    --threads 1 --seconds "$SECS" | tail -1)"
done
