// Unit tests of the metric sinks: CRC32C vectors, tfevents read back by an independent Python reader,
// jsonl truncation on resume and its last step of a kind, Chrome trace JSON shape.
#define BOOST_TEST_MODULE train_metrics
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cairn/files.h"
#include "cairn/metrics.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace cairn::metrics;

static std::string temp_dir(const std::string& tag) {
  std::string d = (fs::temp_directory_path() / ("cairn_train_" + tag + "_" + std::to_string(getpid()))).string();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

static std::string run_capture(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  BOOST_REQUIRE(p);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = pclose(p);
  return out;
}

BOOST_AUTO_TEST_CASE(crc32c_known_vectors) {
  // RFC 3720 B.4 test vectors and the classic check value.
  BOOST_TEST(crc32c("123456789", 9) == 0xE3069283u);
  unsigned char zeros[32] = {0};
  BOOST_TEST(crc32c(zeros, 32) == 0x8A9136AAu);
  unsigned char ones[32];
  for (auto& b : ones) b = 0xff;
  BOOST_TEST(crc32c(ones, 32) == 0x62A8AB43u);
  unsigned char inc[32];
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i);
  BOOST_TEST(crc32c(inc, 32) == 0x46DD794Eu);
}

// tests/libcommon/metrics/read_tfevents.py, the independent reader.
static std::string reader_script() {
  const char* src = std::getenv("CAIRN_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/libcommon/metrics/read_tfevents.py";
}

// The events the reader prints for `args` (one JSON object a line); it must exit 0.
static std::vector<json> reader_events(const std::string& args) {
  int rc = 0;
  std::string out = run_capture("/usr/bin/python3 " + reader_script() + " " + args, &rc);
  BOOST_REQUIRE_EQUAL(rc, 0);
  std::istringstream lines(out);
  std::string line;
  std::vector<json> evs;
  while (std::getline(lines, line)) evs.push_back(json::parse(line));
  return evs;
}

BOOST_AUTO_TEST_CASE(tfevents_read_back_by_python) {
  std::string dir = temp_dir("tfevents");
  std::string path;
  {
    TfEventsWriter w(dir, "r0");
    path = w.path();
    for (int step = 1; step <= 5; ++step) {
      w.add_scalars({{"train/loss", 4.0f / step}, {"train/lr", 1e-3f * step}}, step, 1700000000.0 + step);
    }
    w.add_scalar("val/loss", 1.25f, 5, 1700000010.5);
  }
  const std::string script = reader_script();
  int rc = 0;
  const std::vector<json> evs = reader_events(path + " --tensorboard");
  BOOST_REQUIRE_EQUAL(evs.size(), 7u);
  BOOST_TEST(evs[0]["file_version"] == "brain.Event:2");
  for (int step = 1; step <= 5; ++step) {
    const json& e = evs[step];
    BOOST_TEST(e["step"].get<int>() == step);
    BOOST_TEST(e["wall_time"].get<double>() == 1700000000.0 + step);
    BOOST_TEST(e["scalars"]["train/loss"].get<float>() == 4.0f / step);
    BOOST_TEST(e["scalars"]["train/lr"].get<float>() == 1e-3f * step);
  }
  BOOST_TEST(evs[6]["scalars"]["val/loss"].get<double>() == 1.25);

  // A flipped byte must be caught by the reader's CRC check.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x5a');
  }
  run_capture("/usr/bin/python3 " + script + " " + path + " 2>/dev/null", &rc);
  BOOST_TEST(rc != 0);
  fs::remove_all(dir);
}

