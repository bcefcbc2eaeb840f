// parallel::Groups on 4, 6 or 8 ranks: every communicator has the right members in the right order, for every
// dp x cp x tp x pp shape of the world and on a sub-communicator.
#define BOOST_TEST_MODULE parallel_groups
#include <boost/test/unit_test.hpp>

#include <numeric>

#include "cairn/error.h"
#include "cairn/mpi.h"
#include "cairn/parallel.h"

using namespace cairn;
using namespace cairn::parallel;

namespace cairn::parallel {
// For Boost.Test's messages.
std::ostream& operator<<(std::ostream& os, const Coords& c) {
  return os << "dp" << c.dp << " cp" << c.cp << " tp" << c.tp << " pp" << c.pp;
}
}  // namespace cairn::parallel

struct MpiFixture {
  MpiFixture()
      : session(&boost::unit_test::framework::master_test_suite().argc,
                &boost::unit_test::framework::master_test_suite().argv) {}
  mpi::Session session;
};
BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

namespace {

Layout shape(int world, int dp, int tp, int pp, int cp = 1) {
  Layout l;
  l.world = world, l.dp = dp, l.tp = tp, l.pp = pp, l.cp = cp;
  return l;
}

int comm_size(MPI_Comm c) {
  int n = 0;
  MPI_Comm_size(c, &n);
  return n;
}
int comm_rank(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}

// The members of `c` as ranks of `world`, in the order of their rank in `c`.
std::vector<int> members(MPI_Comm c, int world_rank) { return mpi::allgather_value<int32_t>(world_rank, c); }

// Checks every group of this rank against the coordinates; `world` is the communicator the groups came from.
void check_groups(const Layout& l, MPI_Comm world) {
  BOOST_TEST_CONTEXT("dp" << l.dp << " x cp" << l.cp << " x tp" << l.tp << " x pp" << l.pp) {
    Groups g(l, world);
    int me = comm_rank(world);
    BOOST_TEST(g.rank == me);
    Coords c = coords_of(l, me);
    BOOST_TEST(g.coords == c);

    BOOST_TEST(comm_size(g.tp) == l.tp);
    BOOST_TEST(comm_rank(g.tp) == c.tp);
    std::vector<int> want;
    for (int t = 0; t < l.tp; ++t) want.push_back(rank_of(l, {c.dp, t, c.pp, c.cp}));
    BOOST_TEST(members(g.tp, me) == want, boost::test_tools::per_element());

    BOOST_TEST(comm_size(g.dp) == l.dp);
    BOOST_TEST(comm_rank(g.dp) == c.dp);
    want.clear();
    for (int d = 0; d < l.dp; ++d) want.push_back(rank_of(l, {d, c.tp, c.pp, c.cp}));
    BOOST_TEST(members(g.dp, me) == want, boost::test_tools::per_element());

    BOOST_TEST(comm_size(g.cp) == l.cp);
    BOOST_TEST(comm_rank(g.cp) == c.cp);
    want.clear();
    for (int k = 0; k < l.cp; ++k) want.push_back(rank_of(l, {c.dp, c.tp, c.pp, k}));
    BOOST_TEST(members(g.cp, me) == want, boost::test_tools::per_element());

    // every rank holding this rank's parameters, cp fastest (ZeRO shard order)
    BOOST_TEST(comm_size(g.dp_cp) == l.dp * l.cp);
    BOOST_TEST(comm_rank(g.dp_cp) == c.cp + l.cp * c.dp);
    BOOST_TEST(g.first_replica() == (comm_rank(g.dp_cp) == 0));
    want.clear();
    for (int d = 0; d < l.dp; ++d)
      for (int k = 0; k < l.cp; ++k) want.push_back(rank_of(l, {d, c.tp, c.pp, k}));
    BOOST_TEST(members(g.dp_cp, me) == want, boost::test_tools::per_element());

    BOOST_TEST(comm_size(g.pp) == l.pp);
    BOOST_TEST(comm_rank(g.pp) == c.pp);
    want.clear();
    for (int p = 0; p < l.pp; ++p) want.push_back(rank_of(l, {c.dp, c.tp, p, c.cp}));
    BOOST_TEST(members(g.pp, me) == want, boost::test_tools::per_element());

    // The sum over a group of the world ranks is the sum of its expected members (a collective that uses it).
    BOOST_TEST(mpi::allreduce<int32_t>(me, MPI_SUM, g.pp) == std::accumulate(want.begin(), want.end(), 0));

    if (l.pp == 1) {
      BOOST_TEST((g.embedding == MPI_COMM_NULL));
      BOOST_TEST(g.prev_stage_rank == MPI_PROC_NULL);
      BOOST_TEST(g.next_stage_rank == MPI_PROC_NULL);
    } else {
      bool end = c.pp == 0 || c.pp == l.pp - 1;
      BOOST_TEST((g.embedding != MPI_COMM_NULL) == end);
      if (end) {
        std::vector<int> ends = {rank_of(l, {c.dp, c.tp, 0, c.cp}), rank_of(l, {c.dp, c.tp, l.pp - 1, c.cp})};
        BOOST_TEST(members(g.embedding, me) == ends, boost::test_tools::per_element());
      }
      BOOST_TEST(g.prev_stage_rank == rank_of(l, {c.dp, c.tp, (c.pp + l.pp - 1) % l.pp, c.cp}));
      BOOST_TEST(g.next_stage_rank == rank_of(l, {c.dp, c.tp, (c.pp + 1) % l.pp, c.cp}));
      // The ring is usable: pass our rank to the next stage, receive the previous stage's.
      int32_t got = -1;
      mpi::check(MPI_Sendrecv(&me, 1, MPI_INT32_T, g.next_stage_rank, 7, &got, 1, MPI_INT32_T, g.prev_stage_rank, 7,
                              world, MPI_STATUS_IGNORE),
                 "MPI_Sendrecv");
      BOOST_TEST(got == g.prev_stage_rank);
    }
  }
}

// Every (dp, cp, tp, pp) with dp*cp*tp*pp == n.
std::vector<Layout> all_shapes(int n) {
  std::vector<Layout> out;
  for (int cp = 1; cp <= n; ++cp)
    for (int tp = 1; tp <= n; ++tp)
      for (int pp = 1; pp <= n; ++pp)
        if (n % (cp * tp * pp) == 0) out.push_back(shape(n, n / (cp * tp * pp), tp, pp, cp));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_shape_of_the_world) {
  for (const Layout& l : all_shapes(mpi::size())) check_groups(l, MPI_COMM_WORLD);
}

BOOST_AUTO_TEST_CASE(a_layout_from_resolve_layout) {
  // As cairn-train builds it: from a request, interleaved when the pipeline has two stages or more.
  LayoutRequest r;
  r.world = mpi::size();
  r.layers = 8, r.heads = 4, r.hidden = 64, r.vocab = 256, r.seq_len = 16;
  r.global_batch = 8 * r.world, r.micro_batch = 1, r.zero = 1, r.tp = 2;
  if (r.world % 4 == 0) {
    r.pp = 2, r.v = 2;
  } else if (r.world % 3 == 0) {  // 6 ranks: 8 layers over 3 stages, given explicitly
    r.pp = 3;
    r.stage_layers = suggest_stage_layers(r.layers, r.pp);
  }
  Layout l = resolve_layout(r);
  check_groups(l, MPI_COMM_WORLD);
}

BOOST_AUTO_TEST_CASE(groups_of_a_sub_communicator) {
  // Two halves of the world, each its own layout: ranks are those of the half, not of MPI_COMM_WORLD.
  int n = mpi::size(), me = mpi::rank();
  MPI_Comm half = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split(MPI_COMM_WORLD, me < n / 2 ? 0 : 1, me, &half), "MPI_Comm_split");
  int m = comm_size(half);
  for (const Layout& l : all_shapes(m)) check_groups(l, half);
  MPI_Comm_free(&half);
}

BOOST_AUTO_TEST_CASE(a_layout_for_another_world_size_is_refused) {
  // Checked before any collective, so every rank throws without hanging.
  Layout l = shape(mpi::size() * 2, mpi::size() * 2, 1, 1);
  BOOST_CHECK_THROW(Groups(l, MPI_COMM_WORLD), UsageError);
}

BOOST_AUTO_TEST_CASE(many_groups_come_and_go) {
  // RAII frees the communicators (with the pipeline's embedding group) however often they are built.
  Layout l = shape(mpi::size(), 1, 1, mpi::size());
  for (int i = 0; i < 20; ++i) {
    Groups g(l);
    BOOST_TEST_REQUIRE(comm_size(g.pp) == l.pp);
  }
}
