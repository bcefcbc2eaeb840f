// cuBLAS and cuBLASLt are loaded on the first GPU GEMM, not with the program (cairn/kernels/cublas_api.h): a binary
// linked like the tools has neither mapped after choosing the CPU backend, probing for a GPU and running a CPU GEMM;
// the loader then finds both and resolves every entry point cairn calls. Runs without a GPU (loading cuBLAS needs
// none). The cases run in order: the first must see a process that has not loaded cuBLAS yet.
#define BOOST_TEST_MODULE kernels_cublas_loader
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "cairn/kernels/backend.h"
#include "cairn/kernels/cublas_api.h"

using namespace cairn::kernels;

namespace {
// Whether a file whose name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}
// The directory of the mapped file whose name starts with `prefix` ("" if none).
std::string mapped_dir(const std::string& prefix) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.rfind('/');
    if (slash != std::string::npos && line.compare(slash + 1, prefix.size(), prefix) == 0)
      return line.substr(line.find('/'), slash - line.find('/'));
  }
  return "";
}
}  // namespace

BOOST_AUTO_TEST_CASE(cpu_work_does_not_load_cublas) {
  BOOST_TEST(!mapped("libcublas"));
  (void)find_backend("cuda");  // the GPU probe every tool makes; nullptr on this machine, a backend on a GPU one
  const Backend& cpu = *find_backend("cpu");
  std::vector<float> inp(4 * 8, 0.5f), w(8 * 3, 0.25f), out(4 * 3, 0.0f);
  cpu.matmul_forward(out.data(), inp.data(), w.data(), nullptr, 4, 8, 3, WeightLayout::InOut);
  BOOST_TEST(out[0] == 1.0f);  // 8 x 0.5 x 0.25
  BOOST_TEST(!mapped("libcublas"));
  BOOST_TEST(cublas_loaded_path("cublas").empty());
}

// cuBLASLt asked for first (FP8 calibration): libcublas is loaded first and brings its own libcublasLt, so the two
// come from one directory (one toolkit), never CUDA_HOME's one and the loader path's other.
BOOST_AUTO_TEST_CASE(cublaslt_first_comes_from_cublas_directory) {
  (void)cublaslt_api();
  BOOST_TEST(mapped("libcublas.so."));
  BOOST_TEST(!mapped_dir("libcublasLt.so.").empty());
  BOOST_TEST(mapped_dir("libcublasLt.so.") == mapped_dir("libcublas.so."));
}

BOOST_AUTO_TEST_CASE(loader_resolves_every_entry_point) {
  const CublasApi& b = cublas_api();
  BOOST_TEST((b.create && b.destroy && b.set_math_mode && b.sgemm && b.gemm_ex));
  const CublasLtApi& lt = cublaslt_api();
  BOOST_TEST((lt.create && lt.destroy && lt.desc_create && lt.desc_destroy && lt.desc_set && lt.layout_create &&
              lt.layout_destroy && lt.pref_create && lt.pref_destroy && lt.pref_set && lt.heuristic && lt.matmul));
  BOOST_TEST(mapped("libcublasLt"));
  BOOST_TEST(cublas_loaded_path("cublas").find("libcublas.so.") != std::string::npos);
  BOOST_TEST(cublas_loaded_path("cublasLt").find("libcublasLt.so.") != std::string::npos);
  BOOST_TEST(&cublas_api() == &b);  // loaded once
}
