// Reference for bench/sweep_allreduce_bench.sh: a bare MPI_Allreduce loop over the same buffers
// and the same procedure cairn-sweep uses (page-aligned float buffers allocated once and touched,
// one untimed call per size, barrier, timed loop, mean time across ranks), printing
// "size_bytes time_us busbw_gbps" per size for the out-of-place call.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <time.h>

static double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s minbytes maxbytes iters warmup\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  size_t minb = std::strtoull(argv[1], nullptr, 10), maxb = std::strtoull(argv[2], nullptr, 10);
  int iters = std::atoi(argv[3]), warmup = std::atoi(argv[4]);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  void *send = nullptr, *recv = nullptr;
  if (posix_memalign(&send, 4096, maxb) || posix_memalign(&recv, 4096, maxb)) MPI_Abort(MPI_COMM_WORLD, 1);
  float* s = static_cast<float*>(send);
  for (size_t i = 0; i < maxb / 4; ++i) s[i] = static_cast<float>(i % 7) - 3.0f;
  std::memset(recv, 0, maxb);
  for (size_t b : {maxb, minb}) {
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, static_cast<int>(b / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  for (size_t b = minb; b <= maxb; b *= 2) {
    int count = static_cast<int>(b / 4);
    MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (now_s() - t0) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    t /= n;
    double busbw = b / 1e9 / t * 2.0 * (n - 1) / n;
    if (rank == 0) std::printf("%zu %.3f %.4f\n", b, t * 1e6, busbw);
  }
  std::free(send);
  std::free(recv);
  MPI_Finalize();
  return 0;
}
