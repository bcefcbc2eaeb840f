// The one NCCL bootstrap of cairn (CUDA builds only): an NCCL communicator over the ranks of an MPI communicator, used
// by cairn-train (gradients, tensor parallelism) and cairn-sweep's NCCL backend, and the host waits that end in an
// error instead of a hang when a communicator fails. Bind the GPU first (cairn/gpu.h bind_rank_to_gpu); check NCCL
// calls with CAIRN_NCCL_CHECK (cairn/gpu_check.h).
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <functional>

namespace cairn::gpu {

// Collective over `comm`: its rank 0 creates the ncclUniqueId, MPI_Bcast hands it to the others, and every rank
// joins with ncclCommInitRank on its current device. NCCL ranks are the ranks in `comm`. Throws GpuError (NCCL) or
// RuntimeError (MPI). The caller owns the result and ends it with nccl_end. Until then it is one of the live
// communicators that raise_nccl_async_errors checks; the CUDA backend's synchronize checks them while it waits
// (kernels' cuda_set_wait_poll, set here on the first communicator).
ncclComm_t nccl_comm_from_mpi(MPI_Comm comm);

// Ends a communicator from nccl_comm_from_mpi: ncclCommAbort when `abort` (unwinding from an error: operations still
// waiting for peers end), else ncclCommDestroy. Never throws; a null `comm` is nothing to do.
void nccl_end(ncclComm_t comm, bool abort) noexcept;

// Runs `calls` (NCCL calls, typically one send/recv per peer) between ncclGroupStart and ncclGroupEnd. A throw from
// `calls` (a failed CAIRN_NCCL_CHECK) still closes the group before it propagates: a group left open would swallow
// every later NCCL call of the thread (queued, never launched) and the next collective would wait forever.
void nccl_group(const std::function<void()>& calls);

// Throws GpuError with NCCL's text when a live communicator holds an asynchronous error: a peer or the network
// failed, and NCCL's kernels would otherwise wait for it forever (NCCL's guide, "Fault tolerance"). Returns when
// every one is fine or still in progress.
void raise_nccl_async_errors();

// The host waits until `stream` has run everything queued on it, polling rather than cudaStreamSynchronize so that a
// failed communicator (raise_nccl_async_errors) ends the wait in an error, which brings the job down, not a hang.
void wait_for_stream(cudaStream_t stream);

}  // namespace cairn::gpu
