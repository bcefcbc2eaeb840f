// cairn-sweep's pure parts against hand-computed tables: nccl-tests' size/count rules and bus
// bandwidth factors per collective, size parsing, the closed-form reductions, the fit.
#define BOOST_TEST_MODULE sweep_unit
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <optional>

#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/log.h"
#include "collectives.h"
#include "pattern.h"
#include "sweep.h"

using namespace cairn::sweep;

struct HandRow {
  const char* coll;
  int n;
  uint64_t bytes;
  uint64_t size, count;  // what nccl-tests prints for float (4-byte) elements
  double factor;
};

// Worked by hand from nccl-tests' getCollByteCount: count = bytes/4, then per collective; the ones
// that divide by the rank count trim the per-rank block to 16 bytes: (count/n) & ~(16/4 - 1).
const HandRow kHand[] = {
    {"allreduce", 4, 1024, 1024, 256, 1.5},
    {"allgather", 4, 1024, 1024, 64, 0.75},
    {"reducescatter", 4, 1024, 1024, 64, 0.75},
    {"alltoall", 4, 1024, 1024, 64, 0.75},
    {"broadcast", 4, 1024, 1024, 256, 1.0},
    {"reduce", 4, 1024, 1024, 256, 1.0},
    {"sendrecv", 4, 1024, 1024, 256, 1.0},
    {"allreduce", 2, 64, 64, 16, 1.0},
    {"allgather", 2, 64, 64, 8, 0.5},
    {"reducescatter", 2, 64, 64, 8, 0.5},
    {"allreduce", 3, 1000, 1000, 250, 4.0 / 3},
    {"allgather", 3, 1000, 960, 80, 2.0 / 3},
    {"reducescatter", 3, 1000, 960, 80, 2.0 / 3},
    {"alltoall", 3, 1000, 960, 80, 2.0 / 3},
    {"allgather", 2, 48, 32, 4, 0.5},
    {"alltoall", 4, 32, 0, 0, 0.75},
    {"sendrecv", 3, 1002, 1000, 250, 1.0},
    {"allreduce", 1, 64, 64, 16, 0.0},
    {"allgather", 8, 8, 0, 0, 0.875},
};

// The sweep's progress line: its doubling sizes take most of the time at the end, so the ETA follows their work (the
// count of sizes said 3 s at 23 of 25, and the last two took 2 minutes).
BOOST_AUTO_TEST_CASE(progress_eta_follows_the_work_left) {
  cairn::Progress p("allreduce float", 4, "sizes");
  BOOST_TEST(p.eta_seconds(3, 6.0) == 2.0);  // by count: 3 sizes in 6 s, 1 left
  p.set_work({1, 2, 4, 8});
  BOOST_TEST(p.eta_seconds(3, 7.0) == 8.0);  // 7 units of work in 7 s, 8 left
  BOOST_TEST(p.eta_seconds(0, 1.0) == -1.0);
  p.finish();
}

BOOST_AUTO_TEST_CASE(size_count_and_factor_match_hand_table) {
  for (const auto& h : kHand) {
    const Collective& c = find_collective(h.coll);
    SizeRow r = size_row(c, h.bytes, 4, h.n);
    BOOST_TEST_CONTEXT(h.coll << " n=" << h.n << " bytes=" << h.bytes) {
      BOOST_TEST(r.size == h.size);
      BOOST_TEST(r.count == h.count);
      BOOST_TEST(std::abs(c.busbw_factor(h.n) - h.factor) < 1e-12);
    }
  }
}

BOOST_AUTO_TEST_CASE(bandwidths_follow_nccl_tests) {
  double alg = 0, bus = 0;
  // allreduce, 4 ranks, 1 KiB in 1 us: algbw = 1024 B / 1 us = 1.024 GB/s, busbw x 2(n-1)/n.
  bandwidths(find_collective("allreduce"), 256, 4, 4, 1e-6, &alg, &bus);
  BOOST_TEST(std::abs(alg - 1.024) < 1e-12);
  BOOST_TEST(std::abs(bus - 1.536) < 1e-12);
  // allgather counts all ranks' blocks: 64 elements x 4 B x 4 ranks = 1024 B.
  bandwidths(find_collective("allgather"), 64, 4, 4, 1e-6, &alg, &bus);
  BOOST_TEST(std::abs(alg - 1.024) < 1e-12);
  BOOST_TEST(std::abs(bus - 0.768) < 1e-12);
  bandwidths(find_collective("sendrecv"), 256, 4, 4, 2e-6, &alg, &bus);
  BOOST_TEST(std::abs(alg - 0.512) < 1e-12);
  BOOST_TEST(bus == alg);
}

