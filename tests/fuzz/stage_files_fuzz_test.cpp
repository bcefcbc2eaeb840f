// Seeded in-process fuzzing of the stage-file readers: checkpoint DONE markers (a malformed DONE is an
// incomplete checkpoint with a reason, and --resume auto's search falls back to the previous one),
// dataset index.json (Dataset::open throws only UsageError naming the file and key), fabric.toml
// (apply_fabric: UsageError naming the file, never a nan figure), JsonFields itself, parse_json_text
// and the output checks tools run before long work (check_writable_dir/file).
#define BOOST_TEST_MODULE fuzz_stage_files
#include <boost/test/unit_test.hpp>

#include <unistd.h>
#include <xxhash.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "cairn/checkpoint.h"
#include "cairn/config.h"
#include "cairn/costmodel.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/shards.h"

namespace fs = std::filesystem;
using namespace cairn;
using nlohmann::json;

namespace {

std::string temp_dir(const std::string& tag) {
  std::string d = (fs::temp_directory_path() / ("cairn_fuzz_" + tag + "_" + std::to_string(getpid()))).string();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

// Values that are wrong almost everywhere (and a few that are right somewhere).
json junk(std::mt19937_64& rng) {
  static const std::vector<json> pool = {nullptr, "x", "", -1, -7.5, 1.5, 0, 1e300, true, false, json::array(),
                                         json::array({1, 2}), json::object(), json{{"a", 1}}, "0123456789abcdeg",
                                         "ffffffffffffffff", "../x", "/abs", std::nan(""), INFINITY, -INFINITY,
                                         json(UINT64_MAX), json(INT64_MIN)};
  return pool[rng() % pool.size()];
}

// Mutates one leaf (or removes it, or replaces a whole subtree) of `j`, recursively at random depth.
std::string mutate(json& j, std::mt19937_64& rng, const std::string& path = "") {
  if ((j.is_object() && !j.empty()) || (j.is_array() && !j.empty())) {
    if (rng() % 5 != 0) {
      size_t k = rng() % j.size();
      if (j.is_object()) {
        auto it = j.begin();
        std::advance(it, static_cast<long>(k));
        std::string key = it.key();
        if (rng() % 6 == 0) {
          j.erase(key);
          return path + "." + key + " removed";
        }
        return mutate(j[key], rng, path + "." + key);
      }
      return mutate(j[k], rng, path + "[" + std::to_string(k) + "]");
    }
  }
  j = junk(rng);
  return path + " = " + j.dump();
}

std::string xxh64_of(const std::string& data) {
  return shards::hex64(XXH64(data.data(), data.size(), 0));
}

}  // namespace

// A malformed DONE never throws: check_dir returns a reason and find_newest_complete falls back to
// the previous checkpoint (what `cairn-train --resume auto` does).
BOOST_AUTO_TEST_CASE(done_markers) {
  std::string root = temp_dir("done");
  std::mt19937_64 rng(20240601);
  const std::string payload = "model bytes", optim = "optimizer bytes!";
  auto make = [&](int64_t step) {
    std::string d = checkpoint::step_dir(root, step);
    fs::create_directories(d);
    write(d + "/model.h5", payload);
    write(d + "/optim.rank00000.h5", optim);
    json done = {{"step", step},
                 {"world_size", 1},
                 {"files",
                  {{"model.h5", {{"bytes", payload.size()}, {"xxh64", xxh64_of(payload)}}},
                   {"optim.rank00000.h5", {{"bytes", optim.size()}, {"xxh64", xxh64_of(optim)}}}}}};
    write(d + "/DONE", done.dump(1));
    return std::make_pair(d, done);
  };
  make(10);
  int cases = 0, incomplete = 0;
  for (int c = 0; c < 300; ++c) {
    auto [dir, done] = make(20);
    std::string desc;
    std::string text;
    if (c % 10 == 9) {  // textual damage: truncation, garbage
      text = done.dump();
      text = text.substr(0, rng() % text.size());
      desc = "truncated to " + std::to_string(text.size()) + " bytes";
    } else {
      desc = mutate(done, rng);
      text = done.dump();
    }
    write(dir + "/DONE", text);
    std::string problem;
    BOOST_REQUIRE_NO_THROW(problem = checkpoint::check_dir(dir, true));
    std::optional<checkpoint::Entry> e;
    BOOST_REQUIRE_NO_THROW(e = checkpoint::find_newest_complete(root, true));
    BOOST_REQUIRE(e.has_value());
    if (!problem.empty()) {
      ++incomplete;
      BOOST_TEST_INFO(desc << " -> " << problem);
      BOOST_TEST(e->step == 10);
      BOOST_TEST(problem.find("[json.exception") == std::string::npos);
    } else {
      BOOST_TEST(e->step == 20);
    }
    ++cases;
  }
  BOOST_TEST(incomplete > 200);
  BOOST_TEST_MESSAGE(cases << " DONE cases, " << incomplete << " incomplete");
  // A malformed newest DONE must not make prune() delete the last good checkpoint.
  write(checkpoint::step_dir(root, 20) + "/DONE", R"({"step": 20, "files": {"model.h5": {"bytes": "x"}}})");
  checkpoint::prune(root, 1, 0);
  BOOST_TEST(fs::exists(checkpoint::step_dir(root, 10) + "/DONE"));
  fs::remove_all(root);
}

// Dataset::open on mutated index.json: UsageError naming index.json (never another exception type),
// and the accessors of an index it accepts do not throw.
BOOST_AUTO_TEST_CASE(dataset_index) {
  std::string root = temp_dir("index");
  std::mt19937_64 rng(7);
  const json base = {{"format", "cairn-shards"},
                     {"format_version", 1},
                     {"tokenizer", {{"type", "bytes"}, {"id", "bytes"}, {"vocab_size", 257}, {"eot_id", 256}}},
                     {"vocab_size", 257},
                     {"eot_id", 256},
                     {"token_dtype", "uint16"},
                     {"seed", nullptr},
                     {"split_docs", false},
                     {"total_tokens", 30},
                     {"total_documents", 3},
                     {"total_bytes", 27},
                     {"skipped_records", 0},
                     {"shards",
                      {{{"file", "shard_00000.h5"}, {"tokens", 10}, {"documents", 1}, {"xxh64", "0123456789abcdef"}},
                       {{"file", "shard_00001.h5"}, {"tokens", 20}, {"documents", 2}, {"xxh64", "fedcba9876543210"}}}}};
  write(root + "/index.json", base.dump());
  BOOST_REQUIRE_NO_THROW(shards::Dataset::open(root));
  int rejected = 0;
  for (int c = 0; c < 300; ++c) {
    json ix = base;
    std::string desc = mutate(ix, rng);
    write(root + "/index.json", ix.dump());
    try {
      shards::Dataset ds = shards::Dataset::open(root);
      BOOST_TEST_INFO(desc);
      BOOST_CHECK_NO_THROW((ds.seed(), ds.vocab_size(), ds.eot_id(), ds.tokenizer_id(), ds.total_tokens()));
      BOOST_TEST(ds.num_shards() > 0u);
    } catch (const UsageError& e) {
      ++rejected;
      std::string m = e.what();
      BOOST_TEST_INFO(desc << " -> " << m);
      BOOST_TEST(m.find("index.json") != std::string::npos);
      BOOST_TEST(m.find("[json.exception") == std::string::npos);
    }
    // Anything else (json::type_error, std::exception) fails the test case.
  }
  BOOST_TEST(rejected > 150);
  json empty = base;
  empty["shards"] = json::array();
  write(root + "/index.json", empty.dump());
  BOOST_CHECK_EXCEPTION(shards::Dataset::open(root), UsageError, [](const UsageError& e) {
    return std::string(e.what()).find("\"shards\"") != std::string::npos;
  });
  fs::remove_all(root);
}

// fabric.toml: every accepted fit is finite and non-negative; everything else is a UsageError
// naming the file.
BOOST_AUTO_TEST_CASE(fabric_files) {
  std::string root = temp_dir("fabric");
  std::mt19937_64 rng(11);
  const std::vector<std::string> values = {"nan", "-nan", "inf", "-inf", "-1", "-0.5", "0", "\"x\"", "\"\"", "true",
                                           "[1, 2]", "{ a = 1 }", "9223372036854775807", "1e308", "12.5", "3"};
  const std::vector<std::string> keys = {"nodes", "ranks_per_node", "alpha_us", "busbw_gbps", "ranks"};
  int rejected = 0;
  for (int c = 0; c < 200; ++c) {
    std::string key = keys[rng() % keys.size()], val = values[rng() % values.size()];
    auto v = [&](const std::string& k, const std::string& dflt) { return k == key ? val : dflt; };
    std::string text = "[fabric]\nnodes = " + v("nodes", "2") + "\nranks_per_node = " + v("ranks_per_node", "8") +
                       "\n\n[intra.allreduce]\nalpha_us = " + v("alpha_us", "12.5") + "\nbusbw_gbps = " +
                       v("busbw_gbps", "150.0") + "\nranks = " + v("ranks", "8") + "\n";
    std::string path = root + "/fabric" + std::to_string(c) + ".toml";
    write(path, text);
    costmodel::Cluster cl;
    try {
      costmodel::apply_fabric(cl, path);
      for (const auto& f : cl.intra.fitted)
        if (f.valid) {
          BOOST_TEST_INFO(key << " = " << val);
          BOOST_TEST((std::isfinite(f.alpha_us) && f.alpha_us >= 0 && std::isfinite(f.busbw_gbps) && f.busbw_gbps > 0));
        }
    } catch (const UsageError& e) {
      ++rejected;
      std::string m = e.what();
      BOOST_TEST_INFO(key << " = " << val << " -> " << m);
      BOOST_TEST(m.find(path) != std::string::npos);
      BOOST_TEST(m.find("[json.exception") == std::string::npos);
    }
  }
  BOOST_TEST(rejected > 80);
  fs::remove_all(root);
}

BOOST_AUTO_TEST_CASE(json_fields_messages) {
  json j = json::parse(R"({"a": null, "b": "x", "c": -3, "d": 1.5, "e": {"f": [1]}})");
  JsonFields f(j, "some/file.json", "test file");
  BOOST_CHECK_EXCEPTION(f.u64("b"), UsageError, [](const UsageError& e) {
    std::string m = e.what();
    return m.find("\"some/file.json\"") != std::string::npos && m.find("key \"b\"") != std::string::npos &&
           m.find("expected a non-negative integer, got string \"x\"") != std::string::npos;
  });
  BOOST_CHECK_THROW(f.u64("c"), UsageError);
  BOOST_CHECK_THROW(f.u64("d"), UsageError);
  BOOST_CHECK_THROW(f.str("missing"), UsageError);
  BOOST_TEST(f.u64_or("a", 4) == 4u);  // null counts as absent
  BOOST_TEST(f.number("d", 0, 2) == 1.5);
  BOOST_CHECK_EXCEPTION(f.object("e").nested(j["e"]["f"], "f"), UsageError, [](const UsageError& e) {
    return std::string(e.what()).find("key \"e.f\"") != std::string::npos;
  });
  json n = {{"x", std::nan("")}};
  BOOST_CHECK_EXCEPTION(JsonFields(n, "p", "k").number("x", 0, 1e300), UsageError, [](const UsageError& e) {
    return std::string(e.what()).find("got nan") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(json_text_and_array_elements) {
  // Invalid JSON, including a number a double cannot hold (nlohmann's out_of_range, not parse_error),
  // is a UsageError naming the file, without nlohmann's "[json.exception...]" prefix.
  for (const char* text : {"{\"a\": 1e999999}", "{\"a\": [1, 2", "[-1e400]", "{\"a\": NaN}", ""}) {
    BOOST_TEST_INFO(text);
    BOOST_CHECK_EXCEPTION(parse_json_text(text, "dir/x.json", "test file"), UsageError, [](const UsageError& e) {
      std::string m = e.what();
      return m.rfind("malformed test file \"dir/x.json\": invalid JSON: ", 0) == 0 &&
             m.find("json.exception") == std::string::npos && m.find("last read") == std::string::npos;
    });
  }
  BOOST_TEST(parse_json_text("{\"a\": 1e-999999}", "x", "k")["a"].get<double>() == 0.0);  // underflow is a value
  json j = json::parse(R"({"m": {"merges": ["a b", 7]}})");
  JsonFields m = JsonFields(j, "t.json", "tokenizer").object("m");
  BOOST_CHECK_EXCEPTION(m.fail_value("merges[1]", j["m"]["merges"][1], "\"a b\""), UsageError, [](const UsageError& e) {
    return std::string(e.what()) == "malformed tokenizer \"t.json\": key \"m.merges[1]\": expected \"a b\", got integer 7";
  });
}

BOOST_AUTO_TEST_CASE(unwritable_outputs) {
  // Checked before long work: exit 2 naming the path, also for root (mode bits do not stop root).
  std::string d = temp_dir("out");
  write(d + "/file", "x");
  fs::create_directories(d + "/dir");
  auto usage_naming = [](const std::string& want) {
    return [want](const UsageError& e) { return std::string(e.what()).find(want) != std::string::npos; };
  };
  BOOST_CHECK_EXCEPTION(check_writable_dir(d + "/file/sub"), UsageError, usage_naming("\"" + d + "/file/sub\""));
  BOOST_CHECK_EXCEPTION(check_writable_dir("/proc/cairn-test"), UsageError, usage_naming("\"/proc/cairn-test\""));
  BOOST_CHECK_EXCEPTION(check_writable_file(d + "/dir"), UsageError, usage_naming("\"" + d + "/dir\": Is a directory"));
  BOOST_CHECK_EXCEPTION(check_writable_file(d + "/file/x.json"), UsageError, usage_naming("\"" + d + "/file/x.json\""));
  check_writable_file(d + "/new/x.json");  // creates the directory, leaves no probe file behind
  check_writable_file("-");
  BOOST_TEST(fs::is_directory(d + "/new"));
  BOOST_TEST(fs::is_empty(d + "/new"));
  fs::remove_all(d);
}
