// cairn-train's checkpoints (train_checkpoint.h): resume choice, write + seal + prune, load.
#include "train_checkpoint.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <toml++/toml.h>

#include "backend_buffer.h"
#include "cairn/checkpoint.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "cairn/records.h"
#include "cairn/shards.h"
#include "loader.h"
#include "piece_io.h"
#include "step_trace.h"
#include "trainer.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cairn::train {

namespace {

// What this rank speaks for when the whole model is assembled, per chunk, copied to the host: the parameters (its
// ZeRO-3 shard, or the whole piece on the first data-parallel replica) and, `moments`, the AdamW moments (its ZeRO
// slice, or the whole slice on the first replica without ZeRO).
struct SpokenPieces {
  HostFloats params, m, v;
  size_t params_lo = 0, params_hi = 0, lo = 0, hi = 0;
};

std::vector<SpokenPieces> spoken_pieces(const std::vector<Chunk>& chunks, const kernels::Backend& backend,
                                        bool first_replica, bool moments) {
  std::vector<SpokenPieces> out(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    const Chunk& ch = chunks[c];
    SpokenPieces& h = out[c];
    if (ch.param_shard.data()) {
      h.params = HostFloats(backend, ch.param_shard.data(), ch.shards.count());
      h.params_lo = ch.shards.lo;
      h.params_hi = ch.shards.hi;
    } else if (first_replica) {
      h.params = HostFloats(backend, ch.model->params(), ch.num_params());
      h.params_hi = ch.num_params();
    }
    if (moments && (ch.shards.shard > 0 || first_replica)) {
      h.m = HostFloats(backend, ch.m.data(), ch.shards.count());
      h.v = HostFloats(backend, ch.v.data(), ch.shards.count());
      h.lo = ch.shards.lo;
      h.hi = ch.shards.hi;
    }
  }
  return out;
}

// This rank's contributions to whole tensor t: parameters, first and second moments.
void contributions(const std::vector<Chunk>& chunks, const std::vector<SpokenPieces>& host, const gpt::TensorInfo& t,
                   std::vector<Contribution>& params, std::vector<Contribution>& m, std::vector<Contribution>& v) {
  for (size_t c = 0; c < chunks.size(); ++c) {
    const gpt::TensorInfo* piece = chunks[c].model->find_tensor(t.name);
    if (!piece) continue;
    const SpokenPieces& h = host[c];
    const size_t end = piece->offset + piece->size;
    size_t a = std::max(piece->offset, h.params_lo), b = std::min(end, h.params_hi);
    if (a < b) params.push_back({segments(chunks[c].map, a, b, true), h.params.data(), h.params_lo});
    a = std::max(piece->offset, h.lo);
    b = std::min(end, h.hi);
    if (a < b) {
      m.push_back({segments(chunks[c].map, a, b, true), h.m.data(), h.lo});
      v.push_back({m.back().segs, h.v.data(), h.lo});
    }
  }
}

}  // namespace

void TrainCheckpoints::check_tensor_sizes() const {
  if (s_.world <= 1 || whole()) return;  // whole: rank 0 writes its own copy, resume broadcasts in slices
  for (const gpt::TensorInfo& t : gpt::piece_tensors(config_, gpt::ShardSpec{}))
    if (t.size > static_cast<size_t>(INT_MAX))
      throw UsageError(strprintf("model tensor %s has %zu elements; a checkpoint of this layout (%s) assembles whole "
                                 "tensors from their pieces through MPI, whose counts stop at 2^31 - 1 (cairn-train's "
                                 "limit; data-parallel and ZeRO-1/2 layouts are not bound by it)",
                                 t.name.c_str(), t.size, parallel::describe(s_.layout).c_str()));
}

