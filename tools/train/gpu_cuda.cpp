// CUDA/NCCL implementation of gpu.h (compiled only when the build has CUDA): the NCCL communicator (bootstrapped by
// libcommon's cairn/gpu_nccl.h) and its stream, and the tensor-parallel collectives over it.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cairn/clock.h"
#include "cairn/error.h"
#include "cairn/gpu_check.h"
#include "cairn/gpu_nccl.h"
#include "cairn/mpi.h"
#include "gpu.h"

namespace cairn::train::gpu {

using cairn::gpu::nccl_group;  // libcommon's group guard (cairn/gpu_nccl.h)

struct Nccl::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t compute_done = nullptr;
  cudaEvent_t comm_done = nullptr;
  int rank = 0, world = 1;
  // mark() / compute_waits(): points on the communication stream, point p in marks[p % kMarks].
  static constexpr uint64_t kMarks = 32;  // the data-parallel communicator serves every chunk's ZeRO units
  cudaEvent_t marks[kMarks] = {};
  uint64_t next_mark = 0;
  // Timed tensor-parallel calls (nccl_tp_comm with on_call): pairs of timing events, from -> to (a negative span,
  // a ring exchange done before the compute stream needed it, counts 0), reported and recycled at settle_timings().
  struct Timed {
    cudaEvent_t from, to;
  };
  std::function<void(double, double)> on_timed;
  std::vector<Timed> timed;
  std::vector<cudaEvent_t> spare_events;
  cudaEvent_t ring_end = nullptr;  // the last ring exchange's end on the stream, until ring_wait pairs it

  cudaEvent_t timing_event() {
    cudaEvent_t e = nullptr;
    if (!spare_events.empty()) {
      e = spare_events.back();
      spare_events.pop_back();
      return e;
    }
    CAIRN_CUDA_CHECK(cudaEventCreate(&e));  // with timing, unlike the fences
    return e;
  }
  void destroy_timing_events() {
    for (const Timed& t : timed) {
      cudaEventDestroy(t.from);
      cudaEventDestroy(t.to);
    }
    for (cudaEvent_t e : spare_events) cudaEventDestroy(e);
    if (ring_end) cudaEventDestroy(ring_end);
    timed.clear();
    spare_events.clear();
    ring_end = nullptr;
  }

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
  // The host waits for the communication stream (wait_for_stream: a failed peer throws instead of hanging).
  void host_wait() const { cairn::gpu::wait_for_stream(stream); }
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
    for (cudaEvent_t& e : m.marks) CAIRN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    m.comm = cairn::gpu::nccl_comm_from_mpi(comm);  // on the GPU trainer setup bound (bind_rank_to_gpu)
  } catch (...) {
    for (cudaEvent_t e : m.marks)
      if (e) cudaEventDestroy(e);
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
    const bool unwinding = std::uncaught_exceptions() > 0;
    if (!unwinding) cudaStreamSynchronize(m.stream);
    cairn::gpu::nccl_end(m.comm, /*abort=*/unwinding);
  }
  m.destroy_timing_events();
  for (cudaEvent_t e : m.marks)
    if (e) cudaEventDestroy(e);
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
  // The bucket [lo, hi) as pieces: rank r's is its overlap with shard r, landing at that overlap's place in r's shard.
  Impl& m = *impl_;
  std::vector<size_t> counts(static_cast<size_t>(m.world)), displs(static_cast<size_t>(m.world));
  size_t mine = 0;
  for (int r = 0; r < m.world; ++r) {
    const size_t s0 = std::min(N, shard * static_cast<size_t>(r)), s1 = std::min(N, s0 + shard);
    const size_t a = std::max(lo, s0), b = std::min(hi, s1);
    counts[static_cast<size_t>(r)] = a < b ? b - a : 0;
    displs[static_cast<size_t>(r)] = a < b ? a - lo : 0;
    if (r == m.rank && a < b) mine = a - s0;
  }
  reduce_pieces(g + lo, shard_out + mine, counts, displs);
}

