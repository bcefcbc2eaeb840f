// Training-loop tests, run on 1 and 2 ranks: exact resume after a stop (bitwise losses and weights),
// skipped updates on injected NaNs and spikes, restore-after-too-many-skips and stop-on-skips.
#define BOOST_TEST_MODULE train_loop
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>

#include "cairn/checkpoint.h"
#include "cairn/error.h"
#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "fixture.h"
#include "piece_io.h"
#include "train_checkpoint.h"
#include "trainer.h"
#include "zero_units.h"

namespace fs = std::filesystem;
using namespace cairn;
using namespace cairn::train;

struct MpiFixture {
  std::unique_ptr<mpi::Session> session;
  MpiFixture() {
    auto& m = boost::unit_test::framework::master_test_suite();
    session = std::make_unique<mpi::Session>(&m.argc, &m.argv);
    log_settings().level = LogLevel::Warn;
  }
};
BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

// A shared scratch directory with a small fortunes dataset (same path on every rank).
static std::string scratch() {
  static std::string dir;
  if (dir.empty()) {
    std::string mine = (fs::temp_directory_path() / ("cairn_train_loop_" + std::to_string(getpid()))).string();
    dir = mpi::broadcast_string(mine);
    if (mpi::rank() == 0) test::make_dataset(dir + "/data", 2, 800);
    mpi::barrier();
  }
  return dir;
}

static Config small_config(const std::string& out, std::vector<std::string> extra = {}) {
  ConfigSources src;
  src.use_env = false;
  src.sets = {"run.dir=\"" + out + "\"", "data.path=\"" + scratch() + "/data\"",
              "model.layers=2",          "model.hidden=32",
              "model.heads=2",           "model.seq_len=16",
              "train.global_batch=4",    "train.steps=12",
              "train.warmup=2",          "train.lr=0.003",
              "train.val_every=0",       "train.checkpoint_every=0",
              "train.threads=1",         "train.spike_zscore=0"};
  for (auto& e : extra) src.sets.push_back(e);
  return load_config(src);
}

// Hooks that only ask for the final weights (TrainResult::params), for the comparisons below.
static TrainHooks with_params() {
  TrainHooks h;
  h.return_params = true;
  return h;
}

// Checkpoint assembly: rank 0 gets a tensor of 10 values at whole positions [100, 110) from every rank's pieces (each
// rank speaks for the positions p with p % size == rank, sent as runs of length 1 from a local array with an offset),
// and a gap (a value nobody speaks for) is an error on rank 0, not a silent zero.
BOOST_AUTO_TEST_CASE(checkpoint_tensors_are_gathered_from_the_pieces) {
  const int rank = mpi::rank(), size = mpi::size();
  std::vector<float> local;  // local position 5 + k holds whole position 100 + (rank + k * size)
  Contribution c;
  c.base = 5;
  for (int p = rank, k = 0; p < 10; p += size, ++k) {
    local.push_back(static_cast<float>(1000 + p));
    c.segs.push_back({static_cast<size_t>(100 + p), static_cast<size_t>(5 + k), 1});
  }
  c.values = local.data();
  std::vector<float> out;
  gather_to_root({c}, 100, 10, out, MPI_COMM_WORLD);
  if (rank == 0) {
    BOOST_TEST(out.size() == 10u);
    for (int p = 0; p < 10; ++p) BOOST_TEST(out[static_cast<size_t>(p)] == 1000.0f + static_cast<float>(p));
  }
  // Rank 0 drops its first value: the tensor is not covered.
  Contribution gap = c;
  if (rank == 0) gap.segs.erase(gap.segs.begin());
  bool threw = false;
  try {
    gather_to_root({gap}, 100, 10, out, MPI_COMM_WORLD);
  } catch (const RuntimeError& e) {
    threw = std::string(e.what()).find("cover 9 of the tensor's 10 values") != std::string::npos;
  }
  BOOST_TEST(threw == (rank == 0));
}

BOOST_AUTO_TEST_CASE(resume_is_bitwise_exact) {
  std::string base = scratch();
  TrainResult straight = run_train(small_config(base + "/straight"), with_params());
  BOOST_TEST(straight.exit_code == 0);
  BOOST_REQUIRE_EQUAL(straight.losses.size(), 12u);

  TrainHooks stop;
  stop.stop_after_step = 6;
  TrainResult first = run_train(small_config(base + "/resumed"), stop);
  BOOST_TEST(first.exit_code == kExitRequeue);
  BOOST_TEST(first.final_step == 6);
  BOOST_TEST(fs::exists(base + "/resumed/train/ckpt/step_00000006/DONE"));
  BOOST_TEST(!fs::exists(base + "/resumed/train/FINISHED"));

  TrainResult second = run_train(small_config(base + "/resumed"), with_params());
  BOOST_TEST(second.exit_code == 0);
  BOOST_REQUIRE_EQUAL(second.losses.size(), 6u);
  BOOST_TEST(second.steps.front() == 7);
  for (size_t i = 0; i < 6; ++i) {
    BOOST_TEST(first.losses[i] == straight.losses[i]);
    BOOST_TEST(second.losses[i] == straight.losses[6 + i]);  // bitwise: exact double equality
  }
  if (mpi::rank() == 0) {
    BOOST_REQUIRE(!straight.params.empty());
    BOOST_REQUIRE_EQUAL(second.params.size(), straight.params.size());
    BOOST_TEST(std::memcmp(second.params.data(), straight.params.data(), 4 * straight.params.size()) == 0);
  }
  BOOST_TEST(fs::exists(base + "/resumed/train/FINISHED"));
}