std::vector<float> TrainCheckpoints::assemble_params() const {
  if (whole()) {  // every rank holds the whole model
    if (s_.rank != 0) return {};
    const Chunk& ch = chunks_.front();
    return to_host(backend_, ch.model->params(), ch.num_params());
  }
  const std::vector<SpokenPieces> host = spoken_pieces(chunks_, backend_, groups_.first_replica(), false);
  std::vector<float> full, tensor;
  if (s_.rank == 0) full.resize(gpt::count_params(config_));
  for (const gpt::TensorInfo& t : gpt::piece_tensors(config_, gpt::ShardSpec{})) {
    std::vector<Contribution> params, m, v;
    contributions(chunks_, host, t, params, m, v);
    gather_to_root(params, t.offset, t.size, tensor, MPI_COMM_WORLD);
    if (s_.rank == 0) std::copy(tensor.begin(), tensor.end(), full.begin() + static_cast<std::ptrdiff_t>(t.offset));
  }
  return full;
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
  if (!s.tokenizer_id.empty()) st.tokenizer_id = s.tokenizer_id;
  st.data_tokens = s.data_tokens;
  st.global_batch = s.global_batch;
  st.val_windows = s.val_windows;
  st.lr_schedule = records::TrainState::LrSchedule{s.lr, s.min_lr, s.warmup, s.decay_length(), s.schedule};
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
  std::vector<LoadedChunk> loaded;
  // Rank 0 reads the optimizer files' headers once and hands the list round (every rank opening every rank's file
  // is world^2 opens), before any rank can fail alone: the broadcast must not wait for a rank that threw.
  json listing;
  if (s_.rank == 0) {
    try {
      std::lock_guard<std::recursive_mutex> lk(hdf5_mutex());
      listing["parts"] = json::array();
      for (const checkpoint::OptimPart& part : checkpoint::optim_parts(dir))
        listing["parts"].push_back({part.file, part.offset, part.count, part.adam_step});
    } catch (const std::exception& e) {
      listing = {{"error", file_message("cannot resume from", dir, e.what())}};
    }
  }
  listing = json::parse(mpi::broadcast_string(s_.rank == 0 ? listing.dump() : std::string()));
  std::vector<checkpoint::OptimPart> parts;
  if (listing.contains("parts"))
    for (const json& j : listing["parts"])
      parts.push_back({j[0].get<std::string>(), j[1].get<uint64_t>(), j[2].get<uint64_t>(), j[3].get<int64_t>()});
  try {
    if (listing.contains("error")) throw DamagedCheckpoint(listing["error"].get<std::string>());
    load_files(dir, parts, p, g, loaded);
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
  distribute(loaded, p);
}

// After every rank read its part: the first data-parallel replica's pieces to the others of its dp x cp group (the
// parameters to all; the moments as each rank's ZeRO shard, or whole without ZeRO), then into backend memory.
void TrainCheckpoints::distribute(std::vector<LoadedChunk>& loaded, TrainProgress& p) const {
  const MPI_Comm dp = groups_.dp_cp;
  const bool reader = groups_.first_replica();
  const size_t slice = static_cast<size_t>(1) << 28;
  auto bcast = [&](std::vector<float>& buf, size_t n) {
    buf.resize(n);
    for (size_t at = 0; at < n; at += slice)
      mpi::check(MPI_Bcast(buf.data() + at, mpi::int_count(std::min(slice, n - at), "checkpoint broadcast"), MPI_FLOAT,
                           0, dp),
                 "MPI_Bcast (checkpoint)");
  };
  p.adam_step = mpi::broadcast_value(p.adam_step, 0, dp);  // the reader's (old checkpoints keep it in the files only)
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const Chunk& ch = chunks_[c];
    LoadedChunk& in = loaded[c];
    const Shards& sh = ch.shards;
    std::vector<int> counts, displs;  // each rank's shard (ZeRO), for MPI_Scatterv
    if (sh.shard > 0) {
      for (int r = 0; r < sh.size; ++r) {
        counts.push_back(mpi::int_count(sh.end(r) - sh.begin(r), "checkpoint shard"));
        displs.push_back(mpi::int_count(sh.begin(r), "checkpoint shard"));
      }
    }
    auto scatter = [&](const std::vector<float>& whole_piece, std::vector<float>& mine) {
      mine.resize(sh.count());
      mpi::check(MPI_Scatterv(reader ? whole_piece.data() : nullptr, counts.data(), displs.data(), MPI_FLOAT,
                              mine.data(), mpi::int_count(sh.count(), "checkpoint shard"), MPI_FLOAT, 0, dp),
                 "MPI_Scatterv (checkpoint)");
    };
    // ZeRO-3 ranks get only their shard of the parameters (the piece is never whole on them), the others all of it.
    std::vector<float> param_shard;
    if (ch.spec.lent_params) scatter(in.params, param_shard);
    else bcast(in.params, ch.num_params());
    std::vector<float> m, v;
    if (in.flat) {
      m = std::move(in.m);
      v = std::move(in.v);
    } else if (sh.shard > 0) {  // ZeRO: each rank's shard of the reader's whole-piece moments
      scatter(in.m, m);
      scatter(in.v, v);
    } else {
      bcast(in.m, ch.num_params());
      bcast(in.v, ch.num_params());
      m = std::move(in.m);
      v = std::move(in.v);
    }
    if (ch.spec.lent_params)  // ZeRO-3: the rank's shard is the master copy
      backend_.copy_to_device(ch.param_shard.data(), param_shard.data(), param_shard.size() * sizeof(float));
    else backend_.copy_to_device(ch.model->params(), in.params.data(), in.params.size() * sizeof(float));
    in.params = {};
    if (!m.empty()) {
      backend_.copy_to_device(ch.m.data(), m.data(), m.size() * sizeof(float));
      backend_.copy_to_device(ch.v.data(), v.data(), v.size() * sizeof(float));
    }
  }
}

