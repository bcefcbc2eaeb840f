// cairn-sweep's driver: options from the [sweep] config, the measured blocks, fits and outputs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"
#include "cairn/config.h"
#include "collectives.h"

namespace cairn::sweep {

struct SweepOptions {
  std::string backend = "auto";  // resolved to "mpi" or "nccl" by run_sweep
  std::vector<std::string> collectives;
  std::vector<DataType> types;
  std::vector<RedOp> ops;
  bool all_types = false, all_ops = false;  // -d all / -o all: every type/op the backend has (nccl-tests order)
  int root = 0;                             // -1: every rank of the tier in turn (nccl-tests' -r -1)
  uint64_t minbytes = 8, maxbytes = 128ull << 20, stepbytes = 1ull << 20;
  int stepfactor = 2;
  bool minbytes_defaulted = false;  // sizes too small to split among ranks are then skipped, not errors
  int iters = 20, warmup = 5, check = 1, average = 1;
  int blocking = 0;        // nccl-tests' -z: 1 wait+barrier per call, 2 wait per call, 3 wait+barrier per iteration
  int agg_iters = 1;       // -m: calls per timed iteration
  int report_cputime = 0;  // -C 1: the time column is the host time to issue the calls
  int local_register = 0;  // -R (recorded; not applicable to MPI)
  int graph_launches = 0;  // -G (recorded; CUDA graphs are not used)
  std::string experiment_name;          // JSON results' experiment_name ("" as nccl-tests)
  std::vector<std::string> args;        // the command line, for the JSON "args" list
  std::vector<std::string> flag_notes;  // what the command line asked that does not apply here
  std::vector<std::string> tiers;
  double min_busbw = 0;
  std::string min_busbw_source;  // which setting gave min_busbw (origin, or NCCL_TESTS_MIN_BW), for the log
  bool keep_samples = false, malloc_tune = false;
  bool mpi_nonblocking = false;  // MPI backend: MPI_I* calls, each waited for
  std::string run_dir;
  std::string json_path;    // --json ("" none, "-" stdout)
  bool print_table = true;  // the nccl-tests table on stdout
};

// Faults and stand-ins that only tests inject (cairn-sweep itself passes none: nothing in the tool, its config or
// its environment sets them), so a test proves #wrong, exit 3, the tiers and MPI's large-count paths on one machine.
struct SweepFaults {
  int64_t corrupt_check = 0;     // > 0: one element of rank 0's Nth checked result is overwritten before the check
  int ranks_per_node = 0;        // > 0: consecutive ranks form pretend nodes of this many (intra/inter tiers)
  uint64_t mpi_count_limit = 0;  // > 0: MPI's per-call count limit lowered to this (large-count paths, small sizes)
  int64_t term_after_sizes = 0;  // > 0: rank 0 raises SIGTERM on itself once this many sizes are measured
  int64_t kill_after_sizes = 0;  // > 0: rank 0 raises SIGKILL on itself once this many sizes are measured
  int64_t corrupt_elements = 1;  // elements corrupt_check overwrites (at most a segment's)
};

// The sizes a sweep visits (-b, -e, -f, -i), before per-collective rounding.
std::vector<uint64_t> sweep_sizes(const SweepOptions& o);
// The sizes each block warms up at before its first measured size, as nccl-tests (2.19): every doubling of -b, here up
// to the largest size the sweep measures (nccl-tests goes on to -e, which only -f other than 2 or -i makes larger).
std::vector<uint64_t> warmup_sizes(const SweepOptions& o);
// Reads and validates the [sweep] section (UsageError on bad values).
SweepOptions sweep_options(const Config& cfg);
// nccl-tests' bandwidth floor: NCCL_TESTS_MIN_BW (GB/s) fails a run whose average bus bandwidth is below 90% of it
// (common.cu: FAILED on the "Avg bus bandwidth" line, a non-zero exit).
inline constexpr const char* kNcclTestsMinBw = "NCCL_TESTS_MIN_BW";
inline constexpr int kNcclTestsMinBwPassPercent = 90;
// Takes NCCL_TESTS_MIN_BW, when set, as an environment setting of sweep.min_busbw at 90% of its value, so cairn-sweep
// fails (exit 3) the runs nccl-tests fails: it overrides the config files and the default, and CAIRN_SWEEP_MIN_BUSBW,
// --min-busbw and --set override it. UsageError when it is not a number >= 0.
void apply_nccl_tests_min_bw(Config& cfg);
// Which setting gave sweep.min_busbw, in words for the log ("--min-busbw", "env NCCL_TESTS_MIN_BW=100 (...)", ...).
std::string min_busbw_source(const Config& cfg);

struct Measure {
  double time_us = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;         // #wrong: wrong elements over the ranks, in the first check that found any (nccl-tests)
  int64_t failed_ranks = 0;  // ranks whose check found wrong elements: nccl-tests' "Out of bounds values" adds these
  bool checked = false;      // false prints "N/A" in the #wrong column
};

struct Row {
  uint64_t size = 0, count = 0;
  Measure oop, ip;
  double oop_cpu_us = 0, ip_cpu_us = 0;         // host time to issue one call (-C 1 prints it)
  std::vector<Measure> nodes_oop, nodes_ip;     // intra tier: per node
  std::vector<double> samples_oop, samples_ip;  // --keep-samples: per-iteration us, max over ranks
};

struct Fit {
  bool valid = false;
  double alpha_us = 0, busbw_gbps = 0, r2 = 0, peak_busbw_gbps = 0;
  uint64_t half_peak_bytes = 0;
  int points = 0;
  std::string note;
};

struct Block {
  std::string collective, perf_name, tier;
  DataType type = DataType::Float32;
  RedOp op = RedOp::None;
  int root = -1;
  int nranks = 1;  // communicator size of the tier
  int groups = 1;  // communicators measured at once (nodes for intra)
  std::vector<std::string> group_hosts;
  std::vector<Row> rows;
  double avg_busbw = 0;
  int64_t wrong = 0;          // wrong elements (the #wrong column's sum)
  int64_t failed_checks = 0;  // failed checks, a rank and placement each: the footer's "Out of bounds values"
  Fit fit;
  bool in_sub_table = false;  // the block whose fit is its fabric_key()'s table in fabric.toml
  bool in_fabric = false;     // the block whose fit is [<tier>.<collective>] in fabric.toml
};

struct SweepResult {
  std::string backend;
  std::vector<Block> blocks;
  std::vector<std::string> notes;
  std::vector<std::string> fabric_notes;  // mark_fabric_blocks' (also in notes): fabric.toml records them
  double avg_busbw = 0;
  int64_t wrong = 0;          // wrong elements, over every block
  int64_t failed_checks = 0;  // failed checks, over every block ("Out of bounds values")
  bool gate_failed = false;
  std::string table;  // the text printed on stdout (rank 0)
  std::string out_dir;
  std::string verdict;  // why the exit code is 3 ("" when 0)
  std::string
      stopped_by;  // "SIGTERM" when a stop signal ended the sweep early (exit 75; the files hold what was measured)
};

// One collective call exactly as the timed loop issues it (views already resolved).
struct TimedCall {
  CollKind kind = CollKind::AllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
  RedOp op = RedOp::Sum;
  int root = -1;
  bool in_place = false;
};
// The measurement behind every time cairn-sweep reports: one untimed call, wait, barrier on `comm`,
// `iters` back-to-back calls (blocking: wait and barrier after each), wait. Returns this rank's
// seconds per call; `samples` (optional, `iters` values) gets per-call microseconds of each iteration (-z 3: without
// the barrier, as the returned time; the samples add up to it).
// `blocking` is nccl-tests' -z (0..3), `agg` its -m (calls per iteration; the time is per call);
// `cpu_seconds` (optional) gets the host time per call before the final wait (-C 1).
double time_collective(const Backend& be, BackendComm* bc, MPI_Comm comm, const TimedCall& call, int iters,
                       int blocking, double* samples = nullptr, int agg = 1, double* cpu_seconds = nullptr);
// Combines per-rank times as nccl-tests' -a: 0 = first rank, 1 = mean, 2 = min, 3 = max.
double combine_times(const std::vector<double>& per_rank_seconds, int average);

// Fits time(bytes) = alpha + bytes*factor/busbw to a block's out-of-place rows (weighted least
// squares on relative error, so small and large sizes both count).
Fit fit_block(const Block& b, double busbw_factor);

// A block's sub-table in fabric.toml: "<tier>.<collective>.<type>.<redop>", or "<tier>.<collective>.<type>" for
// collectives without a reduction.
std::string fabric_key(const Block& b);
// Chooses the blocks whose fits fabric.toml holds. A sub-table measured more than once (a collective, type or op
// repeated in the config, -r -1's roots, sendrecv under several -o ops) holds its first valid fit (in_sub_table);
// then per (tier, collective), [<tier>.<collective>] holds the first of those with the first requested type and op,
// else the first (in_fabric). Returns a note per sub-table measured more than once, saying which measurement it holds.
std::vector<std::string> mark_fabric_blocks(std::vector<Block>& blocks, DataType first_type, RedOp first_op);

// Runs the whole sweep (all ranks); rank 0 prints and writes the outputs. Returns the exit code on
// every rank: 0, or 3 when a check or the --min-busbw gate failed (result->verdict says why).
// Every rank agrees on it, so the caller can return it without aborting the MPI job.
int run_sweep(const Config& cfg, const SweepOptions& opts, SweepResult* result = nullptr,
              const SweepFaults& faults = {});
// cairn-sweep's command line (main.cpp is this with no faults; tests/sweep's fault-injecting build passes some):
// parses argv, starts MPI, runs the sweep or --bench-bare and returns the exit code.
int sweep_main(int argc, char** argv, const SweepFaults& faults = {});
// Before anything is measured: rank 0 creates <run_dir>/sweep (with_run_dir) and checks that every
// file the sweep will write there and --json/-J can be written; otherwise every rank throws the same
// UsageError (exit 2) naming the path. Collective over MPI_COMM_WORLD.
void check_outputs(const SweepOptions& o, bool with_run_dir);

// What the outputs say about the run besides the results (rank 0 fills it).
struct RankInfo {
  int rank = 0, group = 0, pid = 0;
  std::string host;
  DeviceInfo device;
};
struct RunInfo {
  SweepOptions opts;
  std::string backend, backend_version;
  std::vector<RankInfo> ranks;
  std::vector<std::string> hosts_by_rank;
  int nodes = 1, ranks_per_node = 1;
  bool simulated_nodes = false;
  std::vector<std::string> env;                  // recorded settings "NAME=value" (MALLOC_*, NCCL_*, OMPI_MCA_*, ...)
  std::string malloc_note;                       // what the malloc settings mean for large-message MPI collectives
  std::string start_time, end_time;              // UTC ISO 8601 (provenance, HDF5)
  std::string start_time_local, end_time_local;  // nccl-tests' JSON format, "%Y-%m-%d %H:%M:%S" local
  int nccl_version = 0;                          // NCCL version code (0 on MPI)
  nlohmann::json sweep_config;                   // the effective [sweep] section (fabric.toml records it)
};

// --bench-bare (bench.cpp): per size, `rounds` alternating pairs of cairn-sweep's timed loop and a
// bare MPI_Allreduce loop on the same buffers in this one job; rank 0 prints the comparison.
struct BenchBareOptions {
  int max_rounds = 400, min_rounds = 24;  // rounds per size
  // One timed loop lasts about this long (>= 1 call): short loops fit between the scheduler's
  // interruptions on a shared machine, so most loops are clean and a hit one is one sample.
  double loop_seconds = 0.0005;
  double size_seconds = 5;  // after min_rounds, no new round starts past this per size
};
struct BenchBareRow {
  uint64_t size = 0, count = 0;
  int iters = 0, rounds = 0;
  std::vector<double> sweep_busbw, bare_busbw;  // per round
  double sweep_median = 0, bare_median = 0, sweep_best = 0, bare_best = 0;
  double diff_median_pct = 0, diff_best_pct = 0, diff_paired_pct = 0;
};
BenchBareRow summarize_bench_row(uint64_t size, uint64_t count, int iters, const std::vector<double>& sweep_busbw,
                                 const std::vector<double>& bare_busbw);
std::string format_bench_header(int nranks, const BenchBareOptions& b, const std::string& type, const std::string& op);
std::string format_bench_row(const BenchBareRow& r);
int run_bench_bare(const SweepOptions& opts, const BenchBareOptions& bench);

// Output writers (rank 0), in report.cpp. The text follows nccl-tests' layout: one section per
// (tier, collective) = one nccl-tests binary run, with every type/op/root row in one table.
// The first line(s) of the whole output (nccl-tests version line, then cairn's own).
std::string format_preamble(const RunInfo& info);
// "# Collective test starting", the options line, devices, the table header.
std::string format_section_header(const RunInfo& info, const std::string& perf_name);
std::string format_row(const Row& r, const Block& b, bool report_cputime = false);
// A table's blocks (same tier and collective): the nccl-tests footer, then cairn's extra lines.
double section_avg_busbw(const std::vector<const Block*>& blocks);
std::string format_section_footer(const std::vector<const Block*>& blocks, double min_busbw);
std::string format_section_extras(const std::vector<const Block*>& blocks);
// Run-level cairn lines printed after the last section (averaging, topology, malloc, notes).
std::string format_trailer(const RunInfo& info, const SweepResult& r);
// nccl-tests' -J document with cairn's extras, keys in writing order (nccl-tests' order, then the table's columns).
nlohmann::ordered_json sweep_json(const RunInfo& info, const SweepResult& r);
void write_sweep_h5(const std::string& path, const RunInfo& info, const SweepResult& r);
std::string fabric_toml(const RunInfo& info, const SweepResult& r);
// nccl-tests' number formatting for a column of `width` characters.
std::string float_column(double value, int width);

}  // namespace cairn::sweep