BOOST_AUTO_TEST_CASE(resume_with_zero1_is_bitwise_exact) {
  std::string base = scratch();
  TrainResult straight = run_train(small_config(base + "/z_straight", {"parallel.zero=1", "train.steps=8"}));
  TrainHooks stop;
  stop.stop_after_step = 4;
  run_train(small_config(base + "/z_resumed", {"parallel.zero=1", "train.steps=8"}), stop);
  TrainResult second = run_train(small_config(base + "/z_resumed", {"parallel.zero=1", "train.steps=8"}));
  BOOST_REQUIRE_EQUAL(second.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) BOOST_TEST(second.losses[i] == straight.losses[4 + i]);
}

BOOST_AUTO_TEST_CASE(nan_and_spike_steps_are_skipped) {
  std::string base = scratch();
  TrainHooks h = with_params();
  h.fault = [](int64_t step) {
    if (step == 3) return Fault::NanGrad;
    if (step == 4) return Fault::NanLoss;
    if (step == 14) return Fault::LossSpike;
    return Fault::None;
  };
  TrainResult r = run_train(small_config(base + "/faults", {"train.steps=16", "train.spike_zscore=4",
                                                            "train.spike_min_steps=6", "train.spike_window=8"}),
                            h);
  BOOST_TEST(r.exit_code == 0);
  BOOST_REQUIRE_EQUAL(r.skipped.size(), 16u);
  int skipped = 0;
  for (int s : r.skipped) skipped += s;
  BOOST_TEST(r.skipped[2] == 1);
  BOOST_TEST(r.skipped[3] == 1);
  BOOST_TEST(r.skipped[13] == 1);
  BOOST_TEST(skipped == 3);
  if (mpi::rank() == 0) {
    BOOST_REQUIRE(!r.params.empty());
    for (float p : r.params) BOOST_TEST_REQUIRE(std::isfinite(p));
    // Skipped steps do not advance the schedule (Megatron's scheduler steps on applied updates): steps 3 and 4 were
    // skipped, so 3, 4 and 5 all run at the rate after two updates, and step 6 after three.
    std::map<int64_t, double> lr;
    std::ifstream in(base + "/faults/train/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.value("kind", "") == "train") lr[j.at("step").get<int64_t>()] = j.at("lr").get<double>();
    }
    BOOST_TEST(lr.at(3) == lr.at(4));
    BOOST_TEST(lr.at(4) == lr.at(5));
    BOOST_TEST(lr.at(6) < lr.at(5));
  }
}

BOOST_AUTO_TEST_CASE(too_many_skips_restore_then_continue_past_bad_data) {
  std::string base = scratch();
  TrainHooks h;
  h.fault = [](int64_t step) { return step >= 7 && step <= 9 ? Fault::NanGrad : Fault::None; };
  // Once restored to step 5, steps 7..9 are computed again: inject only on the first pass.
  auto seen = std::make_shared<int>(0);
  h.fault = [seen](int64_t step) {
    if (step >= 7 && step <= 9 && *seen < 3) {
      ++*seen;
      return Fault::NanGrad;
    }
    return Fault::None;
  };
  TrainResult r =
      run_train(small_config(base + "/restore", {"train.checkpoint_every=5", "train.max_consecutive_skips=2"}), h);
  BOOST_TEST(r.exit_code == 0);
  BOOST_TEST(r.restores == 1);
  BOOST_TEST(r.final_step == 12);
  // Steps 6..9 were computed, then 6..12 again after restoring step 5.
  BOOST_REQUIRE_EQUAL(r.steps.size(), 16u);
  BOOST_TEST(r.steps[9] == 6);
  auto meta = checkpoint::read_model_meta(base + "/restore/train/ckpt/step_00000012");
  // The data position moved past the 4 batches consumed before the restore.
  BOOST_TEST(meta.train_state["batch"].get<int64_t>() == 16);
  BOOST_TEST(meta.train_state["skipped_total"].get<int64_t>() == 3);
}

BOOST_AUTO_TEST_CASE(too_many_skips_can_stop) {
  std::string base = scratch();
  TrainHooks h;
  h.fault = [](int64_t step) { return step >= 3 ? Fault::NanLoss : Fault::None; };
  BOOST_CHECK_THROW(
      run_train(small_config(base + "/stop", {"train.max_consecutive_skips=1", "train.on_too_many_skips=\"stop\""}), h),
      RuntimeError);
}

