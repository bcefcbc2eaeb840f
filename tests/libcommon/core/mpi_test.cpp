// MPI helpers on 1, 2 and 4 ranks: topology, typed collectives, strings, agreeing on failures.
#define BOOST_TEST_MODULE common_mpi
#include <boost/test/unit_test.hpp>

#include "cairn/error.h"
#include "cairn/mpi.h"

using namespace cairn;

struct MpiFixture {
  MpiFixture()
      : session(&boost::unit_test::framework::master_test_suite().argc,
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

// threads = 0: a rank's CPUs over the local ranks whose CPUs overlap them. Unbound ranks share the node; ranks bound
// to CPUs of their own keep them all (they were divided by the node's rank count a second time).
BOOST_AUTO_TEST_CASE(cpus_per_rank_follows_the_binding) {
  auto cpus = [](int first, int count) {
    cpu_set_t s;
    CPU_ZERO(&s);
    for (int c = first; c < first + count; ++c) CPU_SET(c, &s);
    return s;
  };
  const cpu_set_t node = cpus(0, 32);
  BOOST_TEST(mpi::cpus_per_rank(node, {node, node, node, node}) == 8);  // unbound: the node shared
  const std::vector<cpu_set_t> bound{cpus(0, 8), cpus(8, 8), cpus(16, 8), cpus(24, 8)};
  BOOST_TEST(mpi::cpus_per_rank(bound[1], bound) == 8);  // srun --cpu-bind=cores, 8 each
  const std::vector<cpu_set_t> sockets{cpus(0, 16), cpus(0, 16), cpus(16, 16), cpus(16, 16)};
  BOOST_TEST(mpi::cpus_per_rank(sockets[2], sockets) == 8);                               // two ranks per socket
  BOOST_TEST(mpi::cpus_per_rank(cpus(0, 1), {cpus(0, 1), cpus(0, 1), cpus(0, 1)}) == 1);  // never 0
  // This run's own topology agrees with the rule on its real masks.
  BOOST_TEST(mpi::cores_per_local_rank() >= 1);
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
