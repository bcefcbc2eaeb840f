// CUDA/NCCL implementation of gpu.h (compiled only when the build has CUDA): the NCCL communicator (bootstrapped by
// libcommon's cairn/gpu_nccl.h) and its stream, and the tensor-parallel collectives over it.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "cairn/gpu_check.h"
#include "cairn/gpu_nccl.h"
#include "cairn/mpi.h"
#include "gpu.h"

namespace cairn::train::gpu {

namespace {

// Queues the calls of `group` (one NCCL call per peer) inside one NCCL group; a failed call still closes the group.
template <class F>
void nccl_group(F&& group) {
  CAIRN_NCCL_CHECK(ncclGroupStart());
  try {
    group();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  CAIRN_NCCL_CHECK(ncclGroupEnd());
}

}  // namespace

struct Nccl::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t compute_done = nullptr;
  cudaEvent_t comm_done = nullptr;
  int rank = 0, world = 1;

  // The communication stream waits (on the device, not the host) for what is queued on the legacy default
  // stream, where the CUDA backend runs every kernel.
  void after_compute() {
    CAIRN_CUDA_CHECK(cudaEventRecord(compute_done, cudaStreamLegacy));
    CAIRN_CUDA_CHECK(cudaStreamWaitEvent(stream, compute_done, 0));
  }
  // The other way round: what is queued on the compute stream from now on waits for the communication stream's
  // work so far (tensor-parallel results are used by the very next kernel).
  void compute_after() {
    CAIRN_CUDA_CHECK(cudaEventRecord(comm_done, stream));
    CAIRN_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, comm_done, 0));
  }
  // The host waits for the communication stream. Polled rather than cudaStreamSynchronize: a peer that died or a
  // network error leaves NCCL's kernels waiting forever, and only ncclCommGetAsyncError tells (NCCL's guide,
  // "Fault tolerance"), so the wait ends in an error that brings the job down instead of a hang.
  void host_wait() const {
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) CAIRN_CUDA_CHECK(q);
      ncclResult_t async = ncclSuccess;
      CAIRN_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
      if (async != ncclInProgress) CAIRN_NCCL_CHECK(async);
      std::this_thread::yield();
    }
  }
};

Nccl::Nccl(MPI_Comm comm) : impl_(new Impl) {
  Impl& m = *impl_;
  try {
    mpi::check(MPI_Comm_rank(comm, &m.rank), "MPI_Comm_rank");
    mpi::check(MPI_Comm_size(comm, &m.world), "MPI_Comm_size");
    // Non-blocking: kernels on the legacy default stream must not implicitly wait for communication.
    CAIRN_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
    CAIRN_CUDA_CHECK(cudaEventCreateWithFlags(&m.compute_done, cudaEventDisableTiming));
    CAIRN_CUDA_CHECK(cudaEventCreateWithFlags(&m.comm_done, cudaEventDisableTiming));
    m.comm = cairn::gpu::nccl_comm_from_mpi(comm);  // on the GPU trainer setup bound (bind_rank_to_gpu)
  } catch (...) {
    if (m.comm_done) cudaEventDestroy(m.comm_done);
    if (m.compute_done) cudaEventDestroy(m.compute_done);
    if (m.stream) cudaStreamDestroy(m.stream);
    delete impl_;
    throw;
  }
}

Nccl::~Nccl() {
  Impl& m = *impl_;
  if (m.comm) {
    // Unwinding from an error (maybe on another rank): do not wait for peers that may never come.
    if (std::uncaught_exceptions() > 0) {
      ncclCommAbort(m.comm);
    } else {
      cudaStreamSynchronize(m.stream);
      ncclCommDestroy(m.comm);
    }
  }
  if (m.comm_done) cudaEventDestroy(m.comm_done);
  if (m.compute_done) cudaEventDestroy(m.compute_done);
  if (m.stream) cudaStreamDestroy(m.stream);
  delete impl_;
}

void Nccl::all_reduce(float* buf, size_t count) {
  if (count == 0) return;
  impl_->after_compute();
  CAIRN_NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, impl_->comm, impl_->stream));
}

