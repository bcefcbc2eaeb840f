// cairn-train's checkpoints (train_checkpoint.h): resume choice, write + seal + prune, load.
#include "train_checkpoint.h"

#include <xxhash.h>

#include <filesystem>
#include <optional>
#include <vector>

#include "backend_buffer.h"
#include "cairn/checkpoint.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/records.h"
#include "loader.h"
#include "step_trace.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cairn::train {

std::string data_fingerprint(const shards::Dataset& ds) {
  std::string text = strprintf("vocab %u eot %u", ds.vocab_size(), ds.eot_id());
  for (size_t i = 0; i < ds.num_shards(); ++i) {
    const shards::ShardInfo& info = ds.info(i);
    text += strprintf(";%llu %s", static_cast<unsigned long long>(info.tokens), shards::hex64(info.xxh64).c_str());
  }
  return shards::hex64(XXH64(text.data(), text.size(), 0));
}

json train_state(const Settings& s, const TrainProgress& p, const StepGuard& g) {
  records::TrainState st;
  st.step = p.step;
  st.tokens = p.tokens;
  st.batch = p.batch;
  st.adam_step = p.adam_step;
  st.skipped_total = g.skipped_total;
  st.consecutive_skips = g.consecutive;
  st.spikes = records::TrainState::Spikes{{g.spikes.loss.begin(), g.spikes.loss.end()},
                                          {g.spikes.norm.begin(), g.spikes.norm.end()}};
  st.seed = s.seed;
  st.world_size = s.world;
  st.zero = s.zero;
  st.layout = parallel::describe(s.layout);
  st.dp = s.layout.dp;
  st.micro_batch = s.micro;
  st.val_rows = s.val_rows;
  st.data_fingerprint = s.data_fingerprint;
  st.data_tokens = s.data_tokens;
  return st.to_json();
}

std::string TrainCheckpoints::resume_dir(int64_t below) const {
  std::string resume_dir;
  if (s_.resume == "auto") {
    if (s_.rank == 0) {
      auto e = checkpoint::find_newest_complete(s_.ckpt_dir, true, below);
      if (e) resume_dir = e->dir;
    }
    resume_dir = mpi::broadcast_string(resume_dir);
    // Sealed checkpoints exist (DONE written) but none is usable: starting over would overwrite the run's metrics
    // and bury its history under new checkpoints; the user decides (each was named with its problem above). A
    // directory without DONE is a write the preemption interrupted, and a fresh start is right.
    if (resume_dir.empty()) {
      size_t damaged = 0;
      if (s_.rank == 0)
        for (const checkpoint::Entry& e : checkpoint::list(s_.ckpt_dir, false)) damaged += e.sealed ? 1 : 0;
      if (mpi::broadcast_string(std::to_string(damaged)) != "0") {
        throw RuntimeError(file_message("no usable checkpoint in", s_.ckpt_dir,
                                        strprintf("%zu sealed checkpoint(s), all damaged (see the warnings above); "
                                                  "resume from a good copy with --resume DIR, move "
                                                  "them away to start over, or use another --out",
                                                  damaged)));
      }
    }
  } else if (s_.resume == "none") {
    auto all = checkpoint::list(s_.ckpt_dir, false);
    if (!all.empty()) {
      throw UsageError(file_message("refusing to start fresh over existing checkpoints in", s_.ckpt_dir,
                                    "use [train] resume = \"auto\" or another --out"));
    }
  } else {
    // A path that is not there or not a checkpoint is the user's to fix (exit 2); a sealed one whose files fail
    // their checksums is damaged data (exit 1, as when it fails to load).
    resume_dir = s_.resume;
    if (!path_exists(resume_dir))
      throw UsageError(file_message("cannot resume from", resume_dir, "no such checkpoint directory"));
    if (!checkpoint::is_sealed(resume_dir)) {
      throw UsageError(file_message("cannot resume from", resume_dir,
                                    "no DONE marker (not a checkpoint directory, or its write was interrupted)"));
    }
    std::string problem = checkpoint::check_dir(resume_dir);
    if (!problem.empty()) throw RuntimeError(file_message("cannot resume from", resume_dir, problem));
  }
  return resume_dir;
}