BOOST_AUTO_TEST_CASE(names_and_bad_names) {
  BOOST_TEST(std::string(find_collective("all_reduce_perf").name) == "allreduce");
  BOOST_TEST(std::string(type_info(parse_type("float32")).name) == "float");
  BOOST_TEST(std::string(type_info(parse_type("bf16")).name) == "bfloat16");
  BOOST_CHECK_THROW(find_collective("allreduse"), cairn::UsageError);
  BOOST_CHECK_THROW(parse_type("int8"), cairn::UsageError);
  BOOST_TEST(std::string(op_name(parse_op("prod"))) == "prod");
  BOOST_CHECK_THROW(parse_op("mulsum"), cairn::UsageError);
}

// nccl-tests' getFloatStr: %.2f, %.1f, %.0f, whichever first fits the column, else an exponent.
BOOST_AUTO_TEST_CASE(float_columns_follow_get_float_str) {
  BOOST_TEST(float_column(1.234, 7) == "   1.23");
  BOOST_TEST(float_column(9999.996, 7) == "10000.0");  // %.2f would round up to 8 characters
  BOOST_TEST(float_column(123456.7, 7) == " 123457");
  BOOST_TEST(float_column(123456789.0, 7) == "1.2e+08");
  BOOST_TEST(float_column(15000000.0, 6) == " 2e+07");
  BOOST_TEST(float_column(0.0, 6) == "  0.00");
}

// nccl-tests' reduction ops, with prod exact: one rank holds a(g) in [-3, 3], the others +-1.
BOOST_AUTO_TEST_CASE(closed_form_product_equals_explicit_one) {
  for (int n : {1, 2, 3, 5, 64}) {
    PatternParams p;
    p.seed = 99 + n;
    p.nranks = n;
    p.reducing = true;
    p.op = RedOp::Prod;
    for (int r = 0; r < n; ++r) p.sign_prod *= rank_sign(p.seed, r);
    for (uint64_t g = 0; g < 200; ++g) {
      double want = 1;
      for (int r = 0; r < n; ++r) want *= input_value(p, r, g);
      BOOST_TEST(reduced_value(p, g) == want);
    }
  }
}

BOOST_AUTO_TEST_CASE(byte_sizes_and_sweep_steps) {
  BOOST_TEST(cairn::parse_byte_count("8", "x") == 8u);
  BOOST_TEST(cairn::parse_byte_count("1K", "x") == 1024u);
  BOOST_TEST(cairn::parse_byte_count("128M", "x") == 128ull << 20);
  BOOST_TEST(cairn::parse_byte_count("2g", "x") == 2ull << 30);
  BOOST_CHECK_THROW(cairn::parse_byte_count("", "x"), cairn::UsageError);
  // Decimals as nccl-tests' parsesize reads them (a fraction of a byte dropped).
  BOOST_TEST(cairn::parse_byte_count("1.5M", "x") == 3ull << 19);
  BOOST_TEST(cairn::parse_byte_count("1.5K", "x") == 1536u);
  BOOST_TEST(cairn::parse_byte_count("0.5", "x") == 0u);
  BOOST_CHECK_THROW(cairn::parse_byte_count("1.5.1K", "x"), cairn::UsageError);
  BOOST_CHECK_THROW(cairn::parse_byte_count(".", "x"), cairn::UsageError);
  BOOST_CHECK_THROW(cairn::parse_byte_count("-3", "x"), cairn::UsageError);
  // Units with a B (binary, as without): 64MB was refused though a trailing B was meant to be taken.
  BOOST_TEST(cairn::parse_byte_count("64MB", "x") == 64ull << 20);
  BOOST_TEST(cairn::parse_byte_count("64MiB", "x") == 64ull << 20);
  BOOST_TEST(cairn::parse_byte_count("1kb", "x") == 1024u);
  BOOST_TEST(cairn::parse_byte_count("2T", "x") == 2ull << 40);
  BOOST_TEST(cairn::parse_byte_count("512B", "x") == 512u);
  for (const char* bad : {"B", "iB", "64iB", "64BB", "64KK", "K"})
    BOOST_CHECK_THROW(cairn::parse_byte_count(bad, "x"), cairn::UsageError);
  SweepOptions o;
  o.minbytes = 8;
  o.maxbytes = 100;
  o.stepfactor = 2;
  BOOST_TEST(sweep_sizes(o) == (std::vector<uint64_t>{8, 16, 32, 64}), boost::test_tools::per_element());
  o.stepfactor = 1;
  o.stepbytes = 40;
  BOOST_TEST(sweep_sizes(o) == (std::vector<uint64_t>{8, 48, 88}), boost::test_tools::per_element());
}

