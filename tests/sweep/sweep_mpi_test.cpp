// run_sweep in-process on 2 and 4 ranks: every collective correct (#wrong 0), rows as nccl-tests
// defines them, busbw = algbw x factor, a planted wrong element gives exit code 3, sweep.mpi_nonblocking's calls.
#define BOOST_TEST_MODULE sweep_mpi
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/mpi.h"
#include "sweep.h"

using namespace cairn::sweep;

struct MpiFixture {
  MpiFixture()
      : session(&boost::unit_test::framework::master_test_suite().argc,
                &boost::unit_test::framework::master_test_suite().argv) {}
  cairn::mpi::Session session;
};
BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

std::string scratch_dir(const std::string& name) {
  std::string base = std::filesystem::temp_directory_path().string() + "/cairn_sweep_mpi_" + name;
  base = cairn::mpi::broadcast_string(base + "_" + std::to_string(getpid()));
  return base;
}

SweepOptions small_options(const std::string& dir) {
  cairn::Config cfg;
  SweepOptions o = sweep_options(cfg);
  o.collectives = {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv"};
  o.types = {DataType::Float32, DataType::Int32, DataType::Float64};
  o.ops = {RedOp::Sum, RedOp::Min};
  o.minbytes = 64;
  o.maxbytes = 4096;
  o.iters = 2;
  o.warmup = 1;
  o.check = 1;
  o.backend = "mpi";
  o.run_dir = dir;
  o.print_table = false;
  return o;
}

BOOST_AUTO_TEST_CASE(all_collectives_are_correct_and_follow_nccl_tests_rules) {
  cairn::Config cfg;
  SweepOptions o = small_options(scratch_dir("ok"));
  SweepResult res;
  int code = run_sweep(cfg, o, &res);
  BOOST_TEST(code == 0);
  if (cairn::mpi::rank() != 0) return;
  int n = cairn::mpi::size();
  BOOST_TEST(res.wrong == 0);
  // 7 collectives x 3 types; the reducing ones (3) and sendrecv (op column, as nccl-tests) x 2 ops:
  // (3 + 4*2) * 3 = 33 blocks.
  BOOST_TEST(res.blocks.size() == 33u);
  for (const auto& b : res.blocks) {
    const Collective& c = find_collective(b.collective);
    BOOST_TEST(b.wrong == 0);
    BOOST_TEST(b.nranks == n);
    for (const auto& r : b.rows) {
      SizeRow want = size_row(c, r.size, type_info(b.type).size, n);
      BOOST_TEST(r.count == want.count);
      BOOST_TEST(r.oop.checked);
      BOOST_TEST(std::abs(r.oop.busbw - r.oop.algbw * c.busbw_factor(n)) <= 1e-9 * (1 + r.oop.busbw));
      BOOST_TEST(std::abs(r.oop.algbw - r.size / 1e3 / r.oop.time_us) <= 1e-9 * (1 + r.oop.algbw));
    }
  }
  BOOST_TEST(std::filesystem::exists(res.out_dir + "/fabric.toml"));
  std::filesystem::remove_all(o.run_dir);
}

// "Out of bounds values" counts failed checks as nccl-tests does (a rank and placement each), #wrong the wrong
// elements: three corrupted elements in one check are 3 wrong and 1 failed check (the footer said 3).
// The MPI profiling interface: these definitions take the place of the library's and count the non-blocking calls the
// sweep makes before passing them on (PMPI_*).
namespace {
std::map<std::string, long> g_started;
}  // namespace
extern "C" {
int MPI_Iallreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request* q) {
  ++g_started["iallreduce"];
  return PMPI_Iallreduce(s, r, n, t, op, c, q);
}
int MPI_Iallgather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c,
                   MPI_Request* q) {
  ++g_started["iallgather"];
  return PMPI_Iallgather(s, sn, st, r, rn, rt, c, q);
}
int MPI_Ireduce_scatter_block(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request* q) {
  ++g_started["ireduce_scatter_block"];
  return PMPI_Ireduce_scatter_block(s, r, n, t, op, c, q);
}
int MPI_Ialltoall(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c,
                  MPI_Request* q) {
  ++g_started["ialltoall"];
  return PMPI_Ialltoall(s, sn, st, r, rn, rt, c, q);
}
int MPI_Ibcast(void* b, int n, MPI_Datatype t, int root, MPI_Comm c, MPI_Request* q) {
  ++g_started["ibcast"];
  return PMPI_Ibcast(b, n, t, root, c, q);
}
int MPI_Ireduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c, MPI_Request* q) {
  ++g_started["ireduce"];
  return PMPI_Ireduce(s, r, n, t, op, root, c, q);
}
int MPI_Isend(const void* b, int n, MPI_Datatype t, int to, int tag, MPI_Comm c, MPI_Request* q) {
  ++g_started["isend"];
  return PMPI_Isend(b, n, t, to, tag, c, q);
}
}

