#!/usr/bin/env bash
# Fetches OpenAI's tiktoken (npm `tiktoken` 1.0.17: its Rust core built to WASM, with the GPT-2 ranks) once, cached
# under the build directory; prints the package directory, which tests/reshard/tiktoken_reference.js loads.
set -euo pipefail
source "$(dirname "$0")/npm_package.sh"
npm_package tiktoken 1.0.17 "require(process.env.PKG).get_encoding('gpt2').free()"