// nccl-tests 2.19 warms up at every doubling of -b (it warmed up at the largest and smallest size only before), here up
// to the largest measured size, whatever -f or -i step the measured sizes take.
BOOST_AUTO_TEST_CASE(warm_up_at_every_doubling_of_the_smallest_size) {
  SweepOptions o;
  o.minbytes = 8;
  o.maxbytes = 1000;
  o.stepfactor = 4;  // measured: 8, 32, 128, 512
  BOOST_TEST(warmup_sizes(o) == (std::vector<uint64_t>{8, 16, 32, 64, 128, 256, 512}),
             boost::test_tools::per_element());
  o.stepfactor = 1;
  o.stepbytes = 100;  // measured: 8, 108, ..., 908
  BOOST_TEST(warmup_sizes(o) == (std::vector<uint64_t>{8, 16, 32, 64, 128, 256, 512}),
             boost::test_tools::per_element());
  o.minbytes = o.maxbytes = 1000;
  BOOST_TEST(warmup_sizes(o) == (std::vector<uint64_t>{1000}), boost::test_tools::per_element());
}

// NCCL_TESTS_MIN_BW, nccl-tests' floor: a run fails below 90 % of it. It is an environment setting of sweep.min_busbw:
// above the default and the config files, below CAIRN_SWEEP_MIN_BUSBW, the flags and --set; the log names the setting.
BOOST_AUTO_TEST_CASE(nccl_tests_min_bw_sets_the_floor_at_90_percent_below_flags) {
  using cairn::Origin;
  auto floor_with = [](const char* nccl, std::optional<Origin> set_by, std::string* source = nullptr) {
    ::setenv(kNcclTestsMinBw, nccl, 1);
    cairn::Config cfg;
    if (set_by) cfg.set("sweep.min_busbw", 5.0, *set_by);
    try {
      apply_nccl_tests_min_bw(cfg);
    } catch (...) {
      ::unsetenv(kNcclTestsMinBw);
      throw;
    }
    if (source) *source = min_busbw_source(cfg);
    const double floor = sweep_options(cfg).min_busbw;
    ::unsetenv(kNcclTestsMinBw);
    return floor;
  };
  std::string source;
  BOOST_TEST(floor_with("100", std::nullopt, &source) == 90.0);
  BOOST_TEST(source == "env NCCL_TESTS_MIN_BW=100 (nccl-tests fails a run below 90% of it)");
  BOOST_TEST(floor_with("100", Origin{Origin::File, "x.toml:2:1"}) == 90.0);
  BOOST_TEST(floor_with("100", Origin{Origin::Env, "CAIRN_SWEEP_MIN_BUSBW"}) == 5.0);
  BOOST_TEST(floor_with("100", Origin{Origin::Program, "--min-busbw"}, &source) == 5.0);
  BOOST_TEST(source == "--min-busbw (over env NCCL_TESTS_MIN_BW=100)");
  BOOST_TEST(floor_with("100", Origin{Origin::Set, "sweep.min_busbw=5"}) == 5.0);
  BOOST_TEST(floor_with("", std::nullopt) == 0.0);  // empty: not set
  for (const char* bad : {"abc", "-1", "12GB", "nan"})
    BOOST_CHECK_THROW(floor_with(bad, std::nullopt), cairn::UsageError);
  cairn::Config plain;
  BOOST_TEST(min_busbw_source(plain) == "the default");
}