// sweep.mpi_nonblocking: every collective runs as its MPI_I* call (counted above) and is waited for; the results are
// as correct as the blocking calls', in the large-count paths too (slices of a reduction, one element of a derived
// type for the rest). Blocking, none of those calls is made.
BOOST_AUTO_TEST_CASE(nonblocking_calls_are_made_checked_and_recorded) {
  cairn::Config cfg;
  auto remove_run = [](const std::string& dir) {  // by rank 0, once every rank is done with it
    MPI_Barrier(MPI_COMM_WORLD);
    if (cairn::mpi::rank() == 0) std::filesystem::remove_all(dir);
  };
  SweepOptions o = small_options(scratch_dir("nb0"));
  g_started.clear();
  SweepResult blocking;
  BOOST_TEST(run_sweep(cfg, o, &blocking) == 0);
  BOOST_TEST(g_started.empty());
  remove_run(o.run_dir);

  o = small_options(scratch_dir("nb"));
  o.mpi_nonblocking = true;
  o.backend = "auto";  // only MPI has non-blocking calls to sweep: auto takes it
  SweepResult res;
  BOOST_TEST(run_sweep(cfg, o, &res) == 0);
  BOOST_TEST(res.wrong == 0);
  const int n = cairn::mpi::size();
  for (const char* call :
       {"iallreduce", "iallgather", "ireduce_scatter_block", "ialltoall", "ibcast", "ireduce", "isend"})
    BOOST_TEST(g_started[call] > 0, call << " made " << g_started[call] << " times");
  if (cairn::mpi::rank() == 0) {
    BOOST_TEST(res.blocks.size() == 33u);
    for (const auto& b : res.blocks) {
      BOOST_TEST(b.wrong == 0);
      BOOST_TEST(b.nranks == n);
    }
    BOOST_TEST(res.table.find("# MPI calls: non-blocking") != std::string::npos);
  }
  remove_run(o.run_dir);

  // Large counts: MPI's per-call limit lowered to 100 elements, so 4 KiB reductions go in slices and the rest as one
  // element of a derived type.
  o = small_options(scratch_dir("nbl"));
  o.mpi_nonblocking = true;
  o.collectives = {"allreduce", "allgather", "broadcast", "reduce"};
  o.types = {DataType::Float32};
  o.ops = {RedOp::Sum};
  SweepFaults faults;
  faults.mpi_count_limit = 100;
  g_started.clear();
  SweepResult large;
  BOOST_TEST(run_sweep(cfg, o, &large, faults) == 0);
  BOOST_TEST(large.wrong == 0);
  BOOST_TEST(g_started["iallreduce"] > 0);
  remove_run(o.run_dir);
}

