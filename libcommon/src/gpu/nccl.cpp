// cairn/gpu_nccl.h: the NCCL communicator bootstrap over MPI and the failure-aware host waits. A file of its own so
// that tools which bind a GPU but use no NCCL (cairn-eval) do not need libnccl at link time; empty in builds without
// CUDA.
#ifdef CAIRN_HAVE_CUDA_BACKEND
#include "cairn/gpu_nccl.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "cairn/gpu_check.h"
#include "cairn/kernels/cuda.h"
#include "cairn/mpi.h"

namespace cairn::gpu {

namespace {

// The communicators made and not yet ended. Short-lived (a step's pipeline channels live as long as the trainer), so
// a vector under a mutex; the waits read it between polls.
std::mutex g_live_mutex;
std::vector<ncclComm_t> g_live;

}  // namespace

ncclComm_t nccl_comm_from_mpi(MPI_Comm comm) {
  int rank = 0, size = 1;
  mpi::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  mpi::check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  ncclUniqueId id{};
  if (rank == 0) CAIRN_NCCL_CHECK(ncclGetUniqueId(&id));
  mpi::check(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, comm), "MPI_Bcast (NCCL unique id)");
  ncclComm_t nc = nullptr;
  CAIRN_NCCL_CHECK(ncclCommInitRank(&nc, size, id, rank));
  {
    std::lock_guard<std::mutex> lk(g_live_mutex);
    g_live.push_back(nc);
  }
  // From now on the backend's synchronize (every kernel runs on the legacy stream, which waits on communication
  // events) would otherwise block forever behind a failed collective.
  kernels::cuda_set_wait_poll(&raise_nccl_async_errors);
  return nc;
}

void nccl_end(ncclComm_t comm, bool abort) noexcept {
  if (!comm) return;
  {
    std::lock_guard<std::mutex> lk(g_live_mutex);
    g_live.erase(std::remove(g_live.begin(), g_live.end(), comm), g_live.end());
  }
  if (abort) {
    ncclCommAbort(comm);
  } else {
    ncclCommDestroy(comm);
  }
}

void nccl_group(const std::function<void()>& calls) {
  CAIRN_NCCL_CHECK(ncclGroupStart());
  try {
    calls();
  } catch (...) {
    ncclGroupEnd();  // its own error, if any, is not the one to report
    throw;
  }
  CAIRN_NCCL_CHECK(ncclGroupEnd());
}

void raise_nccl_async_errors() {
  std::lock_guard<std::mutex> lk(g_live_mutex);
  for (ncclComm_t c : g_live) {
    ncclResult_t async = ncclSuccess;
    CAIRN_NCCL_CHECK(ncclCommGetAsyncError(c, &async));
    if (async == ncclSuccess || async == ncclInProgress) continue;
    kernels::throw_gpu_error("NCCL", __FILE__, __LINE__, "ncclCommGetAsyncError (a peer or the network failed)",
                             nccl_error_text(ncclGetErrorString(async), ncclGetLastError(c)).c_str());
  }
}

void wait_for_stream(cudaStream_t stream) { kernels::cuda_wait_for_stream(stream, &raise_nccl_async_errors); }

}  // namespace cairn::gpu
#endif
