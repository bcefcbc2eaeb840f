// Checks every op of the CUDA backend (fp32) against the CPU reference backend, forward and backward, and the
// matmuls again with precision = "bf16" (inputs rounded to bf16, fp32 accumulation).
// Tolerance: 1e-4 relative with a tensor-scaled floor (ops_checks.h): cuBLAS and the GPU reductions sum in other
// orders and contract to FMA; bf16 matmuls 2e-2 (bf16 keeps 8 significant bits: ~4e-3 relative per input, which a
// dot product averages). Exits 77 (ctest: skipped) with the reason when no GPU is usable.
#define BOOST_TEST_MODULE kernels_cuda
#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <cstdlib>

#include "ops_checks.h"
#include "cairn/kernels/cuda.h"

using namespace ops_checks;

namespace {
constexpr double kRtol = 1e-4;

struct RequireGpu {
  RequireGpu() {
    if (!find_backend("cuda")) {
      std::printf("SKIPPED: built with CUDA but no usable CUDA device (driver/GPU) on this machine\n");
      std::exit(77);
    }
  }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

const Backend& gpu() { return *find_backend("cuda"); }
}  // namespace

BOOST_AUTO_TEST_CASE(memory_hooks) {
  BOOST_TEST(gpu().device_memory);
  Buf<float> b(gpu(), std::vector<float>{1, 2, 3});
  gpu().fill_zero(b.ptr + 1, sizeof(float));
  BOOST_TEST(b.host() == (std::vector<float>{1, 0, 3}));
}
BOOST_AUTO_TEST_CASE(embedding) { check_embedding(gpu(), kRtol); }
BOOST_AUTO_TEST_CASE(layernorm) { check_layernorm(gpu(), kRtol); }
BOOST_AUTO_TEST_CASE(matmul) { check_matmul(gpu(), kRtol); }
BOOST_AUTO_TEST_CASE(attention) { check_attention(gpu(), kRtol); }
BOOST_AUTO_TEST_CASE(gelu_and_residual) { check_gelu_residual(gpu(), kRtol, true); }
BOOST_AUTO_TEST_CASE(crossentropy) { check_crossentropy(gpu(), kRtol); }
BOOST_AUTO_TEST_CASE(adamw_norm_scale) { check_optimizer(gpu(), kRtol, false); }
BOOST_AUTO_TEST_CASE(matmul_bf16) {
  cairn::kernels::cuda_set_bf16_matmul(true);
  struct Off {
    ~Off() { cairn::kernels::cuda_set_bf16_matmul(false); }
  } off;
  check_matmul(gpu(), 2e-2);
}
