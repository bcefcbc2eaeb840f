// run_sweep in-process on 2 and 4 ranks: every collective correct (#wrong 0), rows as nccl-tests
// defines them, busbw = algbw x factor, a planted wrong element gives exit code 3.
#define BOOST_TEST_MODULE sweep_mpi
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "cairn/config.h"
#include "cairn/mpi.h"
#include "sweep.h"

using namespace cairn::sweep;

struct MpiFixture {
  MpiFixture() : session(&boost::unit_test::framework::master_test_suite().argc,
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
