// Exactly checkable data for sweeps: the value every rank puts at every index, and the value a
// collective must produce there. Shared by the host (MPI) and device (NCCL) backends.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define CAIRN_HD __host__ __device__
#else
#define CAIRN_HD
#endif

namespace cairn::sweep {

enum class DataType : int { Int32 = 0, Float32, Float64, Float16, BFloat16 };
enum class RedOp : int { Sum = 0, Max, Min, Avg, None };

// What a run of elements should hold: the sentinel recv buffers start with, one rank's input, or
// the reduction over all ranks' inputs.
enum class ValueKind : int { Sentinel = 0, Input, Reduced };

// Everything the value functions need; built once per (collective, size, check repetition).
struct PatternParams {
  uint64_t seed = 0;
  int nranks = 1;
  bool reducing = false;   // reducing collectives use a + b*c(rank) values with a closed-form reduction
  RedOp op = RedOp::Sum;
  DataType type = DataType::Float32;
  int64_t modulus = 1;     // range of non-reducing values (exact in the type)
  int64_t c_sum = 0, c_max = 0, c_min = 0;  // of c(rank) over all ranks (reducing)
  // Both 0: exact comparison; else |got - want| <= tol_abs + tol_rel*|want| (avg, half types).
  double tol_abs = 0, tol_rel = 0;
};

CAIRN_HD inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// c(rank) in [-2, 2]: each rank's multiplier in reducing collectives.
CAIRN_HD inline int64_t rank_factor(uint64_t seed, int rank) {
  return static_cast<int64_t>(mix64(seed * 31 + 7 + static_cast<uint64_t>(rank)) % 5) - 2;
}

// The input rank `rank` holds at global index g. Reducing: a(g) + b(g)*c(rank) with a in [-3,3],
// b in {0,1,2}, so sums of a few thousand ranks stay exact small integers in every type.
// Non-reducing: a hash of (rank, g) in [-modulus/2, modulus/2) so misplaced blocks are caught.
CAIRN_HD inline double input_value(const PatternParams& p, int rank, uint64_t g) {
  uint64_t h = mix64(p.seed ^ (g * 0xD1B54A32D192ED03ull));
  if (p.reducing) {
    int64_t a = static_cast<int64_t>(h % 7) - 3;
    int64_t b = static_cast<int64_t>((h >> 32) % 3);
    return static_cast<double>(a + b * rank_factor(p.seed, rank));
  }
  uint64_t hr = mix64(h ^ (static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull));
  return static_cast<double>(static_cast<int64_t>(hr % static_cast<uint64_t>(p.modulus)) - p.modulus / 2);
}

// The reduction of input_value over all ranks at index g (closed form, O(1)).
CAIRN_HD inline double reduced_value(const PatternParams& p, uint64_t g) {
  uint64_t h = mix64(p.seed ^ (g * 0xD1B54A32D192ED03ull));
  int64_t a = static_cast<int64_t>(h % 7) - 3;
  int64_t b = static_cast<int64_t>((h >> 32) % 3);
  switch (p.op) {
    case RedOp::Max: return static_cast<double>(a + b * p.c_max);
    case RedOp::Min: return static_cast<double>(a + b * p.c_min);
    case RedOp::Avg: {
      double sum = static_cast<double>(p.nranks * a + b * p.c_sum);
      if (p.type == DataType::Int32) return static_cast<double>(static_cast<int64_t>(sum / p.nranks));
      return sum / p.nranks;
    }
    default: return static_cast<double>(p.nranks * a + b * p.c_sum);
  }
}

CAIRN_HD inline bool value_matches(const PatternParams& p, double got, double want) {
  if (got != got) return false;  // NaN (the floating sentinel) never matches
  if (p.tol_abs == 0 && p.tol_rel == 0) return got == want;
  double d = got > want ? got - want : want - got;
  double w = want < 0 ? -want : want;
  return d <= p.tol_abs + p.tol_rel * w;
}

// One run of elements of a buffer view and what it holds (for init) or must hold (for checks).
struct Segment {
  bool recv_view = true;  // else the send view
  uint64_t offset = 0;    // elements from the view's start
  uint64_t count = 0;
  ValueKind kind = ValueKind::Input;
  int src_rank = 0;       // Input: whose data
  uint64_t g0 = 0;        // global index of the first element
};

CAIRN_HD inline double segment_value(const PatternParams& p, const Segment& s, uint64_t j) {
  if (s.kind == ValueKind::Reduced) return reduced_value(p, s.g0 + j);
  return input_value(p, s.src_rank, s.g0 + j);
}

}  // namespace cairn::sweep
