#!/usr/bin/env bash
# Sanitizer phase of CI: builds the asan (ASan + UBSan) or tsan (ThreadSanitizer) preset, only the targets
# the selected tests run, and runs those tests with the checked-in suppressions (tests/sanitizers/).
#   scripts/sanitize.sh asan|tsan [extra ctest args]
# asan: every unit and mpi test that is not e2e (e2e tests drive the tool binaries on real data: minutes of
#   ASan runtime for code the unit/mpi tests already cover). tsan: the tests that run our threads: the
#   loader's prefetch thread (train_loader), checkpoints (train_checkpoint: written from the calling thread,
#   there is no writer thread), the report's run-directory pool (report_tool), the tokenizer pool, the shard
#   writer pool and shards::for_each_index_parallel of cairn-reshard, run below on fortunes with 3 threads
#   (build, reshard, verify), which reshard_unit does not start.
# OpenMP stays out of tsan: Debian's libgomp is not built with TSan, so its barriers look like races in our
# kernels (false positives). Every test already runs with OMP_NUM_THREADS=1 (cmake/CairnTesting.cmake), so
# libgomp starts no threads there; the kernels' parallel loops are checked by the ASan run and the ops tests.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh asan|tsan [ctest args]}
shift
dir=build/$kind
supp=$PWD/tests/sanitizers
case $kind in
  asan)
    select=(-L 'unit|mpi' -LE 'e2e|gpu|slurm')
    extra_targets=()
    # ASan: stop at the first error with a full report. The MPI tests replace ASAN_OPTIONS with
    # detect_leaks=0 (cmake/CairnTesting.cmake: Open MPI's components keep memory past MPI_Finalize);
    # LSan's suppressions cover the third-party leaks of the other tests (lsan.supp).
    export ASAN_OPTIONS="abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=0:check_initialization_order=1:strict_init_order=1:detect_odr_violation=1"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
    ;;
  tsan)
    select=(-R '^(train_loader|train_checkpoint|reshard_unit|report_tool)$')
    extra_targets=(cairn-reshard)
    export TSAN_OPTIONS="suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1:history_size=4"
    ;;
  *) echo "sanitize: unknown kind '$kind' (asan or tsan)" >&2; exit 2 ;;
esac
export BOOST_TEST_COLOR_OUTPUT=no OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
jobs=$(nproc)
mkdir -p "$dir"
log=$dir/build.log
echo "sanitize $kind: configuring (log: $log)" >&2
cmake --preset "$kind" >"$log" 2>&1 || { tail -30 "$log" >&2; exit 1; }

# The selected tests' executables. A Boost test's target has the test's name (cairn_add_test); ctest names the
# program only once it is built, so the names come from the test names (an MPI test's _npN removed) and from
# the build-tree binaries script tests pass (e.g. cairn-cli-probe), kept when the build knows such a target.
mapfile -t targets < <(ctest --test-dir "$dir" "${select[@]}" --show-only=json-v1 | python3 -c '
import json, os, re, subprocess, sys
root = os.path.realpath(sys.argv[1])
# "name: phony" (Ninja) or "... name" (Makefiles): every target the build defines.
help = subprocess.run(["cmake", "--build", root, "--target", "help"], text=True, capture_output=True, check=True)
known = set(re.sub(r"^\.\.\. |:.*$", "", l).strip() for l in help.stdout.splitlines())
names = set()
for t in json.load(sys.stdin)["tests"]:
    names.add(re.sub(r"_np[0-9]+$", "", t["name"]))
    for a in t.get("command") or []:
        if os.path.realpath(a).startswith(root + os.sep):
            names.add(os.path.basename(a))
print("\n".join(sorted((names & known) - {""})))' "$dir" | grep .)
[ ${#targets[@]} -gt 0 ] || { echo "sanitize $kind: no test targets found" >&2; exit 1; }
targets+=("${extra_targets[@]}")
echo "sanitize $kind: building ${#targets[@]} targets: ${targets[*]}" >&2
if ! cmake --build "$dir" -j"$jobs" --target "${targets[@]}" >>"$log" 2>&1; then
  grep -E "error|Error" "$log" | head -40 >&2
  echo "sanitize $kind: build failed (full log: $log)" >&2
  exit 1
fi
echo "sanitize $kind: running tests" >&2
ctest --test-dir "$dir" --output-on-failure -j"$jobs" "${select[@]}" "$@"
if [ "$kind" = tsan ]; then
  t=$(mktemp -d "${TMPDIR:-/tmp}/cairn-tsan.XXXXXX")
  trap 'rm -rf "$t"' EXIT
  b=$dir/bin/cairn-reshard
  mapfile -t fortunes < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort | head -8)
  echo "sanitize tsan: cairn-reshard build/reshard/verify with 3 threads on ${#fortunes[@]} fortunes files" >&2
  "$b" build --log-level warn --delimiter % --shards 6 --threads 3 --out "$t/d6" "${fortunes[@]}"
  "$b" reshard --log-level warn "$t/d6" --shards 4 --seed 7 --threads 3 --out "$t/d4"
  "$b" verify --log-level warn --set data.threads=3 "$t/d4"
  echo "sanitize tsan: cairn-reshard threads: no report" >&2
fi
