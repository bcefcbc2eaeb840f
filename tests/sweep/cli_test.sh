#!/usr/bin/env bash
# cairn-sweep under real mpirun (2 and 4 ranks): table/JSON/HDF5/fabric agreement, tiers on
# simulated nodes, a planted wrong element -> exit 3, the busbw gate -> exit 3, bad input -> exit 2.
# Usage: cli_test.sh FAULTS_BIN (tests/sweep's cairn-sweep-faults: the same command line with injected faults;
# the installed cairn-sweep has none).
set -uo pipefail
BIN=${CAIRN_BIN_DIR:?}/cairn-sweep
FAULTS=${1:?usage: cli_test.sh <cairn-sweep-faults>}
PY=/usr/bin/python3
CHECK=tests/sweep/check_sweep.py
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# 1. Every collective on 2 ranks, --json next to the run-directory outputs.
if mpirun -np 2 "$BIN" --out "$TMP/np2" all -b 64 -e 64K -n 3 -w 1 --json "$TMP/np2.json" >"$TMP/np2.txt" 2>"$TMP/np2.err"; then
  $PY $CHECK "$TMP/np2.txt" "$TMP/np2/sweep" --json "$TMP/np2.json" --minbytes 64 --maxbytes 65536 || fail "np2 check"
  # Provenance beside the measurement: the command line in the table's preamble, the [sweep] settings in fabric.toml.
  grep -q "^# cairn-sweep run .* on .*: .*cairn-sweep --out $TMP/np2 all -b 64 -e 64K" "$TMP/np2.txt" ||
    fail "np2: no command line in the preamble"
  $PY - "$TMP/np2/sweep/fabric.toml" <<'PY' || fail "np2: fabric.toml does not record the [sweep] settings"
import sys, tomllib
s = tomllib.load(open(sys.argv[1], "rb"))["fabric"]["sweep"]
assert s["minbytes"] == "64" and s["maxbytes"] == "64K" and s["iters"] == 3 and s["collectives"] == ["all"], s
PY
else
  fail "np2 sweep exited $?"; cat "$TMP/np2.err" >&2
fi

# 2. 4 ranks as 2 simulated nodes of 2: world, intra (both nodes at once) and inter tiers.
if mpirun -np 4 --oversubscribe "$FAULTS" --ranks-per-node 2 --out "$TMP/np4" allreduce,allgather,reducescatter,alltoall,sendrecv \
    -b 64 -e 16K -n 2 -w 1 --tiers world,intra,inter -d float32,int32 --op sum,max >"$TMP/np4.txt" 2>"$TMP/np4.err"; then
  $PY $CHECK "$TMP/np4.txt" "$TMP/np4/sweep" --minbytes 64 --maxbytes 16384 || fail "np4 check"
  for t in world intra inter; do
    grep -q "^\[$t.allreduce\]" "$TMP/np4/sweep/fabric.toml" || fail "fabric.toml lacks [$t.allreduce]"
  done
  grep -q "^ranks = 2" "$TMP/np4/sweep/fabric.toml" || fail "intra/inter tiers should have 2 ranks"
else
  fail "np4 sweep exited $?"; cat "$TMP/np4.err" >&2
fi

# 3. One real node: inter is skipped with a note.
mpirun -np 2 "$BIN" --out "$TMP/one" -b 64 -e 256 -n 1 -w 0 --tiers world,inter >"$TMP/one.txt" 2>&1 || fail "one-node sweep"
grep -q "# Note: tier inter skipped: the job runs on one node" "$TMP/one.txt" || fail "no note for skipped inter tier"
# ... and intra beside world is the same communicator there: measured once (world), with a note; intra alone is measured.
mpirun -np 2 "$BIN" --out "$TMP/one-wi" allreduce -b 64 -e 256 -n 1 -w 0 --tiers world,intra >"$TMP/one-wi.txt" 2>&1 ||
  fail "one-node world,intra sweep"
grep -q "# Note: tier intra skipped: the job runs on one node, where it is the world tier" "$TMP/one-wi.txt" ||
  fail "no note for intra beside world on one node"
grep -q "^# Tier world:" "$TMP/one-wi.txt" || fail "one-node world,intra: world not measured"
grep -q "^# Tier intra:" "$TMP/one-wi.txt" && fail "one-node world,intra: intra measured again"
mpirun -np 2 "$BIN" --out "$TMP/one-i" allreduce -b 64 -e 256 -n 1 -w 0 --tiers intra >"$TMP/one-i.txt" 2>&1 ||
  fail "one-node intra sweep"
