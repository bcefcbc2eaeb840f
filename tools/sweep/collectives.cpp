// Table of collectives (nccl-tests' counts, bus-bandwidth factors) and their checkable layouts.
#include "collectives.h"

#include <algorithm>

#include "cairn/error.h"

namespace cairn::sweep {
namespace {

CollCounts whole_counts(uint64_t c, int, size_t) { return {c, c, c, 0, 0}; }
// nccl-tests trims per-rank blocks of collectives that divide the buffer by the rank count to a
// multiple of 16 bytes: (count/nranks) & ~(16/eltSize - 1).
uint64_t trimmed(uint64_t c, int n, size_t w) { return (c / n) & ~static_cast<uint64_t>(16 / w - 1); }
CollCounts allgather_counts(uint64_t c, int n, size_t w) {
  uint64_t p = trimmed(c, n, w);
  return {p, p * n, p, p, 0};
}
CollCounts reducescatter_counts(uint64_t c, int n, size_t w) {
  uint64_t p = trimmed(c, n, w);
  return {p * n, p, p, 0, p};
}
CollCounts alltoall_counts(uint64_t c, int n, size_t w) {
  uint64_t p = trimmed(c, n, w);
  return {p * n, p * n, p, 0, 0};
}

double allreduce_factor(int n) { return 2.0 * (n - 1) / n; }
double split_factor(int n) { return static_cast<double>(n - 1) / n; }
double unit_factor(int) { return 1.0; }

Segment input(bool recv_view, uint64_t offset, uint64_t count, int src, uint64_t g0) {
  return Segment{recv_view, offset, count, ValueKind::Input, src, g0};
}
Segment reduced(uint64_t offset, uint64_t count, uint64_t g0) {
  return Segment{true, offset, count, ValueKind::Reduced, 0, g0};
}

void allreduce_layout(const LayoutArgs& a, std::vector<Segment>& init, std::vector<Segment>& expect) {
  init.push_back(input(false, 0, a.param, a.rank, 0));
  expect.push_back(reduced(0, a.param, 0));
}
void allgather_layout(const LayoutArgs& a, std::vector<Segment>& init, std::vector<Segment>& expect) {
  init.push_back(input(false, 0, a.param, a.rank, 0));
  for (int p = 0; p < a.nranks; ++p) expect.push_back(input(true, p * a.param, a.param, p, 0));
}
void reducescatter_layout(const LayoutArgs& a, std::vector<Segment>& init, std::vector<Segment>& expect) {
  init.push_back(input(false, 0, a.param * a.nranks, a.rank, 0));
  expect.push_back(reduced(0, a.param, static_cast<uint64_t>(a.rank) * a.param));
}
void alltoall_layout(const LayoutArgs& a, std::vector<Segment>& init, std::vector<Segment>& expect) {
  init.push_back(input(false, 0, a.param * a.nranks, a.rank, 0));
  for (int p = 0; p < a.nranks; ++p)
    expect.push_back(input(true, p * a.param, a.param, p, static_cast<uint64_t>(a.rank) * a.param));
}
void broadcast_layout(const LayoutArgs& a, std::vector<Segment>& init, std::vector<Segment>& expect) {
  init.push_back(input(false, 0, a.param, a.rank, 0));
  bool root_untouched = a.backend && a.backend->root_recv_untouched_by_broadcast && !a.in_place;
  if (a.rank == a.root && root_untouched) {
    expect.push_back(input(false, 0, a.param, a.root, 0));  // the root's data must survive
  } else {
    expect.push_back(input(true, 0, a.param, a.root, 0));
  }
}
void reduce_layout(const LayoutArgs& a, std::vector<Segment>& init, std::vector<Segment>& expect) {
  init.push_back(input(false, 0, a.param, a.rank, 0));
  if (a.rank == a.root) expect.push_back(reduced(0, a.param, 0));
}
void sendrecv_layout(const LayoutArgs& a, std::vector<Segment>& init, std::vector<Segment>& expect) {
  init.push_back(input(false, 0, a.param, a.rank, 0));
  expect.push_back(input(true, 0, a.param, (a.rank - 1 + a.nranks) % a.nranks, 0));
}

const TypeInfo kTypes[] = {
    {DataType::Int32, "int32", "int32", 4},          {DataType::Float32, "float", "float32", 4},
    {DataType::Float64, "double", "float64", 8},     {DataType::Float16, "half", "float16", 2},
    {DataType::BFloat16, "bfloat16", "bfloat16", 2},
};

}  // namespace

const std::vector<Collective>& collectives() {
  static const std::vector<Collective> table = {
      {CollKind::AllReduce, "allreduce", "all_reduce_perf", true, true, false, whole_counts, allreduce_factor, false,
       allreduce_layout},
      {CollKind::AllGather, "allgather", "all_gather_perf", false, false, false, allgather_counts, split_factor, true,
       allgather_layout},
      {CollKind::ReduceScatter, "reducescatter", "reduce_scatter_perf", true, true, false, reducescatter_counts,
       split_factor, true, reducescatter_layout},
      {CollKind::AlltoAll, "alltoall", "alltoall_perf", false, false, false, alltoall_counts, split_factor, true,
       alltoall_layout},
      {CollKind::Broadcast, "broadcast", "broadcast_perf", false, false, true, whole_counts, unit_factor, false,
       broadcast_layout},
      {CollKind::Reduce, "reduce", "reduce_perf", true, true, true, whole_counts, unit_factor, false, reduce_layout},
      {CollKind::SendRecv, "sendrecv", "sendrecv_perf", false, true, false, whole_counts, unit_factor, false,
       sendrecv_layout},
  };
  return table;
}

const Collective& find_collective(const std::string& name) {
  std::string list;
  for (const auto& c : collectives()) {
    if (name == c.name || name == c.perf_name) return c;
    list += (list.empty() ? "" : ", ") + std::string(c.name);
  }
  throw UsageError("unknown collective '" + name + "' (choose from " + list + ", all)");
}

const TypeInfo& type_info(DataType t) { return kTypes[static_cast<int>(t)]; }

DataType parse_type(const std::string& name) {
  if (name == "float32" || name == "float") return DataType::Float32;
  if (name == "float64" || name == "double") return DataType::Float64;
  if (name == "int32" || name == "int") return DataType::Int32;
  if (name == "float16" || name == "half") return DataType::Float16;
  if (name == "bfloat16" || name == "bf16") return DataType::BFloat16;
  throw UsageError("unknown type '" + name + "' (choose from float32, float64, int32, float16, bfloat16)");
}

const char* op_name(RedOp op) {
  switch (op) {
    case RedOp::Sum: return "sum";
    case RedOp::Max: return "max";
    case RedOp::Min: return "min";
    case RedOp::Avg: return "avg";
    case RedOp::Prod: return "prod";
    default: return "none";
  }
}

RedOp parse_op(const std::string& name) {
  if (name == "sum") return RedOp::Sum;
  if (name == "max") return RedOp::Max;
  if (name == "min") return RedOp::Min;
  if (name == "avg") return RedOp::Avg;
  if (name == "prod") return RedOp::Prod;
  throw UsageError("unknown reduction op '" + name + "' (choose from sum, prod, max, min, avg, all)");
}

SizeRow size_row(const Collective& c, uint64_t bytes, size_t elem_size, int nranks) {
  SizeRow r;
  r.counts = c.counts(bytes / elem_size, nranks, elem_size);
  r.size = std::max(r.counts.send, r.counts.recv) * elem_size;
  r.count = r.counts.param;
  return r;
}

void bandwidths(const Collective& c, uint64_t param_count, size_t elem_size, int nranks, double seconds, double* algbw,
                double* busbw) {
  double mult = c.algbw_times_ranks ? static_cast<double>(nranks) : 1.0;
  double base = seconds > 0 ? static_cast<double>(param_count) * elem_size * mult / 1.0e9 / seconds : 0.0;
  *algbw = base;
  *busbw = base * c.busbw_factor(nranks);
}

size_t type_size(DataType t) { return type_info(t).size; }

}  // namespace cairn::sweep
