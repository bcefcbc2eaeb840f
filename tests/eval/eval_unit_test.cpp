// Unit tests of cairn-eval's pieces: harness rolling windows, word counting, stderr, JSONL parsing
// (line numbers, --skip-bad), the harness pair encoding, and batched scoring equal to row-by-row scoring.
#define BOOST_TEST_MODULE eval_unit
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cairn/error.h"
#include "cairn/kernels/backend.h"
#include "cairn/mpi.h"
#include "cairn/tokenizer.h"
#include "eval.h"

using namespace cairn;
using namespace cairn::eval;

struct MpiFixture {
  MpiFixture()
      : session(&boost::unit_test::framework::master_test_suite().argc,
                &boost::unit_test::framework::master_test_suite().argv) {}
  mpi::Session session;
};
BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

BOOST_AUTO_TEST_CASE(rolling_windows_predict_every_token_once_with_max_context) {
  for (int ctx_len : {1, 3}) {
    for (int64_t n : {1, 5, 8, 9, 16, 17, 40}) {
      const int T = 8;
      auto ws = rolling_windows(n, T, ctx_len);
      std::vector<int> seen(n, 0);
      for (const auto& w : ws) {
        BOOST_TEST(w.input_len <= T);
        BOOST_TEST(w.pred_len <= w.input_len);
        // Position t of the window predicts document token (input_begin + t + 1); prefix shifts by one.
        for (int t = w.input_len - w.pred_len; t < w.input_len; ++t) {
          int64_t target = w.input_begin + t + 1;
          BOOST_REQUIRE(target >= 0 && target < n);
          ++seen[target];
          // Context: every token before the target that fits in T positions (or the document start).
          int64_t context = w.input_begin < 0 ? t : t + 1;
          BOOST_TEST(context >= std::min<int64_t>(target, T - w.pred_len + (t - (w.input_len - w.pred_len))));
        }
      }
      for (int64_t i = 0; i < n; ++i) BOOST_TEST(seen[i] == 1);
    }
  }
  // lm-evaluation-harness example: 10 tokens, max_seq_len 4, context_len 1 -> predictions 4 + 4 + 2,
  // the last window right-aligned (inputs tokens 5..8, predicting 8 and 9).
  auto ws = rolling_windows(10, 4, 1);
  BOOST_REQUIRE(ws.size() == 3u);
  BOOST_TEST(ws[0].input_begin == -1);
  BOOST_TEST(ws[0].pred_len == 4);
  BOOST_TEST(ws[1].input_begin == 3);
  BOOST_TEST(ws[1].pred_len == 4);
  BOOST_TEST(ws[2].input_begin == 5);
  BOOST_TEST(ws[2].input_len == 4);
  BOOST_TEST(ws[2].pred_len == 2);
  BOOST_CHECK_THROW(rolling_windows(10, 4, 5), UsageError);
}

BOOST_AUTO_TEST_CASE(words_counted_like_python_re_split) {
  BOOST_TEST(count_words("") == 1);
  BOOST_TEST(count_words("one") == 1);
  BOOST_TEST(count_words("one two  three") == 3);
  BOOST_TEST(count_words(" lead and trail\n") == 5);  // ['', 'lead', 'and', 'trail', '']
  BOOST_TEST(count_words("a\t\nb\xc2\xa0"
                         "c") == 3);  // NBSP is \s in Python 3
}

BOOST_AUTO_TEST_CASE(stderr_is_sample_std_over_sqrt_n) {
  std::vector<double> x = {1, 0, 1, 1};
  double mu = 0.75, var = (3 * 0.0625 + 0.5625) / 3.0;
  BOOST_TEST(std::abs(mean_stderr(x) - std::sqrt(var) / 2.0) < 1e-15);
  BOOST_TEST(std::isnan(mean_stderr({1.0})));
  (void)mu;
}

BOOST_AUTO_TEST_CASE(jsonl_errors_name_the_line_and_skip_bad_counts) {
  std::string path = (std::filesystem::temp_directory_path() / "cairn_eval_unit.jsonl").string();
  {
    std::ofstream f(path);
    f << R"({"context": "a", "choices": ["b", "c"], "label": 1})"
      << "\n\n"
      << R"({"context": "a", "choices": [], "label": 0})"
      << "\n"
      << R"({"context": "a", "choices": ["b"], "label": 0)"
      << "\n"
      << R"({"context": "z", "choices": ["y"], "label": 0})"
      << "\n";
  }
  try {
    read_mc_jsonl(path, false, nullptr);
    BOOST_FAIL("no error");
  } catch (const UsageError& e) {
    BOOST_TEST(std::string(e.what()).find("cairn_eval_unit.jsonl:3:") != std::string::npos);
  }
  int64_t skipped = 0;
  auto ex = read_mc_jsonl(path, true, &skipped);
  BOOST_TEST(ex.size() == 2u);
  BOOST_TEST(skipped == 2);
  BOOST_TEST(ex[1].context == "z");
  std::filesystem::remove(path);
  BOOST_CHECK_THROW(read_mc_jsonl("/nonexistent/x.jsonl", false, nullptr), UsageError);
}