grep -q "^# Tier intra:" "$TMP/one-i.txt" || fail "one-node intra alone: not measured"
# Every tier skipped (inter alone on one node): nothing measured is not a pass. Exit 2 (the tiers do not fit the job),
# and 3 with a bandwidth floor, which was never checked (both exited 0 with empty tables).
mpirun -np 2 "$BIN" --out "$TMP/one-none" allreduce -b 64 -e 256 -n 1 -w 0 --tiers inter >"$TMP/none.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "nothing was measured: no tier of --tiers can run on this job" "$TMP/none.txt" ||
  fail "inter alone on one node: exit $rc, $(cat "$TMP/none.txt")"
mpirun -np 2 "$BIN" --out "$TMP/one-gate" allreduce -b 64 -e 256 -n 1 -w 0 --tiers inter --min-busbw 100 \
  >"$TMP/none-gate.txt" 2>&1
rc=$?
[ $rc -eq 3 ] && grep -q "the bandwidth floor (--min-busbw 100 GB/s) was not checked" "$TMP/none-gate.txt" ||
  fail "inter alone with a floor: exit $rc, $(cat "$TMP/none-gate.txt")"

# 4. A planted wrong element: #wrong > 0 in the table and exit 3.
mpirun -np 2 "$FAULTS" --corrupt-check 2 --out "$TMP/bad" allgather -b 64 -e 1K -n 1 -w 0 >"$TMP/bad.txt" 2>"$TMP/bad.err"
rc=$?
[ $rc -eq 3 ] || fail "planted wrong: exit $rc, want 3"
grep -q "# Out of bounds values : 1 FAILED" "$TMP/bad.txt" || fail "planted wrong not in the footer"
grep -q "1 wrong element" "$TMP/bad.err" || fail "planted wrong: no message"
$PY $CHECK "$TMP/bad.txt" "$TMP/bad/sweep" --minbytes 64 --maxbytes 1024 --expect-wrong 1 || fail "bad-run check"

# 4'. "Out of bounds values" counts failed checks as nccl-tests does (a rank and placement each), #wrong the wrong
# elements: three corrupted elements in one check print #wrong 3 and "Out of bounds values : 1" (it said 3).
mpirun -np 2 "$FAULTS" --corrupt-check 2 --corrupt-elements 3 --out "$TMP/bad3" allgather -b 64 -e 1K -n 1 -w 0 \
  >"$TMP/bad3.txt" 2>"$TMP/bad3.err"
rc=$?
[ $rc -eq 3 ] || fail "3 planted wrong: exit $rc, want 3"
grep -q "# Out of bounds values : 1 FAILED" "$TMP/bad3.txt" || fail "3 planted wrong in one check: footer does not count 1"
[ "$(awk '!/^#/ && ($9 == 3 || $13 == 3)' "$TMP/bad3.txt" | wc -l)" = 1 ] || fail "3 planted wrong: no row with #wrong 3"
grep -q "3 wrong element(s) in the results, 1 failed check(s)" "$TMP/bad3.err" || fail "3 planted wrong: $(cat "$TMP/bad3.err")"
$PY $CHECK "$TMP/bad3.txt" "$TMP/bad3/sweep" --minbytes 64 --maxbytes 1024 --expect-wrong 3 --expect-failed-checks 1 ||
  fail "3 planted wrong: check"

# 4''. A SIGKILL mid-block (Slurm's kill after its grace time, the OOM killer) where no handler runs: the sizes
# measured before it are on stdout, each a whole row, as nccl-tests prints a row per size. Rank 0 kills itself
# once 3 of allreduce's 8 sizes are measured; the rows used to wait for the block's end, and the kill lost them all.
mpirun -np 2 "$FAULTS" --kill-after-sizes 3 --out "$TMP/kill" allreduce -b 8 -e 1K -n 1 -w 0 2>"$TMP/kill.err" |
  cat >"$TMP/kill.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -ne 0 ] || fail "SIGKILL mid-block: mpirun exited 0"
rows=$(awk '!/^#/ && NF == 13 && $3 == "float"' "$TMP/kill.txt" | wc -l)
[ "$rows" = 3 ] && [ "$(grep -cv '^#' "$TMP/kill.txt")" = 3 ] && [ -z "$(tail -c1 "$TMP/kill.txt" | tr -d '\n')" ] ||
  fail "SIGKILL mid-block: $rows whole rows on stdout, want the 3 measured: $(cat "$TMP/kill.txt")"
grep -qE '^ +8 +2 +float +sum +-1 ' "$TMP/kill.txt" && grep -qE '^ +32 +8 +float ' "$TMP/kill.txt" ||
  fail "SIGKILL mid-block: the rows kept are not the first 3 sizes"

