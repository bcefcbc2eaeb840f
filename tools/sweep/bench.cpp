// cairn-sweep --bench-bare: in one MPI job and on the same buffers, alternates cairn-sweep's own
// measurement of allreduce (time_collective through the backend table, the code path behind every
// busbw it reports) with a bare MPI_Allreduce loop, size by size, and prints both busbw figures.
#include "sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "cairn/cli.h"
#include "cairn/clock.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/json_text.h"
#include "cairn/log.h"
#include "cairn/malloc_tune.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"

namespace cairn::sweep {

namespace {

MPI_Datatype bare_type(DataType t) {
  switch (t) {
    case DataType::Int32: return MPI_INT32_T;
    case DataType::Float64: return MPI_DOUBLE;
    default: return MPI_FLOAT;
  }
}
MPI_Op bare_op(RedOp op) {
  switch (op) {
    case RedOp::Max: return MPI_MAX;
    case RedOp::Min: return MPI_MIN;
    default: return MPI_SUM;
  }
}

// Small integers, exact in every MPI type, different per rank (values do not change MPI's speed,
// but NaN or denormal inputs could change the reduction's).
template <typename T>
void fill_inputs(void* p, size_t count, int rank) {
  T* v = static_cast<T*>(p);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<T>(static_cast<int>((i + rank) % 7) - 3);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

BenchBareRow summarize_bench_row(uint64_t size, uint64_t count, int iters, const std::vector<double>& sweep_busbw,
                                 const std::vector<double>& bare_busbw) {
  BenchBareRow r;
  r.rounds = static_cast<int>(std::min(sweep_busbw.size(), bare_busbw.size()));
  r.size = size;
  r.count = count;
  r.iters = iters;
  r.sweep_busbw = sweep_busbw;
  r.bare_busbw = bare_busbw;
  r.sweep_median = median(sweep_busbw);
  r.bare_median = median(bare_busbw);
  r.sweep_best = sweep_busbw.empty() ? 0 : *std::max_element(sweep_busbw.begin(), sweep_busbw.end());
  r.bare_best = bare_busbw.empty() ? 0 : *std::max_element(bare_busbw.begin(), bare_busbw.end());
  r.diff_median_pct = r.bare_median > 0 ? 100.0 * (r.sweep_median - r.bare_median) / r.bare_median : 0;
  r.diff_best_pct = r.bare_best > 0 ? 100.0 * (r.sweep_best - r.bare_best) / r.bare_best : 0;
  // Paired: rounds alternate the order (sweep, bare), (bare, sweep), so two consecutive rounds form
  // an ABBA block in which drift and "first or second loop of a round" effects cancel. Per block,
  // the busbw of the two loops of each kind together (harmonic mean: their times add).
  std::vector<double> ratios;
  size_t rounds = std::min(sweep_busbw.size(), bare_busbw.size());
  for (size_t i = 0; i + 1 < rounds; i += 2) {
    double s =
        sweep_busbw[i] > 0 && sweep_busbw[i + 1] > 0 ? 2.0 / (1.0 / sweep_busbw[i] + 1.0 / sweep_busbw[i + 1]) : 0;
    double b = bare_busbw[i] > 0 && bare_busbw[i + 1] > 0 ? 2.0 / (1.0 / bare_busbw[i] + 1.0 / bare_busbw[i + 1]) : 0;
    if (s > 0 && b > 0) ratios.push_back(100.0 * (s / b - 1.0));
  }
  r.diff_paired_pct = median(ratios);
  return r;
}

std::string format_bench_header(int nranks, const BenchBareOptions& b, const std::string& type, const std::string& op) {
  std::string s =
      strprintf("# allreduce, MPI, %d ranks, %s %s, out of place; per size %d..%d alternating rounds (about %.1f s), "
                "loops of about %.1f ms (busbw GB/s)\n"
                "# sweep = cairn-sweep's timed loop (backend table, as reported); bare = for (i<iters) MPI_Allreduce\n"
                "# diff %% = 100*(sweep-bare)/bare; paired %% = median over pairs of rounds (ABBA) of the difference\n",
                nranks, type.c_str(), op.c_str(), std::min(b.min_rounds, b.max_rounds), b.max_rounds, b.size_seconds,
                b.loop_seconds * 1e3);
  s += strprintf("#%11s %11s %6s %6s %10s %10s %8s %10s %10s %8s %8s\n", "size", "count", "iters", "rounds",
                 "sweep_med", "bare_med", "diff%", "sweep_best", "bare_best", "diff%", "paired%");
  return s;
}

std::string format_bench_row(const BenchBareRow& r) {
  return strprintf("%12llu %11llu %6d %6d %10.3f %10.3f %8.2f %10.3f %10.3f %8.2f %8.2f\n",
                   static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.count), r.iters, r.rounds,
                   r.sweep_median, r.bare_median, r.diff_median_pct, r.sweep_best, r.bare_best, r.diff_best_pct,
                   r.diff_paired_pct);
}

namespace {

// The checks that need no MPI state, in the order the tool has always reported them.
void check_bench_request(const SweepOptions& o, const BenchBareOptions& bo) {
  if (bo.max_rounds < 1) throw UsageError("--bench-bare: the number of rounds must be at least 1");
  // Written as positive tests so NaN fails them; the bounds keep the loop counts inside an int.
  if (!(bo.loop_seconds > 0 && bo.loop_seconds <= 60) || !(bo.size_seconds >= 0 && bo.size_seconds <= 86400))
    throw UsageError("--bench-loop-ms must be in (0, 60000] and --bench-size-s in [0, 86400]");
  if (o.backend == "nccl") throw UsageError("--bench-bare compares against bare MPI_Allreduce: use --backend mpi");
  if (o.collectives.size() != 1 || o.collectives.front() != "allreduce") {
    throw UsageError("--bench-bare measures allreduce only (give no collective or 'allreduce')");
  }
}

void check_backend_supports(const Backend& be, DataType type, RedOp op) {
  if (!be.supports_type(type))
    throw UsageError(std::string("--bench-bare: type ") + type_info(type).config_name + " is not available on MPI");
  if (!be.supports_op(op))
    throw UsageError(std::string("--bench-bare: op ") + op_name(op) + " is not available on MPI");
}

// The sweep's sizes as allreduce rows, without empty or repeated ones.
std::vector<SizeRow> bench_size_rows(const SweepOptions& o, const Collective& c, size_t ws, int n) {
  std::vector<SizeRow> rows;
  for (uint64_t bytes : sweep_sizes(o)) {
    SizeRow r = size_row(c, bytes, ws, n);
    if (r.count == 0 || (!rows.empty() && rows.back().size == r.size)) continue;
    if (r.count > static_cast<uint64_t>(INT32_MAX))
      throw UsageError("--bench-bare: sizes above 2^31-1 elements are not benchmarked");
    rows.push_back(r);
  }
  if (rows.empty()) throw UsageError("--bench-bare: no size in the range holds one element");
  return rows;
}

// One pair of page-aligned buffers, allocated through the backend and touched once, used by both
// loops (so neither loop has the advantage of warmer or differently placed memory).
struct BenchBuffers {
  const Backend& be;
  BackendComm* bc = nullptr;
  void* send = nullptr;
  void* recv = nullptr;

