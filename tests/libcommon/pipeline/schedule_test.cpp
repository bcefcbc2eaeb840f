// Pipeline schedule tests: hand-checked action lists, exactly-once coverage, warm-up counts, activation
// memory bounds, p2p peers and tag matching, the simulator (timing, deadlock) and the bubble closed forms.
#define BOOST_TEST_MODULE pipeline_schedule
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "cairn/error.h"
#include "cairn/pipeline.h"

using namespace cairn;
using namespace cairn::pipeline;

namespace {

// The parameter grid of the brief: interleaved schedules only where M % pp == 0.
template <class F>
void for_each_shape(F f) {
  for (int pp = 1; pp <= 4; ++pp)
    for (int v = 1; v <= 3; ++v)
      for (int M = 1; M <= 12; ++M)
        if (v == 1 || M % pp == 0) f(pp, v, M);
}

std::vector<std::vector<Action>> all_ranks(int pp, int v, int M) {
  std::vector<std::vector<Action>> r;
  for (int rank = 0; rank < pp; ++rank) r.push_back(one_f_one_b(pp, v, rank, M));
  return r;
}

std::string str(const std::vector<Action>& list) {
  std::string s;
  for (const auto& a : list) {
    if (!s.empty()) s += ' ';
    s += to_string(a);
  }
  return s;
}

Action F(int m, int c = 0) { return {Op::Forward, m, c}; }
Action B(int m, int c = 0) { return {Op::Backward, m, c}; }

std::string shape(int pp, int v, int M, int rank = -1) {
  return "pp=" + std::to_string(pp) + " v=" + std::to_string(v) + " M=" + std::to_string(M) +
         (rank >= 0 ? " rank=" + std::to_string(rank) : "");
}

// Predicate for BOOST_CHECK_EXCEPTION: a UsageError whose message contains every piece.
auto mentions(std::vector<std::string> pieces) {
  return [pieces](const UsageError& e) {
    for (const auto& p : pieces)
      if (std::string(e.what()).find(p) == std::string::npos) {
        BOOST_TEST_MESSAGE("missing '" << p << "' in: " << e.what());
        return false;
      }
    return true;
  };
}

}  // namespace

BOOST_AUTO_TEST_CASE(hand_written_lists) {
  // pp=2, v=1, M=4: rank 0 warms up with one forward, rank 1 (last stage) alternates from the start.
  BOOST_TEST(str(one_f_one_b(2, 1, 0, 4)) == str({F(0), F(1), B(0), F(2), B(1), F(3), B(2), B(3)}));
  BOOST_TEST(str(one_f_one_b(2, 1, 1, 4)) == str({F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)}));
  // pp=2, v=2, M=4: micro-batches go in groups of pp through chunk 0 then chunk 1; backwards start at
  // the last chunk. Rank 0 warms up with (2-0-1)*2 + (2-1)*2 = 4 forwards, rank 1 with 2.
  BOOST_TEST(str(one_f_one_b(2, 2, 0, 4)) ==
             str({F(0, 0), F(1, 0), F(0, 1), F(1, 1),  // warm-up
                  F(2, 0), B(0, 1), F(3, 0), B(1, 1), F(2, 1), B(0, 0), F(3, 1), B(1, 0),
                  B(2, 1), B(3, 1), B(2, 0), B(3, 0)}));
  BOOST_TEST(str(one_f_one_b(2, 2, 1, 4)) ==
             str({F(0, 0), F(1, 0),  // warm-up
                  F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 0), B(0, 0), F(3, 0), B(1, 0),
                  F(2, 1), B(2, 1), F(3, 1), B(3, 1), B(2, 0), B(3, 0)}));
  // pp=1: no pipelining, each micro-batch through all chunks and back.
  BOOST_TEST(str(one_f_one_b(1, 1, 0, 3)) == str({F(0), B(0), F(1), B(1), F(2), B(2)}));
  BOOST_TEST(str(one_f_one_b(1, 2, 0, 2)) ==
             str({F(0, 0), F(0, 1), B(0, 1), B(0, 0), F(1, 0), F(1, 1), B(1, 1), B(1, 0)}));
  // Fewer micro-batches than stages: warm-up is cut to M and everything else is cool-down.
  BOOST_TEST(str(one_f_one_b(4, 1, 0, 2)) == str({F(0), F(1), B(0), B(1)}));
}