void TrainCheckpoints::load_files(const std::string& dir, const std::vector<checkpoint::OptimPart>& parts,
                                  TrainProgress& p, StepGuard& g, std::vector<LoadedChunk>& loaded) const {
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
  // The padded vocabulary may differ (another tp pads it to another multiple): wte's rows past the real ones are
  // zeros that are never looked up, so rows are added or dropped (load_state); the real rows must be the same.
  const bool same_rows = c.vocab == want.vocab ||
                         (c.vocab_real == want.vocab_real && c.vocab >= c.vocab_real && want.vocab >= want.vocab_real);
  if (c.layers != want.layers || c.hidden != want.hidden || c.heads != want.heads || !same_rows ||
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
    load_state(dir, parts, meta, p, g, loaded);
  } catch (const UsageError&) {
    throw;  // a checkpoint this run's [model] cannot take, not damaged data
  } catch (const std::exception& e) {
    throw damaged(e);
  }
}

std::string build_change_note(const std::string& dir, const checkpoint::ModelMeta& meta) {
  const Provenance& self = provenance();
  if (meta.git_sha.empty() || meta.git_sha == self.git_sha) return "";
  return strprintf("resuming \"%s\": written by cairn-train %s (git %s), this is %s (git %s): from here on the run "
                   "follows this build's kernels and rules, within float32 rounding of the build that started it, not "
                   "bitwise",
                   dir.c_str(), meta.version.c_str(), meta.git_sha.c_str(), self.version.c_str(), self.git_sha.c_str());
}

// A checkpoint trained on other data, or on the same data in another order: from here on each step would read other
// windows than the run's (bitwise resume and the run's data order are gone; with another split, windows it trained on
// become validation windows). The order is the seed's permutation of the training split, read a global batch at a
// time from the checkpoint's batch. Refused (exit 2) unless [train] on_data_change = "warn"; what a checkpoint
// written before a key was recorded lacks is not compared.
void TrainCheckpoints::check_data(const std::string& dir, const checkpoint::ModelMeta& meta) const {
  records::TrainState st;
  try {
    st = records::TrainState::from_json(
        JsonFields(meta.train_state, join_path(dir, "model.h5"), "checkpoint train_state"));
  } catch (const std::exception& e) {
    throw DamagedCheckpoint(file_message("cannot resume from", dir, e.what()));
  }
  const bool schedule_by_steps = !st.lr_schedule;  // written before the schedule counted applied updates
  fill_unrecorded(st, meta.config_toml);
  check_schedule(dir, st);
  // Such a run set each step's rate by its step number; this cairn-train sets it by the updates applied (skipped steps
  // do not advance it, as in Megatron). With skips behind it, the run's next rate moves: said, with both rates.
  const int64_t done_steps = st.step.value_or(0), updates = st.adam_step.value_or(done_steps);
  if (schedule_by_steps && updates != done_steps && s_.rank == 0)
    CAIRN_LOG_WARN("resuming \"%s\": its run set the learning rate by step number (written by an older cairn-train), "
                   "this one by applied updates (%lld of %lld steps; skipped steps do not advance it): step %lld runs "
                   "at %.4g, not %.4g",
                   dir.c_str(), static_cast<long long>(updates), static_cast<long long>(done_steps),
                   static_cast<long long>(done_steps + 1),
                   learning_rate(updates, s_.decay_length(), s_.warmup, s_.lr, s_.min_lr, s_.schedule),
                   learning_rate(done_steps, s_.decay_length(), s_.warmup, s_.lr, s_.min_lr, s_.schedule));
  std::vector<std::string> changes;
  if (st.data_fingerprint && *st.data_fingerprint != s_.data_fingerprint)
    changes.push_back(strprintf("it was trained on other data than [data] path \"%s\" (data fingerprint %s, %llu "
                                "tokens, in the checkpoint; %s, %llu tokens, now)",
                                s_.data_dir.c_str(), st.data_fingerprint->c_str(),
                                static_cast<unsigned long long>(st.data_tokens.value_or(0)),
                                s_.data_fingerprint.c_str(), static_cast<unsigned long long>(s_.data_tokens)));
  if (st.seed && *st.seed != s_.seed)
    changes.push_back(strprintf("[train] seed is %llu, the checkpoint's run %llu (the order of the windows)",
                                static_cast<unsigned long long>(s_.seed), static_cast<unsigned long long>(*st.seed)));
  if (st.global_batch && *st.global_batch != s_.global_batch)
    changes.push_back(strprintf("[train] global_batch is %lld, the checkpoint's run %lld (its position, %lld batches, "
                                "counts batches of that size)",
                                static_cast<long long>(s_.global_batch), static_cast<long long>(*st.global_batch),
                                static_cast<long long>(st.batch.value_or(0))));
  if (st.val_windows && *st.val_windows != s_.val_windows)
    changes.push_back(strprintf("the validation split is %llu windows, the checkpoint's run %llu ([data] "
                                "val_fraction, or [train] val_every turned on; the training split is another)",
                                static_cast<unsigned long long>(s_.val_windows),
                                static_cast<unsigned long long>(*st.val_windows)));
  // Not the data order, but what val_loss means: another [train] val_batches, or a cairn-train that counts them
  // otherwise (global batches since 2026-12-06, micro-batches before) scores another number of windows, and a
  // report or gate comparing val_loss across this step compares different sums.
  if (st.val_rows && *st.val_rows != s_.val_rows && s_.rank == 0)
    CAIRN_LOG_WARN(
        "resuming \"%s\": validation now scores %llu windows, the checkpoint's run %llu ([train] "
        "val_batches, or a cairn-train that counted them otherwise): val_loss after step %lld is not comparable with "
        "the run's earlier values (metrics.jsonl's val lines carry val_windows)",
        dir.c_str(), static_cast<unsigned long long>(s_.val_rows), static_cast<unsigned long long>(*st.val_rows),
        static_cast<long long>(st.step.value_or(0)));
  if (const std::string note = build_change_note(dir, meta); !note.empty() && s_.rank == 0)
    CAIRN_LOG_WARN("%s", note.c_str());
  if (!st.data_fingerprint && s_.rank == 0)
    CAIRN_LOG_INFO("\"%s\" records no data fingerprint (written before cairn-train recorded one): its data is not "
                   "compared with [data] path",
                   dir.c_str());
  if (changes.empty()) return;
  std::string what;
  for (const auto& c : changes) what += (what.empty() ? "" : "; ") + c;
  if (s_.refuse_data_change) {
    throw UsageError(file_message("cannot resume from", dir,
                                  what + ": the steps after it would not read the run's windows; resume with the "
                                         "run's data and settings, or set [train] on_data_change = \"warn\" to "
                                         "continue in the new order"));
  }
  if (s_.rank == 0)
    CAIRN_LOG_WARN("resuming \"%s\": %s; continuing so ([train] on_data_change = \"warn\"): the data order from here "
                   "on is not the run's",
                   dir.c_str(), what.c_str());
}