  BenchBuffers(const Backend& backend, MPI_Comm comm, DataType type, uint64_t count, size_t ws, int rank)
      : be(backend) {
    uint64_t bytes = count * ws;
    bc = be.open(comm, 0);
    send = be.alloc(bc, bytes);
    recv = be.alloc(bc, bytes);
    switch (type) {
      case DataType::Int32: fill_inputs<int32_t>(send, count, rank); break;
      case DataType::Float64: fill_inputs<double>(send, count, rank); break;
      default: fill_inputs<float>(send, count, rank); break;
    }
    std::memset(recv, 0, bytes);
  }
  void release() {
    be.release(bc, send);
    be.release(bc, recv);
    be.close(bc);
  }
};

// The bare loop the sweep's figure is compared with: one call and a barrier to line the ranks up,
// then `iters` back-to-back MPI_Allreduce calls; seconds per call.
struct BareLoop {
  const BenchBuffers& buf;
  MPI_Datatype dt;
  MPI_Op op;
  MPI_Comm comm;

  double operator()(int count, int iters) const {
    MPI_Allreduce(buf.send, buf.recv, count, dt, op, comm);
    MPI_Barrier(comm);
    double t0 = monotonic_seconds();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(buf.send, buf.recv, count, dt, op, comm);
    return (monotonic_seconds() - t0) / iters;
  }
};

// Output goes to stdout on rank 0 only, and only when the table is wanted.
void emit(int rank, const SweepOptions& o, const std::string& s) {
  if (rank != 0) return;
  if (o.print_table) {
    std::fputs(s.c_str(), stdout);
    std::fflush(stdout);
  }
}

constexpr const char* kMallocEnv[] = {"MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_"};

std::string environment_line(bool malloc_tune) {
  std::string env = "# Environment:";
  for (const char* k : kMallocEnv) {
    const char* v = std::getenv(k);
    env += strprintf(" %s=%s", k, v ? v : "(unset)");
  }
  if (malloc_tune) env += " (malloc tuned in-process)";
  return env + "\n";
}

// Everything one size's measurement needs besides the size itself.
struct BenchContext {
  const SweepOptions& o;
  const BenchBareOptions& bo;
  const Backend& be;
  const Collective& c;
  BenchBuffers& buf;
  const BareLoop& bare_loop;
  MPI_Comm comm;
  DataType type;
  RedOp op;
  size_t ws;
  int rank, n;
};

// Measures one size in alternating rounds; the summarized row is meaningful on rank 0 only.
BenchBareRow measure_size(const BenchContext& x, const SizeRow& r) {
  int count = static_cast<int>(r.count);
  // Iterations per loop so that one loop lasts about loop_seconds (at least one call); every rank
  // uses rank 0's choice so the loops match.
  double probe = x.bare_loop(count, 1);
  for (int k = 0; k < 2; ++k) probe = std::min(probe, x.bare_loop(count, 2));  // a descheduled probe overestimates
  int iters = static_cast<int>(std::clamp(std::ceil(x.bo.loop_seconds / std::max(probe, 1e-9)), 1.0, 1e6));
  iters = mpi::broadcast_value<int>(iters, 0, x.comm);
  TimedCall call{x.c.kind, x.buf.send, x.buf.recv, r.count, x.type, x.op, -1, false};
  std::vector<double> sweep_bw, bare_bw;
  double size_start = monotonic_seconds();
  for (int round = 0; round < x.bo.max_rounds; ++round) {
    // Short loops, many rounds: a descheduled rank spoils a few loops, not the figure. Rounds stop
    // after the size's time budget (rank 0 decides, every rank follows).
    if (round >= x.bo.min_rounds) {
      int more = monotonic_seconds() - size_start < x.bo.size_seconds ? 1 : 0;
      if (!mpi::broadcast_value<int>(more, 0, x.comm)) break;
    }
    double t[2];
    // Alternate which loop goes first, so neither always follows the other.
    for (int k = 0; k < 2; ++k) {
      bool sweep_turn = (k == 0) == (round % 2 == 0);
      if (sweep_turn) t[0] = time_collective(x.be, x.buf.bc, x.comm, call, iters, 0);
      else t[1] = x.bare_loop(count, iters);
    }
    std::vector<double> all(x.rank == 0 ? 2 * static_cast<size_t>(x.n) : 0);
    mpi::check(MPI_Gather(t, 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, x.comm), "MPI_Gather");
    if (x.rank != 0) continue;
    for (int which = 0; which < 2; ++which) {
      std::vector<double> per_rank;
      per_rank.reserve(static_cast<size_t>(x.n));
      for (int q = 0; q < x.n; ++q) per_rank.push_back(all[2 * static_cast<size_t>(q) + which]);
      double algbw = 0, busbw = 0;
      bandwidths(x.c, r.count, x.ws, x.n, combine_times(per_rank, x.o.average), &algbw, &busbw);
      (which == 0 ? sweep_bw : bare_bw).push_back(busbw);
    }
  }
  return summarize_bench_row(r.size, r.count, iters, sweep_bw, bare_bw);
}

std::string summary_line(const std::vector<BenchBareRow>& results) {
  double worst_median = 0, worst_paired = 0;
  for (const auto& r : results) {
    worst_median = std::max(worst_median, std::abs(r.diff_median_pct));
    worst_paired = std::max(worst_paired, std::abs(r.diff_paired_pct));
  }
  return strprintf("# largest |diff| of medians: %.2f%%, of paired differences: %.2f%% (target 3%%)\n", worst_median,
                   worst_paired);
}

nlohmann::ordered_json bench_json(const SweepOptions& o, const BenchBareOptions& bo, int n, DataType type, RedOp op,
                                  const std::vector<BenchBareRow>& results) {
  nlohmann::ordered_json doc;  // keys in writing order
  doc["provenance"] = provenance().to_json();
  doc["benchmark"] = "allreduce: cairn-sweep timed loop vs bare MPI_Allreduce loop";
  doc["ranks"] = n;
  doc["max_rounds"] = bo.max_rounds;
  doc["min_rounds"] = bo.min_rounds;
  doc["size_seconds"] = bo.size_seconds;
  doc["type"] = type_info(type).config_name;
  doc["op"] = op_name(op);
  doc["loop_seconds"] = bo.loop_seconds;
  for (const char* k : kMallocEnv) {
    if (const char* v = std::getenv(k)) doc["env"][k] = v;
  }
  doc["malloc_tune"] = o.malloc_tune;
  doc["rows"] = nlohmann::ordered_json::array();
  for (const auto& r : results) {
    doc["rows"].push_back({{"size", r.size},
                           {"count", r.count},
                           {"iters", r.iters},
                           {"rounds", r.rounds},
                           {"sweep_busbw", r.sweep_busbw},
                           {"bare_busbw", r.bare_busbw},
                           {"sweep_median", r.sweep_median},
                           {"bare_median", r.bare_median},
                           {"sweep_best", r.sweep_best},
                           {"bare_best", r.bare_best},
                           {"diff_median_pct", r.diff_median_pct},
                           {"diff_best_pct", r.diff_best_pct},
                           {"diff_paired_pct", r.diff_paired_pct}});
  }
  return doc;
}

}  // namespace

int run_bench_bare(const SweepOptions& opts, const BenchBareOptions& bo) {
  const SweepOptions& o = opts;
  check_bench_request(o, bo);
  const Backend& be = mpi_backend();
  DataType type = o.types.front();
  RedOp op = o.ops.front();
  check_backend_supports(be, type, op);
  if (o.malloc_tune) {
    keep_freed_memory_mapped();
  }
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  const Collective& c = find_collective("allreduce");
  size_t ws = type_size(type);
  std::vector<SizeRow> rows = bench_size_rows(o, c, ws, n);
  check_outputs(o, false);  // only --json is written in this mode

  BenchBuffers buf(be, comm, type, rows.back().count, ws, rank);
  BareLoop bare_loop{buf, bare_type(type), bare_op(op), comm};
  for (const SizeRow* r : {&rows.back(), &rows.front()}) {
    for (int i = 0; i < o.warmup; ++i)
      MPI_Allreduce(buf.send, buf.recv, static_cast<int>(r->count), bare_loop.dt, bare_loop.op, comm);
  }
  emit(rank, o, environment_line(o.malloc_tune));
  emit(rank, o, format_bench_header(n, bo, type_info(type).config_name, op_name(op)));

  const BenchContext ctx{o, bo, be, c, buf, bare_loop, comm, type, op, ws, rank, n};
  std::vector<BenchBareRow> results;
  for (const SizeRow& r : rows) {
    BenchBareRow row = measure_size(ctx, r);
    if (rank == 0) {
      results.push_back(row);
      emit(rank, o, format_bench_row(results.back()));
    }
  }
  emit(rank, o, summary_line(results));
  buf.release();

  if (rank == 0 && !o.json_path.empty())
    write_json_output(o.json_path, json_text(bench_json(o, bo, n, type, op, results), 1) + "\n");
  return 0;
}

}  // namespace cairn::sweep
