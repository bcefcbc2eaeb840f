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

# cairn_launch gives every launcher's ranks OMP_WAIT_POLICY=PASSIVE (spinning OpenMP threads lose most of the speed
# on a busy node), and a value the caller exported wins.
cat > "$work/omp.sh" <<SH
#!/usr/bin/env bash
source "$CAIRN_SOURCE_DIR/slurm/lib/common.sh"
unset OMP_WAIT_POLICY
CAIRN_LAUNCHER=srun cairn_launch sh -c 'echo "srun \$SLURM_PROCID \$OMP_WAIT_POLICY"'
SH
jid=$(sbatch --parsable -n 2 -o "$work/omp.out" "$work/omp.sh")
st=$(wait_job "$jid" 60) || fail "job $jid: $st"
[ "$st" = COMPLETED ] || { cat "$work/omp.out" >&2; fail "job $jid ended $st"; }
out=$(
  source "$CAIRN_SOURCE_DIR/slurm/lib/common.sh"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  unset OMP_WAIT_POLICY
  CAIRN_LAUNCHER=mpirun CAIRN_NP=2 cairn_launch sh -c 'echo "mpirun $OMPI_COMM_WORLD_RANK $OMP_WAIT_POLICY"'
  unset OMP_WAIT_POLICY
  CAIRN_LAUNCHER=none cairn_launch sh -c 'echo "none 0 $OMP_WAIT_POLICY"'
  export OMP_WAIT_POLICY=ACTIVE
  CAIRN_LAUNCHER=none cairn_launch sh -c 'echo "caller 0 $OMP_WAIT_POLICY"'
)
out+=$'\n'$(cat "$work/omp.out")
for want in "srun 0 PASSIVE" "srun 1 PASSIVE" "mpirun 0 PASSIVE" "mpirun 1 PASSIVE" "none 0 PASSIVE" "caller 0 ACTIVE"; do
  grep -qx "$want" <<<"$out" || fail "ranks' OMP_WAIT_POLICY: want '$want' in: $out"
done
pass "cairn_launch: PASSIVE wait policy for srun, mpirun and none ranks; the caller's own value kept"