BOOST_AUTO_TEST_CASE(pair_encoding_moves_trailing_space_into_the_continuation) {
  auto tok = tokenizer::load(tokenizer::Spec{});
  std::vector<uint32_t> c, k;
  encode_pair(*tok, "The answer is ", " yes", c, k);
  BOOST_TEST(c.size() == 13u);  // "The answer is"
  BOOST_TEST(k.size() == 5u);   // "  yes"
  BOOST_TEST(k[0] == uint32_t(' '));
  BOOST_TEST(k[1] == uint32_t(' '));
  encode_pair(*tok, "", " hi", c, k);
  BOOST_TEST(c.empty());  // the caller substitutes end-of-text
  BOOST_TEST(k.size() == 3u);
  // Python's rstrip() moves Unicode whitespace too: a no-break space (2 bytes), \x1f and U+3000 (3 bytes) end up in
  // the continuation, as the harness's _encode_pair puts them (they stayed in the context, scoring fewer tokens).
  encode_pair(*tok, "ends\xc2\xa0\x1f\xe3\x80\x80", "a", c, k);
  BOOST_TEST(c.size() == 4u);                     // "ends"
  BOOST_TEST(k.size() == 7u);                     // 2 + 1 + 3 bytes + "a"
  encode_pair(*tok, "x\xe3\x80\x81", "a", c, k);  // U+3001 (ideographic comma) is not whitespace
  BOOST_TEST(c.size() == 4u);
  BOOST_TEST(k.size() == 1u);
}

BOOST_AUTO_TEST_CASE(batched_scoring_equals_row_by_row) {
  gpt::GptConfig cfg;
  cfg.layers = 2;
  cfg.hidden = 32;
  cfg.heads = 4;
  cfg.seq_len = 16;
  cfg.vocab = 64;
  cfg.vocab_real = 50;
  gpt::Model model(cfg, kernels::cpu_backend(), false);
  model.init(7);
  BOOST_TEST(model.grads() == nullptr);  // forward-only: no gradient buffers
  // Requests of mixed lengths, some positions unscored.
  RequestSet rs;
  for (int i = 0; i < 11; ++i) rs.lengths.push_back(1 + (i * 5) % 16);
  rs.fill = [&](size_t i, int32_t* in, int32_t* tg) {
    for (int t = 0; t < rs.lengths[i]; ++t) {
      in[t] = static_cast<int32_t>((i * 7 + t * 3) % 50);
      tg[t] = t % 3 == 1 ? -1 : static_cast<int32_t>((i * 11 + t * 5 + 1) % 50);
    }
  };
  auto batched = score_requests(model, rs, 4);
  for (size_t i = 0; i < rs.lengths.size(); ++i) {
    RequestSet one;
    one.lengths = {rs.lengths[i]};
    one.fill = [&](size_t, int32_t* in, int32_t* tg) { rs.fill(i, in, tg); };
    auto s = score_requests(model, one, 1);
    BOOST_TEST(std::abs(s[0].loglik - batched[i].loglik) <= 1e-5 * std::max(1.0, std::abs(s[0].loglik)));
    BOOST_TEST(s[0].tokens == batched[i].tokens);
    BOOST_TEST(batched[i].loglik < 0);
  }
}

// lm-evaluation-harness's file conventions: hash_string (sha256 hex), the date_id of results_<date_id>.json,
// sanitize_model_name and the json.dumps(indent=2, ensure_ascii=False) text doc_hash is taken of.
BOOST_AUTO_TEST_CASE(harness_file_conventions) {
  BOOST_TEST(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  BOOST_TEST(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the padding spills into a second block.
  BOOST_TEST(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
             "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  BOOST_TEST(sha256_hex(std::string(1000, 'a')) == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
  BOOST_TEST(sanitize_model_name("EleutherAI/pythia-160m") == "EleutherAI__pythia-160m");
  BOOST_TEST(sanitize_model_name("a:/b<>c") == "a__b__c");
  setenv("TZ", "UTC", 1);
  tzset();
  // datetime.fromtimestamp(1700000000.25).isoformat().replace(":", "-") in UTC
  BOOST_TEST(harness_date_id(1700000000.25) == "2023-11-14T22-13-20.250000");
  BOOST_TEST(harness_date_id(1700000000.0) == "2023-11-14T22-13-20");  // isoformat drops a zero fraction
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(
      R"({"b": "caf\u00e9 \"q\"\t\u0001", "a": [1, 2.5, true, null], "e": [], "o": {}, "n": {"x": 1e-05}})");
  // json.dumps(doc, indent=2, ensure_ascii=False) of the same doc in CPython 3.11
  BOOST_TEST(
      python_json_dumps_indent2(doc) ==
      "{\n  \"b\": \"caf\xc3\xa9 \\\"q\\\"\\t\\u0001\",\n  \"a\": [\n    1,\n    2.5,\n    true,\n    null\n  ],\n"
      "  \"e\": [],\n  \"o\": {},\n  \"n\": {\n    \"x\": 1e-05\n  }\n}");
}