void TrainCheckpoints::load(const std::string& dir, TrainProgress& p, StepGuard& g) const {
  // Each rank reads its own part (rank 1 its optimizer slice), so one rank can fail alone: all agree, then all throw
  // the same error type (the caller's fallback must be collective too).
  int code = 0;
  std::string msg;
  try {
    load_files(dir, p, g);
  } catch (const UsageError& e) {
    code = kExitUsage;
    msg = e.what();
  } catch (const DamagedCheckpoint& e) {
    code = kExitRuntime;
    msg = e.what();
  } catch (const std::exception& e) {
    code = kExitRuntime;
    msg = file_message("cannot resume from", dir, e.what());
  }
  try {
    mpi::agree_or_throw(code == 0, msg, code);
  } catch (const Error& e) {
    if (e.code() == kExitUsage) throw UsageError(e.what());
    throw DamagedCheckpoint(e.what());
  }
}

void TrainCheckpoints::load_files(const std::string& dir, TrainProgress& p, StepGuard& g) const {
  std::lock_guard<std::recursive_mutex> lk(hdf5_mutex());
  // Anything but the model-shape check below is the files' fault: damaged data, not a usage error.
  auto damaged = [&dir](const std::exception& e) {
    return DamagedCheckpoint(file_message("cannot resume from", dir, e.what()));
  };
  checkpoint::ModelMeta meta;
  try {
    meta = checkpoint::read_model_meta(dir);
  } catch (const std::exception& e) {
    throw damaged(e);
  }
  const gpt::GptConfig& c = meta.config;
  const gpt::GptConfig& want = config_;
  if (c.layers != want.layers || c.hidden != want.hidden || c.heads != want.heads || c.vocab != want.vocab ||
      c.seq_len != want.seq_len) {
    throw UsageError(
        file_message("cannot resume from", dir,
                     strprintf("checkpoint model (layers %d, hidden %d, heads %d, seq %d, vocab %d) differs "
                               "from [model] (layers %d, hidden %d, heads %d, seq %d, vocab %d)",
                               c.layers, c.hidden, c.heads, c.seq_len, c.vocab, want.layers, want.hidden, want.heads,
                               want.seq_len, want.vocab)));
  }
  check_data(dir, meta);
  try {
    load_state(dir, meta, p, g);
  } catch (const std::exception& e) {
    throw damaged(e);
  }
}

// A checkpoint trained on other data: from here on each step would read other windows than the run's (bitwise resume
// and the run's data order are gone). Refused (exit 2) unless [train] on_data_change = "warn"; a checkpoint written
// before the fingerprint was recorded is not compared.
void TrainCheckpoints::check_data(const std::string& dir, const checkpoint::ModelMeta& meta) const {
  std::optional<std::string> fingerprint;
  std::optional<uint64_t> tokens;
  try {
    const records::TrainState st = records::TrainState::from_json(
        JsonFields(meta.train_state, join_path(dir, "model.h5"), "checkpoint train_state"));
    fingerprint = st.data_fingerprint;
    tokens = st.data_tokens;
  } catch (const std::exception& e) {
    throw DamagedCheckpoint(file_message("cannot resume from", dir, e.what()));
  }
  if (!fingerprint) {
    if (s_.rank == 0)
      CAIRN_LOG_INFO("\"%s\" records no data fingerprint (written before cairn-train recorded one): its data is not "
                     "compared with [data] path",
                     dir.c_str());
    return;
  }
  if (*fingerprint == s_.data_fingerprint) return;
  const std::string what = strprintf(
      "it was trained on other data than [data] path \"%s\" (data fingerprint %s, %llu tokens, in the checkpoint; %s, "
      "%llu tokens, now)",
      s_.data_dir.c_str(), fingerprint->c_str(), static_cast<unsigned long long>(tokens.value_or(0)),
      s_.data_fingerprint.c_str(), static_cast<unsigned long long>(s_.data_tokens));
  if (s_.refuse_data_change) {
    throw UsageError(file_message("cannot resume from", dir,
                                  what + ": the steps after it would not read the run's windows; point [data] path at "
                                         "the run's dataset, or set [train] on_data_change = \"warn\" to continue on "
                                         "this data"));
  }
  if (s_.rank == 0)
    CAIRN_LOG_WARN("resuming \"%s\": %s; continuing on this data ([train] on_data_change = \"warn\"): the data order "
                   "from here on is not the run's",
                   dir.c_str(), what.c_str());
}