# 4c. A stop signal (Slurm's time limit, preemption) to rank 0 only, after 5 of allreduce's 8 sizes: every rank stops
# before the next size, the table and the files hold the 5 sizes (a killed sweep kept only what reached stdout),
# exit 75. allgather's table is not started.
mpirun -np 2 "$FAULTS" --term-after-sizes 5 --out "$TMP/term" allreduce allgather -b 8 -e 1K -f 2 -n 1 -w 0 \
  >"$TMP/term.txt" 2>"$TMP/term.err"
rc=$?
[ $rc -eq 75 ] || fail "SIGTERM mid-sweep: exit $rc, want 75: $(cat "$TMP/term.err")"
grep -q "# Note: stopped by SIGTERM with 1 of 2 tables begun" "$TMP/term.txt" || fail "SIGTERM mid-sweep: no note"
grep -q "warning: stopped by SIGTERM with 1 of 2 tables begun" "$TMP/term.err" || fail "SIGTERM mid-sweep: no warning"
! grep -qx "cairn-sweep: *" "$TMP/term.err" || fail "SIGTERM mid-sweep: an empty error line"
grep -q "allreduce float 5/8 sizes (62.5%).* stopped$" "$TMP/term.err" ||
  fail "SIGTERM mid-sweep: the progress line does not say 5 of 8 sizes (it said 8/8, 100 %)"
$PY - "$TMP/term/sweep/sweep.json" <<'PY' || fail "SIGTERM mid-sweep: sweep.json"
import json, sys
d = json.load(open(sys.argv[1]))
rows = [r for r in d["results"] if r.get("name") == "allreduce" or r.get("collective") == "allreduce"] or d["results"]
sizes = sorted({r["size"] for r in rows})
assert sizes == [8, 16, 32, 64, 128], sizes
PY
# ... and when it comes between two tables (after allreduce's 8 sizes), allgather's table is left without rows or a
# footer, and allreduce's stays whole.
mpirun -np 2 "$FAULTS" --term-after-sizes 8 --out "$TMP/term2" allreduce allgather -b 8 -e 1K -f 2 -n 1 -w 0 \
  >"$TMP/term2.txt" 2>"$TMP/term2.err"
rc=$?
[ $rc -eq 75 ] && [ "$(grep -c "Avg bus bandwidth" "$TMP/term2.txt")" = 1 ] &&
  [ "$(grep -cE '^ +[0-9]+ +[0-9]+ +float' "$TMP/term2.txt")" = 8 ] ||
  fail "SIGTERM between tables: exit $rc $(cat "$TMP/term2.txt")"

# 4a. A command line with a newline (a quoted --out) stays one comment line in the preamble.
mpirun -np 1 "$BIN" --out "$TMP/nl"$'\n'"x" allreduce -b 8 -e 8 -n 1 -w 0 >"$TMP/nl.txt" 2>"$TMP/nl.err" ||
  fail "newline in --out: exit $?"
grep -q '^# cairn-sweep run ' "$TMP/nl.txt" && grep -qF "/nl\\nx' allreduce" "$TMP/nl.txt" ||
  fail "newline in --out: not escaped in the preamble"
[ "$(sed -n 4p "$TMP/nl.txt" | cut -c1)" = "#" ] || fail "newline in --out: preamble line 4 is not a comment"

# 4b. Segments of 1 M elements and more are filled and checked by several threads (the rank's share of its cores:
# both here, unbound): every element still checked, the planted one still counted once, in place and out of place.
mpirun --bind-to none -np 1 "$FAULTS" --corrupt-check 1 --out "$TMP/bigbad" allreduce -b 8M -e 8M -n 1 -w 0 \
  >"$TMP/bigbad.txt" 2>"$TMP/bigbad.err"
rc=$?
[ $rc -eq 3 ] || fail "planted wrong in 2 M elements: exit $rc, want 3"
grep -q "# Out of bounds values : 1 FAILED" "$TMP/bigbad.txt" || fail "planted wrong in 2 M elements not counted once"
mpirun --bind-to none -np 1 "$BIN" --out "$TMP/bigok" allreduce reducescatter allgather -b 8M -e 8M -n 1 -w 0 -c 2 \
  >"$TMP/bigok.txt" 2>"$TMP/bigok.err" || fail "2 M elements: a correct sweep exited $?"
