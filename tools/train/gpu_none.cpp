// gpu.h in builds without CUDA: the trainer only reaches these with [train] backend = "cuda", which such a build
// rejects earlier (find_backend("cuda") does not exist), so each one only says so.
#include "cairn/error.h"
#include "gpu.h"

namespace cairn::train::gpu {

namespace {
[[noreturn]] void no_cuda() {
  throw UsageError("this cairn-train was built without CUDA (configure with -DCAIRN_CUDA=ON)");
}
}  // namespace

struct Nccl::Impl {};
Nccl::Nccl(MPI_Comm) : impl_(nullptr) { no_cuda(); }
Nccl::~Nccl() = default;
void Nccl::all_reduce(float*, size_t) { no_cuda(); }
void Nccl::reduce_to_shards(const float*, size_t, size_t, size_t, size_t, float*) { no_cuda(); }
void Nccl::all_gather_shards(float*, size_t, size_t) { no_cuda(); }
void Nccl::gather_pieces(const float*, float*, const std::vector<size_t>&, const std::vector<size_t>&) { no_cuda(); }
void Nccl::reduce_pieces(const float*, float*, const std::vector<size_t>&, const std::vector<size_t>&) { no_cuda(); }
uint64_t Nccl::mark() { no_cuda(); }
void Nccl::compute_waits(uint64_t) { no_cuda(); }
void Nccl::wait() { no_cuda(); }
void Nccl::settle_timings() { no_cuda(); }
void Nccl::abort() {}
// By value as in gpu_cuda.cpp, which moves it into the communicator's closure.
// NOLINTNEXTLINE(performance-unnecessary-value-param)
gpt::TpComm nccl_tp_comm(Nccl&, std::function<void(double, double)>) { no_cuda(); }
std::unique_ptr<PipeTransport> nccl_pipe(MPI_Comm, bool) { no_cuda(); }

}  // namespace cairn::train::gpu