// The tensors, moments and train_state of a checkpoint whose model matches [model].
void TrainCheckpoints::load_state(const std::string& dir, const checkpoint::ModelMeta& meta, TrainProgress& p,
                                  StepGuard& g) const {
  // The whole model, then each chunk's pieces of it; the moments of [lo, hi) of each chunk likewise.
  const std::vector<gpt::TensorInfo> whole_tensors = gpt::piece_tensors(config_, gpt::ShardSpec{});
  const size_t N = gpt::count_params(config_);
  std::vector<float> full(N), fm, fv;
  checkpoint::read_model(dir, whole_tensors, full.data());
  int64_t adam_step = 0;
  if (!whole()) {
    fm.resize(N);
    fv.resize(N);
    checkpoint::read_optim_range(dir, 0, N, fm.data(), fv.data(), &adam_step);
  }
  for (Chunk& ch : chunks_) {
    std::vector<float> local(ch.num_params()), m(ch.shards.count()), v(ch.shards.count());
    take_from_full(ch.map, 0, local.size(), full.data(), local.data());
    if (ch.model->params()) backend_.copy_to_device(ch.model->params(), local.data(), local.size() * sizeof(float));
    if (ch.param_shard.data())  // ZeRO-3: the rank's shard is the master copy
      backend_.copy_to_device(ch.param_shard.data(), local.data() + ch.shards.lo, ch.shards.count() * sizeof(float));
    if (whole()) {
      checkpoint::read_optim_range(dir, ch.shards.lo, ch.shards.count(), m.data(), v.data(), &adam_step);
    } else {
      take_from_full(ch.map, ch.shards.lo, ch.shards.hi, fm.data(), m.data());
      take_from_full(ch.map, ch.shards.lo, ch.shards.hi, fv.data(), v.data());
    }
    if (!m.empty()) {
      backend_.copy_to_device(ch.m.data(), m.data(), m.size() * sizeof(float));
      backend_.copy_to_device(ch.v.data(), v.data(), v.size() * sizeof(float));
    }
  }
  // Checkpoints written before a key existed lack it: the model file's own figures, or a fresh start's.
  const records::TrainState st = records::TrainState::from_json(
      JsonFields(meta.train_state, join_path(dir, "model.h5"), "checkpoint train_state"));
  p.step = st.step.value_or(meta.step);
  p.tokens = st.tokens.value_or(meta.tokens);
  p.batch = st.batch.value_or(p.step);
  p.adam_step = st.adam_step.value_or(adam_step);
  g.skipped_total = st.skipped_total.value_or(0);
  g.consecutive = static_cast<int>(st.consecutive_skips.value_or(0));
  g.spikes = SpikeWindow{};
  if (st.spikes) {
    g.spikes.loss.assign(st.spikes->loss.begin(), st.spikes->loss.end());
    g.spikes.norm.assign(st.spikes->norm.begin(), st.spikes->norm.end());
  }
}

void TrainCheckpoints::remove_leftovers() const {
  if (s_.rank == 0) {
    std::string names;
    for (const std::string& dir : checkpoint::remove_unsealed_leftovers(s_.ckpt_dir))
      names += (names.empty() ? "" : ", ") + fs::path(dir).filename().string();
    if (!names.empty())
      CAIRN_LOG_WARN("removed step directories without DONE older than the newest sealed checkpoint in \"%s\" (left "
                     "by an interrupted prune): %s",
                     s_.ckpt_dir.c_str(), names.c_str());
  }
  mpi::barrier();
}

