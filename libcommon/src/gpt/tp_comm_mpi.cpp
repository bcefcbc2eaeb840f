// gpt::TpComm over MPI: the tensor-parallel group's all-reduce, all-gather and reduce-scatter, and the context-parallel
// ring exchange (staged through host memory on device backends).
#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "cairn/clock.h"
#include "cairn/error.h"
#include "cairn/gpt_mpi.h"
#include "cairn/mpi.h"

namespace cairn::gpt {

namespace {

int count_of(size_t n, const char* what) { return mpi::int_count(n, std::string("tensor-parallel ") + what); }

// Host copies of backend buffers around a collective (device backends).
struct Staging {
  const kernels::Backend* be;
  std::vector<float> a, b;
  float* in(const float* p, size_t n, std::vector<float>& h) {
    if (!be) return const_cast<float*>(p);
    h.resize(n);
    be->copy_to_host(h.data(), p, n * sizeof(float));
    return h.data();
  }
  float* out(float* p, size_t n, std::vector<float>& h) {
    if (!be) return p;
    h.resize(n);
    return h.data();
  }
  void back(float* p, size_t n, const std::vector<float>& h) {
    if (be) be->copy_to_device(p, h.data(), n * sizeof(float));
  }
};

}  // namespace

TpComm mpi_tp_comm(MPI_Comm comm, const std::function<void(double)>& on_call, const kernels::Backend* staging) {
  if (staging && !staging->device_memory) staging = nullptr;
  auto st = std::make_shared<Staging>(Staging{staging, {}, {}});
  TpComm c;
  c.all_reduce = [comm, on_call, st](float* buf, size_t n) {
    timed_call(on_call, [&] {
      float* h = st->in(buf, n, st->a);
      mpi::check(MPI_Allreduce(MPI_IN_PLACE, h, count_of(n, "all-reduce"), MPI_FLOAT, MPI_SUM, comm),
                 "MPI_Allreduce (tensor parallel)");
      st->back(buf, n, st->a);
    });
  };
  c.all_gather = [comm, on_call, st](float* full, const float* part, size_t n) {
    timed_call(on_call, [&] {
      const int count = count_of(n, "all-gather");
      int size = 1;
      MPI_Comm_size(comm, &size);
      float* src = st->in(part, n, st->a);
      float* dst = st->out(full, n * size, st->b);
      mpi::check(MPI_Allgather(src, count, MPI_FLOAT, dst, count, MPI_FLOAT, comm), "MPI_Allgather (tensor parallel)");
      st->back(full, n * size, st->b);
    });
  };
  c.reduce_scatter = [comm, on_call, st](float* part, const float* full, size_t n) {
    timed_call(on_call, [&] {
      int size = 1;
      MPI_Comm_size(comm, &size);
      float* src = st->in(full, n * size, st->a);
      float* dst = st->out(part, n, st->b);
      mpi::check(MPI_Reduce_scatter_block(src, dst, count_of(n, "reduce-scatter"), MPI_FLOAT, MPI_SUM, comm),
                 "MPI_Reduce_scatter_block (tensor parallel)");
      st->back(part, n, st->b);
    });
  };
  // The ring: a non-blocking send to rank + 1 and receive from rank - 1 (one exchange in flight); the time reported
  // is what ring_wait waited, the transfer's exposed part.
  struct Ring {
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    float* recv = nullptr;  // where the staged receive lands (device backends)
    size_t n = 0;
  };
  auto ring = std::make_shared<Ring>();
  int rank = 0, size = 1;
  mpi::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  mpi::check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  c.ring_start = [comm, st, ring, next, prev](const float* send, float* recv, size_t n) {
    const int count = count_of(n, "ring exchange");
    float* src = st->in(send, n, st->a);
    float* dst = st->out(recv, n, st->b);
    ring->recv = recv;
    ring->n = n;
    constexpr int kRingTag = 71;
    mpi::check(MPI_Irecv(dst, count, MPI_FLOAT, prev, kRingTag, comm, &ring->req[0]),
               "MPI_Irecv (context-parallel ring)");
    mpi::check(MPI_Isend(src, count, MPI_FLOAT, next, kRingTag, comm, &ring->req[1]),
               "MPI_Isend (context-parallel ring)");
  };
  c.ring_wait = [on_call, st, ring] {
    timed_call(on_call, [&] {
      mpi::check(MPI_Waitall(2, ring->req, MPI_STATUSES_IGNORE), "MPI_Waitall (context-parallel ring)");
      st->back(ring->recv, ring->n, st->b);
    });
  };
  return c;
}

}  // namespace cairn::gpt
