// The one NCCL bootstrap of cairn (CUDA builds only): an NCCL communicator over the ranks of an MPI communicator, used
// by cairn-train (gradients, tensor parallelism) and cairn-sweep's NCCL backend. Bind the GPU first
// (cairn/gpu.h bind_rank_to_gpu); check NCCL calls with CAIRN_NCCL_CHECK (cairn/gpu_check.h).
#pragma once
#include <mpi.h>
#include <nccl.h>

namespace cairn::gpu {

// Collective over `comm`: its rank 0 creates the ncclUniqueId, MPI_Bcast hands it to the others, and every rank
// joins with ncclCommInitRank on its current device. NCCL ranks are the ranks in `comm`. Throws GpuError (NCCL) or
// RuntimeError (MPI); the caller owns the result (ncclCommDestroy, or ncclCommAbort when unwinding from an error).
ncclComm_t nccl_comm_from_mpi(MPI_Comm comm);

}  // namespace cairn::gpu
