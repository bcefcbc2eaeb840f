// cairn-train's checkpoints (train_checkpoint.h): resume choice, write + seal + prune, load.
#include "train_checkpoint.h"

#include <filesystem>
#include <vector>

#include "cairn/checkpoint.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "backend_buffer.h"
#include "loader.h"
#include "step_trace.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cairn::train {

json train_state(const Settings& s, const TrainProgress& p, const StepGuard& g) {
  return {{"step", p.step}, {"tokens", p.tokens}, {"batch", p.batch}, {"adam_step", p.adam_step},
          {"skipped_total", g.skipped_total}, {"consecutive_skips", g.consecutive}, {"spikes", g.spikes.to_json()},
          {"seed", s.seed}, {"world_size", s.world}, {"zero", s.zero}, {"layout", parallel::describe(s.layout)},
          {"dp", s.layout.dp}, {"micro_batch", s.micro}, {"val_rows", s.val_rows}};
}

std::string TrainCheckpoints::resume_dir() const {
  std::string resume_dir;
  if (s_.resume == "auto") {
    if (s_.rank == 0) {
      auto e = checkpoint::find_newest_complete(s_.ckpt_dir);
      if (e) resume_dir = e->dir;
    }
    resume_dir = mpi::broadcast_string(resume_dir);
  } else if (s_.resume == "none") {
    auto all = checkpoint::list(s_.ckpt_dir, false);
    if (!all.empty()) {
      throw UsageError(file_message("refusing to start fresh over existing checkpoints in", s_.ckpt_dir,
                                    "use [train] resume = \"auto\" or another --out"));
    }
  } else {
    resume_dir = s_.resume;
    std::string problem = checkpoint::check_dir(resume_dir);
    if (!problem.empty()) throw UsageError(file_message("cannot resume from", resume_dir, problem));
  }
  return resume_dir;
}

void TrainCheckpoints::load(const std::string& dir, TrainProgress& p, StepGuard& g) const {
  std::lock_guard<std::mutex> lk(hdf5_mutex());
  checkpoint::ModelMeta meta = checkpoint::read_model_meta(dir);
  const gpt::GptConfig& c = meta.config;
  const gpt::GptConfig& want = config_;
  if (c.layers != want.layers || c.hidden != want.hidden || c.heads != want.heads || c.vocab != want.vocab ||
      c.seq_len != want.seq_len) {
    throw UsageError(file_message("cannot resume from", dir,
                                  strprintf("checkpoint model (layers %d, hidden %d, heads %d, seq %d, vocab %d) differs "
                                            "from [model] (layers %d, hidden %d, heads %d, seq %d, vocab %d)",
                                            c.layers, c.hidden, c.heads, c.seq_len, c.vocab, want.layers, want.hidden,
                                            want.heads, want.seq_len, want.vocab)));
  }
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
  const json& st = meta.train_state;
  p.step = st.value("step", meta.step);
  p.tokens = st.value("tokens", meta.tokens);
  p.batch = st.value("batch", p.step);
  p.adam_step = st.value("adam_step", adam_step);
  g.skipped_total = st.value("skipped_total", int64_t{0});
  g.consecutive = st.value("consecutive_skips", 0);
  g.spikes = st.contains("spikes") ? SpikeWindow::from_json(st["spikes"]) : SpikeWindow{};
}

std::string TrainCheckpoints::write(const TrainProgress& p, const StepGuard& g) const {
  std::string final_dir = checkpoint::step_dir(s_.ckpt_dir, p.step);
  std::string tmp = join_path(s_.ckpt_dir, strprintf(".tmp_step_%08lld", static_cast<long long>(p.step)));
  double t0 = now_s();
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
  CAIRN_LOG_INFO("checkpoint \"%s\" written in %.2f s", final_dir.c_str(), now_s() - t0);
  return final_dir;
}

// model.h5 (rank 0) and this rank's optimizer file into tmp. Collective when pieces are assembled.
void TrainCheckpoints::write_files(const std::string& tmp, const TrainProgress& p, const StepGuard& g) const {
  const size_t N = gpt::count_params(config_);
  const bool dp0 = groups_.coords.dp == 0;
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
  std::lock_guard<std::mutex> lk(hdf5_mutex());
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
