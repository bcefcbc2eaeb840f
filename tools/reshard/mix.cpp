// `mix`: a weighted blend of existing datasets (Megatron-style greedy blending at token granularity),
// written as an ordinary dataset whose stats.json describes the realised mix.
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>

#include "cairn/cli.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/json_text.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/sections/model.h"
#include "reshard.h"

namespace cairn::reshard {

namespace fs = std::filesystem;

namespace {

// The seed of source `s`'s document shuffle in its epoch `epoch`: every (seed, source, epoch) gets its
// own permutation, so repeated epochs of a small source come in a fresh order.
uint64_t epoch_seed(int64_t seed, size_t s, uint64_t epoch) {
  const uint64_t key[3] = {static_cast<uint64_t>(seed), s, epoch};
  return XXH64(key, sizeof key, 0x6d6978ULL);
}

// Source s's documents in the order the blend takes them, one epoch at a time.
struct EpochCursor {
  uint64_t ndocs = 0, pos = 0, epoch = 0;
  std::vector<uint64_t> order;  // empty: stored order (no seed)
  uint64_t next(int64_t seed, size_t s) {
    if (pos == ndocs) pos = 0, ++epoch;
    if (pos == 0 && seed >= 0) order = shuffled_order(ndocs, epoch_seed(seed, s, epoch));
    const uint64_t d = order.empty() ? pos : order[pos];
    ++pos;
    return d;
  }
};

}  // namespace

MixPlan plan_mixture(const std::vector<const DocSource*>& sources, const std::vector<double>& weights,
                     uint64_t target_tokens, int64_t seed, uint64_t expected_documents) {
  const size_t k = sources.size();
  MixPlan plan;
  plan.tokens.assign(k, 0);
  plan.documents.assign(k, 0);
  plan.max_prefix_lag.assign(k, 0);
  // Grown once: doubling a plan of a billion entries would hold the old and the new copy at once.
  plan.source.reserve(expected_documents);
  plan.doc.reserve(expected_documents);
  plan.prefix.reserve(expected_documents + 1);
  std::vector<EpochCursor> cursors(k);
  for (size_t s = 0; s < k; ++s) cursors[s].ndocs = sources[s]->num_docs();
  Progress progress("planning the mixture", target_tokens, "tokens");
  uint64_t total = 0;
  while (total < target_tokens) {
    if ((plan.source.size() & 0xffff) == 0) progress.update(total);
    // Megatron's rule (build_blending_indices), counted in tokens: the source furthest behind its
    // share of what was emitted so far gives the next document (first the heaviest, ties to the lower
    // index).
    const double emitted = std::max<double>(static_cast<double>(total), 1.0);
    size_t pick = 0;
    double worst = -std::numeric_limits<double>::infinity();
    for (size_t s = 0; s < k; ++s) {
      const double lag = weights[s] * emitted - static_cast<double>(plan.tokens[s]);
      if (lag > worst) worst = lag, pick = s;
    }
    const uint64_t d = cursors[pick].next(seed, pick);
    const uint64_t len = sources[pick]->doc_start(d + 1) - sources[pick]->doc_start(d);
    plan.source.push_back(static_cast<uint16_t>(pick));
    plan.doc.push_back(d);
    plan.prefix.push_back(total + len);
    total += len;
    plan.tokens[pick] += len;
    plan.documents[pick] += 1;
    for (size_t s = 0; s < k; ++s)
      plan.max_prefix_lag[s] = std::max(plan.max_prefix_lag[s], std::fabs(static_cast<double>(plan.tokens[s]) -
                                                                          weights[s] * static_cast<double>(total)));
  }
  progress.finish(strprintf("%zu documents", plan.source.size()));
  return plan;
}

uint64_t MixSource::mix_doc(uint64_t offset) const {
  return std::upper_bound(plan_.prefix.begin(), plan_.prefix.end(), offset) - plan_.prefix.begin() - 1;
}

void MixSource::read_stream(uint64_t offset, uint64_t count, uint32_t* out) const {
  for (uint64_t p = mix_doc(offset); count > 0; ++p) {
    const DocSource& s = *sources_[plan_.source[p]];
    const uint64_t local = offset - plan_.prefix[p];
    const uint64_t take = std::min(count, plan_.prefix[p + 1] - offset);
    s.read_stream(s.doc_start(plan_.doc[p]) + local, take, out);
    out += take;
    offset += take;
    count -= take;
  }
}

bool MixSource::raw_range(uint64_t offset, uint64_t count, const void*& ptr, int& width) const {
  if (count == 0 || offset >= plan_.prefix.back()) return false;
  const uint64_t p = mix_doc(offset);
  if (offset + count > plan_.prefix[p + 1]) return false;  // spans documents: read_stream
  const DocSource& s = *sources_[plan_.source[p]];
  return s.raw_range(s.doc_start(plan_.doc[p]) + (offset - plan_.prefix[p]), count, ptr, width);
}

void MixSource::release_mapped() const {
  for (const DocSource* s : sources_) s->release_mapped();
}

json mix_window_stats(const MixPlan& plan, const std::vector<double>& weights, const std::vector<uint64_t>& bounds,
                      uint64_t seq_len, uint64_t sequences) {
  const size_t k = weights.size();
  const uint64_t width = seq_len * sequences;
  // Per-source tokens before stream position x, walking forward (windows come in increasing order).
  std::vector<uint64_t> done(k, 0);
  uint64_t p = 0;
  auto counts_at = [&](uint64_t x, std::vector<uint64_t>& c) {
    while (p + 1 < plan.prefix.size() && plan.prefix[p + 1] <= x) {
      done[plan.source[p]] += plan.prefix[p + 1] - plan.prefix[p];
      ++p;
    }
    c = done;
    if (p < plan.source.size()) c[plan.source[p]] += x - plan.prefix[p];
  };
  uint64_t windows = 0;
  double worst = 0, sum = 0;
  uint64_t worst_shard = 0, worst_offset = 0;
  std::vector<double> lo(k, 1.0), hi(k, 0.0);
  std::vector<uint64_t> a, b;
  for (size_t shard = 0; shard + 1 < bounds.size(); ++shard) {
    // cairn-train's windows: T+1 tokens at stride T from the shard's start, (n - 1) / T of them; a
    // window of m sequences is m consecutive ones (their T inputs each).
    const uint64_t n = bounds[shard + 1] - bounds[shard];
    const uint64_t seqs = n > seq_len ? (n - 1) / seq_len : 0;
    for (uint64_t w = 0; w + sequences <= seqs; w += sequences) {
      const uint64_t start = bounds[shard] + w * seq_len;
      counts_at(start, a);
      counts_at(start + width, b);
      double dev = 0;
      for (size_t s = 0; s < k; ++s) {
        const double share = static_cast<double>(b[s] - a[s]) / static_cast<double>(width);
        lo[s] = std::min(lo[s], share), hi[s] = std::max(hi[s], share);
        dev = std::max(dev, std::fabs(share - weights[s]));
      }
      if (dev > worst || windows == 0) worst = dev, worst_shard = shard, worst_offset = w * seq_len;
      sum += dev;
      ++windows;
    }
  }
  json per_source = json::array();
  for (size_t s = 0; s < k; ++s)
    per_source.push_back(windows ? json{{"min_share", lo[s]}, {"max_share", hi[s]}} : json{});
  json j = {{"sequences", sequences},
            {"tokens", width},
            {"windows", windows},
            {"worst_deviation", windows ? json(worst) : json(nullptr)},
            {"mean_deviation", windows ? json(sum / static_cast<double>(windows)) : json(nullptr)},
            {"per_source", per_source}};
  if (windows) j["worst_at"] = {{"shard", worst_shard}, {"offset", worst_offset}};
  return j;
}

std::string format_mixture(const json& m) {
  std::string out = strprintf("mixture          %zu sources, seed %lld, target %llu tokens\n", m["sources"].size(),
                              static_cast<long long>(m.value("seed", int64_t{-1})),
                              static_cast<unsigned long long>(m.value("target_tokens", uint64_t{0})));
  int width = 6;  // the source column fits the longest path
  for (const auto& s : m["sources"]) width = std::max(width, static_cast<int>(s.value("path", "").size()));
  out += strprintf("  %-*s %8s %9s %14s %10s %8s\n", width, "source", "weight", "realised", "tokens", "documents",
                   "epochs");
  for (const auto& s : m["sources"]) {
    out += strprintf("  %-*s %8.4f %9.4f %14llu %10llu %8.3f\n", width, s.value("path", "").c_str(),
                     s.value("weight", 0.0), s.value("realised_weight", 0.0),
                     static_cast<unsigned long long>(s.value("tokens", uint64_t{0})),
                     static_cast<unsigned long long>(s.value("documents", uint64_t{0})), s.value("epochs", 0.0));
  }
  for (const auto& w : m.value("windows", json::array())) {
    const auto seqs = static_cast<unsigned long long>(w.value("sequences", uint64_t{0}));
    const auto seq_len = static_cast<unsigned long long>(m.value("seq_len", uint64_t{0}));
    if (!w["worst_deviation"].is_number()) {
      out += strprintf("  windows of %llu x %llu tokens: none fit in a shard\n", seqs, seq_len);
      continue;
    }
    out += strprintf("  windows of %llu x %llu tokens: %llu, share off its weight by at most %.4f (mean %.4f)\n", seqs,
                     seq_len, static_cast<unsigned long long>(w.value("windows", uint64_t{0})),
                     w["worst_deviation"].get<double>(), w["mean_deviation"].get<double>());
  }
  return out;
}

namespace {

// What `mix` was asked for: sources (positional arguments win over [data.mix] sources), normalised
// weights and the mixture's size.
struct MixRequest {
  std::vector<std::string> paths;
  std::vector<double> given, weights;  // as configured; normalised to sum 1
  DataMixSection mix;
};

MixRequest read_request(const Config& cfg, const std::vector<std::string>& inputs) {
  MixRequest r;
  r.mix = read_section<DataMixSection>(cfg);
  r.paths = inputs.empty() ? r.mix.sources : inputs;
  if (r.paths.empty()) throw UsageError("mix needs source datasets: positional arguments or [data.mix] sources");
  if (r.paths.size() > 65535) throw UsageError("[data.mix] sources: at most 65535 sources");
  if (r.mix.weights.size() != r.paths.size())
    throw UsageError(strprintf("[data.mix] weights has %zu value(s) but there are %zu sources (--weights "
                               "0.7,0.2,0.1: one positive weight per source, in order)",
                               r.mix.weights.size(), r.paths.size()));
  double sum = 0;
  for (size_t i = 0; i < r.paths.size(); ++i) {
    const double w = r.mix.weights[i];
    if (!(w > 0) || !std::isfinite(w))
      throw UsageError(strprintf("[data.mix] weights[%zu] = %g (source \"%s\"): weights must be positive", i, w,
                                 r.paths[i].c_str()));
    sum += w;
  }
  r.given = r.mix.weights;
  for (double w : r.given) r.weights.push_back(w / sum);
  if (r.mix.tokens > 0 && r.mix.epochs > 0)
    throw UsageError("[data.mix] tokens and epochs are both set: the mixture's size is one or the other");
  return r;
}

// Opens the sources; they must share one tokenizer (id, vocabulary, end-of-text) and hold tokens.
std::vector<shards::Dataset> open_sources(const std::vector<std::string>& paths) {
  std::vector<shards::Dataset> out;
  for (size_t i = 0; i < paths.size(); ++i) {
    try {
      out.push_back(shards::Dataset::open(paths[i]));
    } catch (const UsageError& e) {
      throw UsageError(strprintf("[data.mix] sources[%zu]: %s", i, e.what()));
    }
    const shards::Dataset& d = out.back();
    const shards::Dataset& first = out.front();
    auto differs = [&](const char* what, const std::string& have, const std::string& want) {
      throw UsageError(strprintf("[data.mix] sources[%zu] \"%s\": %s %s differs from sources[0] \"%s\" (%s); a "
                                 "mixture needs one tokenizer (re-tokenize with cairn-reshard build)",
                                 i, paths[i].c_str(), what, have.c_str(), paths[0].c_str(), want.c_str()));
    };
    if (d.tokenizer_id() != first.tokenizer_id()) differs("tokenizer", d.tokenizer_id(), first.tokenizer_id());
    if (d.vocab_size() != first.vocab_size())
      differs("vocab_size", std::to_string(d.vocab_size()), std::to_string(first.vocab_size()));
    if (d.eot_id() != first.eot_id()) differs("eot_id", std::to_string(d.eot_id()), std::to_string(first.eot_id()));
    if (d.total_tokens() == 0 || d.total_documents() == 0)
      throw UsageError(strprintf("[data.mix] sources[%zu] \"%s\": the dataset holds no tokens", i, paths[i].c_str()));
  }
  return out;
}

// Every source shard checked against its index.json before anything is copied (exit 3 naming it);
// MPI ranks split the shards and agree.
std::vector<std::unique_ptr<DatasetSource>> verified_sources(const std::vector<shards::Dataset>& datasets,
                                                             int threads) {
  const bool use_mpi = mpi::initialized();
  const size_t rank = use_mpi ? static_cast<size_t>(mpi::rank()) : 0,
               size = use_mpi ? static_cast<size_t>(mpi::size()) : 1;
  std::vector<std::unique_ptr<DatasetSource>> out;
  std::string err;
  int code = 0;
  try {
    for (const auto& d : datasets) {
      out.push_back(std::make_unique<DatasetSource>(std::vector<shards::Dataset>{d}));
      out.back()->verify(threads, rank, size);
    }
  } catch (const Error& e) {
    err = e.what();
    code = e.code();
  }
  if (use_mpi) mpi::agree_or_throw(err.empty(), err, code ? code : kExitRuntime);
  else if (!err.empty()) throw Error(code, err);
  return out;
}

// What the mixture's size costs, from the sources' index.json alone: known before any shard is read
// or anything allocated, so an absurd size is refused at once instead of growing the plan until the
// machine runs out of memory.
struct MixSize {
  double target = 0;       // tokens: [data.mix] tokens, else epochs (default 1) of the largest source
  size_t largest = 0;      // the source with the most tokens
  double epoch = 0;        // tokens of one epoch of the largest source at its weight
  double documents = 0;    // mixture documents, expected
  double memory = 0;       // bytes of the plan (every rank on a node holds its own)
  int token_width = 2;     // bytes per stored token
  double shard_bytes = 0;  // tokens the shards will store, in bytes
  double max_target = 0;   // the largest target that fits in `available` bytes
  double available = 0;
};

// Per mixture document: the plan (source 2, document 8, prefix 8 bytes) and the document lengths
// rank 0 gathers for stats.json (8).
constexpr double kBytesPerMixDocument = 26;
// Per source document: its start and byte count (12 bytes) and its epoch's shuffled order (8).
constexpr double kBytesPerSourceDocument = 20;

MixSize mix_size(const MixRequest& r, const std::vector<shards::Dataset>& ds) {
  MixSize m;
  for (size_t i = 1; i < ds.size(); ++i)
    if (ds[i].total_tokens() > ds[m.largest].total_tokens()) m.largest = i;
  m.epoch = static_cast<double>(ds[m.largest].total_tokens()) / r.weights[m.largest];
  m.target = r.mix.tokens > 0 ? static_cast<double>(r.mix.tokens)
                              : std::ceil((r.mix.epochs > 0 ? r.mix.epochs : 1.0) * m.epoch);
  // Source i gives about weight x target tokens, in documents of its mean length: exact for whole
  // epochs, and the partial epoch of a seeded source is a random sample of its documents.
  double per_token = 0, source_docs = 0;
  for (size_t i = 0; i < ds.size(); ++i) {
    const double n = static_cast<double>(ds[i].total_documents());
    per_token += r.weights[i] * n / static_cast<double>(ds[i].total_tokens());
    source_docs += n;
  }
  m.documents = m.target * per_token;
  const double ranks_on_node = mpi::initialized() ? std::max(mpi::topology().local_size, 1) : 1;
  const double fixed = source_docs * kBytesPerSourceDocument;
  m.memory = ranks_on_node * (m.documents * kBytesPerMixDocument + source_docs * kBytesPerSourceDocument);
  m.token_width = shards::tokens_fit_uint16(ds.front().vocab_size()) ? 2 : 4;
  m.shard_bytes = m.target * m.token_width;
  m.available = available_memory_bytes();
  m.max_target = std::max(m.available / ranks_on_node - fixed, 0.0) / kBytesPerMixDocument / per_token;
  return m;
}

// Refuses (exit 2, naming the option) a size whose plan does not fit in the memory there is; every
// MPI rank checks its own node and all agree.
void check_size_fits(const MixRequest& r, const MixSize& m) {
  std::string err;
  if (!(m.memory <= m.available && m.target < 9.2e18)) {
    std::string what, fits;
    if (r.mix.tokens > 0) {
      what = strprintf("[data.mix] tokens = %lld (--tokens)", static_cast<long long>(r.mix.tokens));
      fits = strprintf("at most about %.3g tokens fit", m.max_target);
    } else {
      what = r.mix.epochs > 0 ? strprintf("[data.mix] epochs = %g (--epochs)", r.mix.epochs)
                              : strprintf("[data.mix] weights[%zu] = %g (one epoch of the largest source \"%s\")",
                                          m.largest, r.given[m.largest], r.paths[m.largest].c_str());
      fits = strprintf("at most about %.3g epochs (--epochs) fit", m.max_target / m.epoch);
    }
    err = strprintf("%s: a mixture of %.3g tokens would hold about %.3g documents; planning them needs %s of memory, "
                    "more than the %s available (MemAvailable, cgroup limit, ulimit -v), and the shards would take %s; "
                    "%s",
                    what.c_str(), m.target, m.documents, human_bytes(m.memory).c_str(),
                    human_bytes(m.available).c_str(), human_bytes(m.shard_bytes).c_str(), fits.c_str());
  }
  if (mpi::initialized()) mpi::agree_or_throw(err.empty(), err, kExitUsage);
  else if (!err.empty()) throw UsageError(err);
}

std::string mix_identity(const std::vector<std::unique_ptr<DatasetSource>>& src, const MixRequest& r, uint64_t target,
                         int64_t seed) {
  std::string key =
      strprintf("target=%llu|seed=%lld", static_cast<unsigned long long>(target), static_cast<long long>(seed));
  for (size_t i = 0; i < src.size(); ++i) {
    key += '|';
    key += src[i]->identity();
    key += strprintf("@%.17g", r.weights[i]);
  }
  std::string id = "mix:";
  id += shards::hex64(XXH64(key.data(), key.size(), 0));
  return id;
}

// stats.json's "mixture": per-source counts, epochs, requested vs realised weights, the worst
// deviation over training windows; index.json gets the same without the windows.
json mixture_json(const MixRequest& r, const std::vector<shards::Dataset>& ds,
                  const std::vector<std::unique_ptr<DatasetSource>>& src, const MixPlan& plan, uint64_t target,
                  int64_t seed) {
  const uint64_t total = plan.prefix.back();
  json sources = json::array();
  for (size_t i = 0; i < ds.size(); ++i) {
    const uint64_t have = ds[i].total_tokens();
    sources.push_back({{"path", r.paths[i]},
                       {"weight_given", r.given[i]},
                       {"weight", r.weights[i]},
                       {"realised_weight", static_cast<double>(plan.tokens[i]) / static_cast<double>(total)},
                       {"tokens", plan.tokens[i]},
                       {"documents", plan.documents[i]},
                       {"epochs", static_cast<double>(plan.tokens[i]) / static_cast<double>(have)},
                       {"source_tokens", have},
                       {"source_documents", ds[i].total_documents()},
                       {"source_identity", src[i]->identity()},
                       {"max_prefix_lag_tokens", plan.max_prefix_lag[i]}});
  }
  return {{"method", "greedy: the source furthest behind its token share gives the next whole document"},
          {"seed", seed},
          {"target_tokens", target},
          {"tokens", total},
          {"documents", plan.source.size()},
          {"sources", sources}};
}

// Says what was used of every source: repeated epochs and unused tokens are never silent.
void log_epochs(const json& m) {
  for (const auto& s : m["sources"]) {
    const double e = s["epochs"].get<double>();
    const std::string p = s["path"].get<std::string>();
    if (e > 1.0 + 1e-12)
      CAIRN_LOG_INFO("source %s: %.3f epochs (repeated: %d full passes, each in a fresh order when seeded)", p.c_str(),
                     e, static_cast<int>(std::floor(e)));
    else if (e < 1.0 - 1e-12)
      CAIRN_LOG_INFO("source %s: %.3f of an epoch (%.1f%% of its tokens are not in the mixture)", p.c_str(), e,
                     100 * (1 - e));
    else CAIRN_LOG_INFO("source %s: exactly 1 epoch", p.c_str());
  }
}

// Refuses (exit 2) a mixture that would repeat a source more than [data.mix] max_epochs. Source i's epochs are its
// share of the target over its tokens (weight x target / tokens), known from index.json alone: checked before the
// sources are verified or the mixture planned. Documents stay whole, so the realised epochs (stats.json) can exceed
// this by less than a document's worth.
void check_max_epochs(const MixRequest& r, const std::vector<shards::Dataset>& ds, const MixSize& m) {
  if (r.mix.max_epochs <= 0) return;
  for (size_t i = 0; i < ds.size(); ++i) {
    const double e = r.weights[i] * m.target / static_cast<double>(ds[i].total_tokens());
    if (e > r.mix.max_epochs)
      throw UsageError(strprintf("[data.mix] max_epochs = %g: source \"%s\" (sources[%zu]) would be repeated %.3f "
                                 "epochs (lower its weight or the mixture's tokens/epochs)",
                                 r.mix.max_epochs, r.paths[i].c_str(), i, e));
  }
}

// What the output dataset takes on disk besides its tokens: per document its doc_offsets (8 bytes) and doc_bytes (4)
// entries, per shard its HDF5 file's own structures and index.json entry (measured: about 8 KB), and index.json and
// stats.json; the tokenizer copy is counted as the first source's.
constexpr double kDiskBytesPerDocument = 12;
constexpr double kDiskBytesPerShard = 16 * 1024;
constexpr double kDiskBytesFixed = 64 * 1024;

// Bytes of the regular files directly in `dir` whose names start with `prefix` (0 when there is no such directory).
double files_bytes(const std::string& dir, const std::string& prefix = "") {
  double bytes = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fec;
    if (it->path().filename().string().rfind(prefix, 0) == 0 && it->is_regular_file(fec))
      bytes += static_cast<double>(it->file_size(fec));
  }
  return bytes;
}

// Refuses (exit 1) an output that clearly does not fit on its disk, before anything is verified, planned or written:
// the mixture's tokens at their width, the index (kDiskBytes*) and the tokenizer copy, against the free space where
// the output directory is (or will be). Shards an interrupted run left there count as room: a resume keeps those it
// finished.
void check_disk_fits(const std::string& dir, const MixRequest& r, const MixSize& m, uint64_t shards,
                     const ReshardFaults& faults) {
  std::string err;
  const double need = m.shard_bytes + m.documents * kDiskBytesPerDocument +
                      static_cast<double>(shards) * kDiskBytesPerShard + kDiskBytesFixed +
                      files_bytes(join_path(r.paths.front(), "tokenizer"));
  const double free_bytes = faults.free_disk_bytes >= 0 ? faults.free_disk_bytes : available_disk_bytes(dir);
  // Shards already there are room the run can reuse: an interrupted run's, which it rewrites in place, or the
  // staged ones of a run over a complete dataset. That dataset's own shards stay until the new one is written.
  const bool over_dataset = path_exists(join_path(dir, "index.json"));
  const double kept = files_bytes(over_dataset ? staging_dir(dir) : dir, "shard_");
  if (free_bytes >= 0 && need > free_bytes + kept)
    err = file_message(
        "cannot write the mixture to", dir,
        strprintf("it needs about %s (%.3g tokens of %d bytes, and the index), but the disk there has %s free%s%s "
                  "(lower [data.mix] tokens/epochs, or free some space)",
                  human_bytes(need).c_str(), m.target, m.token_width, human_bytes(free_bytes).c_str(),
                  kept > 0 ? (" and " + human_bytes(kept) + " in shards already there").c_str() : "",
                  over_dataset ? "; the dataset already there stays until the new one is written" : ""));
  if (mpi::initialized()) mpi::agree_or_throw(err.empty(), err, kExitRuntime);
  else if (!err.empty()) throw RuntimeError(err);
}

}  // namespace

