// The collectives cairn-sweep measures: one small struct each with nccl-tests' size/count rules,
// bus-bandwidth factor and the layout of exactly checkable inputs and expected outputs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"

namespace cairn::sweep {

// Element counts for one size, as nccl-tests' getCollByteCount defines them. Offsets are per rank:
// in place, the send view starts at recv + send_inplace_offset*rank (likewise the recv view).
struct CollCounts {
  uint64_t send = 0, recv = 0, param = 0;
  uint64_t send_inplace_offset = 0, recv_inplace_offset = 0;
};

struct LayoutArgs {
  int rank = 0, nranks = 1, root = 0;
  uint64_t param = 0;  // the per-rank count passed to the collective
  bool in_place = false;
  const Backend* backend = nullptr;
};

struct Collective {
  CollKind kind;
  const char* name;       // "allreduce"
  const char* perf_name;  // nccl-tests binary it matches, "all_reduce_perf"
  bool reducing;          // takes a reduction op
  bool op_column;         // nccl-tests loops over -o and prints the op (reducing ones, and sendrecv)
  bool rooted;            // takes a root
  CollCounts (*counts)(uint64_t count, int nranks, size_t elem_size);
  double (*busbw_factor)(int nranks);
  bool algbw_times_ranks;  // algbw = param*size*(nranks if true else 1)/t
  // Segments to write into the send view before the call, and to verify afterwards.
  void (*layout)(const LayoutArgs&, std::vector<Segment>& init, std::vector<Segment>& expect);
};

const std::vector<Collective>& collectives();
// Throws UsageError naming the valid choices.
const Collective& find_collective(const std::string& name);

struct TypeInfo {
  DataType type;
  const char* name;         // nccl-tests' name: "float", "double", "int32", "half", "bfloat16"
  const char* config_name;  // cairn's: "float32", "float64", "int32", "float16", "bfloat16"
  size_t size;
};
const TypeInfo& type_info(DataType t);
DataType parse_type(const std::string& name);  // float32|float, float64|double, int32, float16|half, bfloat16|bf16
const char* op_name(RedOp op);                 // "sum", "prod", "max", "min", "avg", "none"
RedOp parse_op(const std::string& name);

// The size (bytes) and count columns nccl-tests prints for a requested size in bytes.
struct SizeRow {
  uint64_t size = 0;   // max(send, recv) bytes
  uint64_t count = 0;  // param count (elements)
  CollCounts counts;
};
SizeRow size_row(const Collective& c, uint64_t bytes, size_t elem_size, int nranks);

// algbw and busbw (GB/s, 1e9) for one row measured in `seconds` per op.
void bandwidths(const Collective& c, uint64_t param_count, size_t elem_size, int nranks, double seconds, double* algbw,
                double* busbw);

}  // namespace cairn::sweep