void Nccl::all_gather_shards(float* p, size_t shard, size_t N) {
  Impl& m = *impl_;
  if (N == 0) return;
  if (shard * static_cast<size_t>(m.world) == N) {
    m.after_compute();
    CAIRN_NCCL_CHECK(ncclAllGather(p + shard * static_cast<size_t>(m.rank), p, shard, ncclFloat32, m.comm, m.stream));
    return;
  }
  // Uneven: each rank's shard as its piece of p, broadcast in place.
  std::vector<size_t> counts(static_cast<size_t>(m.world)), displs(static_cast<size_t>(m.world));
  for (int r = 0; r < m.world; ++r) {
    const size_t a = std::min(N, shard * static_cast<size_t>(r));
    counts[static_cast<size_t>(r)] = std::min(N, a + shard) - a;
    displs[static_cast<size_t>(r)] = a;
  }
  gather_pieces(p + displs[static_cast<size_t>(m.rank)], p, counts, displs);
}

void Nccl::gather_pieces(const float* mine, float* unit, const std::vector<size_t>& counts,
                         const std::vector<size_t>& displs) {
  Impl& m = *impl_;
  m.after_compute();  // the optimizer's update of `mine`, and the last kernels reading `unit`'s buffer
  nccl_group([&] {
    for (int r = 0; r < m.world; ++r) {
      const size_t n = counts[static_cast<size_t>(r)];
      if (n == 0) continue;
      // sendbuff is only read on the root; the others pass their own (valid) destination
      float* dst = unit + displs[static_cast<size_t>(r)];
      CAIRN_NCCL_CHECK(ncclBroadcast(r == m.rank ? mine : dst, dst, n, ncclFloat32, r, m.comm, m.stream));
    }
  });
}

void Nccl::reduce_pieces(const float* unit, float* mine, const std::vector<size_t>& counts,
                         const std::vector<size_t>& displs) {
  Impl& m = *impl_;
  m.after_compute();  // the backward kernels that finished `unit`'s gradient
  nccl_group([&] {
    for (int r = 0; r < m.world; ++r) {
      const size_t n = counts[static_cast<size_t>(r)];
      if (n == 0) continue;
      const float* src = unit + displs[static_cast<size_t>(r)];
      // recvbuff is only written on the root; the others pass their own (valid, untouched) piece buffer
      CAIRN_NCCL_CHECK(ncclReduce(src, mine, n, ncclFloat32, ncclSum, r, m.comm, m.stream));
    }
  });
}

uint64_t Nccl::mark() {
  Impl& m = *impl_;
  const uint64_t point = m.next_mark++;
  CAIRN_CUDA_CHECK(cudaEventRecord(m.marks[point % Impl::kMarks], m.stream));
  return point;
}

void Nccl::compute_waits(uint64_t point) {
  // A ring slot recorded again since holds a later point of the same stream: waiting for it waits longer, never less.
  CAIRN_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, impl_->marks[point % Impl::kMarks], 0));
}

void Nccl::wait() { impl_->host_wait(); }

void Nccl::settle_timings() {
  Impl& m = *impl_;
  if (m.timed.empty()) return;
  // A reference point after every `to`: its host time anchors theirs. The communication stream is waited for first
  // (a failed peer throws there instead of hanging); then the compute stream, which recorded the ring's `from`
  // points and may be behind.
  cudaEvent_t ref = m.timing_event();
  CAIRN_CUDA_CHECK(cudaEventRecord(ref, m.stream));
  m.host_wait();
  const double now = monotonic_seconds();
  cairn::gpu::wait_for_stream(cudaStreamLegacy);
  for (const Impl::Timed& t : m.timed) {
    float ms = 0, to_ref_ms = 0;
    CAIRN_CUDA_CHECK(cudaEventElapsedTime(&ms, t.from, t.to));
    CAIRN_CUDA_CHECK(cudaEventElapsedTime(&to_ref_ms, t.to, ref));
    // A ring exchange that ended before the compute stream needed it was hidden: 0, not a negative time.
    const double seconds = std::max(0.0, static_cast<double>(ms) / 1e3);
    if (m.on_timed) m.on_timed(seconds, now - static_cast<double>(to_ref_ms) / 1e3);
  }
  // Recycled only once every span was read: a throw above leaves them all in `timed`, none handed out twice.
  for (const Impl::Timed& t : m.timed) {
    m.spare_events.push_back(t.from);
    m.spare_events.push_back(t.to);
  }
  m.timed.clear();
  m.spare_events.push_back(ref);
}