int run_mix(const Config& cfg, const std::vector<std::string>& inputs, const std::string& out,
            const std::string& json_out, const ReshardFaults& faults) {
  auto t0 = std::chrono::steady_clock::now();
  const MixRequest req = read_request(cfg, inputs);
  const DataSection data = read_section<DataSection>(cfg);
  const std::string dir = dataset_dir(cfg, out);
  check_output_not_input(dir, req.paths);
  const std::vector<shards::Dataset> datasets = open_sources(req.paths);
  const MixSize size = mix_size(req, datasets);
  check_size_fits(req, size);
  check_max_epochs(req, datasets, size);
  check_disk_fits(dir, req, size, static_cast<uint64_t>(data.shards), faults);
  DirLock lock;  // after the disk check: a mixture refused there leaves no --out behind
  lock_dataset_dir(lock, dir);
  const auto sources = verified_sources(datasets, resolve_threads(data));
  const auto target = static_cast<uint64_t>(size.target);
  std::vector<const DocSource*> ptrs;
  ptrs.reserve(sources.size());
  for (const auto& s : sources) ptrs.push_back(s.get());
  // Room for a little more than expected: a partial epoch of short documents adds a few.
  MixPlan plan =
      plan_mixture(ptrs, req.weights, target, data.seed, static_cast<uint64_t>(size.documents * 1.02) + 1024);
  json mixture = mixture_json(req, datasets, sources, plan, target, data.seed);

  OutputSpec spec;
  spec.dir = dir;
  spec.dir_locked = lock.held();
  spec.shards = static_cast<uint64_t>(data.shards);
  spec.seed = -1;  // the blend's order is the dataset's order (the seed went into the blend)
  spec.split_docs = data.split_docs;
  spec.threads = resolve_threads(data);
  // The input's tokenizer entry as it is (a description, an id, or none: null, which the index leaves out)
  spec.tokenizer = datasets.front().index().value("tokenizer", nlohmann::json());
  spec.tokenizer_files_from_dataset = req.paths.front();
  spec.vocab_size = datasets.front().vocab_size();
  spec.eot_id = datasets.front().eot_id();
  spec.sources = req.paths;
  spec.ids_checked = true;  // every source was verified against the same vocabulary
  spec.index_extra = {{"mixture", mixture}};
  // The realised mix over cairn-train's windows (shards planned as write_dataset plans them).
  const uint64_t seq_len =
      static_cast<uint64_t>(req.mix.seq_len > 0 ? req.mix.seq_len : read_section<ModelSection>(cfg).seq_len);
  const std::vector<uint64_t> bounds = plan_bounds(plan.prefix, spec.shards, spec.split_docs);
  json windows = json::array();
  for (int64_t m : req.mix.window_sequences)
    windows.push_back(mix_window_stats(plan, req.weights, bounds, seq_len, static_cast<uint64_t>(m)));
  mixture["seq_len"] = seq_len;
  mixture["windows"] = windows;
  spec.stats_extra = {{"mixture", mixture}};

  const std::string identity = mix_identity(sources, req, target, data.seed);
  MixSource src(std::move(plan), ptrs, identity);
  WriteResult r = write_dataset(src, spec);
  if (!mpi::initialized() || mpi::rank() == 0) {
    log_epochs(mixture);
    CAIRN_LOG_INFO("mixed %zu sources into %s: %llu documents, %llu tokens (target %llu) in %llu shards, %.2f s",
                   req.paths.size(), dir.c_str(), static_cast<unsigned long long>(r.documents),
                   static_cast<unsigned long long>(r.tokens), static_cast<unsigned long long>(target),
                   static_cast<unsigned long long>(spec.shards),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (log_settings().level <= LogLevel::Info) std::fprintf(stderr, "%s", format_mixture(mixture).c_str());
    json j = r.to_json(dir);
    j["mixture"] = mixture;
    write_json_output(json_out, json_text(j, 2));
  }
  return 0;
}

}  // namespace cairn::reshard
