// Parallel layout without MPI: rank <-> coordinates, every validation error's message, stage splits, config keys.
#define BOOST_TEST_MODULE parallel_layout
#include <boost/test/unit_test.hpp>

#include <numeric>

#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/parallel.h"

using namespace cairn;
using namespace cairn::parallel;

namespace cairn::parallel {
// For Boost.Test's messages.
std::ostream& operator<<(std::ostream& os, const Coords& c) {
  return os << "dp" << c.dp << " cp" << c.cp << " tp" << c.tp << " pp" << c.pp;
}
}  // namespace cairn::parallel

namespace {

Layout shape(int dp, int tp, int pp, int v = 1, int cp = 1) {
  Layout l;
  l.dp = dp, l.tp = tp, l.pp = pp, l.v = v, l.cp = cp, l.world = dp * cp * tp * pp;
  return l;
}

// A valid request: GPT-2 small on 8 ranks, dp2 x tp2 x pp2.
LayoutRequest base() {
  LayoutRequest r;
  r.world = 8, r.dp = 0, r.tp = 2, r.pp = 2, r.v = 1, r.zero = 1;
  r.global_batch = 16, r.micro_batch = 2;
  r.layers = 12, r.heads = 12, r.hidden = 768, r.vocab = 50304, r.seq_len = 1024;
  return r;
}

// Resolves `r`, expecting a UsageError whose message holds every one of `parts`.
void expect_error(const LayoutRequest& r, std::initializer_list<std::string> parts) {
  try {
    resolve_layout(r);
    BOOST_FAIL("expected a UsageError");
  } catch (const UsageError& e) {
    std::string m = e.what();
    BOOST_TEST_MESSAGE(m);
    for (const auto& p : parts) BOOST_TEST(m.find(p) != std::string::npos, "'" << p << "' missing from: " << m);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(coords_and_ranks_are_a_bijection) {
  for (int dp : {1, 2, 3, 4})
    for (int tp : {1, 2, 4, 8})
      for (int pp : {1, 2, 3, 5}) {
        Layout l = shape(dp, tp, pp);
        std::vector<int> seen(l.world, 0);
        for (int r = 0; r < l.world; ++r) {
          Coords c = coords_of(l, r);
          BOOST_TEST((c.dp >= 0 && c.dp < dp && c.tp >= 0 && c.tp < tp && c.pp >= 0 && c.pp < pp));
          BOOST_TEST(rank_of(l, c) == r);
          ++seen[r];
        }
        for (int d = 0; d < dp; ++d)
          for (int t = 0; t < tp; ++t)
            for (int p = 0; p < pp; ++p) BOOST_TEST(coords_of(l, rank_of(l, {d, t, p})) == (Coords{d, t, p}));
      }
}

BOOST_AUTO_TEST_CASE(coords_and_ranks_with_context_parallelism) {
  for (int cp : {2, 3})
    for (int dp : {1, 2})
      for (int tp : {1, 2})
        for (int pp : {1, 2}) {
          Layout l = shape(dp, tp, pp, 1, cp);
          for (int r = 0; r < l.world; ++r) BOOST_TEST(rank_of(l, coords_of(l, r)) == r);
        }
  // Megatron-Core's order tp, cp, dp, pp: dp2 x cp2 x tp2 x pp2
  Layout l = shape(2, 2, 2, 1, 2);
  BOOST_TEST(coords_of(l, 1) == (Coords{0, 1, 0, 0}));  // tp1
  BOOST_TEST(coords_of(l, 2) == (Coords{0, 0, 0, 1}));  // cp1
  BOOST_TEST(coords_of(l, 4) == (Coords{1, 0, 0, 0}));  // dp1
  BOOST_TEST(coords_of(l, 8) == (Coords{0, 0, 1, 0}));  // pp1
  BOOST_TEST(coords_of(l, 15) == (Coords{1, 1, 1, 1}));
  BOOST_TEST(rank_of(l, {1, 0, 1, 1}) == 14);
  BOOST_CHECK_THROW(rank_of(l, {0, 0, 0, 2}), RuntimeError);
}

BOOST_AUTO_TEST_CASE(context_parallel_layouts) {
  LayoutRequest r = base();  // 8 ranks: dp1 x cp2 x tp2 x pp2
  r.cp = 2;
  Layout l = resolve_layout(r);
  BOOST_TEST(l.dp == 1);
  BOOST_TEST(l.cp == 2);
  BOOST_TEST(l.micro_steps == 8);
  BOOST_TEST(describe(l) == "dp1 x cp2 x tp2 x pp2 (layers 6+6), micro-batch 2 x 8, ZeRO-1");
  r.seq_len = 1002;  // 1002 tokens do not split into 2*cp = 4 equal chunks
  expect_error(r, {"[model] seq_len = 1002 is not divisible by 2*[parallel] cp = 2*2 = 4"});
  r = base();
  r.cp = 3;  // 8 ranks
  expect_error(r, {"the 8 MPI ranks are not divisible by [parallel] cp*tp*pp = 3*2*2 = 12"});
  r.dp = 1;
  expect_error(r, {"[parallel] dp*cp*tp*pp = 1*3*2*2 = 12 does not match the 8 MPI ranks"});
  r = base();
  r.cp = 2, r.sp = true, r.seq_len = 12, r.tp = 4, r.pp = 1, r.heads = 12, r.micro_batch = 1;
  // sequence parallelism splits this rank's 12/2 = 6 tokens of a sequence over tp = 4
  expect_error(r, {"[parallel] sp = on splits micro-batch * [model] seq_len / cp = 1*6 = 6 tokens over [parallel] "
                   "tp = 4"});
  r = base();
  r.cp = 0;
  expect_error(r, {"[parallel] cp = 0 must be at least 1"});
}

BOOST_AUTO_TEST_CASE(megatron_rank_order) {
  Layout l = shape(2, 2, 2);
  BOOST_TEST(coords_of(l, 5) == (Coords{0, 1, 1}));  // rank 5 -> tp1 dp0 pp1
  BOOST_TEST(coords_of(l, 2) == (Coords{1, 0, 0}));
  BOOST_TEST(coords_of(l, 7) == (Coords{1, 1, 1}));
  // TP groups are consecutive ranks; the pipeline is the slowest coordinate.
  Layout t = shape(2, 4, 2);
  for (int r = 0; r < 4; ++r) BOOST_TEST(coords_of(t, r).tp == r);
  BOOST_TEST(coords_of(t, 4) == (Coords{1, 0, 0}));
  BOOST_TEST(coords_of(t, 8) == (Coords{0, 0, 1}));
  BOOST_TEST(rank_of(t, {1, 3, 1}) == 15);
  BOOST_CHECK_THROW(coords_of(t, 16), RuntimeError);
  BOOST_CHECK_THROW(rank_of(t, {2, 0, 0}), RuntimeError);
}

BOOST_AUTO_TEST_CASE(resolves_a_valid_layout) {
  Layout l = resolve_layout(base());
  BOOST_TEST(l.world == 8);
  BOOST_TEST(l.dp == 2);
  BOOST_TEST(l.micro_batch == 2);
  BOOST_TEST(l.micro_steps == 4);
  BOOST_TEST(l.stage_layers == (std::vector<int>{6, 6}));
  BOOST_TEST(l.notes.empty());
  BOOST_TEST(describe(l) == "dp2 x tp2 x pp2 (layers 6+6), micro-batch 2 x 4, ZeRO-1");

  LayoutRequest r = base();
  r.v = 2, r.sp = true;
  r.global_batch = 32, r.micro_batch = 4;  // 4 micro-steps, a multiple of pp as interleaving needs
  l = resolve_layout(r);
  BOOST_TEST(l.stage_layers == (std::vector<int>{3, 3, 3, 3}));
  BOOST_TEST(describe(l) == "dp2 x tp2 x pp2 (v2, layers 3+3+3+3), micro-batch 4 x 4, ZeRO-1, sp");

  r = base();
  r.tp = 1, r.pp = 1, r.dp = 8, r.micro_batch = 0, r.zero = 0;
  l = resolve_layout(r);
  BOOST_TEST(l.micro_batch == 2);
  BOOST_TEST(l.micro_steps == 1);
  BOOST_TEST(describe(l) == "dp8 x tp1 x pp1, micro-batch 2 x 1");

  r = base();  // a deep pipeline: its stages in short
  r.world = 20, r.tp = 1, r.pp = 20, r.layers = 40, r.micro_batch = 1;
  BOOST_TEST(describe(resolve_layout(r)) == "dp1 x tp1 x pp20 (20 stages of 2 layers), micro-batch 1 x 16, ZeRO-1");
}

BOOST_AUTO_TEST_CASE(notes_for_settings_that_do_nothing) {
  LayoutRequest r = base();
  r.tp = 1, r.pp = 1, r.sp = true;
  r.world = 1, r.zero = 2;
  Layout l = resolve_layout(r);
  BOOST_TEST(!l.sp);
  BOOST_REQUIRE(l.notes.size() == 2u);
  BOOST_TEST(l.notes[0].find("sp = on does nothing at tp = 1") != std::string::npos);
  BOOST_TEST(l.notes[1].find("zero = 2 does nothing at dp = 1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(world_must_be_dp_tp_pp) {
  LayoutRequest r = base();
  r.world = 6;
  expect_error(r, {"6 MPI ranks", "[parallel] tp*pp = 2*2 = 4", "dp = 0"});
  r = base();
  r.dp = 4;
  expect_error(r, {"[parallel] dp*tp*pp = 4*2*2 = 16", "8 MPI ranks"});
}

BOOST_AUTO_TEST_CASE(tensor_parallel_divisibility) {
  LayoutRequest r = base();
  r.world = 8, r.tp = 8, r.pp = 1;
  expect_error(r, {"[model] heads = 12 is not divisible by [parallel] tp = 8"});
  r = base();
  r.hidden = 769;
  expect_error(r, {"[model] hidden = 769", "[parallel] tp = 2"});
  r = base();
  r.kv_heads = 3;
  expect_error(r, {"[model] kv_heads = 3", "[parallel] tp = 2"});
  r = base();
  r.ffn_hidden = 3001;
  expect_error(r, {"[model] ffn_hidden = 3001", "[parallel] tp = 2"});
  r = base();
  r.vocab = 50257;
  expect_error(r, {"[model] vocab = 50257", "[parallel] tp = 2", "multiple of 128*tp", "vocab = 50432"});
}

BOOST_AUTO_TEST_CASE(batch_divisibility) {
  LayoutRequest r = base();
  r.global_batch = 10;  // dp 2 x micro-batch 2 = 4 does not divide 10
  expect_error(r, {"[train] global_batch = 10", "[parallel] dp", "micro_batch", "[parallel] mb", "2*2 = 4"});
  r = base();
  r.global_batch = 9, r.micro_batch = 0;
  expect_error(r, {"[train] global_batch = 9 is not divisible by [parallel] dp = 2"});
}

BOOST_AUTO_TEST_CASE(interleaving_rules) {
  LayoutRequest r = base();
  r.world = 4, r.pp = 1, r.v = 2;
  expect_error(r, {"[parallel] v = 2", "[parallel] pp > 1", "pp = 1"});
  r = base();
  r.v = 2, r.global_batch = 12, r.micro_batch = 2;  // 3 micro-steps, not a multiple of pp 2
  expect_error(r, {"[parallel] v = 2", "[train] global_batch", "12/(2*2) = 3", "multiple of [parallel] pp = 2"});
}

BOOST_AUTO_TEST_CASE(sequence_parallel_tokens_split_over_tp) {
  LayoutRequest r = base();
  r.sp = true, r.tp = 4, r.pp = 1, r.micro_batch = 1, r.seq_len = 1022;
  expect_error(r, {"[parallel] sp = on", "[model] seq_len", "1*1022 = 1022", "[parallel] tp = 4"});
}

BOOST_AUTO_TEST_CASE(zero_stage_range) {
  LayoutRequest r = base();
  r.zero = 4;
  expect_error(r, {"[parallel] zero = 4", "0, 1, 2 or 3"});
}

BOOST_AUTO_TEST_CASE(uneven_layers_suggest_a_stage_list) {
  LayoutRequest r = base();
  r.layers = 10, r.pp = 2, r.v = 2, r.global_batch = 32, r.micro_batch = 4;
  expect_error(r, {"[model] layers = 10", "[parallel] pp*v = 2*2 = 4", "stage_layers = [2, 3, 3, 2]"});
  r = base();
  r.layers = 3, r.tp = 1, r.pp = 4, r.world = 8;
  expect_error(r, {"[model] layers = 3 is fewer than", "[parallel] pp = 4"});
}

BOOST_AUTO_TEST_CASE(explicit_stage_layers) {
  LayoutRequest r = base();
  r.layers = 10, r.v = 2, r.global_batch = 32, r.micro_batch = 4;
  r.stage_layers = {2, 3, 3, 2};
  Layout l = resolve_layout(r);
  BOOST_TEST(l.stage_layers == r.stage_layers);
  BOOST_TEST((stage_layer_range(l, 0) == std::pair{0, 2}));
  BOOST_TEST((stage_layer_range(l, 1) == std::pair{2, 3}));
  BOOST_TEST((stage_layer_range(l, 2) == std::pair{5, 3}));
  BOOST_TEST((stage_layer_range(l, 3) == std::pair{8, 2}));
  BOOST_CHECK_THROW(stage_layer_range(l, 4), RuntimeError);
  // Interleaving: pipeline rank 1 runs virtual stages 1 and 3.
  BOOST_TEST(virtual_stage(l, 1, 0) == 1);
  BOOST_TEST(virtual_stage(l, 1, 1) == 3);
  BOOST_TEST(virtual_stage(l, 0, 1) == 2);

  r.stage_layers = {5, 5};
  expect_error(r, {"[parallel] stage_layers = [5, 5] has 2 entries", "[parallel] pp*v = 2*2 = 4"});
  r.v = 1, r.stage_layers = {5, 4, 1};
  expect_error(r, {"invalid parallel layout: [parallel] stage_layers = [5, 4, 1] has 3 entries", "[parallel] pp = 2"});
  r.stage_layers = {4, 5};
  expect_error(r, {"[parallel] stage_layers = [4, 5] sums to 9, but [model] layers = 10"});
  r.stage_layers = {10, 0};
  expect_error(r, {"[parallel] stage_layers[1] = 0", "at least one layer"});
  // Even splits through the list give the same layout as the default.
  r.stage_layers = {5, 5};
  BOOST_TEST(resolve_layout(r).stage_layers == (std::vector<int>{5, 5}));
}

BOOST_AUTO_TEST_CASE(even_split_ranges) {
  LayoutRequest r = base();
  r.pp = 2, r.v = 3, r.global_batch = 32, r.micro_batch = 4;
  Layout l = resolve_layout(r);
  BOOST_TEST(l.stage_layers == (std::vector<int>(6, 2)));
  for (int s = 0; s < 6; ++s) BOOST_TEST((stage_layer_range(l, s) == std::pair{2 * s, 2}));
}

BOOST_AUTO_TEST_CASE(suggestions_sum_to_layers_and_spare_the_ends) {
  BOOST_TEST(suggest_stage_layers(10, 4) == (std::vector<int>{2, 3, 3, 2}));
  BOOST_TEST(suggest_stage_layers(7, 2) == (std::vector<int>{4, 3}));
  BOOST_TEST(suggest_stage_layers(5, 1) == (std::vector<int>{5}));
  for (int stages = 1; stages <= 24; ++stages)
    for (int layers = stages; layers <= 100; ++layers) {
      auto s = suggest_stage_layers(layers, stages);
      BOOST_REQUIRE(static_cast<int>(s.size()) == stages);
      BOOST_TEST(std::accumulate(s.begin(), s.end(), 0) == layers);
      auto [lo, hi] = std::minmax_element(s.begin(), s.end());
      BOOST_TEST(*hi - *lo <= 1, "uneven: " << layers << " over " << stages);
      BOOST_TEST(*lo >= 1);
      // An end stage is heavier than a middle one only when every middle stage already took its extra layer.
      if (stages > 2 && (s.front() == *hi && *hi != *lo))
        for (int i = 1; i < stages - 1; ++i) BOOST_TEST(s[i] == *hi);
      if (stages > 2 && (s.back() == *hi && *hi != *lo)) BOOST_TEST(s.front() == *hi);
    }
}

BOOST_AUTO_TEST_CASE(several_problems_in_one_message) {
  LayoutRequest r = base();
  r.heads = 13, r.zero = 5, r.world = 7;
  expect_error(r, {"3 problems", "[model] heads = 13", "[parallel] zero = 5", "7 MPI ranks"});
}

BOOST_AUTO_TEST_CASE(stage_layers_config_key) {
  Config d = load_config(ConfigSources{{}, {}, false});
  BOOST_TEST(d.get_ints("parallel.stage_layers").empty());
  Config c = load_config(ConfigSources{{}, {"parallel.stage_layers=[2,3,3,2]"}, false});
  BOOST_TEST(c.get_ints("parallel.stage_layers") == (std::vector<int64_t>{2, 3, 3, 2}));
  BOOST_TEST(c.to_toml().find("stage_layers = [2, 3, 3, 2]") != std::string::npos);
  Config e = load_config(ConfigSources{{}, {"parallel.stage_layers=[]"}, false});
  BOOST_TEST(e.get_ints("parallel.stage_layers").empty());
  BOOST_CHECK_THROW(load_config(ConfigSources{{}, {"parallel.stage_layers=[2,0]"}, false}), UsageError);
  BOOST_CHECK_THROW(load_config(ConfigSources{{}, {"parallel.stage_layers=[2,1.5]"}, false}), UsageError);
}
