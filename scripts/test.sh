#!/usr/bin/env bash
# README command 2 (and CI): install dependencies, build the release preset and run the whole test suite with ctest,
# then the asan phase (scripts/sanitize.sh asan; tsan on request) and the format check (scripts/lint.sh format).
# Extra arguments go to the release ctest (e.g. -L unit, -R sweep) and then skip the later phases unless asked for.
# Switches (1 = run, 0 = skip): CAIRN_TEST_SANITIZE (asan), CAIRN_TEST_TSAN (tsan, default 0), CAIRN_TEST_LINT
# (clang-format check), CAIRN_TEST_TIDY (clang-tidy, default 0: ~10+ min on 2 cores), CAIRN_TEST_UNITY (ON/OFF: the
# release build as a unity build, default ON unless tidy runs). Each phase's time is printed
# at the end. The tsan phase (~2 min on 2 idle cores: its own unity build of the libraries, the threaded tests) runs
# in CI (.ci/run sets CAIRN_TEST_TSAN=1; CI took 14-27 min without it) and on request here (CAIRN_TEST_TSAN=1, or
# bash scripts/sanitize.sh tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export BOOST_TEST_COLOR_OUTPUT=no OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
later=$([ $# -eq 0 ] && echo 1 || echo 0)
sanitize=${CAIRN_TEST_SANITIZE:-$later}
lint=${CAIRN_TEST_LINT:-$later}
tidy=${CAIRN_TEST_TIDY:-0}
tsan=${CAIRN_TEST_TSAN:-0}
jobs=$(nproc)
log=build/build.log
mkdir -p build
summary=()
failed=()
# phase NAME CMD...: runs CMD, records its wall time and whether it failed; later phases run regardless.
phase() {
  local name=$1 start=$SECONDS rc=0
  shift
  echo "test: phase $name" >&2
  "$@" || rc=$?
  summary+=("$(printf '%-14s %5d s  %s' "$name" $((SECONDS - start)) "$([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)")")")
  [ $rc = 0 ] || failed+=("$name")
}
# The CUDA code is compiled for one architecture here (sm_80 plus its PTX, which also runs on Hopper): the
# sources have no arch-specific paths above sm_80, so a second SASS target only doubles nvcc's time (~40 %
# of one .cu file's compile measured). CAIRN_TEST_CUDA_ARCHS="80;90" checks both, as a default build does.
cuda_archs=${CAIRN_TEST_CUDA_ARCHS:-80}
# Unity build (CMAKE_UNITY_BUILD: each target's sources compiled 8 to a file): nlohmann/json's and the tests'
# templates are instantiated and optimized once per batch instead of once per source, which took the release build
# from ~990 to ~640 CPU-seconds here. A developer's own build (scripts/demo.sh, cmake -B) stays one object per
# source, which also keeps every file's includes checked. clang-tidy needs the per-source compile database, so
# CAIRN_TEST_TIDY=1 builds without it (CAIRN_TEST_UNITY=OFF does too).
unity=${CAIRN_TEST_UNITY:-$([ "$tidy" = 1 ] && echo OFF || echo ON)}
release_build() {
  echo "test: configuring and building (log: $log)" >&2
  if ! { cmake --preset release -DCMAKE_CUDA_ARCHITECTURES="$cuda_archs" -DCMAKE_UNITY_BUILD="$unity" &&
    cmake --build --preset release -j"$jobs"; } >"$log" 2>&1; then
    grep -E "error|Error" "$log" | head -40 >&2
    tail -20 "$log" >&2
    echo "test: build failed (full log: $log)" >&2
    return 1
  fi
  grep -E "warning:" "$log" | sort -u | head -20 >&2 || true
}
phase release-build release_build
if [ ${#failed[@]} -eq 0 ]; then
  phase release-ctest ctest --test-dir build/release --output-on-failure -j"$jobs" "$@"
fi
if [ "$sanitize" = 1 ]; then
  phase asan bash scripts/sanitize.sh asan
fi
if [ "$tsan" = 1 ]; then phase tsan bash scripts/sanitize.sh tsan; fi
if [ "$lint" = 1 ]; then phase lint-format bash scripts/lint.sh format; fi
if [ "$tidy" = 1 ]; then phase lint-tidy bash scripts/lint.sh tidy; fi
echo "test: phases (wall time on $jobs cores):" >&2
printf '  %s\n' "${summary[@]}" >&2
if [ ${#failed[@]} -gt 0 ]; then
  echo "test: FAILED: ${failed[*]}" >&2
  exit 1
fi