// Non-blocking calls are MPI's: asked of an NCCL sweep they are a usage error naming the key (exit 2), built with CUDA
// or not, before anything is measured.
BOOST_AUTO_TEST_CASE(nonblocking_calls_on_nccl_are_a_usage_error) {
  cairn::Config cfg;
  SweepOptions o = small_options(scratch_dir("nbnccl"));
  o.backend = "nccl";
  o.mpi_nonblocking = true;
  SweepResult res;
  BOOST_CHECK_EXCEPTION(run_sweep(cfg, o, &res), cairn::UsageError, [](const cairn::UsageError& e) {
    return std::string(e.what()).find("sweep.mpi_nonblocking") != std::string::npos;
  });
  MPI_Barrier(MPI_COMM_WORLD);
  if (cairn::mpi::rank() == 0) std::filesystem::remove_all(o.run_dir);
}

BOOST_AUTO_TEST_CASE(failed_checks_count_ranks_not_elements) {
  cairn::Config cfg;
  SweepOptions o = small_options(scratch_dir("bad3"));
  o.collectives = {"allreduce"};
  o.types = {DataType::Float32};
  o.ops = {RedOp::Sum};
  SweepFaults faults;
  faults.corrupt_check = 2;  // rank 0's second check: the smallest size, in place
  faults.corrupt_elements = 3;
  SweepResult res;
  BOOST_TEST(run_sweep(cfg, o, &res, faults) == 3);
  BOOST_TEST(res.wrong == 3);
  BOOST_TEST(res.failed_checks == 1);
  if (cairn::mpi::rank() != 0) return;
  BOOST_REQUIRE(res.blocks.size() == 1u);
  BOOST_TEST(res.blocks[0].rows[0].ip.wrong == 3);
  BOOST_TEST(res.blocks[0].rows[0].ip.failed_ranks == 1);
  BOOST_TEST(res.table.find("# Out of bounds values : 1 FAILED") != std::string::npos);
  std::filesystem::remove_all(o.run_dir);
}

namespace {
// A backend whose calls do nothing and whose wait lasts 20 ms on rank 1 only: under -z 3 every other rank spends its
// iterations in the barrier, waiting for rank 1.
void run_nothing(BackendComm*, CollKind, const void*, void*, size_t, DataType, RedOp, int, bool) {}
void slow_wait_on_rank_1(BackendComm*) {
  if (cairn::mpi::rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}
}  // namespace

// -z 3 times the collective without the barrier after each iteration, as nccl-tests' paired events do; the kept
// samples (--keep-samples) must too, so they add up to the averaged time. They held the barrier's wait: on rank 0
// here, rank 1's 20 ms per iteration, while the time said microseconds.
BOOST_AUTO_TEST_CASE(blocking_3_samples_exclude_the_barrier_as_the_time_does) {
  Backend be = mpi_backend();
  be.run = run_nothing;
  be.sync = slow_wait_on_rank_1;
  const int iters = 5, agg = 2;
  std::vector<double> samples(iters, -1.0);
  const double seconds = time_collective(be, nullptr, MPI_COMM_WORLD, TimedCall{}, iters, 3, samples.data(), agg);
  double sum_us = 0;
  for (double s : samples) {
    BOOST_TEST(s >= 0.0);
    sum_us += s;
  }
  // Both per call: the samples' sum never exceeds the time (only the final wait's instant lies between them).
  BOOST_TEST(sum_us * 1e-6 <= seconds * iters + 1e-9, "samples " << sum_us << " us, time " << seconds * iters * 1e6);
}

BOOST_AUTO_TEST_CASE(planted_wrong_element_fails_the_gate) {
  cairn::Config cfg;
  SweepOptions o = small_options(scratch_dir("bad"));
  o.collectives = {"allgather"};
  o.types = {DataType::Float32};
  SweepFaults faults;
  faults.corrupt_check = 2;  // the second checked result on rank 0
  SweepResult res;
  int code = run_sweep(cfg, o, &res, faults);
  BOOST_TEST(code == 3);
  if (cairn::mpi::rank() == 0) {
    BOOST_TEST(res.wrong == 1);
    BOOST_TEST(res.verdict.find("wrong") != std::string::npos);
    std::filesystem::remove_all(o.run_dir);
  }
}
