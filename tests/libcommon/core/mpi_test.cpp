// MPI helpers on 1, 2 and 4 ranks: topology, typed collectives, strings, agreeing on failures.
#define BOOST_TEST_MODULE common_mpi
#include <boost/test/unit_test.hpp>

#include "cairn/error.h"
#include "cairn/mpi.h"

using namespace cairn;

struct MpiFixture {
  MpiFixture() : session(&boost::unit_test::framework::master_test_suite().argc,
                         &boost::unit_test::framework::master_test_suite().argv) {}
  mpi::Session session;
};
BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

BOOST_AUTO_TEST_CASE(topology_is_consistent) {
  const auto& t = mpi::topology();
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  BOOST_TEST(t.size == n);
  BOOST_TEST(t.hosts_by_rank.size() == static_cast<size_t>(n));
  // One machine here: every rank is on node 0 and the node communicator holds everyone.
  BOOST_TEST(t.node_count == 1);
  BOOST_TEST(t.local_size == n);
  BOOST_TEST(t.local_rank == t.rank);
  int cross = 0;
  MPI_Comm_size(t.cross, &cross);
  BOOST_TEST(cross == 1);
}

BOOST_AUTO_TEST_CASE(typed_collectives) {
  int r = mpi::rank(), n = mpi::size();
  BOOST_TEST(mpi::allreduce<int64_t>(r + 1) == static_cast<int64_t>(n) * (n + 1) / 2);
  BOOST_TEST(mpi::allreduce<double>(r, MPI_MAX) == n - 1.0);
  std::vector<float> v = {1.0f * r, 2.0f};
  mpi::allreduce_inplace(v);
  BOOST_TEST(v[0] == n * (n - 1) / 2.0f);
  BOOST_TEST(v[1] == 2.0f * n);
  BOOST_TEST(mpi::broadcast_value<uint64_t>(r == 0 ? 42u : 0u) == 42u);
  auto all = mpi::allgather_value<int32_t>(r * 10);
  for (int i = 0; i < n; ++i) BOOST_TEST(all[i] == i * 10);
}

BOOST_AUTO_TEST_CASE(strings) {
  int r = mpi::rank();
  BOOST_TEST(mpi::broadcast_string(r == 0 ? "from root" : "") == "from root");
  auto names = mpi::allgather_strings(std::string(r + 1, 'a' + r));
  for (int i = 0; i < mpi::size(); ++i) BOOST_TEST(names[i] == std::string(i + 1, 'a' + i));
}

BOOST_AUTO_TEST_CASE(one_failing_rank_fails_everyone_without_hanging) {
  int last = mpi::size() - 1;
  bool ok = mpi::rank() != last;
  try {
    mpi::agree_or_throw(ok, "shard 3 is corrupt", kExitGate);
    BOOST_FAIL("expected every rank to throw");
  } catch (const Error& e) {
    BOOST_TEST(e.code() == kExitGate);
    std::string expect = last == 0 ? "shard 3 is corrupt" : "rank " + std::to_string(last) + ": shard 3 is corrupt";
    BOOST_TEST(std::string(e.what()) == expect);
  }
  BOOST_CHECK_NO_THROW(mpi::agree_or_throw(true, "", kExitRuntime));
}
