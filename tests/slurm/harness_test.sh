#!/usr/bin/env bash
# Proves the local test cluster works: a plain batch job and a 2-rank Open MPI job through srun (PMIx).
# Run inside scripts/slurm-local.sh run -- (ctest does that); asserts the jobs COMPLETE with the right output.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -n "${SLURM_CONF:-}" ] || fail "SLURM_CONF not set: run under scripts/slurm-local.sh run --"

work="" ; make_workdir harness

jid=$(sbatch --parsable -n 1 -o "$work/plain.out" --wrap 'echo "hello from $SLURM_JOB_ID on $SLURMD_NODENAME"')
st=$(wait_job "$jid" 60) || fail "plain job $jid: $st"
[ "$st" = COMPLETED ] || fail "plain job $jid ended $st"
grep -q "hello from $jid" "$work/plain.out" || fail "plain job output: $(cat "$work/plain.out")"
pass "plain batch job $jid COMPLETED"

cat > "$work/hello.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size, sum, one = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d of %d sum %d\n", rank, size, sum);
  MPI_Finalize();
  return 0;
}
C
mpicc -o "$work/hello" "$work/hello.c"
mpi=${CAIRN_SRUN_MPI:-pmix}
jid=$(sbatch --parsable -n 2 -o "$work/mpi.out" --wrap "srun --mpi=$mpi -n 2 $work/hello")
st=$(wait_job "$jid" 60) || fail "mpi job $jid: $st"
[ "$st" = COMPLETED ] || { cat "$work/mpi.out" >&2; fail "mpi job $jid ended $st"; }
for r in 0 1; do
  grep -q "rank $r of 2 sum 2" "$work/mpi.out" || { cat "$work/mpi.out" >&2; fail "rank $r missing from MPI output"; }
done
pass "srun --mpi=$mpi -n 2 MPI hello (allreduce) job $jid COMPLETED"

# cairn_launch (slurm/lib/common.sh, what every stage uses): one rank failing ends the whole step at once
# (--kill-on-bad-exit), instead of leaving the other rank running until the time limit. Rank 1 would sleep 600 s.
cat > "$work/badexit.sh" <<SH
#!/usr/bin/env bash
source "$CAIRN_SOURCE_DIR/slurm/lib/common.sh"
CAIRN_LAUNCHER=srun cairn_launch sh -c 'if [ "\$SLURM_PROCID" = 0 ]; then exit 3; fi; exec sleep 600'
SH
jid=$(sbatch --parsable -n 2 -o "$work/badexit.out" "$work/badexit.sh")
st=$(wait_job "$jid" 60) || { cat "$work/badexit.out" >&2; fail "job $jid with a failed rank still running after 60 s: $st"; }
[ "$st" = FAILED ] || { cat "$work/badexit.out" >&2; fail "job $jid with a failed rank ended $st, want FAILED"; }
pass "one rank exiting 3 ended job $jid ($st) without waiting for the other rank"
