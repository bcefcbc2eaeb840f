// cairn-sweep: collective-bandwidth sweeps (MPI or NCCL) with nccl-tests-compatible output,
// per-tier latency/bandwidth fits and fabric.toml for cairn-plan.
#include "sweep.h"

int main(int argc, char** argv) { return cairn::sweep::sweep_main(argc, argv); }
