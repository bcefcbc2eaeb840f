#!/usr/bin/env bash
# Fetches OpenAI's tiktoken (npm `tiktoken` 1.0.17: its Rust core built to WASM, with the GPT-2 ranks) once, cached
# under the build directory; prints the package directory, which tests/reshard/tiktoken_reference.js loads.
set -euo pipefail
version=1.0.17
mkdir -p "${CAIRN_BUILD_DIR:?}/reshard-cache"
cache="$(cd "$CAIRN_BUILD_DIR/reshard-cache" && pwd)/tiktoken-$version"
pkg="$cache/node_modules/tiktoken"
exec 9>"$cache.lock"  # one fetch at a time (ctest -j)
flock 9
if [ ! -f "$pkg/package.json" ] || ! node -e "require('$pkg').get_encoding('gpt2').free()" 2>/dev/null; then
  rm -rf "$cache"
  mkdir -p "$pkg"
  ( cd "$cache" && npm pack --silent "tiktoken@$version" >/dev/null )
  tar -xzf "$cache/tiktoken-$version.tgz" -C "$pkg" --strip-components=1
  rm -f "$cache/tiktoken-$version.tgz"
  node -e "require('$pkg').get_encoding('gpt2').free()" || { echo "setup_tiktoken.sh: $pkg does not load" >&2; exit 1; }
fi
echo "$pkg"
