// gpt::TpComm over MPI (CPU backends): the tensor-parallel group's all-reduce, all-gather and reduce-scatter.
#include <chrono>
#include <climits>
#include <string>

#include "cairn/error.h"
#include "cairn/gpt_mpi.h"
#include "cairn/mpi.h"

namespace cairn::gpt {

namespace {

int count_of(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX))
    throw RuntimeError(std::string("tensor-parallel ") + what + " of " + std::to_string(n) +
                       " floats exceeds MPI's int count");
  return static_cast<int>(n);
}

// Runs one collective and reports its duration.
template <typename F>
void timed(const std::function<void(double)>& on_call, F&& f) {
  if (!on_call) {
    f();
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  f();
  on_call(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

TpComm mpi_tp_comm(MPI_Comm comm, std::function<void(double)> on_call) {
  TpComm c;
  c.all_reduce = [comm, on_call](float* buf, size_t n) {
    timed(on_call, [&] {
      mpi::check(MPI_Allreduce(MPI_IN_PLACE, buf, count_of(n, "all-reduce"), MPI_FLOAT, MPI_SUM, comm),
                 "MPI_Allreduce (tensor parallel)");
    });
  };
  c.all_gather = [comm, on_call](float* full, const float* part, size_t n) {
    timed(on_call, [&] {
      const int count = count_of(n, "all-gather");
      mpi::check(MPI_Allgather(part, count, MPI_FLOAT, full, count, MPI_FLOAT, comm), "MPI_Allgather (tensor parallel)");
    });
  };
  c.reduce_scatter = [comm, on_call](float* part, const float* full, size_t n) {
    timed(on_call, [&] {
      mpi::check(MPI_Reduce_scatter_block(full, part, count_of(n, "reduce-scatter"), MPI_FLOAT, MPI_SUM, comm),
                 "MPI_Reduce_scatter_block (tensor parallel)");
    });
  };
  return c;
}

}  // namespace cairn::gpt
