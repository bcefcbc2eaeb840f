// The dlopen loader behind cairn/kernels/cublas_api.h: one place that finds libcublas and libcublasLt and resolves
// the symbols cairn uses (host C++, no device code; its own small library so cairn-plan can link it without the
// kernels).
#include "cairn/kernels/cublas_api.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "cairn/kernels/gpu_check.h"

namespace cairn::kernels {

namespace {

// Candidates for libNAME: the soname of the headers' major version (what a linked binary would have needed), by the
// loader's own search; then that file in $CUDA_HOME/lib64, $CUDA_HOME/lib, the build's toolkit directories and
// /usr/local/cuda/lib64 (or lib).
std::vector<std::string> candidates(const std::string& stem) {
  const std::string soname = "lib" + stem + ".so." + std::to_string(CUBLAS_VER_MAJOR);
  std::vector<std::string> out{soname};
  auto in_dir = [&](const std::string& dir) {  // each place once
    const std::string path = dir + "/" + soname;
    if (!dir.empty() && std::find(out.begin(), out.end(), path) == out.end()) out.push_back(path);
  };
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) {
    in_dir(std::string(home) + "/lib64");
    in_dir(std::string(home) + "/lib");
  }
#ifdef CAIRN_CUDA_LIBRARY_DIR  // one directory or several, ':'-separated
  const std::string dirs = CAIRN_CUDA_LIBRARY_DIR;
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    in_dir(dirs.substr(start, end - start));
    start = end + 1;
  }
#endif
  in_dir("/usr/local/cuda/lib64");  // the toolkit's usual home
  in_dir("/usr/local/cuda/lib");
  return out;
}

// A loaded library, never closed (cuBLAS handles live to the end of the process), and where it came from.
struct Library {
  void* handle = nullptr;
  std::string stem, path;

  explicit Library(const std::string& name) : stem(name) {
    std::string tried, reason;
    for (const std::string& c : candidates(stem)) {
      if ((handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) {
        path = c;
        return;
      }
      const char* e = dlerror();
      if (reason.empty() && e) reason = e;
      tried += (tried.empty() ? "" : ", ") + c;
    }
    throw GpuError("cannot load " + stem + " (tried " + tried + "): " + reason +
                   "; put CUDA's library directory on LD_LIBRARY_PATH or set CUDA_HOME");
  }

  template <typename F>
  void get(F& f, const char* symbol) const {
    void* p = dlsym(handle, symbol);
    if (!p)
      throw GpuError(stem + " (" + path + ") has no " + symbol + "; is it CUDA " + std::to_string(CUBLAS_VER_MAJOR) +
                     "'s?");
    f = reinterpret_cast<F>(p);
  }
};

std::mutex g_paths_mutex;
std::string g_cublas_path, g_cublaslt_path;

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = [] {
    const Library lib("cublas");
    CublasApi a;
    lib.get(a.create, "cublasCreate_v2");
    lib.get(a.destroy, "cublasDestroy_v2");
    lib.get(a.set_math_mode, "cublasSetMathMode");
    lib.get(a.sgemm, "cublasSgemm_v2");
    lib.get(a.gemm_ex, "cublasGemmEx");
    const std::lock_guard<std::mutex> lock(g_paths_mutex);
    g_cublas_path = lib.path;
    return a;
  }();
  return api;
}

const CublasLtApi& cublaslt_api() {
  static const CublasLtApi api = [] {
    // libcublas first: it loads libcublasLt as its own dependency (from its directory), and the soname below then
    // names that copy, so the two always come from one toolkit; found apart, CUDA_HOME could give one and the
    // loader's path the other.
    (void)cublas_api();
    const Library lib("cublasLt");
    CublasLtApi a;
    lib.get(a.create, "cublasLtCreate");
    lib.get(a.destroy, "cublasLtDestroy");
    lib.get(a.desc_create, "cublasLtMatmulDescCreate");
    lib.get(a.desc_destroy, "cublasLtMatmulDescDestroy");
    lib.get(a.desc_set, "cublasLtMatmulDescSetAttribute");
    lib.get(a.layout_create, "cublasLtMatrixLayoutCreate");
    lib.get(a.layout_destroy, "cublasLtMatrixLayoutDestroy");
    lib.get(a.pref_create, "cublasLtMatmulPreferenceCreate");
    lib.get(a.pref_destroy, "cublasLtMatmulPreferenceDestroy");
    lib.get(a.pref_set, "cublasLtMatmulPreferenceSetAttribute");
    lib.get(a.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    lib.get(a.matmul, "cublasLtMatmul");
    const std::lock_guard<std::mutex> lock(g_paths_mutex);
    g_cublaslt_path = lib.path;
    return a;
  }();
  return api;
}

std::string cublas_loaded_path(const char* stem) {
  const std::lock_guard<std::mutex> lock(g_paths_mutex);
  const std::string s = stem ? stem : "";
  return s == "cublas" ? g_cublas_path : s == "cublasLt" ? g_cublaslt_path : std::string();
}

}  // namespace cairn::kernels
