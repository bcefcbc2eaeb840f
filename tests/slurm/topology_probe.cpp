// Test-only MPI program for tests/slurm/cluster_ranks_test.sh: one line per rank with libcommon's view of the job's
// node layout (cairn/mpi.h) and the device the binding rule picks (cairn/device_binding.h), beside Slurm's variables.
// Usage: cairn-topology-probe [PHYSICAL_DEVICES]  (devices each node pretends to have; CUDA_VISIBLE_DEVICES applies)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cairn/cli.h"
#include "cairn/device_binding.h"
#include "cairn/mpi.h"

namespace {
const char* env_or_dash(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "-";
}
}  // namespace

int main(int argc, char** argv) {
  return cairn::run_tool("cairn-topology-probe", argc, argv, [&] {
    const int physical = argc > 1 ? std::atoi(argv[1]) : 8;
    cairn::mpi::Session session(&argc, &argv);
    const cairn::mpi::Topology& t = cairn::mpi::topology();
    // The same two calls a CUDA build makes in gpu::bind_rank_to_gpu, with the device count faked.
    const int visible = cairn::visible_devices_from_env(std::getenv("CUDA_VISIBLE_DEVICES"), physical);
    const int device = visible > 0 ? cairn::device_for_local_rank(t.local_rank, visible, "probe") : -1;
    std::printf("probe rank=%d size=%d host=%s local_rank=%d local_size=%d node=%d nodes=%d visible=%d device=%d "
                "SLURM_PROCID=%s SLURM_LOCALID=%s SLURM_NODEID=%s SLURM_NTASKS_PER_NODE=%s\n",
                t.rank, t.size, t.host.c_str(), t.local_rank, t.local_size, t.node_index, t.node_count, visible, device,
                env_or_dash("SLURM_PROCID"), env_or_dash("SLURM_LOCALID"), env_or_dash("SLURM_NODEID"),
                env_or_dash("SLURM_NTASKS_PER_NODE"));
    std::fflush(stdout);
    cairn::mpi::barrier(MPI_COMM_WORLD);
    return 0;
  });
}
