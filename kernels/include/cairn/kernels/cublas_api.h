// cuBLAS and cuBLASLt loaded on first use (dlopen), for the CUDA backend's GEMMs and cairn-plan calibrate's: a CUDA
// build's CPU runs and cairn-plan's other commands start without mapping them (linked, libcublasLt alone took
// 0.4-0.5 s and 215 MB per process to load). Only code built with CUDA includes this header.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

namespace cairn::kernels {

// The cuBLAS entry points cairn calls, resolved from the loaded library.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  // the C (32-bit int) signature; C++ also sees a 64-bit overload, so the type is spelled out
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
};

// The cuBLASLt entry points: the bf16 training GEMMs and the FP8 calibration (cuBLAS's GemmEx has no FP8).
struct CublasLtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

// Loaded once per process and kept. The library is looked up as the dynamic loader would (LD_LIBRARY_PATH, the
// binary's RUNPATH, ld.so.cache: libcublas.so.<major of the headers built against>), then in $CUDA_HOME, the
// toolkit directory found at build time and /usr/local/cuda. Throws GpuError naming the library, the places tried and
// dlerror's reason (or the missing symbol); a later call tries again.
const CublasApi& cublas_api();
const CublasLtApi& cublaslt_api();

// Where cublas_api() / cublaslt_api() loaded the library from ("" before it is loaded), for logs and tests.
std::string cublas_loaded_path(const char* stem);

}  // namespace cairn::kernels
