// Unit tests of checkpoint files: model/optimizer round trip, sealing with DONE, newest-complete
// selection skipping incomplete and corrupt ones, pruning, optimizer ranges across shard layouts.
#define BOOST_TEST_MODULE train_checkpoint
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cairn/checkpoint.h"
#include "cairn/error.h"
#include "cairn/files.h"

namespace fs = std::filesystem;
using namespace cairn;

static std::string temp_dir(const std::string& tag) {
  std::string d = (fs::temp_directory_path() / ("cairn_train_" + tag + "_" + std::to_string(getpid()))).string();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

static std::vector<gpt::TensorInfo> fake_tensors() {
  std::vector<gpt::TensorInfo> t(3);
  t[0].name = "wte";
  t[0].offset = 0;
  t[0].size = 12;
  t[0].shape = {4, 3};
  t[0].weight_decay = true;
  t[1].name = "h.0.ln_1.weight";
  t[1].offset = 12;
  t[1].size = 3;
  t[1].shape = {3};
  t[2].name = "h.0.attn.c_attn.weight";
  t[2].offset = 15;
  t[2].size = 9;
  t[2].shape = {3, 3};
  t[2].layer = 0;
  return t;
}

static void write_ckpt(const std::string& root, int64_t step, const std::vector<float>& p) {
  std::string tmp = root + "/.tmp_" + std::to_string(step);
  fs::create_directories(tmp);
  checkpoint::ModelMeta meta;
  meta.config.layers = 1;
  meta.config.hidden = 3;
  meta.config.vocab = 4;
  meta.config.vocab_real = 4;
  meta.step = step;
  meta.tokens = step * 100;
  meta.train_state = {{"loader", {{"epoch", 1}, {"position", step}}}};
  checkpoint::write_model(tmp + "/model.h5", meta, fake_tensors(), p.data());
  checkpoint::OptimShard s;
  s.offset = 0;
  s.count = 10;
  s.total = 24;
  s.adam_step = step;
  s.m.assign(10, 1.0f);
  s.v.assign(10, 2.0f);
  checkpoint::write_optim(tmp + "/" + checkpoint::optim_file_name(0), s);
  s.offset = 10;
  s.count = 14;
  s.m.assign(14, 3.0f);
  s.v.assign(14, 4.0f);
  checkpoint::write_optim(tmp + "/" + checkpoint::optim_file_name(1), s);
  checkpoint::seal(tmp, checkpoint::step_dir(root, step), step, 2);
}

BOOST_AUTO_TEST_CASE(round_trip_and_newest_complete) {
  std::string root = temp_dir("ckpt");
  std::vector<float> p(24);
  for (size_t i = 0; i < p.size(); ++i) p[i] = 0.5f * i - 3.0f;
  for (int64_t s : {10, 20, 30, 40}) write_ckpt(root, s, p);

  auto meta = checkpoint::read_model_meta(checkpoint::step_dir(root, 20));
  BOOST_TEST(meta.step == 20);
  BOOST_TEST(meta.tokens == 2000);
  BOOST_TEST(meta.config.hidden == 3);
  BOOST_TEST(meta.train_state["loader"]["position"] == 20);
  std::vector<float> q(24, 0.0f);
  checkpoint::read_model(checkpoint::step_dir(root, 20), fake_tensors(), q.data());
  BOOST_TEST(q == p, boost::test_tools::per_element());

  // Optimizer range spanning both rank files (as a 3-rank ZeRO layout would ask).
  std::vector<float> m(8), v(8);
  int64_t adam_step = 0;
  checkpoint::read_optim_range(checkpoint::step_dir(root, 20), 6, 8, m.data(), v.data(), &adam_step);
  BOOST_TEST(adam_step == 20);
  BOOST_TEST(m[0] == 1.0f);
  BOOST_TEST(m[3] == 1.0f);
  BOOST_TEST(m[4] == 3.0f);
  BOOST_TEST(v[7] == 4.0f);

  // Newest (40) loses DONE: incomplete; 30 gets a corrupted byte: checksum mismatch; 20 is chosen.
  fs::remove(checkpoint::step_dir(root, 40) + "/DONE");
  {
    std::string f = checkpoint::step_dir(root, 30) + "/optim.rank00001.h5";
    std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
    s.seekg(0, std::ios::end);
    auto size = static_cast<long>(s.tellg());
    s.seekp(size - 8);
    s.put('\x7f');
  }
  BOOST_TEST(!checkpoint::is_sealed(checkpoint::step_dir(root, 40)));
  BOOST_TEST(checkpoint::is_sealed(checkpoint::step_dir(root, 30)));  // sealed, though damaged
  auto all = checkpoint::list(root);
  BOOST_REQUIRE_EQUAL(all.size(), 4u);
  BOOST_TEST(all[3].problem.find("DONE") != std::string::npos);
  BOOST_TEST(all[2].problem.find("checksum") != std::string::npos);
  // list() says which entries were sealed when checked: the damaged one is, the interrupted write is not.
  BOOST_TEST((all[0].sealed && all[1].sealed && all[2].sealed && !all[3].sealed));
  auto newest = checkpoint::find_newest_complete(root);
  BOOST_REQUIRE(newest.has_value());
  BOOST_TEST(newest->step == 20);
  // Below 20 (20 failed to load, say): 10.
  auto older = checkpoint::find_newest_complete(root, true, 20);
  BOOST_REQUIRE(older.has_value());
  BOOST_TEST(older->step == 10);
  BOOST_TEST(!checkpoint::find_newest_complete(root, true, 10).has_value());
  fs::remove_all(root);
}

// The one-tensor-at-a-time writers and readers make the same files as the whole-buffer ones (tensors in any order,
// ranges of the moments), and a reader given optim_parts' list opens only the files its range needs: with the other
// rank's file made unreadable, a range inside rank 1's file still reads, one that touches rank 0's does not.
BOOST_AUTO_TEST_CASE(streamed_files_and_range_limited_optimizer_reads) {
  std::string root = temp_dir("stream");
  std::vector<float> p(24);
  for (size_t i = 0; i < p.size(); ++i) p[i] = 0.25f * i + 1.0f;
  checkpoint::ModelMeta meta;
  meta.config.layers = 1;
  meta.config.hidden = 3;
  meta.config.vocab = 4;
  meta.config.vocab_real = 4;
  const auto tensors = fake_tensors();
  checkpoint::write_model(root + "/whole.h5", meta, tensors, p.data());
  {
    checkpoint::ModelWriter w(root + "/streamed.h5", meta, tensors);
    for (size_t i = tensors.size(); i-- > 0;) w.write(i, p.data() + tensors[i].offset);  // last tensor first
    w.close();
  }
  checkpoint::ModelReader r(root + "/streamed.h5");
  for (const auto& t : tensors) {
    std::vector<float> a(t.size), b(t.size);
    r.read(t, a.data());
    checkpoint::ModelReader(root + "/whole.h5").read(t, b.data());
    BOOST_TEST(a == b, boost::test_tools::per_element());
    BOOST_TEST(a == std::vector<float>(p.begin() + t.offset, p.begin() + t.offset + t.size),
               boost::test_tools::per_element());
  }
  {  // a writer that misses a tensor does not close silently
    checkpoint::ModelWriter w(root + "/short.h5", meta, tensors);
    w.write(0, p.data());
    BOOST_CHECK_THROW(w.close(), RuntimeError);
  }

  const std::string dir = root + "/optim";
  fs::create_directories(dir);
  checkpoint::OptimShard s;
  s.total = 24;
  s.adam_step = 7;
  s.count = 10;
  {
    checkpoint::OptimWriter w(dir + "/" + checkpoint::optim_file_name(0), s);
    std::vector<float> m(10), v(10);
    for (int i = 0; i < 10; ++i) m[i] = float(i), v[i] = float(100 + i);
    w.write(5, 5, m.data() + 5, v.data() + 5);  // second half first
    w.write(0, 5, m.data(), v.data());
    w.close();
  }
  s.offset = 10;
  s.count = 14;
  s.m.resize(14);
  s.v.resize(14);
  for (int i = 0; i < 14; ++i) s.m[i] = float(10 + i), s.v[i] = float(110 + i);
  checkpoint::write_optim(dir + "/" + checkpoint::optim_file_name(1), s);
  const auto parts = checkpoint::optim_parts(dir);
  BOOST_REQUIRE_EQUAL(parts.size(), 2u);
  BOOST_TEST(parts[0].offset == 0u);
  BOOST_TEST(parts[0].count == 10u);
  BOOST_TEST(parts[1].offset == 10u);
  BOOST_TEST(parts[1].count == 14u);
  std::vector<float> m(24), v(24);
  int64_t adam_step = 0;
  checkpoint::OptimReader(dir).read(0, 24, m.data(), v.data(), &adam_step);
  BOOST_TEST(adam_step == 7);
  for (int i = 0; i < 24; ++i) BOOST_TEST((m[i] == float(i) && v[i] == float(100 + i)), i);
  // rank 0's file becomes garbage: a reader of [12, 20) never opens it
  { std::ofstream(dir + "/" + checkpoint::optim_file_name(0), std::ios::trunc) << "not hdf5"; }
  std::fill(m.begin(), m.end(), 0.0f);
  checkpoint::OptimReader(dir, parts, 12, 20).read(12, 8, m.data(), v.data(), &adam_step);
  BOOST_TEST(m[0] == 12.0f);
  BOOST_TEST(v[7] == 119.0f);
  BOOST_CHECK_THROW(checkpoint::OptimReader(dir, parts, 8, 20), RuntimeError);
  fs::remove_all(root);
}

BOOST_AUTO_TEST_CASE(seal_takes_the_writers_descriptions) {
  // Each rank describes its own files (fsync, size, xxh64); seal lists them as described and describes the rest.
  const std::string root = temp_dir("described");
  const std::string tmp = root + "/.tmp";
  fs::create_directories(tmp);
  std::ofstream(tmp + "/a.h5") << "first file";
  std::ofstream(tmp + "/b.h5") << "second";
  const records::CheckpointDone::File a = checkpoint::describe_written_file(tmp + "/a.h5");
  BOOST_TEST(a.name == "a.h5");
  BOOST_TEST(a.bytes == 10u);
  BOOST_TEST(a.xxh64 == checkpoint::describe_written_file(tmp + "/a.h5").xxh64);
  // A described file rank 0 does not see is refused, and nothing is sealed.
  std::vector<records::CheckpointDone::File> described{a, {"c.h5", 3, "0123456789abcdef"}};
  const std::string final_dir = checkpoint::step_dir(root, 5);
  BOOST_CHECK_EXCEPTION(checkpoint::seal(tmp, final_dir, 5, 2, described), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()).find("c.h5 was written but is not listed there") != std::string::npos;
  });
  BOOST_TEST(!fs::exists(final_dir));
  described.pop_back();
  described[0].xxh64 = "00000000000000aa";  // taken as described, not recomputed (same size)
  checkpoint::seal(tmp, final_dir, 5, 2, described);
  const std::string done = checkpoint::check_dir(final_dir, false);
  BOOST_TEST(done.empty(), done);
  std::ifstream in(final_dir + "/DONE");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  BOOST_TEST(text.find("00000000000000aa") != std::string::npos, text);
  BOOST_TEST(text.find("b.h5") != std::string::npos, text);  // undescribed: described by seal
  fs::remove_all(root);
}