// A checkpoint written before cairn-train recorded its schedule, global batch and validation split in train_state
// still holds the config it ran with (model.h5's config_toml): what train_state lacks is read from there, so the
// extension of a run started before an upgrade is checked as one started after it (it used to pass unchecked: the
// rate jumped 4.7x on the first step of an extended run).
void TrainCheckpoints::fill_unrecorded(records::TrainState& st, const std::string& config_toml) const {
  if (config_toml.empty() || (st.lr_schedule && st.global_batch && st.val_windows)) return;
  toml::table t;
  try {
    t = toml::parse(config_toml);
  } catch (const toml::parse_error&) {
    return;  // nothing to compare with, as before
  }
  const toml::table* train = t["train"].as_table();
  const toml::table* data = t["data"].as_table();
  if (!train) return;
  auto number = [](const toml::table* tb, const char* key) -> std::optional<double> {
    if (!tb) return std::nullopt;
    return (*tb)[key].value<double>();
  };
  if (!st.lr_schedule) {
    const auto lr = number(train, "lr"), min_lr = number(train, "min_lr"), warmup = number(train, "warmup"),
               steps = number(train, "steps"), decay = number(train, "decay_steps");
    const auto schedule = (*train)["schedule"].value<std::string>();
    if (lr && warmup && steps && schedule) {
      records::TrainState::LrSchedule was;
      was.lr = *lr;
      was.min_lr = !min_lr || *min_lr < 0 ? *lr / 10 : *min_lr;  // the default, as read_train_keys resolves it
      was.decay_steps = static_cast<int64_t>(decay && *decay > 0 ? *decay : *steps);
      was.warmup = std::min(static_cast<int64_t>(*warmup), was.decay_steps);
      was.schedule = *schedule;
      st.lr_schedule = was;
    }
  }
  if (!st.global_batch)
    if (const auto gb = number(train, "global_batch")) st.global_batch = static_cast<int64_t>(*gb);
  if (!st.val_windows && s_.total_windows > 0) {
    const auto fraction = number(data, "val_fraction"), every = number(train, "val_every");
    if (fraction && every) st.val_windows = shards::val_window_count(s_.total_windows, *fraction, *every > 0 ? 1 : 0);
  }
}

