// CUDA matmul forward and backward: row-major GEMMs through column-major cuBLAS (C^T = B^T A^T), fp32 sgemm without
// TF32 so results match the CPU reference, or with cuda_set_bf16_matmul(true) (precision = "bf16") bf16 inputs with
// fp32 accumulation on tensor cores through cuBLASLt. Both are loaded on the first GEMM (cairn/kernels/cublas_api.h).
#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "cairn/kernels/cublas_api.h"
#include "cairn/kernels/cuda.h"
#include "cuda_common.cuh"

namespace cairn::kernels {
namespace cuda {
namespace {

cublasHandle_t cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h;
    CAIRN_CUBLAS_CHECK(cublas_api().create(&h));
    // full fp32 (no TF32) so the fp32 path matches the CPU reference; bf16 comes with mixed precision
    CAIRN_CUBLAS_CHECK(cublas_api().set_math_mode(h, CUBLAS_DEFAULT_MATH));
    return h;
  }();
  return handle;
}

__global__ void fill_rows_kernel(float* out, const float* bias, int N, int OC) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < (size_t)N * OC) out[idx] = bias[idx % OC];
}

// ---- bf16 GEMMs (precision = "bf16", autocast style): A and B rounded to bf16 right before each GEMM, fp32
// accumulation and fp32 output, so parameters, gradients, AdamW state and every other op stay fp32.
std::atomic<bool> g_bf16_matmul{false};

cublasLtHandle_t cublaslt() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h;
    CAIRN_CUBLAS_CHECK(cublaslt_api().create(&h));
    return h;
  }();
  return handle;
}

__global__ void to_bf16_kernel(__nv_bfloat16* out, const float* in, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

// bf16 copies of a GEMM's two inputs in one grow-only buffer (not scratch(): attention and the norm use that one):
// A at the start, B at the next 256-byte boundary, so both are 256-byte aligned and the buffer is as large as the
// largest pair (the lm_head's logits gradient dominates), not twice the largest operand.
std::pair<__nv_bfloat16*, __nv_bfloat16*> bf16_copies(const float* a, size_t na, const float* b, size_t nb) {
  static GrowBuffer buf;
  const size_t b_offset = (na + 127) / 128 * 128, n = b_offset + nb;
  auto* ptr = static_cast<__nv_bfloat16*>(buf.at_least(n * sizeof(__nv_bfloat16)));
  to_bf16_kernel<<<blocks_for(na), kThreads>>>(ptr, a, na);
  to_bf16_kernel<<<blocks_for(nb), kThreads>>>(ptr + b_offset, b, nb);
  CAIRN_CUDA_CHECK_LAUNCH("to_bf16");
  return {ptr, ptr + b_offset};
}

constexpr size_t kLtWorkspaceBytes = 32u << 20;
void* lt_workspace() {
  static void* ws = [] {
    void* p = nullptr;
    CAIRN_CUDA_CHECK(cudaMalloc(&p, kLtWorkspaceBytes));
    track_alloc(p, kLtWorkspaceBytes);
    return p;
  }();
  return ws;
}

uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 4 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// The cublasSgemm call below with A and B in bf16 (dense: lda/ldb are the stored row counts, as in every call here).
// False when cuBLASLt offers no algorithm for the shape or alignment; the caller then runs the fp32 GEMM.
bool gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a, int lda, const float* b,
               int ldb, float beta, float* c, int ldc) {
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  const CublasLtApi& lt = cublaslt_api();
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t ad = nullptr, bd = nullptr, cd = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  bool ok = false;
  try {
    CAIRN_CUBLAS_CHECK(lt.desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CAIRN_CUBLAS_CHECK(lt.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CAIRN_CUBLAS_CHECK(lt.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CAIRN_CUBLAS_CHECK(lt.layout_create(&ad, CUDA_R_16BF, a_rows, a_cols, lda));
    CAIRN_CUBLAS_CHECK(lt.layout_create(&bd, CUDA_R_16BF, b_rows, b_cols, ldb));
    CAIRN_CUBLAS_CHECK(lt.layout_create(&cd, CUDA_R_32F, m, n, ldc));
    CAIRN_CUBLAS_CHECK(lt.pref_create(&pref));
    uint64_t ws_bytes = kLtWorkspaceBytes;
    uint32_t align_ab = 256, align_c = alignment_of(c);  // bf16 copies are cudaMalloc'ed: 256-byte aligned
    CAIRN_CUBLAS_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    CAIRN_CUBLAS_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_ab, sizeof align_ab));
    CAIRN_CUBLAS_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_ab, sizeof align_ab));
    CAIRN_CUBLAS_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c));
    CAIRN_CUBLAS_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c));
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    if (lt.heuristic(cublaslt(), op, ad, bd, cd, cd, pref, 1, &heuristic, &found) == CUBLAS_STATUS_SUCCESS &&
        found > 0) {
      const auto [a16, b16] = bf16_copies(a, (size_t)lda * a_cols, b, (size_t)ldb * b_cols);
      const float one = 1.0f;
      CAIRN_CUBLAS_CHECK(lt.matmul(cublaslt(), op, &one, a16, ad, b16, bd, &beta, c, cd, c, cd, &heuristic.algo,
                                   lt_workspace(), kLtWorkspaceBytes, 0));
      ok = true;
    }
  } catch (...) {
    if (pref) lt.pref_destroy(pref);
    if (cd) lt.layout_destroy(cd);
    if (bd) lt.layout_destroy(bd);
    if (ad) lt.layout_destroy(ad);
    if (op) lt.desc_destroy(op);
    throw;
  }
  lt.pref_destroy(pref);
  lt.layout_destroy(cd);
  lt.layout_destroy(bd);
  lt.layout_destroy(ad);
  lt.desc_destroy(op);
  return ok;
}

void sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
  if (g_bf16_matmul && gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)) return;
  const float one = 1.0f;
  CAIRN_CUBLAS_CHECK(cublas_api().sgemm(cublas(), ta, tb, m, n, k, &one, a, lda, b, ldb, &beta, c, ldc));
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                    WeightLayout layout) {
  float beta = 0.0f;
  if (bias) {
    fill_rows_kernel<<<blocks_for((size_t)N * OC), kThreads>>>(out, bias, N, OC);
    CAIRN_CUDA_CHECK_LAUNCH("matmul bias");
    beta = 1.0f;
  }
  if (layout == WeightLayout::InOut)  // W row-major [C,OC] is column-major [OC,C]
    sgemm(CUBLAS_OP_N, CUBLAS_OP_N, OC, N, C, weight, OC, inp, C, beta, out, OC);
  else  // W row-major [OC,C] is column-major [C,OC]; transpose it
    sgemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, WeightLayout layout) {
  if (layout == WeightLayout::InOut) {
    if (dinp) sgemm(CUBLAS_OP_T, CUBLAS_OP_N, C, N, OC, weight, OC, dout, OC, 0.0f, dinp, C);
    sgemm(CUBLAS_OP_N, CUBLAS_OP_T, OC, C, N, dout, OC, inp, C, 1.0f, dweight, OC);
  } else {
    if (dinp) sgemm(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, 0.0f, dinp, C);
    sgemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dweight, C);
  }
  if (dbias) column_sums(dbias, dout, nullptr, nullptr, nullptr, N, OC, 0);
}

}  // namespace cuda

// precision = "bf16": every matmul of this backend rounds its inputs to bf16 and runs on tensor cores (fp32
// accumulation and output); off (the default) is plain fp32 cuBLAS.
void cuda_set_bf16_matmul(bool on) { cuda::g_bf16_matmul = on; }
bool cuda_bf16_matmul() { return cuda::g_bf16_matmul; }

}  // namespace cairn::kernels
