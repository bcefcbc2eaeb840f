// Tensor-parallel collectives of the GPT model (gpt::TpComm) over an MPI communicator.
#pragma once
#include <mpi.h>

#include "cairn/gpt.h"

namespace cairn::gpt {

// all_reduce = MPI_Allreduce (sum, in place), all_gather = MPI_Allgather, reduce_scatter = MPI_Reduce_scatter_block,
// all over `comm` (which must outlive the returned table). `on_call(seconds)` (optional) is told how long each call
// took, so a trainer can report the time spent in tensor-parallel communication. With `staging` (a backend with device
// memory) the buffers are copied through host memory around each call, so device backends run too (NCCL would be
// faster; this keeps one code path everywhere).
TpComm mpi_tp_comm(MPI_Comm comm, const std::function<void(double seconds)>& on_call = {},
                   const kernels::Backend* staging = nullptr);

}  // namespace cairn::gpt