// A checkpoint trained on another learning-rate schedule: the next step's rate would jump (extending a 240-step
// cosine run to 480 steps took it from 1.0e-4 to 1.6e-3, 16x). Under --resume auto refused (exit 2) as Megatron's
// scheduler check is, unless [train] on_schedule_change = "continue"; else warned about. Checkpoints written before
// the schedule was recorded pass.
void TrainCheckpoints::check_schedule(const std::string& dir, const records::TrainState& st) const {
  if (!st.lr_schedule) return;
  const records::TrainState::LrSchedule& was = *st.lr_schedule;
  const int64_t step = st.step.value_or(0), updates = st.adam_step.value_or(step);
  // A constant schedule has no decay (min_lr and the decay length do not enter it), and past both warmups the
  // warmup length no longer matters: only what changes a rate from here on is compared.
  const bool constant = was.schedule == "constant" && s_.schedule == "constant";
  const bool warmup_matters = !constant || updates < std::max(was.warmup, s_.warmup);
  std::vector<std::string> changes;
  auto differs = [](double a, double b) { return std::abs(a - b) > 1e-12 * std::max(std::abs(a), std::abs(b)); };
  if (differs(was.lr, s_.lr)) changes.push_back(strprintf("lr %g (now %g)", was.lr, s_.lr));
  if (!constant && differs(was.min_lr, s_.min_lr))
    changes.push_back(strprintf("min_lr %g (now %g)", was.min_lr, s_.min_lr));
  if (warmup_matters && was.warmup != s_.warmup)
    changes.push_back(
        strprintf("warmup %lld (now %lld)", static_cast<long long>(was.warmup), static_cast<long long>(s_.warmup)));
  if (!constant && was.decay_steps != s_.decay_length())
    changes.push_back(strprintf("decay over %lld steps (now %lld: [train] decay_steps, else steps)",
                                static_cast<long long>(was.decay_steps), static_cast<long long>(s_.decay_length())));
  if (was.schedule != s_.schedule)
    changes.push_back(strprintf("schedule \"%s\" (now \"%s\")", was.schedule.c_str(), s_.schedule.c_str()));
  if (changes.empty()) return;
  auto rate_then = [&](int64_t u) {
    return learning_rate(u, was.decay_steps, was.warmup, was.lr, was.min_lr, was.schedule);
  };
  auto rate_now = [&](int64_t u) {
    return learning_rate(u, s_.decay_length(), s_.warmup, s_.lr, s_.min_lr, s_.schedule);
  };
  std::string what;
  for (const auto& c : changes) what += (what.empty() ? "" : ", ") + c;
  // The first step whose rate differs: the next one, unless both are inside the warmup and only the decay changed.
  // From the longer decay's end on both rates stay where they ended, so none differing up to `last` means the change
  // alters no step from here on (a run past both decays whose decay_steps moved): nothing to refuse.
  int64_t u = updates;
  const int64_t last = std::max(was.decay_steps, s_.decay_length()) + 1;
  while (u < last && !differs(rate_now(u), rate_then(u))) ++u;
  const double now = rate_now(u), then = rate_then(u);
  if (!differs(now, then)) {
    if (s_.rank == 0)
      CAIRN_LOG_INFO("resuming \"%s\": its learning-rate schedule differs (%s) but gives every step from %lld on the "
                     "same rate",
                     dir.c_str(), what.c_str(), static_cast<long long>(step + 1));
    return;
  }
  // Four significant digits, or as many as it takes to tell the two rates apart (a longer decay moves the next
  // step's rate by a few parts in 10^4 early on).
  int digits = 4;
  while (digits < 17 && strprintf("%.*g", digits, now) == strprintf("%.*g", digits, then)) ++digits;
  const std::string effect =
      (u == updates ? strprintf("step %lld would run at learning rate ", static_cast<long long>(step + 1))
                    : strprintf("step %lld runs at the same rate, %.4g, but step %lld would run at ",
                                static_cast<long long>(step + 1), rate_now(updates),
                                static_cast<long long>(step + 1 + (u - updates)))) +
      strprintf("%.*g where the run's schedule gives %.*g", digits, now, digits, then);
  // A checkpoint named with --resume DIR is a deliberate restart (a rollback after a spike, usually with a lower
  // rate): its new schedule is taken, with the warning. What --resume auto finds (a requeue, an extension) is the run
  // going on, where a changed schedule is an accident.
  if (s_.refuse_schedule_change && s_.resume == "auto") {
    // The run's own values, as the keys that give them back (min_lr, warmup and the decay as they were applied).
    std::string keep;
    if (differs(was.lr, s_.lr)) keep += strprintf(" --set train.lr=%.17g", was.lr);
    if (!constant && differs(was.min_lr, s_.min_lr)) keep += strprintf(" --set train.min_lr=%.17g", was.min_lr);
    if (warmup_matters && was.warmup != s_.warmup)
      keep += strprintf(" --set train.warmup=%lld", static_cast<long long>(was.warmup));
    if (!constant && was.decay_steps != s_.decay_length())
      keep += strprintf(" --set train.decay_steps=%lld", static_cast<long long>(was.decay_steps));
    if (was.schedule != s_.schedule) keep += " --set train.schedule=" + was.schedule;
    const std::string hint = " (to go on with the run's schedule:" + keep + ")";
    throw UsageError(file_message("cannot resume from", dir,
                                  "it was trained with another learning-rate schedule: " + what + "; " + effect + hint +
                                      "; or set [train] on_schedule_change = \"continue\""));
  }
  if (s_.rank == 0)
    CAIRN_LOG_WARN("resuming \"%s\" on another learning-rate schedule (%s): %s; %s", dir.c_str(),
                   s_.resume == "auto" ? "[train] on_schedule_change = \"continue\"" : "named with --resume",
                   what.c_str(), effect.c_str());
}

