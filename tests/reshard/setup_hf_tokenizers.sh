#!/usr/bin/env bash
# Fetches Hugging Face's tokenizers library itself (the Rust crate, through its Node binding: npm `tokenizers`
# 0.23.2, prebuilt N-API binaries) once, cached under the build directory; prints the package directory, which
# `node tests/reshard/hf_reference.js --rust DIR tokenizer.json FILE...` loads. Only this machine's binary is kept.
set -euo pipefail
version=0.23.2
mkdir -p "${CAIRN_BUILD_DIR:?}/reshard-cache"
cache="$(cd "$CAIRN_BUILD_DIR/reshard-cache" && pwd)/hf-tokenizers-$version"
pkg="$cache/node_modules/tokenizers"
exec 9>"$cache.lock"  # one fetch at a time (ctest -j)
flock 9
if [ ! -f "$pkg/index.js" ] || ! node -e "require('$pkg')" 2>/dev/null; then
  rm -rf "$cache"
  mkdir -p "$pkg"
  ( cd "$cache" && npm pack --silent "tokenizers@$version" >/dev/null )
  tar -xzf "$cache/tokenizers-$version.tgz" -C "$pkg" --strip-components=1
  rm -f "$cache/tokenizers-$version.tgz"
  keep=$(node -e "const r = process.report.getReport().header.glibcVersionRuntime;
console.log(\`tokenizers.\${process.platform}-\${process.arch}-\${r ? 'gnu' : 'musl'}.node\`)")
  find "$pkg" -name 'tokenizers.*.node' ! -name "$keep" -delete
  node -e "require('$pkg')" || { echo "setup_hf_tokenizers.sh: $pkg does not load on this machine" >&2; exit 1; }
fi
echo "$pkg"