void Nccl::reduce_to_shards(const float* g, size_t lo, size_t hi, size_t shard, size_t N, float* shard_out) {
  if (hi <= lo) return;
  Impl& m = *impl_;
  m.after_compute();
  nccl_group([&] {
    for (int r = 0; r < m.world; ++r) {
      size_t s0 = std::min(N, shard * static_cast<size_t>(r)), s1 = std::min(N, s0 + shard);
      size_t a = std::max(lo, s0), b = std::min(hi, s1);
      if (a >= b) continue;
      // recvbuff is only written on the root; other ranks pass their own (valid, untouched) shard buffer.
      float* recv = r == m.rank ? shard_out + (a - s0) : shard_out;
      CAIRN_NCCL_CHECK(ncclReduce(g + a, recv, b - a, ncclFloat32, ncclSum, r, m.comm, m.stream));
    }
  });
}

void Nccl::all_gather_shards(float* p, size_t shard, size_t N) {
  Impl& m = *impl_;
  if (N == 0) return;
  m.after_compute();
  if (shard * static_cast<size_t>(m.world) == N) {
    CAIRN_NCCL_CHECK(ncclAllGather(p + shard * static_cast<size_t>(m.rank), p, shard, ncclFloat32, m.comm, m.stream));
    return;
  }
  nccl_group([&] {
    for (int r = 0; r < m.world; ++r) {
      size_t a = std::min(N, shard * static_cast<size_t>(r)), b = std::min(N, a + shard);
      if (a >= b) continue;
      CAIRN_NCCL_CHECK(ncclBroadcast(p + a, p + a, b - a, ncclFloat32, r, m.comm, m.stream));
    }
  });
}

void Nccl::wait() { impl_->host_wait(); }

void Nccl::abort() {
  if (impl_->comm) ncclCommAbort(impl_->comm);
  impl_->comm = nullptr;
}

gpt::TpComm nccl_tp_comm(Nccl& comm, std::function<void(double)> on_call) {
  // One collective (`op` issues and checks it) on the communicator's stream, fenced by events against the compute
  // stream on both sides (NCCL is never handed the legacy default stream itself); timed, when asked, between host
  // synchronizations.
  auto run = [m = comm.impl_, on_call](auto&& op) {
    std::chrono::steady_clock::time_point t0;
    if (on_call) {
      // The compute work queued before the call is not the collective's time.
      CAIRN_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
      t0 = std::chrono::steady_clock::now();
    }
    m->after_compute();
    op(m->comm, m->stream);
    m->compute_after();
    if (on_call) {
      m->host_wait();
      on_call(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  };
  // Sizes are the same on every rank of the group, so an empty call is skipped by all of them.
  gpt::TpComm c;
  c.all_reduce = [run](float* buf, size_t n) {
    if (n == 0) return;
    run([&](ncclComm_t nc, cudaStream_t s) {
      CAIRN_NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, nc, s));
    });
  };
  c.all_gather = [run](float* full, const float* part, size_t n) {
    if (n == 0) return;
    run([&](ncclComm_t nc, cudaStream_t s) { CAIRN_NCCL_CHECK(ncclAllGather(part, full, n, ncclFloat32, nc, s)); });
  };
  c.reduce_scatter = [run](float* part, const float* full, size_t n) {
    if (n == 0) return;
    run([&](ncclComm_t nc, cudaStream_t s) {
      CAIRN_NCCL_CHECK(ncclReduceScatter(full, part, n, ncclFloat32, ncclSum, nc, s));
    });
  };
  // The ring: ncclSend to rank + 1 and ncclRecv from rank - 1 in one group, on the communicator's stream after the
  // compute queued so far; ring_wait makes later compute wait for it (on the device). Timed, when asked, as the
  // host's wait for the transfer: its exposed part.
  c.ring_start = [m = comm.impl_](const float* send, float* recv, size_t n) {
    if (n == 0) return;
    m->after_compute();
    nccl_group([&] {
      CAIRN_NCCL_CHECK(ncclSend(send, n, ncclFloat32, (m->rank + 1) % m->world, m->comm, m->stream));
      CAIRN_NCCL_CHECK(ncclRecv(recv, n, ncclFloat32, (m->rank + m->world - 1) % m->world, m->comm, m->stream));
    });
  };
  c.ring_wait = [m = comm.impl_, on_call] {
    const auto t0 = std::chrono::steady_clock::now();
    if (on_call) m->host_wait();
    m->compute_after();
    if (on_call) on_call(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  return c;
}

}  // namespace cairn::train::gpu