BOOST_AUTO_TEST_CASE(closed_form_reductions_equal_explicit_ones) {
  for (int n : {1, 2, 3, 4, 7, 64}) {
    for (RedOp op : {RedOp::Sum, RedOp::Max, RedOp::Min}) {
      PatternParams p;
      p.seed = 12345 + n;
      p.nranks = n;
      p.reducing = true;
      p.op = op;
      p.c_min = INT64_MAX;
      p.c_max = INT64_MIN;
      for (int r = 0; r < n; ++r) {
        int64_t f = rank_factor(p.seed, r);
        p.c_sum += f;
        p.c_min = std::min(p.c_min, f);
        p.c_max = std::max(p.c_max, f);
      }
      for (uint64_t g = 0; g < 200; ++g) {
        double want = op == RedOp::Sum ? 0 : input_value(p, 0, g);
        for (int r = 0; r < n; ++r) {
          double v = input_value(p, r, g);
          want = op == RedOp::Sum ? want + v : op == RedOp::Max ? std::max(want, v) : std::min(want, v);
        }
        BOOST_TEST(reduced_value(p, g) == want);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(non_reducing_values_differ_between_ranks) {
  PatternParams p;
  p.seed = 7;
  p.modulus = 1 << 24;
  int same = 0;
  for (uint64_t g = 0; g < 1000; ++g) same += input_value(p, 0, g) == input_value(p, 1, g);
  BOOST_TEST(same < 5);  // a block delivered from the wrong rank is caught
  BOOST_TEST(!value_matches(p, std::nan(""), 0.0));
}

Block synthetic_block(double alpha_us, double busbw_gbps, double factor) {
  Block b;
  for (uint64_t s = 1024; s <= (64u << 20); s *= 4) {
    Row r;
    r.size = s;
    r.oop.time_us = alpha_us + static_cast<double>(s) * factor / (busbw_gbps * 1e3);
    r.oop.busbw = static_cast<double>(s) / 1e3 / r.oop.time_us * factor;
    b.rows.push_back(r);
  }
  return b;
}

BOOST_AUTO_TEST_CASE(fit_recovers_alpha_and_busbw) {
  Block b = synthetic_block(5.0, 12.5, 1.5);
  Fit f = fit_block(b, 1.5);
  BOOST_TEST(f.valid);
  BOOST_TEST(std::abs(f.alpha_us - 5.0) < 1e-6);
  BOOST_TEST(std::abs(f.busbw_gbps - 12.5) < 1e-6);
  BOOST_TEST(f.r2 > 0.999999);
  // Half of the peak busbw is reached where S*factor/busbw ~ alpha: between 64 KiB and 256 KiB here.
  BOOST_TEST(f.half_peak_bytes == 65536u);
  BOOST_TEST(!fit_block(b, 0.0).valid);  // one rank: nothing to fit
  // Sizes that stop below the half-bandwidth size (about 90 KiB here): the slope is the noise's, and the fit is not
  // written (a latency-bound 8-64 B sweep fitted 14x any busbw it measured). Up to 16 KiB the largest measured busbw
  // is 0.15 of the line's; up to 256 KiB, 0.74: a fit.
  Block short_range = b;
  short_range.rows.resize(4);                                                   // 1 KiB .. 64 KiB
  for (auto& r : short_range.rows) r.oop.time_us *= r.size % 2048 ? 1.3 : 0.8;  // noise
  short_range.rows.resize(3);                                                   // 1 .. 16 KiB
  const Fit short_fit = fit_block(short_range, 1.5);
  BOOST_TEST(!short_fit.valid);
  BOOST_TEST(short_fit.note.find("stop short of the bandwidth-bound range") != std::string::npos);
  Block reaching = b;
  reaching.rows.resize(5);  // 1 KiB .. 256 KiB
  BOOST_TEST(fit_block(reaching, 1.5).valid);
}

BOOST_AUTO_TEST_CASE(bench_summary_medians_best_and_abba_pairs) {
  // Rounds alternate (sweep, bare), (bare, sweep): rounds 0+1 and 2+3 are the two ABBA pairs.
  std::vector<double> sweep = {2.0, 4.0, 1.0, 3.0, 10.0};
  std::vector<double> bare = {1.0, 4.0, 1.0, 3.0, 2.0};
  BenchBareRow r = summarize_bench_row(1024, 256, 7, sweep, bare);
  BOOST_TEST(r.rounds == 5);
  BOOST_TEST(r.sweep_median == 3.0);
  BOOST_TEST(r.bare_median == 2.0);
  BOOST_TEST(r.sweep_best == 10.0);
  BOOST_TEST(r.bare_best == 4.0);
  BOOST_TEST(r.diff_median_pct == 50.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(r.diff_best_pct == 150.0, boost::test_tools::tolerance(1e-9));
  // Pair 1: harmonic means 2/(1/2+1/4) = 8/3 vs 2/(1/1+1/4) = 8/5 -> +66.67%; pair 2: 1.5 vs 1.5 -> 0%;
  // the unpaired fifth round is left out; median of {66.67, 0} = 33.33.
  BOOST_TEST(r.diff_paired_pct == 100.0 / 3.0, boost::test_tools::tolerance(1e-9));
  std::string line = format_bench_row(r);
  BOOST_TEST(line.find("1024") != std::string::npos);
  BOOST_TEST(line.find("33.33") != std::string::npos);
}