std::string TrainCheckpoints::write(const TrainProgress& p, const StepGuard& g) const {
  std::string final_dir = checkpoint::step_dir(s_.ckpt_dir, p.step);
  std::string tmp = join_path(s_.ckpt_dir, strprintf(".tmp_step_%08lld", static_cast<long long>(p.step)));
  double t0 = monotonic_seconds();
  if (s_.rank == 0) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    ensure_dir(tmp);
  }
  mpi::barrier();
  bool ok = true;
  std::string err;
  try {
    write_files(tmp, p, g);
  } catch (const std::exception& e) {
    ok = false;
    err = e.what();
  }
  mpi::agree_or_throw(ok, err, kExitRuntime);
  if (s_.rank == 0) {
    checkpoint::seal(tmp, final_dir, p.step, s_.world);
    checkpoint::prune(s_.ckpt_dir, s_.keep_checkpoints, s_.keep_every);
  }
  mpi::barrier();
  CAIRN_LOG_INFO("checkpoint \"%s\" written in %.2f s", final_dir.c_str(), monotonic_seconds() - t0);
  return final_dir;
}

// model.h5 (rank 0) and this rank's optimizer file into tmp. Collective when pieces are assembled.
void TrainCheckpoints::write_files(const std::string& tmp, const TrainProgress& p, const StepGuard& g) const {
  const size_t N = gpt::count_params(config_);
  const bool dp0 = groups_.first_replica();  // data- and context-parallel rank 0: one copy of each piece
  std::vector<float> params, m, v;
  if (whole()) {
    if (s_.rank == 0) params = to_host(backend_, chunks_.front().model->params(), N);
  } else {
    // Whole tensors from every rank's pieces: one data-parallel replica speaks for the parameters; the moments come
    // from each rank's ZeRO slice (or from data-parallel rank 0 without ZeRO).
    params.assign(N, 0.0f);
    m.assign(N, 0.0f);
    v.assign(N, 0.0f);
    for (const Chunk& ch : chunks_) {
      if (ch.param_shard.data()) {  // ZeRO-3: each data-parallel rank speaks for its shard
        const std::vector<float> local = to_host(backend_, ch.param_shard.data(), ch.shards.count());
        add_to_full(ch.map, ch.shards.lo, ch.shards.hi, local.data(), params.data());
      } else if (dp0) {
        const std::vector<float> local = to_host(backend_, ch.model->params(), ch.num_params());
        add_to_full(ch.map, 0, local.size(), local.data(), params.data());
      }
      if (ch.shards.shard > 0 || dp0) {
        const std::vector<float> hm = to_host(backend_, ch.m.data(), ch.shards.count());
        const std::vector<float> hv = to_host(backend_, ch.v.data(), ch.shards.count());
        add_to_full(ch.map, ch.shards.lo, ch.shards.hi, hm.data(), m.data());
        add_to_full(ch.map, ch.shards.lo, ch.shards.hi, hv.data(), v.data());
      }
    }
    reduce_to_root(params, MPI_COMM_WORLD);
    reduce_to_root(m, MPI_COMM_WORLD);
    reduce_to_root(v, MPI_COMM_WORLD);
  }
  std::lock_guard<std::recursive_mutex> lk(hdf5_mutex());
  if (s_.rank == 0) {
    checkpoint::ModelMeta meta;
    meta.config = config_;
    meta.step = p.step;
    meta.tokens = p.tokens;
    meta.train_state = train_state(s_, p, g);
    meta.config_toml = cfg_.to_toml();
    checkpoint::write_model(join_path(tmp, "model.h5"), meta, gpt::piece_tensors(config_, gpt::ShardSpec{}),
                            params.data());
  }
  checkpoint::OptimShard os;
  os.total = N;
  os.adam_step = p.adam_step;
  const Chunk& ch = chunks_.front();
  if (whole()) {
    // Without ZeRO every rank holds the same moments: rank 0 writes them, the others only their state.
    const bool owns = ch.shards.shard > 0 || s_.rank == 0;
    os.offset = owns ? ch.shards.lo : 0;
    os.count = owns ? ch.shards.count() : 0;
    if (owns) {
      os.m = to_host(backend_, ch.m.data(), ch.shards.count());
      os.v = to_host(backend_, ch.v.data(), ch.shards.count());
    }
  } else if (s_.rank == 0) {
    os.offset = 0;
    os.count = N;
    os.m = std::move(m);
    os.v = std::move(v);
  }
  os.rank_state = {{"rank", s_.rank}, {"batch", p.batch}};
  checkpoint::write_optim(join_path(tmp, checkpoint::optim_file_name(s_.rank)), os);
}

}  // namespace cairn::train