BOOST_AUTO_TEST_CASE(prune_keeps_last_and_every_nth) {
  std::string root = temp_dir("prune");
  std::vector<float> p(24, 1.0f);
  for (int64_t s = 1; s <= 7; ++s) write_ckpt(root, s * 10, p);
  fs::create_directories(root + "/.tmp_80");  // stale temp dir of a killed writer
  checkpoint::prune(root, 2, 30);
  std::vector<int64_t> left;
  for (const auto& e : checkpoint::list(root, false)) left.push_back(e.step);
  BOOST_TEST(left == (std::vector<int64_t>{30, 60, 70}), boost::test_tools::per_element());
  BOOST_TEST(!fs::exists(root + "/.tmp_80"));
  // Pruned directories went through a temporary name (a kill midway leaves one of those): none is left.
  size_t entries = 0;
  for ([[maybe_unused]] const auto& de : fs::directory_iterator(root)) ++entries;
  BOOST_TEST(entries == 3u);
  fs::remove_all(root);
}

// A prune killed midway (before prune renamed first) left step 10 without DONE and model.h5; the newest step 40 lacks
// DONE as an interrupted write does; 20 is sealed but lost a file. Only 10 goes: below the newest sealed (30),
// unsealed.
BOOST_AUTO_TEST_CASE(unsealed_leftovers_below_the_newest_sealed_are_removed) {
  std::string root = temp_dir("leftovers");
  std::vector<float> p(24, 1.0f);
  for (int64_t s : {10, 20, 30, 40}) write_ckpt(root, s, p);
  fs::remove(checkpoint::step_dir(root, 10) + "/DONE");
  fs::remove(checkpoint::step_dir(root, 10) + "/model.h5");
  fs::remove(checkpoint::step_dir(root, 20) + "/optim.rank00001.h5");
  fs::remove(checkpoint::step_dir(root, 40) + "/DONE");
  auto removed = checkpoint::remove_unsealed_leftovers(root);
  BOOST_TEST(removed == (std::vector<std::string>{checkpoint::step_dir(root, 10)}), boost::test_tools::per_element());
  std::vector<int64_t> left;
  for (const auto& e : checkpoint::list(root, false)) left.push_back(e.step);
  BOOST_TEST(left == (std::vector<int64_t>{20, 30, 40}), boost::test_tools::per_element());
  BOOST_TEST(checkpoint::remove_unsealed_leftovers(root).empty());
  fs::remove_all(root);
}