BOOST_AUTO_TEST_CASE(schedule_and_step_ranges) {
  // Linear warmup to the peak, cosine to min_lr at the last step, halfway in the middle.
  BOOST_TEST(learning_rate(0, 110, 10, 1.0, 0.1, "cosine") == 0.1, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(learning_rate(9, 110, 10, 1.0, 0.1, "cosine") == 1.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(learning_rate(60, 110, 10, 1.0, 0.1, "cosine") == 0.55, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(learning_rate(110, 110, 10, 1.0, 0.1, "cosine") == 0.1, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(learning_rate(60, 110, 10, 1.0, 0.1, "linear") == 0.55, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(learning_rate(60, 110, 10, 1.0, 0.1, "constant") == 1.0);
  BOOST_TEST(parse_step_range("3:7").first == 3);
  BOOST_TEST(parse_step_range("3:7").second == 7);
  BOOST_CHECK_THROW(parse_step_range("7:3"), UsageError);
  BOOST_CHECK_THROW(parse_step_range("x"), UsageError);
  BOOST_CHECK_THROW(parse_step_range("0:3"), UsageError);  // steps are numbered from 1: there is no step 0
  BOOST_CHECK_THROW(parse_step_range("3:3"), UsageError);
}

// --trace-steps a:b traces steps a..b-1, numbered as in metrics.jsonl (1-based), plus the validation after a
// traced step; every event has integer microseconds.
BOOST_AUTO_TEST_CASE(trace_steps_are_one_based_half_open) {
  std::string out = scratch() + "/trace";
  TrainResult r = run_train(small_config(out, {"train.trace_steps=\"3:5\"", "train.steps=6", "train.val_every=4",
                                               "data.val_fraction=0.1", "train.val_batches=2"}));
  BOOST_TEST(r.exit_code == 0);
  if (mpi::rank() != 0) return;
  std::ifstream in(out + "/train/trace.json");
  BOOST_REQUIRE(in.good());
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<std::string> steps;
  int validations = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    BOOST_TEST(e["ts"].is_number_integer());
    BOOST_TEST(e["dur"].is_number_integer());
    if (e["cat"] == "step" && e["pid"] == 0) steps.push_back(e["name"].get<std::string>());
    if (e["name"] == "validation" && e["pid"] == 0) ++validations;
  }
  BOOST_TEST(steps == (std::vector<std::string>{"step 3", "step 4"}), boost::test_tools::per_element());
  BOOST_TEST(validations == 1);  // after step 4 (val_every = 4), inside the range
  BOOST_TEST(j["otherData"]["first_step"] == 3);
  BOOST_TEST(j["otherData"]["last_step"] == 4);
}

// ---------------------------------------------------------------- stop signals at any moment
// Real signals (raise) at points the trainer reports through TrainHooks::at: no timers. A signal raised on one rank
// only must stop every rank (the stop decision is collective).

static bool exists_any_checkpoint(const std::string& run) {
  return !checkpoint::list(run + "/train/ckpt", false).empty();
}

BOOST_AUTO_TEST_CASE(signal_during_setup_exits_75_with_nothing_saved) {
  for (int sig : {SIGTERM, SIGUSR1}) {
    const std::string run = scratch() + "/sig_setup_" + std::to_string(sig);
    TrainHooks h;
    h.at = [sig](const std::string& point, int64_t) {
      if (point == "setup" && mpi::rank() == mpi::size() - 1) raise(sig);  // the last rank only
    };
    TrainResult r = run_train(small_config(run), h);
    BOOST_TEST(r.exit_code == kExitRequeue);
    BOOST_TEST(r.final_step == 0);
    BOOST_TEST(r.steps.empty());
    BOOST_TEST(stop_signal() == 0);  // acted on, cleared
    mpi::barrier();
    BOOST_TEST(!exists_any_checkpoint(run));
    BOOST_TEST(fs::exists(run + "/train/STOPPED"));
    BOOST_TEST(!fs::exists(run + "/train/FINISHED"));
    // The requeued run starts from scratch and finishes; STOPPED is gone.
    TrainResult again = run_train(small_config(run));
    BOOST_TEST(again.exit_code == 0);
    BOOST_TEST(again.final_step == 12);
    mpi::barrier();
    BOOST_TEST(!fs::exists(run + "/train/STOPPED"));
    BOOST_TEST(fs::exists(run + "/train/FINISHED"));
  }
}

BOOST_AUTO_TEST_CASE(signal_mid_run_checkpoints_and_resumes_bitwise) {
  const std::string base = scratch();
  TrainResult straight = run_train(small_config(base + "/sig_straight"), with_params());
  TrainHooks h;
  h.at = [](const std::string& point, int64_t step) {
    if (point == "step_done" && step == 5 && mpi::rank() == 0) raise(SIGUSR1);
  };
  TrainResult first = run_train(small_config(base + "/sig_mid"), h);
  BOOST_TEST(first.exit_code == kExitRequeue);
  BOOST_TEST(first.final_step == 5);
  mpi::barrier();
  BOOST_TEST(fs::exists(base + "/sig_mid/train/ckpt/step_00000005/DONE"));
  BOOST_TEST(fs::exists(base + "/sig_mid/train/STOPPED"));
  TrainResult second = run_train(small_config(base + "/sig_mid"), with_params());
  BOOST_TEST(second.exit_code == 0);
  BOOST_REQUIRE_EQUAL(second.losses.size(), 7u);
  for (size_t i = 0; i < 7; ++i) BOOST_TEST(second.losses[i] == straight.losses[5 + i]);
  if (mpi::rank() == 0) {
    BOOST_REQUIRE_EQUAL(second.params.size(), straight.params.size());
    BOOST_REQUIRE(!straight.params.empty());
  }
  if (mpi::rank() == 0)
    BOOST_TEST(std::memcmp(second.params.data(), straight.params.data(), 4 * straight.params.size()) == 0);
}

BOOST_AUTO_TEST_CASE(signal_at_the_end_lets_the_run_finish) {
  for (const char* where : {"step_done", "final_checkpoint", "end"}) {
    const std::string run = scratch() + "/sig_end_" + where;
    TrainHooks h;
    h.at = [where](const std::string& point, int64_t step) {
      if (point == where && (point != "step_done" || step == 12) && mpi::rank() == 0) raise(SIGTERM);
    };
    TrainResult r = run_train(small_config(run), h);
    BOOST_TEST(r.exit_code == 0, where);
    BOOST_TEST(r.final_step == 12);
    BOOST_TEST(stop_signal() == 0);
    mpi::barrier();
    BOOST_TEST(fs::exists(run + "/train/FINISHED"), where);
    BOOST_TEST(fs::exists(run + "/train/ckpt/step_00000012/DONE"));
    BOOST_TEST(!fs::exists(run + "/train/STOPPED"));
  }
}

// ---------------------------------------------------------------- FINISHED means a usable model

static nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

BOOST_AUTO_TEST_CASE(extending_a_finished_run_removes_finished) {
  const std::string run = scratch() + "/extend";
  BOOST_TEST(run_train(small_config(run, {"train.steps=6"})).exit_code == 0);
  mpi::barrier();
  BOOST_TEST(fs::exists(run + "/train/FINISHED"));
  // Rerun as it is: nothing to train, and the run's records are left as they were (a provenance line was appended).
  // FINISHED too: it keeps the provenance of the run that trained the model (the rerun's command line replaced it).
  const std::string metrics = read_file(run + "/train/metrics.jsonl"), config = read_file(run + "/train/config.toml");
  const std::string finished = read_file(run + "/train/FINISHED");
  const std::string command_line = provenance().command_line;
  provenance().command_line = "cairn-train (the rerun)";
  BOOST_TEST(run_train(small_config(run, {"train.steps=6"})).exit_code == 0);
  provenance().command_line = command_line;
  mpi::barrier();
  BOOST_TEST(read_file(run + "/train/metrics.jsonl") == metrics);
  BOOST_TEST(read_file(run + "/train/config.toml") == config);
  BOOST_TEST(read_file(run + "/train/FINISHED") == finished);
  BOOST_TEST(read_json(run + "/train/FINISHED")["step"] == 6);
  TrainHooks h;
  auto seen = std::make_shared<int>(-1);
  h.at = [run, seen](const std::string& point, int64_t) {
    if (point == "first_step") *seen = fs::exists(run + "/train/FINISHED") ? 1 : 0;
  };
  h.stop_after_step = 8;
  // On the run's schedule (its decay over 6 steps): a longer decay would be refused as a schedule change.
  TrainResult r = run_train(small_config(run, {"train.steps=12", "train.decay_steps=6"}), h);
  BOOST_TEST(r.exit_code == kExitRequeue);
  BOOST_TEST(*seen == 0);  // gone before the first step of the extension
  mpi::barrier();
  BOOST_TEST(!fs::exists(run + "/train/FINISHED"));  // cairn-eval --watch keeps waiting
  BOOST_TEST(run_train(small_config(run, {"train.steps=12", "train.decay_steps=6"})).exit_code == 0);
  mpi::barrier();
  BOOST_TEST(read_json(run + "/train/FINISHED")["step"] == 12);
}

// Every step skips from step 4 on, on every pass: the restores all go back to the step-4 checkpoint (written after an
// accepted step), none is written from the skipping state, and the third restore of it ends the run with an error.
BOOST_AUTO_TEST_CASE(a_run_that_only_skips_stops_with_an_error) {
  const std::string run = scratch() + "/dead";
  TrainHooks h;
  h.fault = [](int64_t step) { return step >= 4 ? Fault::NanGrad : Fault::None; };
  BOOST_CHECK_THROW(
      run_train(small_config(run, {"train.steps=40", "train.checkpoint_every=2", "train.max_consecutive_skips=2"}), h),
      RuntimeError);
  clear_stop_signal();
  mpi::barrier();
  std::vector<int64_t> steps;
  for (const auto& e : checkpoint::list(run + "/train/ckpt", false)) steps.push_back(e.step);
  BOOST_TEST(steps == (std::vector<int64_t>{2, 4}), boost::test_tools::per_element());
  BOOST_TEST(!fs::exists(run + "/train/FINISHED"));
}

// The learning rate that killed a model in the issue: no FINISHED, a non-zero outcome.
BOOST_AUTO_TEST_CASE(lr_1000_does_not_finish) {
  const std::string run = scratch() + "/lr1000";
  bool failed = false;
  try {
    TrainResult r = run_train(
        small_config(run, {"train.steps=60", "train.lr=1000", "train.checkpoint_every=5", "train.spike_zscore=6"}));
    failed = r.exit_code != 0;
  } catch (const RuntimeError&) {
    failed = true;
  }
  BOOST_TEST(failed);
  mpi::barrier();
  BOOST_TEST(!fs::exists(run + "/train/FINISHED"));
}

// Runs `cfg` until it stops (as on SIGTERM) after `step`, its checkpoint written; every rank past it.
static void stop_after(const Config& cfg, int64_t step) {
  TrainHooks stop;
  stop.stop_after_step = step;
  BOOST_TEST(run_train(cfg, stop).exit_code == kExitRequeue);
  mpi::barrier();
}

// Runs `cfg` to its end and checks it resumed at `first` (the first step it computed); every rank past it.
static void expect_resume_at(const Config& cfg, int64_t first) {
  TrainResult r = run_train(cfg);
  BOOST_TEST(r.exit_code == 0);
  BOOST_REQUIRE(!r.steps.empty());
  BOOST_TEST(r.steps.front() == first);
  mpi::barrier();
}

// How a run that must fail ends (every rank throws the same error): its exit code and message; {0, ""} if it returned.
static std::pair<int, std::string> run_error(const Config& cfg) {
  try {
    run_train(cfg);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {0, ""};
}

// Rank 0 rewrites checkpoint `dir`'s model.h5 as `edit` changes its metadata, tensor list or parameters, and seals it
// again: DONE's checksums match the new file, so only loading it can tell.
using ModelEdit = std::function<void(checkpoint::ModelMeta&, std::vector<gpt::TensorInfo>&, std::vector<float>&)>;
static void rewrite_model(const std::string& dir, const ModelEdit& edit) {
  if (mpi::rank() == 0) {
    checkpoint::ModelMeta meta = checkpoint::read_model_meta(dir);
    auto tensors = gpt::piece_tensors(meta.config, gpt::ShardSpec{});
    std::vector<float> p(gpt::count_params(meta.config));
    checkpoint::read_model(dir, tensors, p.data());
    edit(meta, tensors, p);
    const std::string tmp = fs::path(dir).parent_path().string() + "/.tmp_rewrite";
    fs::create_directories(tmp);
    for (const auto& f : fs::directory_iterator(dir))
      if (f.path().filename() != "DONE" && f.path().filename() != "model.h5")
        fs::copy(f.path(), tmp + "/" + f.path().filename().string());
    checkpoint::write_model(tmp + "/model.h5", meta, tensors, p.data());
    checkpoint::seal(tmp, dir, meta.step, mpi::size());
    BOOST_TEST(checkpoint::check_dir(dir).empty());  // checksums valid
  }
  mpi::barrier();
}

// A checkpoint with valid checksums but a NaN in wte: refused at resume, never trained from or named by FINISHED.
BOOST_AUTO_TEST_CASE(non_finite_checkpoint_is_refused) {
  const std::string run = scratch() + "/nanckpt";
  TrainHooks stop;
  stop.stop_after_step = 4;
  BOOST_TEST(run_train(small_config(run), stop).exit_code == kExitRequeue);
  mpi::barrier();
  rewrite_model(run + "/train/ckpt/step_00000004", [](auto&, auto& tensors, auto& p) {
    for (const auto& t : tensors)
      if (t.name == "wte") p[t.offset + 7] = std::numeric_limits<float>::quiet_NaN();
  });
  BOOST_CHECK_THROW(run_train(small_config(run)), RuntimeError);
  mpi::barrier();
  BOOST_TEST(!fs::exists(run + "/train/FINISHED"));
}

// ---------------------------------------------------------------- rollback

// --resume step_4 (with a new lr) after a 12-step run, stopped at step 6, then --resume auto: continues the new line
// (step 6), never the abandoned run's step 8 or 12, which were retired.
BOOST_AUTO_TEST_CASE(rollback_retires_the_abandoned_checkpoints) {
  const std::string run = scratch() + "/rollback";
  BOOST_TEST(run_train(small_config(run, {"train.checkpoint_every=4"})).exit_code == 0);
  mpi::barrier();
  TrainHooks stop;
  stop.stop_after_step = 6;
  TrainResult rb = run_train(small_config(run, {"train.checkpoint_every=4", "train.lr=0.001",
                                                "train.resume=\"" + run + "/train/ckpt/step_00000004\""}),
                             stop);
  BOOST_TEST(rb.exit_code == kExitRequeue);
  BOOST_TEST(rb.steps.front() == 5);
  mpi::barrier();
  std::vector<int64_t> steps;
  for (const auto& e : checkpoint::list(run + "/train/ckpt", false)) steps.push_back(e.step);
  BOOST_TEST(steps == (std::vector<int64_t>{4, 6}), boost::test_tools::per_element());
  BOOST_TEST(fs::exists(run + "/train/retired"));
  BOOST_TEST(!fs::exists(run + "/train/FINISHED"));
  TrainResult after = run_train(small_config(run, {"train.checkpoint_every=4", "train.lr=0.001"}));
  BOOST_TEST(after.exit_code == 0);
  BOOST_REQUIRE(!after.steps.empty());
  BOOST_TEST(after.steps.front() == 7);
}

// A sealed checkpoint whose files match DONE but do not load (model.h5 rewritten with a truncated tensor, then sealed
// again): --resume auto treats it like the damaged ones its search skips: warned about, retired, and the run resumes
// from the previous checkpoint; named explicitly with --resume DIR it is damaged data (exit 1).
BOOST_AUTO_TEST_CASE(auto_resume_falls_back_over_a_sealed_checkpoint_that_does_not_load) {
  const std::string run = scratch() + "/unloadable";
  stop_after(small_config(run, {"train.checkpoint_every=4"}), 8);
  const std::string dir = run + "/train/ckpt/step_00000008";
  rewrite_model(dir, [](auto&, auto& tensors, auto&) {
    tensors.back().size -= 1;  // the last tensor, one value short
    tensors.back().shape = {static_cast<int>(tensors.back().size)};
  });
  const auto [code, msg] = run_error(small_config(run, {"train.checkpoint_every=4", "train.resume=\"" + dir + "\""}));
  BOOST_TEST(code == kExitRuntime);
  BOOST_TEST(msg.find("step_00000008") != std::string::npos, msg);
  // Earlier retirements (a job preempted again and again): of them and this one, the newest keep_checkpoints (2
  // here) stay; the older ones are removed, so retired/ does not grow without end.
  if (mpi::rank() == 0)
    for (const char* old : {"20000101T000000Z", "20000102T000000Z", "20000103T000000Z"})
      fs::create_directories(run + "/train/retired/" + old + "/step_00000001");
  mpi::barrier();
  expect_resume_at(small_config(run, {"train.checkpoint_every=4", "train.keep_checkpoints=2"}), 5);
  bool retired = false;
  size_t retirements = 0;
  for (const auto& d : fs::directory_iterator(run + "/train/retired")) {
    retired = retired || fs::exists(d.path() / "step_00000008" / "model.h5");
    ++retirements;
  }
  BOOST_TEST(retired);
  BOOST_TEST(retirements == 2u);
  BOOST_TEST(fs::exists(run + "/train/retired/20000103T000000Z"));
  BOOST_TEST(fs::exists(run + "/train/FINISHED"));
}

// A prune killed midway left step 4 without DONE and model.h5 below the newest sealed step 8: the next start removes
// it (and resumes from 8); the sealed checkpoints stay.
BOOST_AUTO_TEST_CASE(half_pruned_step_directories_are_removed_at_start) {
  const std::string run = scratch() + "/halfpruned";
  stop_after(small_config(run, {"train.checkpoint_every=4"}), 8);
  if (mpi::rank() == 0) {
    fs::remove(run + "/train/ckpt/step_00000004/DONE");
    fs::remove(run + "/train/ckpt/step_00000004/model.h5");
  }
  mpi::barrier();
  expect_resume_at(small_config(run, {"train.checkpoint_every=4"}), 9);
  BOOST_TEST(!fs::exists(run + "/train/ckpt/step_00000004"));
  BOOST_TEST(fs::exists(run + "/train/ckpt/step_00000008/DONE"));
  BOOST_TEST(fs::exists(run + "/train/ckpt/step_00000012/DONE"));
}

// A checkpoint resumed on other data (the same documents in 3 shards instead of 2: other windows): refused (exit 2,
// nothing written); with on_data_change = "warn" the run continues on it; a checkpoint written before the fingerprint
// was recorded resumes on anything.
BOOST_AUTO_TEST_CASE(resuming_on_other_data_is_refused_unless_allowed) {
  const std::string run = scratch() + "/otherdata", other = scratch() + "/data3";
  if (mpi::rank() == 0) test::make_dataset(other, 3, 800);
  stop_after(small_config(run), 4);
  const auto metrics_size = fs::file_size(run + "/train/metrics.jsonl");
  const auto [code, msg] = run_error(small_config(run, {"data.path=\"" + other + "\""}));
  BOOST_TEST(code == kExitUsage);
  BOOST_TEST(msg.find("trained on other data than [data] path \"" + other + "\"") != std::string::npos, msg);
  BOOST_TEST(msg.find("on_data_change") != std::string::npos, msg);
  mpi::barrier();
  BOOST_TEST(fs::file_size(run + "/train/metrics.jsonl") == metrics_size);
  expect_resume_at(small_config(run, {"data.path=\"" + other + "\"", "train.on_data_change=\"warn\"", "train.steps=6",
                                      "train.decay_steps=12"}),
                   5);

  // The same data in another order is refused too, naming the key: another seed (another permutation), another
  // global batch (the checkpoint's position counts batches of its size), another validation split (windows it
  // trained on would be scored as validation). These used to resume without a word.
  const std::string order = scratch() + "/otherorder";
  stop_after(small_config(order), 4);
  const auto order_size = fs::file_size(order + "/train/metrics.jsonl");
  for (const auto& [set, want] :
       std::vector<std::pair<std::string, std::string>>{{"train.seed=99", "[train] seed is 99, the checkpoint's run "},
                                                        {"train.global_batch=8",
                                                         "[train] global_batch is 8, the checkpoint's run 4"},
                                                        {"data.val_fraction=0.3", "the validation split is "}}) {
    const auto [c, m] = run_error(small_config(order, {set}));
    BOOST_TEST(c == kExitUsage, set);
    BOOST_TEST(m.find(want) != std::string::npos, m);
    BOOST_TEST(m.find("on_data_change") != std::string::npos, m);
  }
  mpi::barrier();
  BOOST_TEST(fs::file_size(order + "/train/metrics.jsonl") == order_size);
  expect_resume_at(small_config(order, {"train.seed=99", "train.on_data_change=\"warn\"", "train.steps=6",
                                        "train.decay_steps=12"}),
                   5);

  // An older cairn-train's checkpoint (no fingerprint, global batch or split): resumed on this data without a word
  // against it.
  const std::string old = scratch() + "/olddata";
  stop_after(small_config(old), 4);
  rewrite_model(old + "/train/ckpt/step_00000004", [](auto& meta, auto&, auto&) {
    for (const char* key : {"data_fingerprint", "data_tokens", "global_batch", "val_windows"})
      meta.train_state.erase(key);
  });
  expect_resume_at(small_config(old, {"data.path=\"" + other + "\"", "train.steps=6", "train.decay_steps=12"}), 5);

  // ... but the config it ran with (model.h5's config_toml) says what its train_state does not: another global batch,
  // validation split or schedule is refused as for a checkpoint that recorded them. Runs started before an upgrade
  // used to pass unchecked: an extended run's rate jumped 4.7x on its first step.
  const std::string older = scratch() + "/olderschedule";
  stop_after(small_config(older), 4);
  rewrite_model(older + "/train/ckpt/step_00000004", [](auto& meta, auto&, auto&) {
    for (const char* key : {"lr_schedule", "global_batch", "val_windows", "data_fingerprint", "data_tokens"})
      meta.train_state.erase(key);
  });
  for (const auto& [set, want] : std::vector<std::pair<std::string, std::string>>{
           {"train.global_batch=8", "[train] global_batch is 8, the checkpoint's run 4"},
           {"data.val_fraction=0.3", "the validation split is "},
           {"train.steps=40", "another learning-rate schedule: decay over 12 steps (now 40"}}) {
    const auto [c, m] = run_error(small_config(older, {set}));
    BOOST_TEST(c == kExitUsage, set);
    BOOST_TEST(m.find(want) != std::string::npos, m);
  }
  mpi::barrier();
  expect_resume_at(small_config(older), 5);

  // A checkpoint names the build that wrote it: this build's resumes say nothing, another's are told they continue
  // within float32 rounding, not bitwise (an upgrade mid-run; the audit saw losses part by 2e-7 from the first step).
  const std::string step4 = old + "/train/ckpt/step_00000004";
  checkpoint::ModelMeta meta = checkpoint::read_model_meta(step4);
  BOOST_TEST(meta.git_sha == provenance().git_sha);
  BOOST_TEST(meta.version == provenance().version);
  BOOST_TEST(build_change_note(step4, meta).empty());
  meta.git_sha = "0123456789ab";
  const std::string note = build_change_note(step4, meta);
  BOOST_TEST(note.find("written by cairn-train " + meta.version + " (git 0123456789ab), this is " +
                       provenance().version + " (git " + provenance().git_sha + ")") != std::string::npos,
             note);
  meta.git_sha.clear();  // written before the attribute, or by a tool that did not record it
  BOOST_TEST(build_change_note(step4, meta).empty());
}

// ---------------------------------------------------------------- one trainer per run directory

// Another process holding <run>/train/LOCK (here: this test, through its own open file): the trainer stops before it
// writes anything, on every rank, naming the run and the holder; once the holder lets go the run proceeds.
BOOST_AUTO_TEST_CASE(a_locked_run_directory_is_refused) {
  const std::string run = scratch() + "/locked";
  int fd = -1;
  if (mpi::rank() == 0) {
    fs::create_directories(run + "/train");
    fd = ::open((run + "/train/LOCK").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    BOOST_REQUIRE(fd >= 0);
    BOOST_REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
    const std::string who = "pid 4242 on elsewhere (started 2026-01-01T00:00:00Z)\n";
    BOOST_REQUIRE(::write(fd, who.data(), who.size()) == static_cast<ssize_t>(who.size()));
  }
  mpi::barrier();
  const auto [code, msg] = run_error(small_config(run));
  BOOST_TEST(code == kExitRuntime);
  BOOST_TEST(msg.find("another cairn-train is running in \"" + run + "\"") != std::string::npos, msg);
  BOOST_TEST(msg.find("pid 4242 on elsewhere") != std::string::npos, msg);
  mpi::barrier();
  BOOST_TEST(!fs::exists(run + "/train/metrics.jsonl"));
  BOOST_TEST(!fs::exists(run + "/train/ckpt"));
  if (mpi::rank() == 0) ::close(fd);  // the holder exits
  mpi::barrier();
  BOOST_TEST(run_train(small_config(run, {"train.steps=2"})).exit_code == 0);
  mpi::barrier();
  // Released with the trainer: the file stays, without a holder line.
  BOOST_TEST(fs::exists(run + "/train/LOCK"));
  BOOST_TEST(fs::file_size(run + "/train/LOCK") == 0u);
}

// ZeRO-3 over the world's ranks, each running the same micro-batches: the embedding and the final norm are gathered
// once per step (both ends of every pass use them), each layer once per forward and once per backward, and every use
// but the step's first finds its gather already started. Losses and the gradient shard are the resident model's,
// bitwise, also in a step after the parameters changed (nothing kept from the step before). ZeRO needs a group of
// two or more (the trainer runs one rank unsharded): this case runs in the np2 entry.
static boost::test_tools::assertion_result two_or_more_ranks(boost::unit_test::test_unit_id) {
  return mpi::size() >= 2;
}
// The tiny GPT the ZeRO unit tests below shard.
static gpt::GptConfig zero_test_model(int layers) {
  gpt::GptConfig cfg;
  cfg.layers = layers;
  cfg.hidden = 32;
  cfg.heads = 2;
  cfg.seq_len = 16;
  cfg.vocab = 64;
  cfg.vocab_real = 61;
  return cfg;
}
BOOST_AUTO_TEST_CASE(zero3_gathers_the_ends_once_per_step_and_prefetches_the_rest,
                     *boost::unit_test::precondition(two_or_more_ranks)) {
  const gpt::GptConfig cfg = zero_test_model(3);
  const kernels::Backend& be = kernels::cpu_backend();
  const int B = 2, T = 16, micro = 3;
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    inputs[i] = (i * 7 + 3) % cfg.vocab_real;
    targets[i] = (i * 11 + 5) % cfg.vocab_real;
  }
  gpt::Model resident(cfg, be);
  resident.init(3);
  const size_t n = resident.num_params();
  std::vector<float> params(n), want(n);
  resident.copy_params_to_host(params.data());

  gpt::ShardSpec spec;
  spec.lent_grads = spec.lent_params = true;
  gpt::Model lent(cfg, be, true, spec);
  const Shards sh = Shards::over(MPI_COMM_WORLD, n, true);
  BOOST_TEST_REQUIRE(sh.size == 2);
  std::vector<float> param_shard(params.begin() + sh.lo, params.begin() + sh.hi), shard_grads(sh.count());
  ZeroUnits zero(MPI_COMM_WORLD, sh, lent.units(), be, true, param_shard.data(), shard_grads.data(), -1);
  lent.set_unit_storage(zero.storage());
  const auto units = lent.units();
  size_t layer_floats = 0;
  for (size_t u = 1; u + 1 < units.size(); ++u) layer_floats += units[u].second;

  for (int step = 0; step < 2; ++step) {
    if (step == 1) {  // an update between the steps: every parameter changes
      for (float& p : params) p *= 0.5f;
      for (size_t i = 0; i < sh.count(); ++i) param_shard[i] = params[sh.lo + i];
      resident.copy_params_from_host(params.data());
    }
    resident.zero_grad();
    const float want_loss = resident.forward(inputs.data(), targets.data(), B, T);
    resident.backward();
    resident.copy_grads_to_host(want.data());
    zero.begin_step();
    for (int k = 0; k < micro; ++k) {
      BOOST_TEST(lent.forward(inputs.data(), targets.data(), B, T) == want_loss);
      lent.backward();
    }
    const ZeroUnits::GatherStats stats = zero.gather_stats();
    zero.finish_step();
    BOOST_TEST(stats.gathers == 2 + 2 * cfg.layers * micro);
    BOOST_TEST(stats.unprefetched == 1);
    BOOST_TEST(stats.floats == units.front().second + units.back().second + 2 * micro * layer_floats);
    // each micro-batch adds the two ranks' sum (g + g is exact) into the shard
    int mismatched = 0;
    for (size_t i = 0; i < sh.count(); ++i) {
      const float g = want[sh.lo + i], part = g + g;
      float acc = 0;
      for (int k = 0; k < micro; ++k) acc += part;
      mismatched += shard_grads[i] != acc;
    }
    BOOST_TEST(mismatched == 0, "step " << step);
  }
}

// ZeRO-3 keeps the embedding and final norm gathered between passes; validation passes after every step and a
// restore to an earlier checkpoint (two NaN steps in a row) must not see parameters gathered before the update or
// the load: the losses, validation losses and final weights are ZeRO-1's within fp32 reordering.
BOOST_AUTO_TEST_CASE(zero3_with_validation_and_a_restore_matches_zero1,
                     *boost::unit_test::precondition(two_or_more_ranks)) {
  std::string base = scratch();
  auto run = [&](const std::string& name, int zero) {
    auto seen = std::make_shared<int>(0);
    TrainHooks h = with_params();
    h.fault = [seen](int64_t step) {
      if (step >= 7 && step <= 8 && *seen < 2) {
        ++*seen;
        return Fault::NanGrad;
      }
      return Fault::None;
    };
    return run_train(small_config(base + "/" + name,
                                  {"train.checkpoint_every=5", "train.max_consecutive_skips=1", "train.val_every=1",
                                   "train.val_batches=1", "parallel.zero=" + std::to_string(zero)}),
                     h);
  };
  const TrainResult z1 = run("restore_z1", 1), z3 = run("restore_z3", 3);
  BOOST_TEST(z3.restores == 1);
  BOOST_TEST(z3.final_step == 12);
  BOOST_REQUIRE_EQUAL(z3.losses.size(), z1.losses.size());
  BOOST_REQUIRE_EQUAL(z3.val_losses.size(), z1.val_losses.size());
  BOOST_TEST(!z3.val_losses.empty());
  for (size_t i = 0; i < z1.losses.size(); ++i)
    BOOST_TEST(z3.losses[i] == z1.losses[i], boost::test_tools::tolerance(1e-5));
  for (size_t i = 0; i < z1.val_losses.size(); ++i)
    BOOST_TEST(z3.val_losses[i] == z1.val_losses[i], boost::test_tools::tolerance(1e-5));
  if (mpi::rank() == 0) {
    BOOST_REQUIRE_EQUAL(z3.params.size(), z1.params.size());
    double worst = 0;
    for (size_t i = 0; i < z1.params.size(); ++i)
      worst = std::max(worst, std::abs(double(z3.params[i]) - z1.params[i]) / (std::abs(double(z1.params[i])) + 1e-3));
    BOOST_TEST(worst < 1e-4);
  }
}

// A middle pipeline piece under ZeRO-3 (no embedding, no head): a schedule that calls prefetch_params with the
// model's first unit of the pass it runs next (cairn-train does, before each pipeline receive) never waits for a
// gather from the start; without the calls each pass's first layer was gathered on the spot (2 per micro-batch).
BOOST_AUTO_TEST_CASE(zero3_pipeline_piece_prefetches_each_pass_first_unit,
                     *boost::unit_test::precondition(two_or_more_ranks)) {
  const gpt::GptConfig cfg = zero_test_model(4);
  const kernels::Backend& be = kernels::cpu_backend();
  gpt::ShardSpec spec;
  spec.first_layer = 1;
  spec.num_layers = 2;
  spec.has_embedding = spec.has_head = false;
  spec.lent_grads = spec.lent_params = true;
  gpt::Model piece(cfg, be, true, spec);
  BOOST_TEST(piece.first_unit(false) == 0);
  BOOST_TEST(piece.first_unit(true) == 1);
  const size_t n = piece.num_params();
  std::vector<float> values(n);
  piece.init_values(5, 0, n, values.data());
  const Shards sh = Shards::over(MPI_COMM_WORLD, n, true);
  BOOST_TEST_REQUIRE(sh.size == 2);
  std::vector<float> param_shard(values.begin() + sh.lo, values.begin() + sh.hi), shard_grads(sh.count());
  ZeroUnits zero(MPI_COMM_WORLD, sh, piece.units(), be, true, param_shard.data(), shard_grads.data(), -1);
  piece.set_unit_storage(zero.storage());
  const int B = 2, T = 16, micro = 3;
  const size_t rows = piece.stream_rows(B, T) * static_cast<size_t>(cfg.hidden);
  std::vector<float> input(rows), output_grad(rows);
  for (size_t i = 0; i < rows; ++i) {
    input[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
    output_grad[i] = 0.001f * static_cast<float>(i % 89) - 0.04f;
  }
  for (bool announce : {false, true}) {
    zero.begin_step();
    for (int k = 0; k < micro; ++k) {
      if (announce) zero.prefetch_params(piece.first_unit(false));
      std::copy(input.begin(), input.end(), piece.stage_input(B, T));
      piece.forward(nullptr, nullptr, B, T);
      if (announce) zero.prefetch_params(piece.first_unit(true));
      gpt::BackwardOptions o;
      o.output_grad = output_grad.data();
      piece.backward(o);
    }
    const ZeroUnits::GatherStats stats = zero.gather_stats();
    zero.finish_step();
    BOOST_TEST(stats.gathers == 2 * spec.num_layers * micro, "announce " << announce);
    BOOST_TEST(stats.unprefetched == (announce ? 0 : 2 * micro), "announce " << announce);
  }
}

// Last: the shared scratch directory goes.
BOOST_AUTO_TEST_CASE(cleanup) {
  mpi::barrier();
  if (mpi::rank() == 0) fs::remove_all(scratch());
}