BOOST_AUTO_TEST_CASE(each_forward_and_backward_exactly_once_forward_first) {
  for_each_shape([](int pp, int v, int M) {
    for (int rank = 0; rank < pp; ++rank) {
      const auto list = one_f_one_b(pp, v, rank, M);
      BOOST_TEST_CONTEXT(shape(pp, v, M, rank)) {
        BOOST_TEST(list.size() == size_t(2 * M * v));
        std::map<std::tuple<int, int, int>, int> seen;  // (op, micro, chunk) -> position
        for (size_t i = 0; i < list.size(); ++i) {
          const Action& a = list[i];
          BOOST_TEST((a.micro >= 0 && a.micro < M && a.chunk >= 0 && a.chunk < v), to_string(a));
          BOOST_TEST(seen.emplace(std::make_tuple(int(a.op), a.micro, a.chunk), int(i)).second,
                     "duplicate " << to_string(a));
        }
        BOOST_TEST(seen.size() == size_t(2 * M * v));
        for (int m = 0; m < M; ++m)
          for (int c = 0; c < v; ++c)
            BOOST_TEST((seen[{int(Op::Forward), m, c}] < seen[{int(Op::Backward), m, c}]), "F before B of " << m << "." << c);
        // Per chunk, micro-batches go in increasing order in both directions: with the tags below this is
        // what lets an executor pre-post receives in schedule order.
        for (int c = 0; c < v; ++c)
          for (Op op : {Op::Forward, Op::Backward}) {
            int last = -1;
            for (const auto& a : list)
              if (a.chunk == c && a.op == op) {
                BOOST_TEST(a.micro > last);
                last = a.micro;
              }
          }
      }
    }
  });
}

BOOST_AUTO_TEST_CASE(warmup_counts_match_megatron) {
  for_each_shape([](int pp, int v, int M) {
    for (int rank = 0; rank < pp; ++rank) {
      BOOST_TEST_CONTEXT(shape(pp, v, M, rank)) {
        const int expect = v == 1 ? std::min(pp - rank - 1, M) : std::min((pp - rank - 1) * 2 + (v - 1) * pp, M * v);
        BOOST_TEST(warmup_forwards(pp, v, rank, M) == expect);
        // The list opens with the warm-up forwards plus the first steady-state forward (when there is one).
        const auto list = one_f_one_b(pp, v, rank, M);
        const auto first_b = std::find_if(list.begin(), list.end(), [](const Action& a) { return a.op == Op::Backward; });
        BOOST_TEST(int(first_b - list.begin()) == std::min(expect + 1, M * v));
        // After the warm-up, forwards and backwards alternate until the forwards run out.
        for (int i = expect; i + 1 < int(list.size()) && i < 2 * M * v - expect && pp > 1; i += 2) {
          BOOST_TEST((list[i].op == Op::Forward), i);
          BOOST_TEST((list[i + 1].op == Op::Backward), i + 1);
        }
      }
    }
  });
  // pp=4, v=2, M=8: ranks 0..3 warm up with 10, 8, 6, 4 forwards.
  BOOST_TEST(warmup_forwards(4, 2, 0, 8) == 10);
  BOOST_TEST(warmup_forwards(4, 2, 3, 8) == 4);
  BOOST_TEST(warmup_forwards(4, 2, 0, 4) == 8);  // capped at M*v: all forwards first
}