BOOST_AUTO_TEST_CASE(missing_tensor_is_named) {
  std::string root = temp_dir("missing");
  std::vector<float> p(24, 1.0f);
  write_ckpt(root, 5, p);
  auto t = fake_tensors();
  t[2].name = "h.0.mlp.c_fc.weight";
  std::vector<float> q(24);
  try {
    checkpoint::read_model(checkpoint::step_dir(root, 5), t, q.data());
    BOOST_FAIL("expected an error");
  } catch (const std::exception& e) {
    BOOST_TEST(std::string(e.what()).find("h.0.mlp.c_fc.weight") != std::string::npos);
    BOOST_TEST(std::string(e.what()).find("model.h5") != std::string::npos);
  }
  fs::remove_all(root);
}

// A tensor stored transposed has the right count: its shape refuses it (it loaded silently as other weights).
BOOST_AUTO_TEST_CASE(transposed_tensor_is_refused_by_shape) {
  std::string root = temp_dir("shape");
  std::vector<float> p(24, 1.0f);
  write_ckpt(root, 5, p);
  auto t = fake_tensors();
  t[0].shape = {3, 4};  // wte stored (4, 3)
  std::vector<float> q(24);
  try {
    checkpoint::read_model(checkpoint::step_dir(root, 5), t, q.data());
    BOOST_FAIL("expected an error");
  } catch (const std::exception& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("/params/wte has shape (4, 3), the model expects (3, 4)") != std::string::npos, what);
    BOOST_TEST(what.find("model.h5") != std::string::npos);
  }
  checkpoint::read_model(checkpoint::step_dir(root, 5), fake_tensors(), q.data());  // the true shapes read
  BOOST_TEST(q[0] == 1.0f);
  fs::remove_all(root);
}

// A rank's optimizer file gone: the error names the values no file holds, once (it repeated "cannot resume from").
BOOST_AUTO_TEST_CASE(missing_optimizer_file_names_the_gap) {
  std::string root = temp_dir("optgap");
  write_ckpt(root, 5, std::vector<float>(24, 1.0f));
  const std::string dir = checkpoint::step_dir(root, 5);
  fs::remove(dir + "/" + checkpoint::optim_file_name(1));  // held [10, 24)
  std::vector<float> m(24), v(24);
  try {
    checkpoint::OptimReader(dir).read(0, 24, m.data(), v.data(), nullptr);
    BOOST_FAIL("expected an error");
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("hold 10 of the 24 values needed: values [10, 24) are in none of them") != std::string::npos,
               what);
  }
  fs::remove_all(root);
}
