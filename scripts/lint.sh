#!/usr/bin/env bash
# Lint: clang-format (--dry-run --Werror, .clang-format) and clang-tidy (.clang-tidy) over libcommon/ kernels/ tools/.
#   scripts/lint.sh [format|tidy|all]   (default all)
# Tidy reads compile_commands.json from $CAIRN_LINT_BUILD (default build/release, what scripts/test.sh
# configures) and skips CUDA .cu files, which clang-tidy cannot parse with nvcc's flags. Tidy takes several
# minutes on 2 cores; CI runs only the format check unless CAIRN_TEST_TIDY=1 (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
build=${CAIRN_LINT_BUILD:-build/release}
jobs=$(nproc)
fmt=$(command -v clang-format-14 || command -v clang-format)
tidy=$(command -v clang-tidy-14 || command -v clang-tidy)
# Our sources, tracked or new (not ignored): generated and third-party code lives under build/ and is never linted.
sources() { git ls-files -co --exclude-standard -- libcommon kernels tools | grep -E "$1" || true; }
rc=0

if [ "$what" = format ] || [ "$what" = all ]; then
  mapfile -t files < <(sources '\.(h|hpp|cpp|cc|cu|cuh)$')
  echo "lint: clang-format on ${#files[@]} files" >&2
  if ! printf '%s\0' "${files[@]}" | xargs -0 -P"$jobs" -n16 "$fmt" --dry-run --Werror; then
    echo "lint: clang-format: files above differ from .clang-format (fix: $fmt -i FILE)" >&2
    rc=1
  fi
fi

if [ "$what" = tidy ] || [ "$what" = all ]; then
  if [ ! -f "$build/compile_commands.json" ]; then
    echo "lint: $build/compile_commands.json missing: configure first (cmake --preset release)" >&2
    exit 2
  fi
  if grep -q '^CMAKE_UNITY_BUILD:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
    # A unity build's database names the batch files, not our sources: tidy would check nothing.
    echo "lint: $build is a unity build (scripts/test.sh builds one): reconfigure it with -DCMAKE_UNITY_BUILD=OFF" \
      "or point CAIRN_LINT_BUILD at a per-source build" >&2
    exit 2
  fi
  # Only the translation units the build knows (a header is checked through the files including it).
  mapfile -t files < <(python3 - "$build/compile_commands.json" <<'PY'
import json, os, sys
root = os.getcwd()
seen = set()
for e in json.load(open(sys.argv[1])):
    f = os.path.realpath(os.path.join(e["directory"], e["file"]))
    rel = os.path.relpath(f, root)
    if rel.split(os.sep)[0] in ("libcommon", "kernels", "tools") and not rel.endswith(".cu") and rel not in seen:
        seen.add(rel)
        print(rel)
PY
)
  echo "lint: clang-tidy on ${#files[@]} files ($build/compile_commands.json)" >&2
  # One process per file, $jobs at a time; each prints its findings, the exit status says whether any failed.
  if ! printf '%s\0' "${files[@]}" | xargs -0 -P"$jobs" -n1 "$tidy" -p "$build" --quiet; then
    echo "lint: clang-tidy found problems (above)" >&2
    rc=1
  fi
fi
exit $rc
