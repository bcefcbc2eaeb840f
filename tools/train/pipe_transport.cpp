// MPI implementation of cairn-train's pipeline transport (pipe_transport.h).
#include "pipe_transport.h"

#include <mpi.h>

#include <climits>
#include <deque>
#include <string>
#include <vector>

#include "cairn/clock.h"
#include "cairn/error.h"
#include "cairn/mpi.h"

namespace cairn::train {

namespace {

int count_of(size_t n) { return mpi::int_count(n, "pipeline message"); }

class MpiPipe final : public PipeTransport {
 public:
  MpiPipe(const kernels::Backend& backend, bool in_order) : be_(backend), in_order_(in_order) {}

  void send(const float* src, size_t n, int to, int tag, PipeKind kind) override {
    if (in_order_) tag = kind_tag(kind);
    Pending* s = nullptr;
    for (Pending& p : sends_) {  // reuse a buffer whose message has left
      int done = 0;
      mpi::check(MPI_Test(&p.req, &done, MPI_STATUS_IGNORE), "MPI_Test (pipeline send)");
      if (done) {
        s = &p;
        break;
      }
    }
    if (!s) s = &sends_.emplace_back();
    s->buf.resize(n);
    be_.copy_to_host(s->buf.data(), src, n * sizeof(float));
    mpi::check(MPI_Isend(s->buf.data(), count_of(n), MPI_FLOAT, to, tag, MPI_COMM_WORLD, &s->req),
               "MPI_Isend (pipeline)");
  }

  double recv(float* dst, size_t n, int from, int tag, PipeKind kind) override {
    if (in_order_) tag = kind_tag(kind);
    const double t0 = monotonic_seconds();
    float* into = dst;
    if (be_.device_memory) {
      staging_.resize(n);
      into = staging_.data();
    }
    mpi::check(MPI_Recv(into, count_of(n), MPI_FLOAT, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
               "MPI_Recv (pipeline)");
    if (into != dst) be_.copy_to_device(dst, into, n * sizeof(float));
    return monotonic_seconds() - t0;
  }

  void wait_sends() override {
    for (Pending& p : sends_) mpi::check(MPI_Wait(&p.req, MPI_STATUS_IGNORE), "MPI_Wait (pipeline send)");
  }

 private:
  struct Pending {  // a send in flight owns its buffer until MPI is done with it
    std::vector<float> buf;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  // The two kinds' channels (a run matches every message one way, so these never meet a schedule's tag).
  static int kind_tag(PipeKind kind) { return kind == PipeKind::Activations ? 0 : 1; }

  const kernels::Backend& be_;
  bool in_order_;
  std::deque<Pending> sends_;
  std::vector<float> staging_;  // received floats on device backends
};

}  // namespace

std::unique_ptr<PipeTransport> make_mpi_pipe(const kernels::Backend& backend, bool in_order) {
  return std::make_unique<MpiPipe>(backend, in_order);
}

}  // namespace cairn::train
