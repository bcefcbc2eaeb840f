#!/bin/bash
# Runs gpt_parity_dump for each CPU backend and checks the result against PyTorch (Debian's python3-torch).
# Usage: torch_parity.sh <path to gpt_parity_dump>
set -euo pipefail
dump=$1
py=/usr/bin/python3  # Debian's python3: a python3 earlier on PATH may not see python3-torch
if ! "$py" -c 'import torch, h5py' 2>/dev/null; then
  echo "torch_parity: $py cannot import torch and h5py (install python3-torch python3-h5py)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for backend in cpu cpu-ref; do
  "$dump" "$backend" "$tmp/$backend.h5"
  "$py" "$(dirname "$0")/torch_parity.py" "$tmp/$backend.h5"
done
