// cairn/gpu_nccl.h: the NCCL communicator bootstrap over MPI. A file of its own so that tools which bind a GPU but use
// no NCCL (cairn-eval) do not need libnccl at link time; empty in builds without CUDA.
#ifdef CAIRN_HAVE_CUDA_BACKEND
#include "cairn/gpu_nccl.h"

#include "cairn/gpu_check.h"
#include "cairn/mpi.h"

namespace cairn::gpu {

ncclComm_t nccl_comm_from_mpi(MPI_Comm comm) {
  int rank = 0, size = 1;
  mpi::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  mpi::check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  ncclUniqueId id{};
  if (rank == 0) CAIRN_NCCL_CHECK(ncclGetUniqueId(&id));
  mpi::check(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, comm), "MPI_Bcast (NCCL unique id)");
  ncclComm_t nc = nullptr;
  CAIRN_NCCL_CHECK(ncclCommInitRank(&nc, size, id, rank));
  return nc;
}

}  // namespace cairn::gpu
#endif
