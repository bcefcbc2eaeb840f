// Unit tests of the typed records of stage files (cairn/records.h): what a writer's to_json produces, the reader's
// from_json (and the metrics fast scanner) gives back; malformed values are UsageErrors naming the key.
#define BOOST_TEST_MODULE libcommon_records
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cairn/error.h"
#include "cairn/records.h"

using namespace cairn;
using namespace cairn::records;
using nlohmann::json;

namespace {

// The message of the UsageError `f` throws ("" when it throws none).
template <class F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

MetricsLine train_line() {
  MetricsLine m;
  m.kind = "train";
  m.step = 12;
  m.tokens = 49152;
  m.loss = 3.25;
  m.lr = 6e-4;
  m.grad_norm = 0.75;
  m.tokens_per_s = 123456.5;
  m.mfu = 0.41;
  m.tflops = 120.5;
  m.skipped = false;
  m.skipped_total = 2;
  m.mem_gib = 1.5;
  m.time_s = StepTimes{0.01, 0.1, 0.2, 0.03, 0.02, 0.4, 0.005, 0.001};
  m.wall_time = 1.7e9;
  return m;
}

void check_same(const MetricsLine& a, const MetricsLine& b) {
  BOOST_TEST(a.kind == b.kind);
#define CAIRN_TEST_SAME(type, name) BOOST_TEST((a.name == b.name), #name);
  CAIRN_METRICS_LINE_FIELDS(CAIRN_TEST_SAME)
#undef CAIRN_TEST_SAME
  BOOST_TEST(a.time_s.has_value() == b.time_s.has_value());
  if (a.time_s && b.time_s) BOOST_TEST(a.time_s->to_json() == b.time_s->to_json());
  BOOST_TEST(a.provenance == b.provenance);
}

}  // namespace

BOOST_AUTO_TEST_CASE(metrics_lines_round_trip_through_reader_and_scanner) {
  MetricsLine val;
  val.kind = "val";
  val.step = 100;
  val.tokens = 409600;
  val.val_loss = 2.5;
  val.val_first_window = 7;
  val.val_windows = 64;
  val.seq_len = 1024;
  val.wall_time = 1.7e9 + 3;
  MetricsLine prov;
  prov.kind = "provenance";
  prov.step = 0;
  prov.provenance = {{"tool", "cairn-train"}, {"config", "[train]\nsteps = 10\n"}};
  for (const MetricsLine& m : {train_line(), val, prov}) {
    const std::string text = m.to_json().dump();
    check_same(m, MetricsLine::parse(text, "metrics.jsonl:1"));
    MetricsLine scanned;
    BOOST_REQUIRE((scan_metrics_line(text, scanned) == ScanResult::Ok));
    if (m.kind == "provenance") scanned.provenance = m.provenance;  // the scanner skips it by design
    check_same(m, scanned);
  }
  // Optional members stay absent: a val line has no loss, lr or time_s; a train line no val_loss.
  const json v = val.to_json();
  for (const char* key : {"loss", "lr", "time_s", "hfu", "peak_mem_gib"}) BOOST_TEST(!v.contains(key), key);
  BOOST_TEST(!train_line().to_json().contains("val_loss"));
}

BOOST_AUTO_TEST_CASE(metrics_writer_format_is_unchanged) {
  // What cairn-train wrote before the records existed (sorted keys, null for a non-finite loss), plus time_s.cp_comm
  // and time_s.zero_comm (context parallelism and ZeRO-2/3's waits, added since): existing readers see the same bytes
  // around the new keys.
  MetricsLine m = train_line();
  m.loss = std::nan("");
  const std::string text = m.to_json().dump();
  BOOST_TEST(
      text ==
      "{\"grad_norm\":0.75,\"kind\":\"train\",\"loss\":null,\"lr\":0.0006,\"mem_gib\":1.5,\"mfu\":0.41,"
      "\"skipped\":false,\"skipped_total\":2,\"step\":12,\"tflops\":120.5,\"time_s\":{\"backward\":0.2,"
      "\"comm\":0.03,\"cp_comm\":0.0,\"data\":0.01,\"forward\":0.1,\"optimizer\":0.02,\"pp_wait\":0.001,\"total\":0.4,"
      "\"tp_comm\":0.005,\"zero_comm\":0.0},\"tokens\":49152,\"tokens_per_s\":123456.5,\"wall_time\":1700000000.0}");
  // null reads as absent: the loss is not a number the report could chart.
  BOOST_TEST(!MetricsLine::parse(text, "m").loss.has_value());
}

