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
          {"seed", s.seed}, {"world_size", s.world}, {"zero", s.zero}};
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
  const size_t N = shards_.N;
  std::vector<float> host(N);
  checkpoint::read_model(dir, model_.tensors(), host.data());
  backend_.copy_to_device(model_.params(), host.data(), N * sizeof(float));
  int64_t adam_step = 0;
  std::vector<float> m(shards_.count()), v(shards_.count());
  checkpoint::read_optim_range(dir, shards_.lo, shards_.count(), m.data(), v.data(), &adam_step);
  if (!m.empty()) {
    backend_.copy_to_device(m_, m.data(), m.size() * sizeof(float));
    backend_.copy_to_device(v_, v.data(), v.size() * sizeof(float));
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
    std::lock_guard<std::mutex> lk(hdf5_mutex());
    if (s_.rank == 0) {
      checkpoint::ModelMeta meta;
      meta.config = config_;
      meta.step = p.step;
      meta.tokens = p.tokens;
      meta.train_state = train_state(s_, p, g);
      meta.config_toml = cfg_.to_toml();
      checkpoint::write_model(join_path(tmp, "model.h5"), meta, model_.tensors(),
                              to_host(backend_, model_.params(), shards_.N).data());
    }
    checkpoint::OptimShard os;
    // Without ZeRO every rank holds the same moments: rank 0 writes them, the others only their state.
    bool owns = s_.zero == 1 || s_.rank == 0;
    os.offset = owns ? shards_.lo : 0;
    os.count = owns ? shards_.count() : 0;
    os.total = shards_.N;
    os.adam_step = p.adam_step;
    if (owns) {
      os.m = to_host(backend_, m_, shards_.count());
      os.v = to_host(backend_, v_, shards_.count());
    }
    os.rank_state = {{"rank", s_.rank}, {"batch", p.batch}};
    checkpoint::write_optim(join_path(tmp, checkpoint::optim_file_name(s_.rank)), os);
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

}  // namespace cairn::train