void Nccl::abort() {
  cairn::gpu::nccl_end(impl_->comm, /*abort=*/true);
  impl_->comm = nullptr;
}

gpt::TpComm nccl_tp_comm(Nccl& comm, std::function<void(double seconds, double end)> on_call) {
  comm.impl_->on_timed = std::move(on_call);
  // One collective (`op` issues and checks it) on the communicator's stream, fenced by events against the compute
  // stream on both sides (NCCL is never handed the legacy default stream itself); timed, when asked, from a timing
  // event on the compute stream (the point it reached) to one on the communication stream after the collective.
  auto run = [m = comm.impl_](auto&& op) {
    cudaEvent_t from = nullptr;
    if (m->on_timed) {
      from = m->timing_event();
      CAIRN_CUDA_CHECK(cudaEventRecord(from, cudaStreamLegacy));
    }
    m->after_compute();
    op(m->comm, m->stream);
    if (from) {
      cudaEvent_t to = m->timing_event();
      CAIRN_CUDA_CHECK(cudaEventRecord(to, m->stream));
      m->timed.push_back({from, to});
    }
    m->compute_after();
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
  // compute queued so far; ring_wait makes later compute wait for it (on the device). Timed, when asked, from the
  // point the compute stream reached at ring_wait to the exchange's end: its exposed part.
  c.ring_start = [m = comm.impl_](const float* send, float* recv, size_t n) {
    if (n == 0) return;
    m->after_compute();
    nccl_group([&] {
      CAIRN_NCCL_CHECK(ncclSend(send, n, ncclFloat32, (m->rank + 1) % m->world, m->comm, m->stream));
      CAIRN_NCCL_CHECK(ncclRecv(recv, n, ncclFloat32, (m->rank + m->world - 1) % m->world, m->comm, m->stream));
    });
    if (m->on_timed) {
      if (!m->ring_end) m->ring_end = m->timing_event();
      CAIRN_CUDA_CHECK(cudaEventRecord(m->ring_end, m->stream));
    }
  };
  c.ring_wait = [m = comm.impl_] {
    if (m->on_timed && m->ring_end) {
      cudaEvent_t from = m->timing_event();
      CAIRN_CUDA_CHECK(cudaEventRecord(from, cudaStreamLegacy));
      m->timed.push_back({from, m->ring_end});
      m->ring_end = nullptr;
    }
    m->compute_after();
  };
  return c;
}

// ---------------------------------------------------------------- pipeline messages

namespace {

// One direction and kind of pipeline message between this rank and one neighbour: a two-rank NCCL communicator (the
// sender is its rank 0) with its own stream.
struct PipeChannel {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int peer = -1;        // the other end's rank in comm
  int peer_world = -1;  // and in MPI_COMM_WORLD (what the trainer names)
  int edge = -1;        // the edge's place in the ring's one global order (made and destroyed in that order)
  bool open() const { return comm != nullptr; }
};

// A send's own copy of the floats, reusable once `sent` (recorded on the channel's stream after ncclSend) is done.
struct SendBuffer {
  float* data = nullptr;
  size_t capacity = 0;
  cudaEvent_t sent = nullptr;
};

class NcclPipe final : public PipeTransport {
 public:
  NcclPipe(MPI_Comm pp_group, bool wraps) {
    int me = 0, P = 1, world_rank = 0;
    mpi::check(MPI_Comm_rank(pp_group, &me), "MPI_Comm_rank (pipeline)");
    mpi::check(MPI_Comm_size(pp_group, &P), "MPI_Comm_size (pipeline)");
    mpi::check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
    std::vector<int> world_of(static_cast<size_t>(P));
    mpi::check(MPI_Allgather(&world_rank, 1, MPI_INT, world_of.data(), 1, MPI_INT, pp_group),
               "MPI_Allgather (pipeline ranks)");
    CAIRN_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    // Every edge of the ring in one global order (activations r -> r+1, then gradients r -> r-1), each created by its
    // two ends only: NCCL's initialization blocks until both have joined, and with one order everywhere the first
    // edge not yet made always has both its ends waiting on it.
    try {
      for (int kind = 0; kind < 2; ++kind)
        for (int from = 0; from < P; ++from) {
          const int to = kind == 0 ? from + 1 : from - 1;
          if (!wraps && (to < 0 || to >= P)) continue;
          const int dst = (to + P) % P;
          const bool sender = me == from, receiver = me == dst;
          MPI_Comm pair = MPI_COMM_NULL;
          mpi::check(MPI_Comm_split(pp_group, sender || receiver ? 0 : MPI_UNDEFINED, sender ? 0 : 1, &pair),
                     "MPI_Comm_split (pipeline channel)");
          if (pair == MPI_COMM_NULL) continue;
          PipeChannel& c = kind == 0 ? (sender ? act_out_ : act_in_) : (sender ? grad_out_ : grad_in_);
          c.edge = kind * P + from;
          try {
            CAIRN_CUDA_CHECK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
            c.comm = cairn::gpu::nccl_comm_from_mpi(pair);
          } catch (...) {
            MPI_Comm_free(&pair);
            throw;
          }
          MPI_Comm_free(&pair);
          c.peer = sender ? 1 : 0;
          c.peer_world = world_of[static_cast<size_t>(sender ? dst : from)];
          connect(c, sender);
        }
    } catch (...) {
      release(/*abort_comms=*/true);
      throw;
    }
  }

  ~NcclPipe() override { release(/*abort_comms=*/std::uncaught_exceptions() > 0); }
  NcclPipe(const NcclPipe&) = delete;
  NcclPipe& operator=(const NcclPipe&) = delete;

  void send(const float* src, size_t n, int to, int, PipeKind kind) override {
    PipeChannel& c = channel(kind == PipeKind::Activations ? act_out_ : grad_out_, to, "send");
    SendBuffer& b = free_buffer(n);
    CAIRN_CUDA_CHECK(cudaMemcpyAsync(b.data, src, n * sizeof(float), cudaMemcpyDeviceToDevice, cudaStreamLegacy));
    CAIRN_CUDA_CHECK(cudaEventRecord(copied_, cudaStreamLegacy));
    CAIRN_CUDA_CHECK(cudaStreamWaitEvent(c.stream, copied_, 0));
    CAIRN_NCCL_CHECK(ncclSend(b.data, n, ncclFloat32, c.peer, c.comm, c.stream));
    CAIRN_CUDA_CHECK(cudaEventRecord(b.sent, c.stream));
  }

  double recv(float* dst, size_t n, int from, int, PipeKind kind) override {
    PipeChannel& c = channel(kind == PipeKind::Activations ? act_in_ : grad_in_, from, "receive");
    // Queued kernels may still read dst (the previous micro-batch's use of the same buffer), and are not the wait.
    cairn::gpu::wait_for_stream(cudaStreamLegacy);
    const auto t0 = std::chrono::steady_clock::now();
    CAIRN_NCCL_CHECK(ncclRecv(dst, n, ncclFloat32, c.peer, c.comm, c.stream));
    cairn::gpu::wait_for_stream(c.stream);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void wait_sends() override {
    for (PipeChannel* c : {&act_out_, &grad_out_})
      if (c->open()) cairn::gpu::wait_for_stream(c->stream);
  }

  void abort() override {
    for (PipeChannel* c : channels()) {
      cairn::gpu::nccl_end(c->comm, /*abort=*/true);
      c->comm = nullptr;
    }
  }

 private:
  std::vector<PipeChannel*> channels() { return {&act_out_, &act_in_, &grad_out_, &grad_in_}; }

  // NCCL connects a point-to-point pair inside the first ncclSend / ncclRecv, on the host, so the first send would
  // wait for its receiver. One float each way while both ends are here (making this very edge) connects it now, and
  // proves the link before the first step.
  static void connect(PipeChannel& c, bool sender) {
    float* one = nullptr;
    CAIRN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&one), sizeof(float)));
    try {
      CAIRN_CUDA_CHECK(cudaMemsetAsync(one, 0, sizeof(float), c.stream));
      if (sender) CAIRN_NCCL_CHECK(ncclSend(one, 1, ncclFloat32, c.peer, c.comm, c.stream));
      else CAIRN_NCCL_CHECK(ncclRecv(one, 1, ncclFloat32, c.peer, c.comm, c.stream));
      cairn::gpu::wait_for_stream(c.stream);
    } catch (...) {
      cudaFree(one);
      throw;
    }
    CAIRN_CUDA_CHECK(cudaFree(one));
  }

  // Ends every channel: aborted on an error path; otherwise destroyed in the edges' global order. ncclCommDestroy may
  // wait for the other end of the same communicator (an intra-node barrier in recent NCCL), so with v > 1 destroying
  // act_out first everywhere would have each rank wait on its successor round the ring; in one global order the
  // first edge not yet destroyed always has both its ends at it.
  void release(bool abort_comms) {
    std::vector<PipeChannel*> order = channels();
    std::sort(order.begin(), order.end(), [](const PipeChannel* a, const PipeChannel* b) { return a->edge < b->edge; });
    for (PipeChannel* c : order) {
      if (c->comm) {
        if (!abort_comms) cudaStreamSynchronize(c->stream);
        cairn::gpu::nccl_end(c->comm, /*abort=*/abort_comms);
        c->comm = nullptr;
      }
      if (c->stream) cudaStreamDestroy(c->stream);
      c->stream = nullptr;
    }
    for (SendBuffer& b : buffers_) {
      if (b.data) cudaFree(b.data);
      if (b.sent) cudaEventDestroy(b.sent);
    }
    buffers_.clear();
    if (copied_) cudaEventDestroy(copied_);
    copied_ = nullptr;
  }

  // The channel a message to or from world rank `peer` travels on; a peer that is not the channel's other end is a
  // bug in the caller's schedule, not something to send anyway.
  static PipeChannel& channel(PipeChannel& c, int peer, const char* what) {
    if (!c.open() || c.peer_world != peer)
      throw RuntimeError(
          std::string("pipeline: no NCCL channel to ") + what + " that message " +
          (c.open() ? "(its peer is world rank " + std::to_string(c.peer_world) + ", not " + std::to_string(peer) + ")"
                    : "(this stage has no such neighbour)"));
    return c;
  }

  // A buffer whose last message has left and that is large enough, or a new one. Never cudaFree here: it waits for
  // the whole device, in-flight sends included, and those finish only when their receivers post, which would make
  // this send wait for its receiver (with interleaving, a cycle). Messages are one size per run, so nothing piles up.
  SendBuffer& free_buffer(size_t n) {
    for (SendBuffer& b : buffers_) {
      if (b.capacity < n) continue;
      const cudaError_t q = cudaEventQuery(b.sent);
      if (q == cudaErrorNotReady) continue;
      CAIRN_CUDA_CHECK(q);
      return b;
    }
    SendBuffer& b = buffers_.emplace_back();
    CAIRN_CUDA_CHECK(cudaEventCreateWithFlags(&b.sent, cudaEventDisableTiming));
    CAIRN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&b.data), n * sizeof(float)));
    b.capacity = n;
    return b;
  }

  PipeChannel act_out_, act_in_, grad_out_, grad_in_;
  std::deque<SendBuffer> buffers_;  // deque: references stay valid as it grows
  cudaEvent_t copied_ = nullptr;
};

}  // namespace

std::unique_ptr<PipeTransport> nccl_pipe(MPI_Comm pp_group, bool wraps) {
  return std::make_unique<NcclPipe>(pp_group, wraps);
}

}  // namespace cairn::train::gpu
