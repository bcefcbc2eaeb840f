#!/usr/bin/env bash
# Keeps one job in one place: fails, listing the lines, when code in tools/, libcommon/ or kernels/ matches PATTERN
# (grep -E) outside the files whose "path:" matches ALLOWED (grep -E); the tests that guard such a rule call it.
# usage: keep_out.sh PATTERN ALLOWED WHY OK
set -euo pipefail
pattern=$1 allowed=$2 why=$3 ok=$4
cd "$(dirname "$0")/../.."
hits=$(grep -rnE "$pattern" tools libcommon/src libcommon/include kernels --include='*.cpp' --include='*.h' \
         --include='*.cu' | grep -vE "$allowed" || true)
if [[ -n "$hits" ]]; then
  echo "$why" >&2
  echo "$hits" >&2
  exit 1
fi
echo "$ok"
