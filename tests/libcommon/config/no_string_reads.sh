#!/usr/bin/env bash
# Keeps config reads typed: outside libcommon's config machinery, no code looks a key up by its dotted name
# (cfg.get_int("train.steps") ...); tools read their section structs (read_section<TrainSection>(cfg)).
set -euo pipefail
cd "$(dirname "$0")/../../.."
pattern='(\.|->)(get_int|get_float|get_string|get_bool|get_ints|get_strings|get_floats|get|has)\("[a-z_]+\.[a-z_]+"'
hits=$(grep -rnE "$pattern" tools libcommon/src libcommon/include --include='*.cpp' --include='*.h' --include='*.cu' \
         | grep -v '^libcommon/src/config.cpp:' || true)
if [[ -n "$hits" ]]; then
  echo "config keys read by string (use the section struct from cairn/sections/*.h and read_section):" >&2
  echo "$hits" >&2
  exit 1
fi
echo "no string reads of config keys outside libcommon/src/config.cpp"