BOOST_AUTO_TEST_CASE(live_activations_bounded) {
  for_each_shape([](int pp, int v, int M) {
    int prev = M * v + 1;
    for (int rank = 0; rank < pp; ++rank) {
      BOOST_TEST_CONTEXT(shape(pp, v, M, rank)) {
        int live = 0, peak = 0;
        for (const auto& a : one_f_one_b(pp, v, rank, M)) {
          live += a.op == Op::Forward ? 1 : -1;
          peak = std::max(peak, live);
        }
        BOOST_TEST(live == 0);
        // Exactly one more than the warm-up: the first steady forward precedes the first backward.
        const int expect = std::min(warmup_forwards(pp, v, rank, M) + 1, M * v);
        BOOST_TEST(peak == expect);
        if (v == 1) {
          BOOST_TEST(peak <= pp);               // 1F1B's bound, independent of M
          BOOST_TEST(peak == std::min(pp - rank, M));
        } else if (pp > 1) {
          BOOST_TEST(peak <= pp * (v + 1) - 1);  // chunk activations: (1 + 1/v) pp - 1/v stages' worth
        } else {
          BOOST_TEST(peak == v);                 // one micro-batch through all chunks
        }
        BOOST_TEST(peak <= prev);                // rank 0 holds the most
        prev = peak;
      }
    }
  });
}

BOOST_AUTO_TEST_CASE(virtual_stages_and_peers) {
  BOOST_TEST(virtual_stage(4, 3, 0) == 3);
  BOOST_TEST(virtual_stage(4, 0, 1) == 4);
  BOOST_TEST(virtual_stage(4, 2, 2) == 10);
  // pp=4, v=2: stage 3 (rank 3 chunk 0) feeds stage 4 (rank 0 chunk 1) across the wrap-around.
  Peers p = peers(4, 2, 3, F(0, 0));
  BOOST_TEST(p.recv_from == 2);
  BOOST_TEST(p.send_to == 0);
  p = peers(4, 2, 0, F(0, 1));
  BOOST_TEST(p.recv_from == 3);
  BOOST_TEST(p.send_to == 1);
  p = peers(4, 2, 0, B(0, 1));
  BOOST_TEST(p.recv_from == 1);
  BOOST_TEST(p.send_to == 3);
  // Ends of the pipeline: stage 0 forward receives nothing, its backward sends nothing; the loss stage
  // (rank 3 chunk 1 = stage 7) forward sends nothing and its backward receives nothing.
  p = peers(4, 2, 0, F(5, 0));
  BOOST_TEST(p.recv_from == -1);
  BOOST_TEST(p.recv_tag == -1);
  BOOST_TEST(p.send_to == 1);
  p = peers(4, 2, 0, B(5, 0));
  BOOST_TEST(p.send_to == -1);
  BOOST_TEST(p.send_tag == -1);
  BOOST_TEST(p.recv_from == 1);
  p = peers(4, 2, 3, F(5, 1));
  BOOST_TEST(p.send_to == -1);
  BOOST_TEST(p.recv_from == 2);
  p = peers(4, 2, 3, B(5, 1));
  BOOST_TEST(p.recv_from == -1);
  BOOST_TEST(p.send_to == 2);
  // pp == 1 with chunks: the peer is the rank itself.
  p = peers(1, 2, 0, F(0, 1));
  BOOST_TEST(p.recv_from == 0);
  BOOST_TEST(p.send_to == -1);
  // pp == 1, v == 1: no traffic at all.
  p = peers(1, 1, 0, F(0));
  BOOST_TEST((p.recv_from == -1 && p.send_to == -1 && p.recv_tag == -1 && p.send_tag == -1));
  // Tag layout: (micro * pp*v + receiving stage) * 2 + direction.
  BOOST_TEST(message_tag(4, 2, 0, F(3, 1)) == (3 * 8 + 4) * 2 + 0);
  BOOST_TEST(message_tag(4, 2, 2, B(3, 0)) == (3 * 8 + 2) * 2 + 1);
  BOOST_TEST(max_message_tag(4, 2, 8) == 127);
}

