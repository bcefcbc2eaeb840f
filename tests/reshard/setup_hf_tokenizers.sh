#!/usr/bin/env bash
# Fetches Hugging Face's tokenizers library itself (the Rust crate, through its Node binding: npm `tokenizers`
# 0.23.2, prebuilt N-API binaries) once, cached under the build directory; prints the package directory, which
# `node tests/reshard/hf_reference.js --rust DIR tokenizer.json FILE...` loads. Only this machine's binary is kept.
set -euo pipefail
source "$(dirname "$0")/npm_package.sh"
keep_this_machines_binary() {
  local keep
  keep=$(node -e "const r = process.report.getReport().header.glibcVersionRuntime;
console.log(\`tokenizers.\${process.platform}-\${process.arch}-\${r ? 'gnu' : 'musl'}.node\`)")
  find "$1" -name 'tokenizers.*.node' ! -name "$keep" -delete
}
npm_package tokenizers 0.23.2 "require(process.env.PKG)" keep_this_machines_binary