BOOST_AUTO_TEST_CASE(pipeline_stages_round_trip_and_are_checked) {
  // A pp > 1 train line: each stage's busiest rank and its split, in stage order, after time_s.
  MetricsLine m = train_line();
  StepTimes last = *m.time_s;
  last.backward = 0.25;
  last.pp_wait = 0.04;
  m.stages = {{0, 0, *m.time_s}, {1, 3, last}};
  const std::string text = m.to_json().dump();
  BOOST_TEST(text.find(",\"stages\":[{\"rank\":0,\"stage\":0,\"time_s\":{") != std::string::npos, text);
  const MetricsLine back = MetricsLine::parse(text, "m:1");
  BOOST_REQUIRE(back.stages.size() == 2u);
  BOOST_TEST(back.stages[1].stage == 1);
  BOOST_TEST(back.stages[1].rank == 3);
  BOOST_TEST(back.stages[1].time.backward == 0.25);
  BOOST_TEST(back.stages[1].time.pp_wait == 0.04);
  BOOST_TEST(back.to_json().dump() == text);
  // Lines without a pipeline have no key. The fast scanner reads the same stages.
  BOOST_TEST(!train_line().to_json().contains("stages"));
  MetricsLine scanned;
  BOOST_REQUIRE((scan_metrics_line(text, scanned) == ScanResult::Ok));
  BOOST_TEST(scanned.to_json().dump() == text);
  // ... tolerantly: an element that is not an object is skipped, a non-integer rank reads as 0.
  BOOST_REQUIRE((scan_metrics_line(R"({"kind":"train","stages":[7,{"stage":1,"rank":"x","time_s":{"pp_wait":0.5}}]})",
                                   scanned) == ScanResult::Ok));
  BOOST_REQUIRE(scanned.stages.size() == 1u);
  BOOST_TEST(scanned.stages[0].stage == 1);
  BOOST_TEST(scanned.stages[0].rank == 0);
  BOOST_TEST(scanned.stages[0].time.pp_wait == 0.5);
  BOOST_TEST(std::isnan(scanned.stages[0].time.forward));
  // A malformed entry names its place.
  std::string msg = usage_error([] {
    MetricsLine::parse(R"({"kind":"train","stages":[{"stage":0,"rank":0,"time_s":{}},{"stage":1,"rank":-2,)"
                       R"("time_s":{}}]})",
                       "m:4");
  });
  BOOST_TEST(msg.find("key \"stages[1].rank\": expected an integer") != std::string::npos, msg);
  msg = usage_error([] { MetricsLine::parse(R"({"kind":"train","stages":[7]})", "m:5"); });
  BOOST_TEST(msg.find("key \"stages[0]\": expected an object") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(malformed_metrics_values_name_the_key) {
  std::string msg =
      usage_error([] { MetricsLine::parse(R"({"kind":"train","step":"seven"})", "run/metrics.jsonl:3"); });
  BOOST_TEST(msg.find("malformed metrics line \"run/metrics.jsonl:3\": key \"step\": expected an integer in [0, ") ==
                 0u,
             msg);
  BOOST_TEST(msg.find("got string \"seven\"") != std::string::npos, msg);
  msg = usage_error([] { MetricsLine::parse(R"({"kind":"train","step":1,"time_s":{"total":"x"}})", "m:1"); });
  BOOST_TEST(msg.find("key \"time_s.total\": expected a finite number, got string \"x\"") != std::string::npos, msg);
  msg = usage_error([] { MetricsLine::parse(R"({"skipped":1})", "m:1"); });
  BOOST_TEST(msg.find("key \"skipped\": expected true or false, got integer 1") != std::string::npos, msg);
  msg = usage_error([] { MetricsLine::parse(R"({"step":1,)", "m:9"); });
  BOOST_TEST(msg.find("malformed metrics line \"m:9\": invalid JSON") == 0u, msg);
  // The tolerant scanner reads the same values as absent instead.
  MetricsLine m;
  BOOST_REQUIRE((scan_metrics_line(R"({"kind":"train","step":"seven","loss":2,"skipped":1})", m) == ScanResult::Ok));
  BOOST_TEST(!m.step.has_value());
  BOOST_TEST(*m.loss == 2.0);
  BOOST_TEST(*m.skipped);
}

BOOST_AUTO_TEST_CASE(fast_scanner_accepts_exactly_what_a_full_parser_accepts) {
  std::string good = train_line().to_json().dump();
  MetricsLine rec;
  BOOST_REQUIRE((scan_metrics_line(good, rec) == ScanResult::Ok));
  BOOST_TEST(*rec.step == 12);
  BOOST_TEST(rec.time_s->total == 0.4);
  // Every prefix and many one-byte mutations.
  std::vector<std::string> cases;
  for (size_t n = 0; n < good.size(); ++n) cases.push_back(good.substr(0, n));
  std::mt19937 rng(3);
  const std::string alphabet = "{}[]\",:0123456789.eE+-tfnul \\/x\t";
  for (int k = 0; k < 3000; ++k) {
    std::string m = good;
    m[rng() % m.size()] = alphabet[rng() % alphabet.size()];
    cases.push_back(m);
  }
  for (const char* extra : {"{}", "[]", "3", "\"x\"", "{\"a\":[1,{\"b\":null}],\"step\":-0.5e+3}", "{\"step\":01}",
                            "{\"step\":1.}", "{\"s\":\"\\u12G4\"}", "{\"a\":1,}", "{\"a\" 1}",
                            "{\"kind\":\"tr\\u0061in\"}", "{\"step\":1e999}", "{\"x\":\"tab\there\"}",
                            // UTF-8 in strings: valid 2-4 byte forms, then a stray continuation byte, 0xFF, an overlong
                            // '/', a surrogate, a code point past U+10FFFF and sequences cut short.
                            "{\"kind\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}", "{\"kind\":\"\x80\"}",
                            "{\"kind\":\"\xff\"}", "{\"kind\":\"\xc0\xaf\"}", "{\"kind\":\"\xed\xa0\x80\"}",
                            "{\"kind\":\"\xf4\x90\x80\x80\"}", "{\"kind\":\"\xe2\x82\"}", "{\"x\":1,\"\xe2\":2}"})
    cases.push_back(extra);
  for (const auto& c : cases) {
    const bool ok_full = json::accept(c);
    const ScanResult r = scan_metrics_line(c, rec);
    BOOST_TEST((r != ScanResult::Invalid) == ok_full, "line: " << c);
    if (ok_full) BOOST_TEST(((r == ScanResult::Ok) == json::parse(c).is_object()), "line: " << c);
  }
  BOOST_REQUIRE((scan_metrics_line("{\"kind\":\"tr\\u0061in\"}", rec) == ScanResult::Ok));
  BOOST_TEST(rec.kind == "train");
}

BOOST_AUTO_TEST_CASE(eval_rows_round_trip) {
  // No checkpoint_id: a row as written before it was recorded.
  EvalRow r{250, 1024000, "run/train/ckpt/step_00000250", "hellaswag", "acc_norm", 0.31, 0.012, 500, 1.7e9, "", "", "",
            0,   {}};
  const EvalRow back = EvalRow::parse(r.to_json().dump(), "results.jsonl:1");
  BOOST_TEST(back.to_json() == r.to_json());
  BOOST_TEST(back.stderr_value == 0.012);
  BOOST_TEST(!back.to_json().contains("checkpoint_id"));  // rows before it was recorded read back without it
  r.checkpoint_id = "0123456789abcdef";
  BOOST_TEST(EvalRow::parse(r.to_json().dump(), "results.jsonl:1").checkpoint_id == "0123456789abcdef");
  BOOST_TEST(!r.to_json().contains("eval_run"));
  r.eval_run = "fedcba9876543210";
  BOOST_TEST(EvalRow::parse(r.to_json().dump(), "results.jsonl:1").eval_run == "fedcba9876543210");
  BOOST_TEST(!r.to_json().contains("rows_in_write"));  // rows before it was recorded read back without it
  r.rows_in_write = 7;
  BOOST_TEST(EvalRow::parse(r.to_json().dump(), "results.jsonl:1").rows_in_write == 7);
  BOOST_TEST(EvalRow::parse(r.to_json().dump(), "results.jsonl:1").unknown_keys.is_null());  // a key it knows
  // Not computed: NaN is written as null and read back as NaN.
  r.value = std::nan("");
  r.stderr_value = std::nan("");
  const EvalRow nan_back = EvalRow::parse(r.to_json().dump(), "results.jsonl:2");
  BOOST_TEST(std::isnan(nan_back.value));
  BOOST_TEST(std::isnan(nan_back.stderr_value));
  std::string msg = usage_error([] { EvalRow::parse(R"({"step":1,"metric":"acc","value":1})", "results.jsonl:4"); });
  BOOST_TEST(msg ==
             "malformed eval result \"results.jsonl:4\": key \"task\": expected a string, got nothing (missing)");
  msg = usage_error([] { EvalRow::parse(R"({"step":-1,"task":"t","metric":"acc"})", "r:1"); });
  BOOST_TEST(msg.find("key \"step\": expected an integer in [0, ") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(eval_rows_keep_a_later_versions_keys) {
  // A row a later cairn-eval wrote, rewritten by this one (a rollback): its keys stay, known ones are not doubled.
  const std::string later =
      R"({"step":5,"task":"t","metric":"acc","value":0.5,"n_shots":3,"samples":{"kept":[1,2]},"eval_run":"ab"})";
  const EvalRow r = EvalRow::parse(later, "results.jsonl:1");
  BOOST_TEST(r.unknown_keys.size() == 2u);
  const json back = json::parse(EvalRow::parse(r.to_json().dump(), "results.jsonl:1").to_json().dump());
  BOOST_TEST(back["n_shots"] == 3);
  BOOST_TEST(back["samples"]["kept"][1] == 2);
  BOOST_TEST(back["eval_run"] == "ab");
  BOOST_TEST(back.size() == r.to_json().size());
}

BOOST_AUTO_TEST_CASE(eval_provenance_lines) {
  const EvalProvenance p{"fedcba9876543210", json{{"tool", "cairn-eval"}, {"command_line", "cairn-eval --out x"}}};
  const EvalProvenance back = EvalProvenance::parse(p.to_json().dump(), "provenance.jsonl:1");
  BOOST_TEST(back.eval_run == p.eval_run);
  BOOST_TEST(back.provenance == p.provenance);
  std::string msg = usage_error([] { EvalProvenance::parse(R"({"eval_run":"ab","provenance":3})", "p.jsonl:2"); });
  BOOST_TEST(msg.find("\"p.jsonl:2\": key \"provenance\": expected an object") != std::string::npos, msg);
  msg = usage_error([] { EvalProvenance::parse(R"({"provenance":{}})", "p.jsonl:3"); });
  BOOST_TEST(msg.find("key \"eval_run\"") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(plan_rows_round_trip) {
  PlanRow p;
  p.dp = 4;
  p.tp = 2;
  p.pp = 2;
  p.mb = 2;
  p.zero = 1;
  p.recompute = "selective";
  p.sp = true;
  p.step_time_s = 1.25;
  p.tokens_per_s = 52000;
  p.tflops_per_gpu = 140;
  p.hw_tflops_per_gpu = 150;
  p.mfu = 0.45;
  p.hfu = 0.48;
  p.memory_gib = 61.5;
  p.breakdown = {{"microbatches", 8}};
  const json j = p.to_json();
  BOOST_TEST(j["sp"] == "on");
  BOOST_TEST(j["tp_overlap"] == "off");
  BOOST_TEST(!j.contains("reason"));
  const PlanRow back = PlanRow::from_json(JsonFields(j, "plans.json", "plan file", "plans[0]"));
  BOOST_TEST(back.to_json() == j);
  // Hand-written switches as booleans; a file without predictions reads as not given.
  const json hand = {{"dp", 2}, {"sp", true}};
  const PlanRow h = PlanRow::from_json(JsonFields(hand, "plans.json", "plan file"));
  BOOST_TEST(h.sp);
  BOOST_TEST(!h.step_time_s.has_value());
  const json bad = {{"dp", 2}, {"sp", "maybe"}};
  std::string msg = usage_error([&] { PlanRow::from_json(JsonFields(bad, "plans.json", "plan file", "plans[3]")); });
  BOOST_TEST(msg ==
             "malformed plan file \"plans.json\": key \"plans[3].sp\": expected \"on\", \"off\" or true/false, got "
             "string \"maybe\"");
  const json negative = {{"mfu", -0.5}};
  msg = usage_error([&] { PlanRow::from_json(JsonFields(negative, "plans.json", "plan file")); });
  BOOST_TEST(msg.find("key \"mfu\": expected a finite number >= 0, got number -0.5") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(fabric_tiers_round_trip) {
  FabricTier t;
  t.alpha_us = 12.5;
  t.busbw_gbps = 180;
  t.ranks = 8;
  t.r2 = 0.999;
  t.half_peak_bytes = 1u << 20;
  t.peak_busbw_gbps = 185;
  t.type = "float";
  t.redop = "sum";
  const json j = t.to_json();
  const FabricTier back = FabricTier::from_json(JsonFields(j, "fabric.toml", "fabric file", "intra.allreduce"));
  BOOST_TEST(back.to_json() == j);
  // Only the model is required.
  const json bare = {{"alpha_us", 5}, {"busbw_gbps", 20.5}};
  const FabricTier b = FabricTier::from_json(JsonFields(bare, "fabric.toml", "fabric file"));
  BOOST_TEST(b.ranks == 2);
  BOOST_TEST(!b.r2.has_value());
  const json zero = {{"alpha_us", 5}, {"busbw_gbps", 0}};
  std::string msg =
      usage_error([&] { FabricTier::from_json(JsonFields(zero, "f.toml", "fabric file", "world.allgather")); });
  BOOST_TEST(msg == "malformed fabric file \"f.toml\": key \"world.allgather.busbw_gbps\": expected a positive number, "
                    "got integer 0");
}

BOOST_AUTO_TEST_CASE(fabric_header_round_trips) {
  FabricHeader h;
  h.backend = "nccl";
  h.backend_version = "2.21.5";
  h.world_size = 16;
  h.nodes = 2;
  h.ranks_per_node = 8;
  h.simulated_nodes = false;
  h.type = "bfloat16";
  h.tool = "cairn-sweep";
  h.git_sha = "0123456789ab";
  h.skipped = {"inter.alltoall.bfloat16: fewer than 3 sizes"};
  const json j = h.to_json();
  const FabricHeader back = FabricHeader::from_json(JsonFields(j, "fabric.toml", "fabric file", "fabric"));
  BOOST_TEST(back.to_json() == j);
  // A hand-written file may give no header fields at all: one node, ranks per node unknown.
  const FabricHeader bare = FabricHeader::from_json(JsonFields(json::object(), "f.toml", "fabric file", "fabric"));
  BOOST_TEST(bare.nodes == 1);
  BOOST_TEST(bare.ranks_per_node == 0);
  const json bad = {{"nodes", 0}};
  std::string msg = usage_error([&] { FabricHeader::from_json(JsonFields(bad, "f.toml", "fabric file", "fabric")); });
  BOOST_TEST(msg.find("key \"fabric.nodes\"") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(checkpoint_done_round_trips_and_rejects_escaping_names) {
  CheckpointDone d;
  d.step = 120;
  d.world_size = 4;
  d.files = {{"model.h5", 123456, "00112233aabbccdd"}, {"optim_r0.h5", 99, "ffffffffffffffff"}};
  const json j = d.to_json();
  BOOST_TEST(j.dump() ==
             R"({"files":{"model.h5":{"bytes":123456,"xxh64":"00112233aabbccdd"},"optim_r0.h5":{"bytes":99,)"
             R"("xxh64":"ffffffffffffffff"}},"step":120,"world_size":4})");
  const CheckpointDone back = CheckpointDone::from_json(JsonFields(j, "DONE", "DONE marker"));
  BOOST_TEST(back.to_json() == j);
  json escaping = j;
  escaping["files"]["../model.h5"] = {{"bytes", 1}, {"xxh64", "0000000000000000"}};
  std::string msg = usage_error([&] { CheckpointDone::from_json(JsonFields(escaping, "DONE", "DONE marker")); });
  BOOST_TEST(msg.find("a file name inside the checkpoint directory") != std::string::npos, msg);
  json short_hash = j;
  short_hash["files"]["model.h5"]["xxh64"] = "abc";
  msg = usage_error([&] { CheckpointDone::from_json(JsonFields(short_hash, "DONE", "DONE marker")); });
  BOOST_TEST(msg.find("16 lowercase hex digits") != std::string::npos, msg);
  const json empty = {{"step", 1}, {"files", json::object()}};
  msg = usage_error([&] { CheckpointDone::from_json(JsonFields(empty, "DONE", "DONE marker")); });
  BOOST_TEST(msg.find("at least one file") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(checkpoint_done_is_read_from_its_directory_naming_the_file_when_malformed) {
  namespace fs = std::filesystem;
  const std::string dir = (fs::temp_directory_path() / ("cairn_done_test." + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/DONE";
  auto write = [&](const std::string& text) { std::ofstream(path, std::ios::binary) << text; };
  BOOST_TEST(!read_checkpoint_done(dir).has_value());  // not sealed
  CheckpointDone d;
  d.step = 40;
  d.world_size = 2;
  d.files = {{"model.h5", 10, "0123456789abcdef"}};
  write(d.to_json().dump(1));
  const std::optional<CheckpointDone> back = read_checkpoint_done(dir);
  BOOST_REQUIRE(back.has_value());
  BOOST_TEST(back->step == 40);
  BOOST_TEST(back->world_size.value_or(0) == 2);
  BOOST_TEST(back->to_json() == d.to_json());
  write("{\"step\": 40, \"files\": ");
  std::string msg = usage_error([&] { read_checkpoint_done(dir); });
  BOOST_TEST(msg.find("malformed DONE marker \"" + path + "\": invalid JSON") == 0, msg);
  write(R"({"step": -1, "files": {"model.h5": {"bytes": 10, "xxh64": "0123456789abcdef"}}})");
  msg = usage_error([&] { read_checkpoint_done(dir); });
  BOOST_TEST(msg.find("malformed DONE marker \"" + path + "\": key \"step\"") == 0, msg);
  // Not a regular file (a directory here; a FIFO, refused the same way, would block the read forever): a malformed
  // marker, not an unreadable one.
  fs::remove(path);
  fs::create_directory(path);
  msg = usage_error([&] { read_checkpoint_done(dir); });
  BOOST_TEST(msg == "malformed DONE marker \"" + path + "\": not a regular file", msg);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(train_state_round_trips) {
  TrainState s;
  s.step = 300;
  s.tokens = 1228800;
  s.batch = 300;
  s.adam_step = 298;
  s.skipped_total = 2;
  s.consecutive_skips = 0;
  s.seed = 18446744073709551615ull;  // a seed is any uint64
  s.world_size = 4;
  s.zero = 1;
  s.dp = 2;
  s.micro_batch = 4;
  s.val_rows = 64;
  s.layout = "dp=2,tp=2,pp=1,v=1";
  s.data_fingerprint = "0123456789abcdef";
  s.data_tokens = 1234567;
  s.spikes = TrainState::Spikes{{3.1, 3.0}, {0.8, 0.7}};
  const json j = s.to_json();
  const TrainState back = TrainState::from_json(JsonFields(j, "model.h5", "checkpoint train_state"));
  BOOST_TEST(back.to_json() == j);
  BOOST_TEST(*back.seed == *s.seed);
  // An old checkpoint's train_state: what it lacks stays absent for the reader to default.
  const json old = {{"step", 10}, {"tokens", 40960}};
  const TrainState o = TrainState::from_json(JsonFields(old, "model.h5", "checkpoint train_state"));
  BOOST_TEST(!o.val_rows.has_value());
  BOOST_TEST(!o.spikes.has_value());
  BOOST_TEST(!o.data_fingerprint.has_value());
  const json bad = {{"spikes", {{"loss", {1.0, "x"}}, {"norm", json::array()}}}};
  std::string msg =
      usage_error([&] { TrainState::from_json(JsonFields(bad, "ck/model.h5", "checkpoint train_state")); });
  BOOST_TEST(msg ==
             "malformed checkpoint train_state \"ck/model.h5\": key \"spikes.loss[1]\": expected a finite number, "
             "got string \"x\"");
}