BOOST_AUTO_TEST_CASE(every_send_matches_one_receive) {
  for_each_shape([](int pp, int v, int M) {
    BOOST_TEST_CONTEXT(shape(pp, v, M)) {
      const auto ranks = all_ranks(pp, v, M);
      // (receiving rank, from, tag) -> count of receives; tags are unique over the whole step.
      std::map<std::tuple<int, int, int>, int> receives;
      std::set<int> tags;
      int sends = 0;
      for (int r = 0; r < pp; ++r)
        for (const auto& a : ranks[r]) {
          const Peers p = peers(pp, v, r, a);
          const int s = virtual_stage(pp, r, a.chunk);
          const bool has_input = a.op == Op::Forward ? s > 0 : s < pp * v - 1;
          BOOST_TEST((p.recv_from >= 0) == has_input, to_string(a) << " on rank " << r);
          if (p.recv_from >= 0) {
            BOOST_TEST((p.recv_tag >= 0 && p.recv_tag <= max_message_tag(pp, v, M)));
            BOOST_TEST(tags.insert(p.recv_tag).second, "tag reused: " << p.recv_tag);
            ++receives[{r, p.recv_from, p.recv_tag}];
          }
          if (p.send_to >= 0) ++sends;
        }
      int matched = 0;
      for (int r = 0; r < pp; ++r)
        for (const auto& a : ranks[r]) {
          const Peers p = peers(pp, v, r, a);
          if (p.send_to < 0) continue;
          const auto it = receives.find({p.send_to, r, p.send_tag});
          BOOST_TEST((it != receives.end() && it->second == 1), to_string(a) << " on rank " << r << " unmatched");
          ++matched;
        }
      BOOST_TEST(matched == sends);
      BOOST_TEST(int(receives.size()) == sends);  // no receive waits for a send that never comes
      BOOST_TEST(sends == 2 * M * (pp * v - 1));
    }
  });
}

// NCCL's point-to-point has no tags: each (sender, receiver, kind) channel must see its messages received in the
// order they were sent, for every shape the trainer can run (uneven stage sizes do not change the lists).
BOOST_AUTO_TEST_CASE(messages_arrive_in_the_order_they_are_sent) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int v = 1; v <= 4; ++v)
      for (int M = 1; M <= 24; ++M)
        if (v == 1 || M % pp == 0) BOOST_TEST(in_order_mismatch(pp, v, M) == "", shape(pp, v, M));
}

// A rank that runs two micro-batches' forwards in the other order breaks its input channel's order; the check must
// see it (it is what stops a tagless transport from handing one micro-batch's activations to another).
BOOST_AUTO_TEST_CASE(swapped_forwards_break_the_order) {
  auto ranks = all_ranks(2, 1, 4);
  BOOST_TEST(in_order_mismatch(2, 1, ranks) == "");
  auto& last = ranks[1];  // rank 1: F0 B0 F1 B1 ... -> F1 before F0
  const auto f0 = std::find(last.begin(), last.end(), F(0)), f1 = std::find(last.begin(), last.end(), F(1));
  std::iter_swap(f0, f1);
  const std::string why = in_order_mismatch(2, 1, ranks);
  BOOST_TEST(why.find("activations from rank 0 to rank 1") != std::string::npos, why);
  BOOST_CHECK_THROW(in_order_mismatch(3, 2, 4), UsageError);  // M % pp != 0 with v > 1
  BOOST_CHECK_THROW(in_order_mismatch(2, 1, all_ranks(3, 1, 3)), UsageError);
}