// A resumed run: the first file (a killed run) reached step 6, the second restarts at step 4 (its checkpoint was step
// 3). TensorBoard's reading (read_tfevents.py --run emulates its purge; with TensorBoard installed, checked against
// it) shows steps 1-3 of the first file and 4-7 of the second, each once.
BOOST_AUTO_TEST_CASE(tfevents_session_start_purges_the_steps_it_rewrites) {
  std::string dir = temp_dir("tfevents_start");
  {
    TfEventsWriter a(dir, "a");
    a.add_session_start(1, 1700000000.0);
    for (int step = 1; step <= 6; ++step) a.add_scalar("train/loss", 10.0f + step, step, 1700000000.0 + step);
  }
  {
    TfEventsWriter b(dir, "b");
    b.add_session_start(4, 1700000100.0, "cairn-train starts after step 3");
    for (int step = 4; step <= 7; ++step) b.add_scalar("train/loss", 20.0f + step, step, 1700000100.0 + step);
  }
  std::vector<std::pair<int, float>> seen;
  for (const json& e : reader_events(dir + " --run --tensorboard"))
    seen.emplace_back(e["step"].get<int>(), e["scalars"]["train/loss"].get<float>());
  const std::vector<std::pair<int, float>> want = {{1, 11.0f}, {2, 12.0f}, {3, 13.0f}, {4, 24.0f},
                                                   {5, 25.0f}, {6, 26.0f}, {7, 27.0f}};
  BOOST_TEST((seen == want));
  // The START event itself, as the reader decodes it.
  int rc = 0;
  std::string raw = run_capture("/usr/bin/python3 " + reader_script() + " " + dir + "/*.b", &rc);
  BOOST_TEST(raw.find(R"("session_log": {"status": "START", "msg": "cairn-train starts after step 3"})") !=
                 std::string::npos,
             raw);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(jsonl_truncates_after_resumed_step) {
  std::string dir = temp_dir("jsonl");
  std::string path = dir + "/metrics.jsonl";
  {
    JsonlWriter w(path);
    for (int s = 1; s <= 6; ++s) w.write({{"kind", "train"}, {"step", s}, {"loss", 1.0 / s}});
  }
  {
    std::ofstream torn(path, std::ios::app);
    torn << "{\"kind\":\"train\",\"st";  // a line torn by SIGKILL
  }
  {
    JsonlWriter w(path, 4);
    w.write({{"kind", "train"}, {"step", 5}, {"loss", 0.5}});
    w.sync();  // what cairn-train calls before sealing a checkpoint
    BOOST_TEST(cairn::read_file(path).find("\"step\":5") != std::string::npos);
  }
  BOOST_CHECK_NO_THROW(JsonlWriter().sync());  // not open: nothing to sync
  std::ifstream in(path);
  std::string line;
  std::vector<int> steps;
  while (std::getline(in, line)) steps.push_back(json::parse(line)["step"].get<int>());
  BOOST_TEST(steps == (std::vector<int>{1, 2, 3, 4, 5}), boost::test_tools::per_element());
  fs::remove_all(dir);
}

// A resume cuts the file at its step by reading back from the end only (a long run's file is not parsed whole): the
// result is what keeping every parseable line at or before the step, or without one, gives. Cases: provenance lines
// of later segments (kept), torn lines, a file of several read chunks, an unterminated last line at the step, a
// cut with nothing to drop (the file is left as it was), a cut before every step.
BOOST_AUTO_TEST_CASE(jsonl_cut_reads_only_the_tail_and_keeps_what_a_full_parse_keeps) {
  const std::string dir = temp_dir("jsonl_cut");
  const std::string path = dir + "/metrics.jsonl";
  auto reference = [](const std::string& text, int64_t step) {
    std::istringstream in(text);
    std::string line, kept;
    while (std::getline(in, line)) try {
        const json j = json::parse(line);
        if (!j.contains("step") || j["step"].get<int64_t>() <= step) kept += line + "\n";
      } catch (const std::exception&) {
      }
    return kept;
  };
  auto cut = [&](const std::string& text, int64_t step) {
    std::ofstream(path, std::ios::trunc) << text;
    { JsonlWriter w(path, step); }
    return cairn::read_file(path);
  };
  std::string big = "{\"kind\":\"provenance\",\"tool\":\"a\"}\n";
  for (int s = 1; s <= 8000; ++s) {
    big += "{\"kind\":\"train\",\"step\":" + std::to_string(s) + ",\"loss\":" + std::to_string(1.0 / s) + "}\n";
    if (s % 1000 == 0) big += "{\"kind\":\"val\",\"step\":" + std::to_string(s) + ",\"val_loss\":2.5}\n";
    if (s == 6500) big += "{\"kind\":\"provenance\",\"tool\":\"b\"}\n";
  }
  const std::string torn = big + "{\"kind\":\"train\",\"st";
  for (int64_t step : {0, 1, 999, 1000, 6499, 6500, 6501, 7999, 8000, 9000}) {
    BOOST_TEST_CONTEXT("step " << step) {
      BOOST_TEST(cut(big, step) == reference(big, step));
      BOOST_TEST(cut(torn, step) == reference(torn, step));
    }
  }
  BOOST_TEST(big.size() > (64u << 10) * 3);  // the cuts far back read several chunks
  // The step's line unterminated at the end: kept, and the next line starts on its own.
  const std::string open_end = "{\"step\":1}\n{\"step\":2}";
  std::ofstream(path, std::ios::trunc) << open_end;
  {
    JsonlWriter w(path, 2);
    w.write({{"step", 3}});
  }
  BOOST_TEST(cairn::read_file(path) == "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
  fs::remove_all(dir);
}

// What a resume compares with its checkpoint's step: the last train line's step, read back from the end past the
// lines of other kinds (val, a later start's provenance line, whose config may quote a train line) and a torn line.
BOOST_AUTO_TEST_CASE(last_step_of_kind_reads_the_last_line_of_that_kind) {
  const std::string dir = temp_dir("jsonl_last");
  const std::string path = dir + "/metrics.jsonl";
  BOOST_TEST(!last_step_of_kind(path, "train").has_value());  // no file
  std::ofstream(path, std::ios::trunc) << "{\"kind\":\"provenance\",\"step\":0}\n";
  BOOST_TEST(!last_step_of_kind(path, "train").has_value());  // no line of the kind
  std::string text = "{\"kind\":\"provenance\",\"step\":0}\n";
  for (int s = 1; s <= 3000; ++s)
    text += "{\"kind\":\"train\",\"loss\":2.5,\"pad\":\"" + std::string(400, 'x') + "\",\"step\":" + std::to_string(s) +
            "}\n";
  text += "{\"kind\":\"val\",\"step\":3000,\"val_loss\":2.5}\n";
  text += "{\"config\":\"{\\\"kind\\\":\\\"train\\\",\\\"step\\\":9}\",\"kind\":\"provenance\",\"step\":3000}\n";
  std::ofstream(path, std::ios::trunc) << text + "{\"kind\":\"train\",\"loss\":2.5,\"st";
  BOOST_TEST(last_step_of_kind(path, "train").value_or(-1) == 3000);
  BOOST_TEST(last_step_of_kind(path, "val").value_or(-1) == 3000);
  // Only train lines far back (more than one read chunk): found there.
  std::ofstream(path, std::ios::trunc) << text.substr(0, text.find("\"step\":2000}\n") + 12) +
                                              std::string(2 << 20, '\n') + "{\"kind\":\"val\",\"step\":9}\n";
  BOOST_TEST(last_step_of_kind(path, "train").value_or(-1) == 2000);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(trace_is_chrome_json) {
  Trace t;
  t.name_process(0, "rank 0");
  t.add("forward", "phase", 0, 0, 10, 5, {{"step", 3}});
  t.add("h.0", "layer", 1, 1, 11, 1);
  json j = json::parse(t.to_json({{"world_size", 2}}));
  BOOST_TEST(j["traceEvents"].size() == 4u);
  const json& e = j["traceEvents"][2];
  BOOST_TEST(e["ph"] == "X");
  BOOST_TEST(e["ts"].is_number_integer());
  BOOST_TEST(e["dur"].is_number_integer());
  BOOST_TEST(e["dur"].get<int64_t>() == 5);
  BOOST_TEST(e["args"]["step"] == 3);
  BOOST_TEST(j["traceEvents"][3]["pid"] == 1);
  // rebase(): the earliest event starts at 0, metadata untouched
  t.rebase();
  BOOST_TEST(t.events()[2]["ts"].get<int64_t>() == 0);
  BOOST_TEST(t.events()[3]["ts"].get<int64_t>() == 1);
  BOOST_TEST(!t.events()[0].contains("ts"));
}

// Seconds -> integer microseconds through one monotonic conversion: a child inside its parent in seconds stays
// inside in microseconds, and siblings that touch never overlap (the float version ended children one ulp late).
BOOST_AUTO_TEST_CASE(trace_microseconds_keep_nesting) {
  const double epoch = 123456.789012345;
  for (int i = 0; i < 100000; ++i) {
    const double p0 = epoch + i * 0.0137 + 1e-7 * (i % 7), p1 = p0 + 0.01 + 3e-8 * (i % 11);
    const double c0 = p0 + (p1 - p0) * 0.3, c1 = p1;  // child ends with its parent
    const int64_t ps = Trace::to_us(p0, epoch), pe = Trace::to_us(p1, epoch);
    const int64_t cs = Trace::to_us(c0, epoch), ce = Trace::to_us(c1, epoch);
    BOOST_REQUIRE(cs >= ps);
    BOOST_REQUIRE(ce <= pe);
    BOOST_REQUIRE(cs <= ce);
  }
  BOOST_TEST(Trace::to_us(epoch + 0.25, epoch) == 250000);
}
