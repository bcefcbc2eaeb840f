#!/usr/bin/env bash
# README command 2: install dependencies, build (release preset), run the whole test suite with ctest.
# ctest's summary is the last thing printed. Extra arguments go to ctest (e.g. -L unit, -R sweep).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export BOOST_TEST_COLOR_OUTPUT=no OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
jobs=$(nproc)
log=build/build.log
mkdir -p build
echo "test: configuring and building (log: $log)" >&2
if ! { cmake --preset release && cmake --build --preset release -j"$jobs"; } >"$log" 2>&1; then
  grep -E "error|Error" "$log" | head -40 >&2
  tail -20 "$log" >&2
  echo "test: build failed (full log: $log)" >&2
  exit 1
fi
grep -E "warning:" "$log" | sort -u | head -20 >&2 || true
exec ctest --test-dir build/release --output-on-failure -j"$jobs" "$@"