// The tensors, moments and train_state of a checkpoint whose model matches [model].
void TrainCheckpoints::load_state(const std::string& dir, const std::vector<checkpoint::OptimPart>& parts,
                                  const checkpoint::ModelMeta& meta, TrainProgress& p, StepGuard& g,
                                  std::vector<LoadedChunk>& loaded) const {
  // Only the first data-parallel replica reads the parameters (and, beyond whole(), the moments of its whole pieces);
  // distribute() hands them to the other replicas, so the file system serves each piece once, not dp x cp times.
  // Each chunk's pieces, whole tensor by whole tensor (read whole, checked, then sliced): no rank holds more than
  // its pieces and one tensor.
  const bool reader = groups_.first_replica();
  const bool flat = flat_moments(meta);
  const std::vector<gpt::TensorInfo> whole_tensors = gpt::piece_tensors(config_, gpt::ShardSpec{});
  // The checkpoint's own whole tensors: the same, but for wte's rows when it padded the vocabulary otherwise.
  const std::vector<gpt::TensorInfo> saved_tensors = gpt::piece_tensors(meta.config, gpt::ShardSpec{});
  std::map<std::string, std::pair<const gpt::TensorInfo*, const gpt::TensorInfo*>> whole_of;  // name -> (ours, saved)
  for (size_t i = 0; i < whole_tensors.size(); ++i) whole_of[whole_tensors[i].name] = {&whole_tensors[i], nullptr};
  for (const gpt::TensorInfo& t : saved_tensors) whole_of.at(t.name).second = &t;
  // A saved tensor in this run's shape: wte's rows past the shorter padding are zeros (added), or must be (dropped:
  // rows that hold anything are a model this vocabulary cannot hold).
  auto fit_rows = [&](std::vector<float>& values, const gpt::TensorInfo& t, const gpt::TensorInfo& saved,
                      const char* what) {
    if (saved.size == t.size) return;
    const size_t keep = std::min(saved.size, t.size);
    if (std::any_of(values.begin() + static_cast<std::ptrdiff_t>(keep), values.end(), [](float x) { return x != 0; }))
      throw UsageError(file_message(
          "cannot resume from", dir,
          strprintf("its %s (%s) holds non-zero values in rows %zu..%zu, which this run's vocab = %d drops (set "
                    "[model] vocab = %d, the checkpoint's)",
                    t.name.c_str(), what, t.size / t.shape.back(), saved.size / saved.shape.back() - 1, config_.vocab,
                    meta.config.vocab)));
    values.resize(t.size, 0.0f);
  };
  if (meta.config.vocab != config_.vocab && s_.rank == 0)
    CAIRN_LOG_INFO("the checkpoint pads the vocabulary to %d rows, this run to %d: wte's padding rows (zeros, never "
                   "looked up) are %s",
                   meta.config.vocab, config_.vocab, meta.config.vocab < config_.vocab ? "added" : "dropped");
  std::optional<checkpoint::ModelReader> model;
  std::optional<checkpoint::OptimReader> optim;
  if (reader) model.emplace(dir);
  // The files holding what this rank reads: its own flat range (flat), or every piece of its chunks (the reader).
  if (flat) optim.emplace(dir, parts, chunks_.front().shards.lo, chunks_.front().shards.hi);
  else if (reader) optim.emplace(dir, parts, 0, gpt::count_params(meta.config));
  int64_t adam_step = 0;
  std::vector<float> tensor, tm, tv;
  loaded.assign(chunks_.size(), LoadedChunk{});
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const Chunk& ch = chunks_[c];
    LoadedChunk& out = loaded[c];
    out.flat = flat;
    if (flat) {  // one piece that is the whole model, laid out as saved: each rank's moments are its own flat range
      out.m.resize(ch.shards.count());
      out.v.resize(ch.shards.count());
      optim->read(ch.shards.lo, ch.shards.count(), out.m.data(), out.v.data(), &adam_step);
    }
    if (!reader) continue;
    out.params.resize(ch.num_params());
    if (!flat) {
      out.m.resize(ch.num_params());
      out.v.resize(ch.num_params());
    }
    for (const gpt::TensorInfo& piece : ch.model->tensors()) {
      const auto [ours, saved] = whole_of.at(piece.name);
      const gpt::TensorInfo& t = *ours;
      tensor.resize(saved->size);
      model->read(*saved, tensor.data());
      fit_rows(tensor, t, *saved, "parameters");
      const std::vector<Segment> segs = segments(ch.map, piece.offset, piece.offset + piece.size, false);
      for (const Segment& s : segs)
        std::copy_n(tensor.data() + (s.full - t.offset), s.count, out.params.data() + s.local);
      if (flat) continue;
      tm.resize(saved->size);
      tv.resize(saved->size);
      optim->read(saved->offset, saved->size, tm.data(), tv.data(), &adam_step);
      fit_rows(tm, t, *saved, "Adam m");
      fit_rows(tv, t, *saved, "Adam v");
      for (const Segment& s : segs) {
        std::copy_n(tm.data() + (s.full - t.offset), s.count, out.m.data() + s.local);
        std::copy_n(tv.data() + (s.full - t.offset), s.count, out.v.data() + s.local);
      }
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
  nlohmann::json described = nlohmann::json::array();  // this rank's files as DONE lists them
  try {
    write_files(tmp, p, g);
    // Each rank flushes and checksums the files it wrote, all at once: rank 0 alone read back every rank's
    // optimizer file (with ZeRO, the whole optimizer state) and fsynced them one after another.
    std::vector<std::string> mine{checkpoint::optim_file_name(s_.rank)};
    if (s_.rank == 0) mine.push_back("model.h5");
    for (const std::string& name : mine) {
      const records::CheckpointDone::File f = checkpoint::describe_written_file(join_path(tmp, name));
      described.push_back({f.name, f.bytes, f.xxh64});
    }
  } catch (const std::exception& e) {
    ok = false;
    err = e.what();
  }
  // Rank 0, once every rank is past its writes: the partial checkpoint goes. On a full disk it holds the space that
  // the resumed run's next checkpoint needs (prune would only remove it after a checkpoint that succeeded). seal
  // renames before it writes DONE: a step directory without DONE is this one, unsealed.
  auto discard_partial = [&] {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    if (!path_exists(join_path(final_dir, records::kCheckpointDoneFile))) fs::remove_all(final_dir, ec);
  };
  try {
    mpi::agree_or_throw(ok, err, kExitRuntime);
  } catch (...) {
    if (s_.rank == 0) discard_partial();
    throw;
  }
  const std::vector<std::string> all = mpi::gather_strings(described.dump(), 0);
  // Sealing (DONE written, the directory renamed) can fail too, on a full disk: the partial checkpoint goes then as
  // above, and every rank leaves with rank 0's error instead of waiting for it in a barrier until the job aborts.
  // Pruning older checkpoints comes after a good seal: its failure leaves them, with a warning, not the run failed.
  if (s_.rank == 0) {
    try {
      std::vector<records::CheckpointDone::File> files;
      for (const std::string& text : all)
        for (const auto& f : nlohmann::json::parse(text))
          files.push_back({f.at(0).get<std::string>(), f.at(1).get<uint64_t>(), f.at(2).get<std::string>()});
      checkpoint::seal(tmp, final_dir, p.step, s_.world, files);
    } catch (const std::exception& e) {
      ok = false;
      err = e.what();
      discard_partial();
    }
    if (ok) {
      try {
        checkpoint::prune(s_.ckpt_dir, s_.keep_checkpoints, s_.keep_every);
      } catch (const std::exception& e) {
        CAIRN_LOG_WARN("checkpoint \"%s\" written, but older checkpoints were not pruned: %s", final_dir.c_str(),
                       e.what());
      }
    }
  }
  mpi::agree_or_throw(ok, err, kExitRuntime);
  CAIRN_LOG_INFO("checkpoint \"%s\" written in %.2f s", final_dir.c_str(), monotonic_seconds() - t0);
  return final_dir;
}

// model.h5 (rank 0) and this rank's optimizer file into tmp. Collective when pieces are assembled.
void TrainCheckpoints::write_files(const std::string& tmp, const TrainProgress& p, const StepGuard& g) const {
  const size_t N = gpt::count_params(config_);
  checkpoint::ModelMeta meta;
  meta.config = config_;
  meta.step = p.step;
  meta.tokens = p.tokens;
  meta.train_state = train_state(s_, p, g);
  meta.config_toml = cfg_.to_toml();
  const std::vector<gpt::TensorInfo> whole_tensors = gpt::piece_tensors(config_, gpt::ShardSpec{});
  checkpoint::OptimShard os;
  os.total = N;
  os.adam_step = p.adam_step;
  os.rank_state = {{"rank", s_.rank}, {"batch", p.batch}};
  const Chunk& ch = chunks_.front();
  if (whole()) {
    std::lock_guard<std::recursive_mutex> lk(hdf5_mutex());
    if (s_.rank == 0) {
      const HostFloats params(backend_, ch.model->params(), N);
      checkpoint::write_model(join_path(tmp, "model.h5"), meta, whole_tensors, params.data());
    }
    // Without ZeRO every rank holds the same moments: rank 0 writes them, the others only their state.
    const bool owns = ch.shards.shard > 0 || s_.rank == 0;
    os.offset = owns ? ch.shards.lo : 0;
    os.count = owns ? ch.shards.count() : 0;
    checkpoint::OptimWriter optim(join_path(tmp, checkpoint::optim_file_name(s_.rank)), os);
    if (os.count > 0) {
      const HostFloats m(backend_, ch.m.data(), os.count), v(backend_, ch.v.data(), os.count);
      optim.write(0, os.count, m.data(), v.data());
    }
    optim.close();
    return;
  }
  write_assembled(tmp, meta, whole_tensors, os);
}

// Whole tensors from every rank's pieces, one tensor at a time: rank 0 gathers each from the ranks that speak for
// its values (one data-parallel replica for the parameters, or every data-parallel rank for its ZeRO-3 shard; the
// moments from each rank's ZeRO slice, or from the first replica without ZeRO) and writes it to model.h5 and to the
// whole flat moments of optim.rank00000.h5; the other ranks write an optimizer file with no values. Memory: the
// rank's own pieces and, on rank 0, one tensor. Rank 0 keeps gathering after a failed write (a full disk) and reports
// it at the end, so no rank is left waiting in a collective.
void TrainCheckpoints::write_assembled(const std::string& tmp, const checkpoint::ModelMeta& meta,
                                       const std::vector<gpt::TensorInfo>& whole_tensors,
                                       checkpoint::OptimShard os) const {
  const size_t N = gpt::count_params(config_);
  const std::vector<SpokenPieces> host = spoken_pieces(chunks_, backend_, groups_.first_replica(), true);
  std::string failure;  // rank 0's first write error
  auto attempt = [&failure](auto&& f) {
    if (!failure.empty()) return;
    try {
      f();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  };
  std::lock_guard<std::recursive_mutex> lk(hdf5_mutex());
  std::unique_ptr<checkpoint::ModelWriter> model;
  std::unique_ptr<checkpoint::OptimWriter> optim;
  if (s_.rank == 0) {
    os.offset = 0;
    os.count = N;
    attempt([&] {
      model = std::make_unique<checkpoint::ModelWriter>(join_path(tmp, "model.h5"), meta, whole_tensors);
      optim = std::make_unique<checkpoint::OptimWriter>(join_path(tmp, checkpoint::optim_file_name(0)), os);
    });
  } else {
    os.offset = 0;
    os.count = 0;
    // A failure here (a full disk) is reported after the gathers below, which every rank must join.
    attempt([&] { checkpoint::write_optim(join_path(tmp, checkpoint::optim_file_name(s_.rank)), os); });
  }
  // gather_to_root's checks on rank 0 come after its collectives: a failure is kept and the next gathers still run.
  auto gather = [&](const std::vector<Contribution>& c, const gpt::TensorInfo& t, std::vector<float>& out) {
    try {
      gather_to_root(c, t.offset, t.size, out, MPI_COMM_WORLD);
      return true;
    } catch (const std::exception& e) {
      if (failure.empty()) failure = e.what();
      return false;
    }
  };
  // One buffer on rank 0, reused for the parameters, then each moment: rank 0's peak is one tensor, not three.
  std::vector<float> tensor;
  for (size_t i = 0; i < whole_tensors.size(); ++i) {
    const gpt::TensorInfo& t = whole_tensors[i];
    std::vector<Contribution> params, m, v;
    contributions(chunks_, host, t, params, m, v);
    if (gather(params, t, tensor) && s_.rank == 0) attempt([&] { model->write(i, tensor.data()); });
    if (gather(m, t, tensor) && s_.rank == 0) attempt([&] { optim->write_m(t.offset, t.size, tensor.data()); });
    if (gather(v, t, tensor) && s_.rank == 0) attempt([&] { optim->write_v(t.offset, t.size, tensor.data()); });
  }
  if (s_.rank == 0)
    attempt([&] {
      model->close();
      optim->close();
    });
  if (!failure.empty()) throw RuntimeError(failure);
}

}  // namespace cairn::train