[ "$(grep -c "# Out of bounds values : 0 OK" "$TMP/bigok.txt")" = 3 ] || fail "2 M elements: wrong elements in a correct sweep"

# 5. The bandwidth gate.
mpirun -np 2 "$BIN" --out "$TMP/gate" -b 1K -e 4K -n 1 -w 0 --min-busbw 100000 >"$TMP/gate.txt" 2>"$TMP/gate.err"
rc=$?
[ $rc -eq 3 ] || fail "--min-busbw: exit $rc, want 3"
grep -q "Avg bus bandwidth    : .* FAILED" "$TMP/gate.txt" || fail "--min-busbw: footer does not say FAILED"

# 5'. nccl-tests' NCCL_TESTS_MIN_BW: the floor at 90 % of it (a run nccl-tests fails fails here too, exit 3), the log
# naming the setting; a flag, CAIRN_SWEEP_MIN_BUSBW or --set wins over it (it was ignored).
NCCL_TESTS_MIN_BW=100000 mpirun -np 2 "$BIN" --out "$TMP/ngate" -b 1K -e 4K -n 1 -w 0 >"$TMP/ngate.txt" 2>"$TMP/ngate.err"
rc=$?
[ $rc -eq 3 ] || fail "NCCL_TESTS_MIN_BW: exit $rc, want 3"
grep -q "Avg bus bandwidth    : .* FAILED" "$TMP/ngate.txt" || fail "NCCL_TESTS_MIN_BW: footer does not say FAILED"
grep -q "bandwidth floor 90000 GB/s (each table's average bus bandwidth), set by env NCCL_TESTS_MIN_BW=100000 \
(nccl-tests fails a run below 90% of it)" "$TMP/ngate.err" || fail "NCCL_TESTS_MIN_BW: log: $(cat "$TMP/ngate.err")"
NCCL_TESTS_MIN_BW=100000 mpirun -np 2 "$BIN" --out "$TMP/ngate2" -b 1K -e 4K -n 1 -w 0 --min-busbw 0.000001 \
  >"$TMP/ngate2.txt" 2>"$TMP/ngate2.err" || fail "--min-busbw over NCCL_TESTS_MIN_BW: exit $?"
grep -q "bandwidth floor 1e-06 GB/s (each table's average bus bandwidth), set by --min-busbw (over env \
NCCL_TESTS_MIN_BW=100000)" "$TMP/ngate2.err" || fail "--min-busbw over NCCL_TESTS_MIN_BW: log: $(cat "$TMP/ngate2.err")"
NCCL_TESTS_MIN_BW=50 "$BIN" --print-config 2>&1 | grep -q '^min_busbw = 45.0 *# env NCCL_TESTS_MIN_BW' ||
  fail "NCCL_TESTS_MIN_BW=50: --print-config does not show min_busbw = 45.0 from it"
NCCL_TESTS_MIN_BW=50 CAIRN_SWEEP_MIN_BUSBW=7 "$BIN" --print-config 2>&1 | grep -q '^min_busbw = 7.0' ||
  fail "CAIRN_SWEEP_MIN_BUSBW does not win over NCCL_TESTS_MIN_BW"
NCCL_TESTS_MIN_BW=fast "$BIN" --print-config >/dev/null 2>"$TMP/nbad.err"
rc=$?
[ $rc -eq 2 ] && grep -q "env NCCL_TESTS_MIN_BW: 'fast' is not a bus bandwidth in GB/s" "$TMP/nbad.err" ||
  fail "NCCL_TESTS_MIN_BW=fast: exit $rc, $(cat "$TMP/nbad.err")"

# 5''. nccl-tests' binary names name their collectives (the config refused them): a script's all_gather_perf measures
# allgather.
if mpirun -np 2 "$BIN" --out "$TMP/perf" all_gather_perf reduce_scatter_perf -b 64 -e 256 -n 1 -w 0 \
    >"$TMP/perf.txt" 2>"$TMP/perf.err"; then
  [ "$(grep -c '^# Collective test starting: ' "$TMP/perf.txt")" = 2 ] &&
    grep -q '^# Collective test starting: all_gather_perf' "$TMP/perf.txt" &&
    grep -q '^# Collective test starting: reduce_scatter_perf' "$TMP/perf.txt" ||
    fail "all_gather_perf reduce_scatter_perf: not their tables"
else
  fail "all_gather_perf reduce_scatter_perf exited $?"; cat "$TMP/perf.err" >&2
fi
"$BIN" --print-config --set 'sweep.collectives=["alltoall_perf"]' >/dev/null 2>&1 ||
  fail "--set sweep.collectives=[\"alltoall_perf\"] refused"

# 6. Large MPI counts: an injected fault lowers MPI's int count limit to 1000 elements, so sizes up to
# 64 KiB take the large-count path (sliced reductions, derived types for the rest; 1000 does not
# divide the counts, so remainders are exercised). Every element is still checked on 3 ranks.
if mpirun -np 3 --oversubscribe "$FAULTS" --mpi-count-limit 1000 --out "$TMP/big" \
    allreduce,allgather,alltoall,broadcast,reduce,sendrecv -d float32,int32 -b 6K -e 48K -n 1 -w 1 -c 1 \
    >"$TMP/big.txt" 2>"$TMP/big.err"; then
  $PY $CHECK "$TMP/big.txt" "$TMP/big/sweep" --minbytes 6144 --maxbytes 49152 || fail "large-count check"
  n=$(grep -c "use MPI large-count handling" "$TMP/big.txt")
  [ "$n" -eq 12 ] || fail "large-count notes: $n, want 12 (6 collectives x 2 types)"
else
  fail "large-count sweep exited $?"; cat "$TMP/big.err" >&2
fi
mpirun -np 2 "$FAULTS" --mpi-count-limit 1000 --out "$TMP/bigrs" reducescatter -b 64K -e 64K >"$TMP/u.txt" 2>"$TMP/u.err"
rc=$?
[ $rc -eq 2 ] || fail "large-count reducescatter: exit $rc, want 2"
grep -q "no large-count reduce-scatter" "$TMP/u.err" || fail "large-count reducescatter: no message"

# 7. --bench-bare (the benchmark mode): both loops measured per size, JSON with per-round figures.
if mpirun -np 2 "$BIN" --out "$TMP/bench" --bench-bare 4 --bench-size-s 0 -b 1K -e 4K -w 1 --json "$TMP/bench.json" \
    >"$TMP/bench.txt" 2>"$TMP/bench.err"; then
  $PY - "$TMP/bench.json" <<'PY' || fail "--bench-bare JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert [r["size"] for r in d["rows"]] == [1024, 2048, 4096], d["rows"]
for r in d["rows"]:
    assert r["rounds"] == 4 and len(r["sweep_busbw"]) == 4 and len(r["bare_busbw"]) == 4, r
    assert all(x > 0 for x in r["sweep_busbw"] + r["bare_busbw"]), r
    assert r["sweep_best"] == max(r["sweep_busbw"]) and r["bare_best"] == max(r["bare_busbw"]), r
PY
  [ "$(grep -vc '^#' "$TMP/bench.txt")" -eq 3 ] || fail "--bench-bare: want 3 table rows"
else
  fail "--bench-bare exited $?"; cat "$TMP/bench.err" >&2
fi

# 8. Bad input: exit 2 and a message naming the problem.
expect_usage() {
  local want=$1; shift
  mpirun -np 2 "$BIN" --out "$TMP/usage" "$@" >"$TMP/u.txt" 2>"$TMP/u.err"
  local rc=$?
  [ $rc -eq 2 ] || fail "'$*': exit $rc, want 2"
  grep -qE -- "$want" "$TMP/u.err" || { fail "'$*': no '$want' in stderr"; head -3 "$TMP/u.err" >&2; }
}
expect_usage "at least 1 byte" -b 0
expect_usage "size range is inverted" -b 1M -e 1K
expect_usage "is not one of" allreduse
expect_usage "not available on backend mpi" -d bfloat16
expect_usage "not available on backend mpi" --op avg
expect_usage "unknown reduction op 'bogus'" -o bogus
expect_usage "mulsum: not measured" -o mulsum
expect_usage "int8: not measured" -d int8
expect_usage "nthreads 2: cairn-sweep runs one thread" -t 2
expect_usage "ngpus 4: cairn-sweep drives one GPU" -g 4
expect_usage "root -2: give a rank, or -1" -r -2
expect_usage "blocking 4: choose 0, 1, 2 or 3" -z 4
expect_usage "report_cputime 2: choose 0 or 1" -C 2
expect_usage "agg_iters 0: must be 1 or more" -m 0
expect_usage "local_register 3: choose 0, 1 or 2" -R 3
expect_usage "not a rank of tier world" broadcast -r 2
expect_usage "built without CUDA|GPUs but only 0 are visible" --backend nccl  # CUDA builds on GPU-less CI
expect_usage "not a size" -e 12X
# A size from a config file names where it was set, and --print-config refuses what the sweep would.
printf '[sweep]\nminbytes = "abc"\n' > "$TMP/badsize.toml"
expect_usage "badsize.toml:2:1: sweep.minbytes: 'abc' is not a size" --config "$TMP/badsize.toml"
expect_usage "--minbytes: sweep.minbytes: 'abc' is not a size" -b abc --print-config
expect_usage "--maxbytes: sweep.maxbytes: '99999999999999999999' is too large" -e 99999999999999999999  # was "stoull", exit 1
# Every tool checks a size where it loads the config (cairn-plan passed `sweep.minbytes=bogus` that cairn-sweep
# refused), and a list that must name something is refused empty.
"$CAIRN_BIN_DIR/cairn-plan" --set sweep.minbytes=bogus --print-config > /dev/null 2> "$TMP/plan_size.err" && fail "cairn-plan took sweep.minbytes=bogus"
grep -q "sweep.minbytes: 'bogus' is not a size" "$TMP/plan_size.err" || fail "cairn-plan: $(cat "$TMP/plan_size.err")"
expect_usage "sweep.collectives: the list is empty: give at least one value" --set 'sweep.collectives=[]' --print-config
# A byte count may be a plain TOML integer (a file, --set, CAIRN_SWEEP_*); negative ones are refused by name.
"$BIN" --print-config --set sweep.maxbytes=65536 --set sweep.stepbytes=4096 2>&1 | grep -q '^maxbytes = "65536"' ||
  fail "--set sweep.maxbytes=65536 not taken as 64K"
CAIRN_SWEEP_MINBYTES=1024 "$BIN" --print-config 2>&1 | grep -q '^minbytes = "1024"' || fail "integer env byte count"
expect_usage "sweep.maxbytes: value -5 is not a byte count" --set sweep.maxbytes=-5 --print-config
expect_usage "sweep.maxbytes: value 1.5 is not a byte count: write whole bytes" --set sweep.maxbytes=1.5 --print-config
expect_usage "measures allreduce only" --bench-bare 3 allgather -b 1K -e 1K
# Buffers the node cannot hold: refused before any allocation and before the table (each allocation alone fits, so
# the ranks used to be killed by the OOM killer once they touched them, or exit 1 after the header).
expect_usage "the sweep's buffers need 2.2 TB per rank \(2 x 1.1 TB at -e/--maxbytes\), 4.4 TB for the 2 ranks on \
this node, more than 80% of the .* of memory available here" -b 1M -e 1T
! grep -q "out-of-place" "$TMP/u.txt" || fail "-e 1T: the table started before the memory check"

# 8a. Ranks given different configs (MPMD, a CAIRN_* variable on one node): exit 2 naming the key at once, where
# they used to wait forever in each other's collectives.
mpirun -np 1 "$BIN" --out "$TMP/usage" allreduce -b 8 -e 1K -n 1 -w 0 : -np 1 "$BIN" --out "$TMP/usage" allgather \
  -b 8 -e 1K -n 1 -w 0 >"$TMP/u.txt" 2>"$TMP/u.err"
rc=$?
[ $rc -eq 2 ] || fail "ranks with different collectives: exit $rc, want 2"
grep -qF 'rank 1: the config differs from rank 0'"'"'s: sweep.collectives = ["allgather"] here, sweep.collectives = ["allreduce"] on rank 0' \
  "$TMP/u.err" || { fail "ranks with different collectives: no message naming the key"; head -3 "$TMP/u.err" >&2; }

# 8a'. A config that fails to load on one rank only (a config file on a node-local path): every rank learns of it,
# so rank 0 reports it naming the rank and ends the job at once (the failing rank used to wait out a 20 s grace
# for rank 0, which sat in the next collective, and then report it itself).
mpirun -np 1 "$BIN" --out "$TMP/usage" allreduce -b 8 -e 1K -n 1 -w 0 : -np 1 "$BIN" --config "$TMP/nowhere.toml" \
  --out "$TMP/usage" allreduce -b 8 -e 1K -n 1 -w 0 >"$TMP/u.txt" 2>"$TMP/u.err"
rc=$?
[ $rc -eq 2 ] || fail "a config missing on rank 1: exit $rc, want 2"
grep -q '^\[r0/2 [^]]*\] cairn-sweep: rank 1: .*nowhere.toml' "$TMP/u.err" ||
  { fail "a config missing on rank 1: rank 0 did not report it"; head -3 "$TMP/u.err" >&2; }

# 8b. An output location that cannot be written fails before anything is measured (exit 2, no table),
# naming the path. Tests run as root, where mode bits do not stop writes: a path under a regular file,
# a directory where a file goes, and /proc fail for root too.
echo "not a directory" > "$TMP/afile"
mkdir -p "$TMP/hasdir/sweep/sweep.json" "$TMP/jdir"
expect_unwritable() {
  local want=$1; shift
  mpirun -np 2 "$BIN" "$@" -b 64 -e 1K -n 1 -w 0 >"$TMP/w.txt" 2>"$TMP/w.err"
  local rc=$?
  [ $rc -eq 2 ] || fail "'$*': exit $rc, want 2"
  grep -qF -- "$want" "$TMP/w.err" || { fail "'$*': stderr does not name '$want'"; head -3 "$TMP/w.err" >&2; }
  ! grep -q "^# Out of bounds values" "$TMP/w.txt" || fail "'$*': measured before failing on the output"
}
expect_unwritable "--out: cannot use run directory \"$TMP/afile/sub\": Not a directory" --out "$TMP/afile/sub"
expect_unwritable "--out: cannot use run directory \"$TMP/afile\": Not a directory" --out "$TMP/afile"
expect_unwritable "\"$TMP/hasdir/sweep/sweep.json\": Is a directory" --out "$TMP/hasdir"
expect_unwritable "\"/proc/cairn-sweep-test/sweep\"" --out /proc/cairn-sweep-test
expect_unwritable "\"$TMP/jdir\": Is a directory" --out "$TMP/jout" -J "$TMP/jdir"
expect_unwritable "\"$TMP/afile/x.json\"" --out "$TMP/jout" --json "$TMP/afile/x.json"
expect_unwritable "\"$TMP/afile/b.json\"" --out "$TMP/jout" --bench-bare 2 --json "$TMP/afile/b.json"

# 8c. One sweep per run directory: while another process holds <out>/sweep/LOCK (flock(1) stands in for a running
# sweep; no timing involved), a sweep stops before measuring anything (exit 1, the holder named, on both ranks).
mkdir -p "$TMP/busy/sweep"
echo "pid 4242 on node7 (started 2026-12-05T00:00:00Z)" > "$TMP/busy/sweep/LOCK"
flock -n "$TMP/busy/sweep/LOCK" mpirun -np 2 "$BIN" --out "$TMP/busy" -b 64 -e 1K -n 1 -w 0 >"$TMP/busy.txt" 2>"$TMP/busy.err"
rc=$?
[ $rc -eq 1 ] || fail "a sweep on a run directory another sweep holds: exit $rc, want 1"
grep -qF "another cairn-sweep is running in \"$TMP/busy\": pid 4242 on node7 (started 2026-12-05T00:00:00Z) holds" \
  "$TMP/busy.err" || { fail "a held sweep lock: the holder is not named"; head -3 "$TMP/busy.err" >&2; }
! grep -q "^# Out of bounds values" "$TMP/busy.txt" || fail "a held sweep lock: measured anyway"
[ ! -e "$TMP/busy/sweep/sweep.json" ] || fail "a held sweep lock: sweep.json written anyway"

# 9. nccl-tests' flags with nccl-tests' meaning. -o is the reduction op (not --out): `-o max`
# measures max and writes nothing under ./max; --out keeps its long form.
mkdir -p "$TMP/cwd"
if (cd "$TMP/cwd" && mpirun -np 2 "$BIN" --out "$TMP/opmax" -o max -b 64 -e 256 -n 1 -w 0 >"$TMP/opmax.txt" 2>"$TMP/opmax.err"); then
  [ ! -e "$TMP/cwd/max" ] || fail "-o max created ./max (taken as --out)"
  n=$(grep -vc '^#' "$TMP/opmax.txt"); m=$(awk '!/^#/ && NF == 13 && $4 == "max"' "$TMP/opmax.txt" | wc -l)
  [ "$m" -eq 3 ] && [ "$n" -eq 4 ] || fail "-o max: want 3 allreduce max rows, got $m of $n lines"
else
  fail "-o max exited $?"; cat "$TMP/opmax.err" >&2
fi

# 10. Every collective x every type (-d all) x every op (-o all) x every root (-r -1) on 3 ranks:
# sizes that leave a rank less than a 16-byte block print 0-byte rows (no exit 2); every line
# follows nccl-tests' formatting rules (tests/sweep/nccl_format.py) and the files agree.
if mpirun -np 3 --oversubscribe "$BIN" --out "$TMP/fmt" all -b 8 -e 4K -n 1 -w 1 -d all -o all -r -1 \
    -J "$TMP/fmt.json" >"$TMP/fmt.txt" 2>"$TMP/fmt.err"; then
  $PY tests/sweep/nccl_format.py "$TMP/fmt.txt" "$TMP/fmt.json" --types int32,float,double --ops sum,prod,max,min \
    --ranks 3 --roots all || fail "nccl-tests format (3 ranks, all types/ops/roots)"
  $PY $CHECK "$TMP/fmt.txt" "$TMP/fmt/sweep" --json "$TMP/fmt.json" --minbytes 8 --maxbytes 4096 || fail "3-rank check"
  z=$(awk '!/^#/ && NF == 13 && $1 == 0 && $2 == 0' "$TMP/fmt.txt" | wc -l)
  [ "$z" -gt 0 ] || fail "no 0-byte rows for sizes below one block per rank"
  # Why, per collective and type: each rank's share rounds down to whole 16-byte blocks (8, 16, 32 < 3 x 16 bytes).
  grep -qxF "# Note: allgather double (tier world, 3 ranks): 3 size(s) run as 0-byte rows, below 48 B (3 ranks x 16 \
B): each rank's share, size / 8 B / 3 elements, rounds down to a multiple of 2 elements (16 B), which is 0 there" \
    "$TMP/fmt.txt" || fail "0-byte rows: no note giving the reason for allgather double"
  grep -q "^# Writing JSON output to $TMP/fmt.json" "$TMP/fmt.txt" || fail "-J: no 'Writing JSON output' line"
else
  fail "all-types/ops/roots sweep exited $?"; cat "$TMP/fmt.err" >&2
fi

# 10'. A size below one element is a 0-byte row of any collective; the note says so (it blamed a 16-byte block).
mpirun -np 1 "$BIN" --out "$TMP/tiny" allreduce -d double -b 4 -e 16 -n 1 -w 0 >"$TMP/tiny.txt" 2>&1 || fail "-b 4 -d double"
grep -qxF "# Note: allreduce double (tier world, 1 ranks): 1 size(s) run as 0-byte rows, below 8 B: the size holds no \
whole 8-byte double element" "$TMP/tiny.txt" || fail "-b 4 -d double: no note on the element size: $(grep Note "$TMP/tiny.txt")"

# 11. -C 1 (cputime columns and cpu_time in JSON), -m 2, -z 3, -G/-R accepted with a note, -t/-g 1,
# --experiment-name, and sendrecv's op column.
if mpirun -np 2 "$BIN" --out "$TMP/misc" allreduce,sendrecv,reduce -b 64 -e 1K -n 2 -w 1 -o sum,min -C 1 -m 2 -z 3 \
    -G 5 -R 1 -t 1 -g 1 --experiment-name exp1 -J "$TMP/misc.json" >"$TMP/misc.txt" 2>"$TMP/misc.err"; then
  $PY tests/sweep/nccl_format.py "$TMP/misc.txt" "$TMP/misc.json" --types float --ops sum,min --ranks 2 --roots 0 \
    --cputime --experiment exp1 || fail "nccl-tests format (-C 1)"
  grep -q "agg iters: 2 " "$TMP/misc.txt" || fail "-m 2 not in the options line"
  grep -q "^# Blocking Enabled: wait and barrier after each outer iteration" "$TMP/misc.txt" || fail "-z 3 not reported"
  grep -q "^# Note: -G 5 (CUDA graph launches): not applicable to the mpi backend" "$TMP/misc.txt" || fail "-G note"
  grep -q "^# Note: -R 1 (NCCL buffer registration): not applicable to the mpi backend" "$TMP/misc.txt" || fail "-R note"
  $PY - "$TMP/misc.json" <<'PY' || fail "-m/-z/-C JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["config"]["aggregated_iterations"] == 2 and d["config"]["blocking_collectives"] == "true", d["config"]
assert {r["redop"] for r in d["results"] if r["cairn"]["collective"] == "sendrecv"} == {"sum", "min"}
assert all("cpu_time" in r["out_of_place"] for r in d["results"])
PY
else
  fail "-C/-m/-z sweep exited $?"; cat "$TMP/misc.err" >&2
fi

# 12. --json -: stdout is the JSON document alone on 2 ranks (the table and notes go nowhere or to stderr).
if mpirun -np 2 "$BIN" --out "$TMP/jstdout" allreduce -b 64 -e 256 -n 1 -w 0 --json - >"$TMP/j.out" 2>"$TMP/j.err"; then
  $PY -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['results'], d" "$TMP/j.out" ||
    { fail "--json -: stdout is not one JSON document"; head -3 "$TMP/j.out" >&2; }
else
  fail "--json - sweep exited $?"; cat "$TMP/j.err" >&2
fi

# A block from 64 MiB announces its buffers and warm-up (a 1 GiB sweep was silent for 20 s before its first progress
# line); smaller blocks stay quiet.
# The warm-up is nccl-tests': at every doubling of -b (16, 32, 64 MiB), whatever the -f step (it was the largest and
# smallest size only).
if mpirun -np 2 "$BIN" --out "$TMP/big" -b 16M -e 64M -f 4 -n 1 -w 1 -c 0 >/dev/null 2>"$TMP/big.err"; then
  grep -q "allreduce float: buffers 2 x .*; warm-up at 3 sizes, every doubling from 16777216 B to 67108864 B (1 \
iterations each)" "$TMP/big.err" ||
    { fail "64 MiB block: no warm-up line"; cat "$TMP/big.err" >&2; }
  grep -q "warm-up at" "$TMP/np2.err" && fail "64 KiB blocks announced a warm-up"
else
  fail "64 MiB sweep exited $?"; cat "$TMP/big.err" >&2
fi

[ $failures -eq 0 ] && echo "sweep_cli: all checks passed"
exit $((failures > 0))