BOOST_AUTO_TEST_CASE(simulator_hand_timeline) {
  // pp=2, v=1, M=2, tf=1, tb=2. Rank 0: F0 [0,1] F1 [1,2]; rank 1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7];
  // rank 0: B0 [4,6] B1 [7,9].
  const Simulation s = simulate(2, 1, all_ranks(2, 1, 2), 1.0, 2.0);
  BOOST_TEST(!s.deadlock);
  BOOST_TEST(s.start[0] == std::vector<double>({0, 1, 4, 7}), boost::test_tools::per_element());
  BOOST_TEST(s.end[0] == std::vector<double>({1, 2, 6, 9}), boost::test_tools::per_element());
  BOOST_TEST(s.start[1] == std::vector<double>({1, 2, 4, 5}), boost::test_tools::per_element());
  BOOST_TEST(s.end[1] == std::vector<double>({2, 4, 5, 7}), boost::test_tools::per_element());
  BOOST_TEST(s.makespan == 9.0);
  BOOST_TEST(s.busy == 12.0);
}

BOOST_AUTO_TEST_CASE(simulator_respects_dependencies_and_finishes) {
  for_each_shape([](int pp, int v, int M) {
    BOOST_TEST_CONTEXT(shape(pp, v, M)) {
      const double tf = 1.0, tb = 2.0;
      const auto ranks = all_ranks(pp, v, M);
      const Simulation s = simulate(pp, v, ranks, tf, tb);
      BOOST_TEST(!s.deadlock, s.stuck);
      std::map<std::tuple<int, int, int>, std::pair<double, double>> when;  // (op, micro, stage) -> start, end
      for (int r = 0; r < pp; ++r) {
        BOOST_TEST(s.end[r].size() == ranks[r].size());
        for (size_t i = 0; i < ranks[r].size(); ++i) {
          const Action& a = ranks[r][i];
          BOOST_TEST(s.end[r][i] - s.start[r][i] == (a.op == Op::Forward ? tf : tb));
          if (i > 0) BOOST_TEST(s.start[r][i] >= s.end[r][i - 1]);  // one action at a time, in order
          when[{int(a.op), a.micro, virtual_stage(pp, r, a.chunk)}] = {s.start[r][i], s.end[r][i]};
        }
      }
      const int S = pp * v;
      for (int m = 0; m < M; ++m)
        for (int st = 0; st < S; ++st) {
          const auto f = when.at({int(Op::Forward), m, st});
          const auto b = when.at({int(Op::Backward), m, st});
          if (st > 0) BOOST_TEST(f.first >= when.at({int(Op::Forward), m, st - 1}).second);
          if (st < S - 1) BOOST_TEST(b.first >= when.at({int(Op::Backward), m, st + 1}).second);
          BOOST_TEST(b.first >= f.second);
        }
    }
  });
}

BOOST_AUTO_TEST_CASE(simulator_reports_deadlock) {
  // Rank 1 wants micro-batch 1 first, but rank 0 sends it only after B0, which needs rank 1's B0.
  Simulation s = simulate(2, 1, {{F(0), B(0), F(1), B(1)}, {F(1), B(1), F(0), B(0)}}, 1, 1);
  BOOST_TEST(s.deadlock);
  BOOST_TEST(s.stuck.find("rank 0") != std::string::npos, s.stuck);
  BOOST_TEST(s.stuck.find("rank 1") != std::string::npos, s.stuck);
  // An input nobody produces: rank 1 has nothing to do, rank 0's backward waits forever.
  s = simulate(2, 1, {{F(0), B(0)}, {}}, 1, 1);
  BOOST_TEST(s.deadlock);
  BOOST_TEST(s.stuck.find("B0.0") != std::string::npos, s.stuck);
  // A backward before its own forward on the same rank.
  s = simulate(1, 1, {{B(0), F(0)}}, 1, 1);
  BOOST_TEST(s.deadlock);
  BOOST_TEST(s.stuck.find("its own forward") != std::string::npos, s.stuck);
  BOOST_CHECK_THROW(simulate(2, 1, {{F(0)}}, 1, 1), UsageError);  // one list per rank
}

