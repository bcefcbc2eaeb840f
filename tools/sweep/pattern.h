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
enum class RedOp : int { Sum = 0, Max, Min, Avg, Prod, None };

// What a run of elements should hold: the sentinel recv buffers start with, one rank's input, or
// the reduction over all ranks' inputs.
enum class ValueKind : int { Sentinel = 0, Input, Reduced };

// Everything the value functions need; built once per (collective, size, check repetition).
struct PatternParams {
  uint64_t seed = 0;
  int nranks = 1;
  bool reducing = false;  // reducing collectives use a + b*c(rank) values with a closed-form reduction
  RedOp op = RedOp::Sum;
  DataType type = DataType::Float32;
  int64_t modulus = 1;                      // range of non-reducing values (exact in the type)
  int64_t c_sum = 0, c_max = 0, c_min = 0;  // of c(rank) over all ranks (reducing)
  int64_t sign_prod = 1;                    // product of rank_sign(rank) over all ranks (prod)
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

// s(rank) in {-1, 1}: each rank's sign in prod reductions.
CAIRN_HD inline int64_t rank_sign(uint64_t seed, int rank) {
  return (mix64(seed * 131 + 3 + static_cast<uint64_t>(rank)) & 1) ? -1 : 1;
}

// The rank that holds the non-unit factor of index g in prod reductions.
CAIRN_HD inline int prod_owner(uint64_t g, int nranks) { return static_cast<int>(g % static_cast<uint64_t>(nranks)); }

// The input rank `rank` holds at global index g. Prod: one rank (prod_owner) holds a(g) in [-3,3],
// every other rank its sign s(rank), so the product a(g)*S/s(owner) is exact in every type. Reducing: a(g) +
// b(g)*c(rank) with a in [-3,3], b in {0,1,2}, so sums of a few thousand ranks stay exact small integers in every type.
// Non-reducing: a hash of (rank, g) in [-modulus/2, modulus/2) so misplaced blocks are caught.
CAIRN_HD inline double input_value(const PatternParams& p, int rank, uint64_t g) {
  uint64_t h = mix64(p.seed ^ (g * 0xD1B54A32D192ED03ull));
  if (p.reducing && p.op == RedOp::Prod) {
    if (rank == prod_owner(g, p.nranks)) return static_cast<double>(static_cast<int64_t>(h % 7) - 3);
    return static_cast<double>(rank_sign(p.seed, rank));
  }
  if (p.reducing) {
    int64_t a = static_cast<int64_t>(h % 7) - 3;
    int64_t b = static_cast<int64_t>((h >> 32) % 3);
    return static_cast<double>(a + b * rank_factor(p.seed, rank));
  }
  uint64_t hr = mix64(h ^ (static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull));
  // Integer values centred on 0 (modulus / 2 rounds down on purpose: exact in every type).
  const int64_t centred = static_cast<int64_t>(hr % static_cast<uint64_t>(p.modulus)) - p.modulus / 2;
  return static_cast<double>(centred);
}

// The reduction of input_value over all ranks at index g (closed form, O(1)).
CAIRN_HD inline double reduced_value(const PatternParams& p, uint64_t g) {
  uint64_t h = mix64(p.seed ^ (g * 0xD1B54A32D192ED03ull));
  int64_t a = static_cast<int64_t>(h % 7) - 3;
  int64_t b = static_cast<int64_t>((h >> 32) % 3);
  switch (p.op) {
    case RedOp::Prod: {
      int64_t owner_sign = rank_sign(p.seed, prod_owner(g, p.nranks));
      return static_cast<double>(a * p.sign_prod * owner_sign);  // S/s(owner) = S*s(owner)
    }
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
  int src_rank = 0;  // Input: whose data
  uint64_t g0 = 0;   // global index of the first element
};

CAIRN_HD inline double segment_value(const PatternParams& p, const Segment& s, uint64_t j) {
  if (s.kind == ValueKind::Reduced) return reduced_value(p, s.g0 + j);
  return input_value(p, s.src_rank, s.g0 + j);
}

}  // namespace cairn::sweep
