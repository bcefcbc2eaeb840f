// Plain cblas_sgemm (row-major only, what kernels/cpu/fast.cpp calls) for bench/kernels_gpu_bench.sh on GPU machines
// without OpenBLAS: the CPU side there is only the parity reference of the gpu tests, so simple loops will do.
#include <cstddef>

extern "C" void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha, const float* a,
                            int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  (void)order;  // 101 = row-major, the only order cairn uses
  const bool ta = transa != 111, tb = transb != 111;  // 111 = CblasNoTrans
#pragma omp parallel for
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < n; j++) {
      float s = 0.0f;
      for (int p = 0; p < k; p++) {
        const float x = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        const float y = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
        s += x * y;
      }
      c[(size_t)i * ldc + j] = alpha * s + (beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j]);
    }
  }
}