BOOST_AUTO_TEST_CASE(bubble_closed_forms) {
  // With every chunk taking tf forward and tb backward and free communication, each rank idles exactly
  // (pp-1)(tf+tb) per step: the step is (v*M + pp - 1)(tf+tb), so the idle share is (pp-1)/(v*M+pp-1)
  // and idle/busy is (pp-1)/(v*M), cairn-plan's formula, for every tf:tb.
  for_each_shape([](int pp, int v, int M) {
    for (double tf : {0.5, 1.0, 2.0, 3.0}) {
      BOOST_TEST_CONTEXT(shape(pp, v, M) << " tf=" << tf << " tb=1") {
        const double f = simulated_bubble_fraction(pp, v, M, tf, 1.0);
        BOOST_TEST(std::abs(f - double(pp - 1) / (v * M + pp - 1)) < 1e-12);
        BOOST_TEST(std::abs(f / (1 - f) - double(pp - 1) / (v * M)) < 1e-12);
        const Simulation s = simulate(pp, v, all_ranks(pp, v, M), tf, 1.0);
        BOOST_TEST(std::abs(s.makespan - (v * M + pp - 1) * (tf + 1.0)) < 1e-9);
      }
    }
  });
  // Interleaving divides idle/busy by v at the same M (here exactly).
  for (int pp : {2, 3, 4})
    for (int v : {2, 3}) {
      const int M = 4 * pp;
      const double f1 = simulated_bubble_fraction(pp, 1, M, 0.5, 1.0);
      const double fv = simulated_bubble_fraction(pp, v, M, 0.5, 1.0);
      BOOST_TEST(std::abs((f1 / (1 - f1)) / (fv / (1 - fv)) - v) < 1e-9, shape(pp, v, M));
      BOOST_TEST(fv < f1);
    }
  BOOST_TEST(simulated_bubble_fraction(1, 3, 5, 1, 2) == 0.0);
}

BOOST_AUTO_TEST_CASE(invalid_input) {
  BOOST_CHECK_EXCEPTION(one_f_one_b(2, 2, 0, 5), UsageError, mentions({"M=5", "pp=2", "v=2"}));
  BOOST_CHECK_EXCEPTION(one_f_one_b(4, 3, 1, 6), UsageError, mentions({"M=6", "pp=4"}));
  BOOST_CHECK_EXCEPTION(warmup_forwards(3, 2, 0, 4), UsageError, mentions({"M=4", "pp=3"}));
  BOOST_CHECK_EXCEPTION(one_f_one_b(0, 1, 0, 4), UsageError, mentions({"pp=0"}));
  BOOST_CHECK_EXCEPTION(one_f_one_b(2, 0, 0, 4), UsageError, mentions({"v=0"}));
  BOOST_CHECK_EXCEPTION(one_f_one_b(2, 1, 0, 0), UsageError, mentions({"M=0"}));
  BOOST_CHECK_EXCEPTION(one_f_one_b(2, 1, 2, 4), UsageError, mentions({"rank 2", "[0, 2)"}));
  BOOST_CHECK_EXCEPTION(one_f_one_b(2, 1, -1, 4), UsageError, mentions({"rank -1"}));
  BOOST_CHECK_THROW(virtual_stage(2, 2, 0), UsageError);
  BOOST_CHECK_THROW(peers(2, 2, 0, F(0, 2)), UsageError);   // chunk out of range
  BOOST_CHECK_THROW(peers(2, 2, 0, F(-1, 0)), UsageError);  // negative micro-batch
  BOOST_CHECK_THROW(message_tag(2, 1, 3, F(0)), UsageError);
  BOOST_CHECK_THROW(max_message_tag(64, 8, 1 << 24), UsageError);  // beyond int
  BOOST_CHECK_THROW(simulated_bubble_fraction(2, 1, 4, 0.0, 1.0), UsageError);
  // M % pp is irrelevant without interleaving.
  BOOST_TEST(one_f_one_b(3, 1, 0, 5).size() == 10u);
}
