// `build` (raw text -> shards, multithreaded tokenization, MPI ranks share the batches) and
// `reshard` (M shards -> N shards).
#include <sys/stat.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include "cairn/cli.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "reshard.h"

namespace cairn::reshard {

namespace {

tokenizer::Spec tokenizer_spec(const Config& cfg) {
  tokenizer::Spec s;
  s.type = cfg.get_string("data.tokenizer");
  s.vocab = cfg.get_string("data.vocab");
  s.merges = cfg.get_string("data.merges");
  s.tokenizer_json = cfg.get_string("data.tokenizer_json");
  return s;
}

struct Batch {
  size_t first = 0, last = 0;  // documents [first, last)
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> lengths;  // tokens per document (end-of-text included)
};

void fill_output_spec(const Config& cfg, const tokenizer::Tokenizer& tok, OutputSpec& spec) {
  spec.shards = static_cast<uint64_t>(cfg.get_int("data.shards"));
  spec.seed = cfg.get_int("data.seed");
  spec.split_docs = cfg.get_bool("data.split_docs");
  spec.threads = resolve_threads(cfg);
  spec.tokenizer = tok.describe();
  spec.tokenizer_files = tok.source_files();
  spec.vocab_size = tok.vocab_size();
  spec.eot_id = tok.eot_id();
}

}  // namespace

std::unique_ptr<tokenizer::Tokenizer> load_configured_tokenizer(const Config& cfg) {
  return tokenizer::load(tokenizer_spec(cfg));
}

namespace {

// Tokenizes one input file with `nthreads` threads into a part file (a shard of all its documents,
// in order, each ending with end-of-text). Returns {documents, skipped records, source bytes}.
json tokenize_file_to_part(const Config& cfg, const tokenizer::Tokenizer& tok, const std::string& file,
                           const std::string& part_path, const shards::ShardMeta& meta, int nthreads,
                           Progress& progress, std::atomic<uint64_t>& done_bytes) {
  TextCorpus corpus = read_text_files(cfg, {file});
  const uint64_t batch_bytes = static_cast<uint64_t>(cfg.get_float("data.batch_mb") * (1 << 20));
  std::vector<Batch> batches;
  for (size_t d = 0; d < corpus.docs.size();) {
    Batch b;
    b.first = d;
    uint64_t acc = 0;
    while (d < corpus.docs.size() && (acc == 0 || acc + corpus.docs[d].text.size() <= batch_bytes))
      acc += corpus.docs[d++].text.size();
    b.last = d;
    batches.push_back(std::move(b));
  }
  const uint32_t eot = tok.eot_id();
  std::atomic<size_t> next{0};
  std::string error;
  std::mutex mu;
  auto worker = [&]() {
    for (;;) {
      size_t i = next.fetch_add(1);
      if (i >= batches.size()) return;
      Batch& b = batches[i];
      try {
        uint64_t bytes = 0;
        for (size_t d = b.first; d < b.last; ++d) {
          size_t before = b.tokens.size();
          tok.encode_into(corpus.docs[d].text, b.tokens);
          b.tokens.push_back(eot);
          b.lengths.push_back(b.tokens.size() - before);
          bytes += corpus.docs[d].text.size();
        }
        done_bytes += bytes;
        std::unique_lock<std::mutex> lock(mu, std::try_to_lock);
        if (lock) progress.update(done_bytes.load());
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (error.empty()) error = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(nthreads, static_cast<int>(batches.size())); ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (!error.empty()) throw RuntimeError(error);
  uint64_t tokens = 0;
  for (auto& b : batches) tokens += b.tokens.size();
  shards::ShardWriter w(part_path, meta, tokens, corpus.docs.size());
  for (auto& b : batches) {
    w.append_tokens(b.tokens.data(), b.tokens.size());
    for (size_t d = b.first; d < b.last; ++d)
      w.append_document(b.lengths[d - b.first], static_cast<uint32_t>(corpus.docs[d].text.size()));
    std::vector<uint32_t>().swap(b.tokens);
  }
  w.finish();
  return {{"file", file}, {"documents", corpus.docs.size()}, {"skipped", corpus.skipped}, {"bytes", corpus.bytes}};
}

// What makes a part reusable on a rerun: the file (path, size, mtime), tokenizer and text settings.
std::string part_plan(const Config& cfg, const tokenizer::Tokenizer& tok, const std::string& file, size_t index) {
  std::string key = tok.id();
  key += strprintf("|%zu|", index);
  key += file;
  if (file == "-") return "";  // stdin cannot be known unchanged: always tokenized again
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0)
    key += strprintf("|%lld|%lld.%09ld", static_cast<long long>(st.st_size), static_cast<long long>(st.st_mtim.tv_sec),
                     st.st_mtim.tv_nsec);
  for (const char* k : {"data.format", "data.delimiter", "data.jsonl_field"}) {
    key += '|';
    key += cfg.get_string(k);
  }
  key += cfg.get_bool("data.skip_bad") ? "|skip" : "|strict";
  return shards::hex64(XXH64(key.data(), key.size(), 0));
}

}  // namespace

int run_build(const Config& cfg, const std::vector<std::string>& args, const std::string& out,
              const std::string& json_out) {
  std::vector<std::string> inputs = args.empty() ? cfg.get_strings("data.inputs") : args;
  if (inputs.empty()) throw UsageError("build needs inputs (files, directories or -), or [data] inputs");
  const std::string dir = dataset_dir(cfg, out);
  check_output_not_input(dir, inputs);
  auto tok = load_configured_tokenizer(cfg);
  const bool use_mpi = mpi::initialized();
  const int rank = use_mpi ? mpi::rank() : 0, size = use_mpi ? mpi::size() : 1;
  const int nthreads = resolve_threads(cfg);
  auto t0 = std::chrono::steady_clock::now();

  // Stage 1: every input file becomes a part (a shard of its documents) in <dir>/.build-parts/,
  // tokenized by rank i % size (stdin by rank 0) with all its threads. Memory holds one file at a
  // time; parts of unchanged files are reused when a build is rerun after an interruption.
  const std::vector<std::string> files = expand_inputs(inputs);
  const std::string parts = join_path(dir, ".build-parts");
  if (rank == 0) ensure_dir(parts);
  if (use_mpi) mpi::barrier();
  uint64_t my_bytes = 0;
  auto owner = [&](size_t i) { return files[i] == "-" ? 0 : static_cast<int>(i % size); };
  for (size_t i = 0; i < files.size(); ++i) {
    struct stat st {};
    if (owner(i) == rank && files[i] != "-" && ::stat(files[i].c_str(), &st) == 0) my_bytes += st.st_size;
  }
  Progress progress("tokenizing", my_bytes, "bytes");
  std::atomic<uint64_t> done_bytes{0};
  std::string error;
  int error_code = 0;
  uint64_t reused = 0;
  try {
    for (size_t i = 0; i < files.size(); ++i) {
      if (owner(i) != rank) continue;
      std::string part = join_path(parts, strprintf("part_%06zu.h5", i));
      std::string sidecar = join_path(parts, strprintf("part_%06zu.json", i));
      shards::ShardMeta meta;
      meta.shard_index = i;
      meta.shard_count = files.size();
      meta.tokenizer_id = tok->id();
      meta.vocab_size = tok->vocab_size();
      meta.eot_id = tok->eot_id();
      meta.plan_hash = part_plan(cfg, *tok, files[i], i);
      shards::ShardInfo info;
      if (!meta.plan_hash.empty() && path_exists(sidecar) && shards::existing_shard_matches(part, meta.plan_hash, info)) {
        ++reused;
        continue;
      }
      if (meta.plan_hash.empty()) meta.plan_hash = "stdin";
      json summary = tokenize_file_to_part(cfg, *tok, files[i], part, meta, nthreads, progress, done_bytes);
      atomic_write(sidecar, summary.dump() + "\n");
    }
  } catch (const Error& e) {
    error = e.what(), error_code = e.code();
  }
  progress.finish();
  if (use_mpi) mpi::agree_or_throw(error.empty(), error, error_code ? error_code : kExitRuntime);
  else if (!error.empty()) throw Error(error_code, error);
  if (use_mpi) reused = mpi::allreduce<uint64_t>(reused);
  double tok_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Stage 2: the parts, in input order, form a dataset that is planned and written like a reshard.
  uint64_t skipped = 0, source_bytes = 0, docs = 0;
  if (rank == 0) {
    json shard_list = json::array();
    for (size_t i = 0; i < files.size(); ++i) {
      json side = json::parse(read_file(join_path(parts, strprintf("part_%06zu.json", i))));
      skipped += side.value("skipped", uint64_t{0});
      source_bytes += side.value("bytes", uint64_t{0});
      std::string file = strprintf("part_%06zu.h5", i);
      auto sh = shards::open_shard(join_path(parts, file));
      shard_list.push_back({{"file", file}, {"tokens", sh->num_tokens()}, {"documents", sh->num_documents()},
                            {"xxh64", shards::hex64(sh->attributes().value("tokens_xxh64", uint64_t{0}))}});
      docs += sh->num_documents();
    }
    json index = {{"format", "cairn-shards"}, {"format_version", shards::kFormatVersion},
                  {"tokenizer", tok->describe()}, {"vocab_size", tok->vocab_size()}, {"eot_id", tok->eot_id()},
                  {"shards", shard_list}};
    atomic_write(join_path(parts, "index.json"), index.dump() + "\n");
    CAIRN_LOG_INFO("tokenized %zu inputs (%.1f MB, %llu documents) in %.2f s (%.1f MB/s, %d threads x %d ranks)%s%s",
                   files.size(), source_bytes / 1e6, static_cast<unsigned long long>(docs), tok_s,
                   source_bytes / 1e6 / tok_s, nthreads, size,
                   reused ? strprintf("; %llu inputs unchanged since an interrupted run",
                                      static_cast<unsigned long long>(reused)).c_str() : "",
                   skipped ? strprintf("; skipped %llu bad records", static_cast<unsigned long long>(skipped)).c_str() : "");
  }
  if (use_mpi) mpi::barrier();
  if (use_mpi) docs = mpi::broadcast_value<uint64_t>(docs);
  if (docs == 0) throw UsageError("the inputs contain no documents");
  shards::Dataset parts_ds = shards::Dataset::open(parts);
  DatasetSource src({parts_ds});
  OutputSpec spec;
  spec.dir = dir;
  fill_output_spec(cfg, *tok, spec);
  spec.sources = files;
  spec.skipped_records = use_mpi ? mpi::broadcast_value<uint64_t>(skipped) : skipped;
  WriteResult r = write_dataset(src, spec);
  if (rank == 0) {
    std::filesystem::remove_all(parts);
    CAIRN_LOG_INFO("built %s: %llu documents, %llu tokens (%.3f bytes/token) in %llu shards%s",
                   dir.c_str(), static_cast<unsigned long long>(docs), static_cast<unsigned long long>(r.tokens),
                   r.tokens ? source_bytes / double(r.tokens) : 0.0, static_cast<unsigned long long>(spec.shards),
                   r.shards_resumed ? strprintf(" (%llu already complete)",
                                                static_cast<unsigned long long>(r.shards_resumed)).c_str() : "");
    json j = r.to_json(dir);
    j["skipped_records"] = skipped;
    j["source_bytes"] = source_bytes;
    j["tokenize_mb_per_s"] = source_bytes / 1e6 / tok_s;
    write_json_output(json_out, j.dump(2));
  }
  return 0;
}

int run_reshard(const Config& cfg, const std::vector<std::string>& inputs, const std::string& out,
                const std::string& json_out) {
  if (inputs.empty()) throw UsageError("reshard needs input dataset directories (they are concatenated in order)");
  const std::string dir = dataset_dir(cfg, out);
  check_output_not_input(dir, inputs);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<shards::Dataset> datasets;
  for (auto& i : inputs) {
    datasets.push_back(shards::Dataset::open(i));
    if (datasets.back().tokenizer_id() != datasets.front().tokenizer_id())
      throw UsageError(strprintf("cannot merge %s (tokenizer %s) with %s (tokenizer %s)", i.c_str(),
                                 datasets.back().tokenizer_id().c_str(), inputs[0].c_str(),
                                 datasets.front().tokenizer_id().c_str()));
  }
  // Corruption is caught, not copied: every input shard's tokens are checked against index.json
  // (xxh64, counts, ids below the vocabulary) before anything is written or removed. Ranks split the
  // shards and agree, so a bad shard stops every rank with the same message (exit 3, naming it).
  {
    const bool use_mpi = mpi::initialized();
    const size_t rank = use_mpi ? static_cast<size_t>(mpi::rank()) : 0, size = use_mpi ? static_cast<size_t>(mpi::size()) : 1;
    std::string err;
    int code = 0;
    size_t base = 0;
    try {
      for (auto& d : datasets) {
        // Global shard numbering across the concatenated datasets, round-robin over ranks.
        size_t first = (rank + size - base % size) % size;
        d.verify_shards(resolve_threads(cfg), first, size);
        base += d.num_shards();
      }
    } catch (const Error& e) {
      err = e.what();
      code = e.code();
    }
    if (use_mpi) mpi::agree_or_throw(err.empty(), err, code ? code : kExitRuntime);
    else if (!err.empty()) throw Error(code, err);
  }
  const shards::Dataset& in = datasets.front();
  DatasetSource src(datasets);
  size_t in_shards = 0;
  for (auto& d : datasets) in_shards += d.num_shards();
  CAIRN_LOG_DEBUG("opened %zu input shards in %.3f s", in_shards,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  OutputSpec spec;
  spec.dir = dir;
  spec.shards = static_cast<uint64_t>(cfg.get_int("data.shards"));
  spec.seed = cfg.get_int("data.seed");
  spec.split_docs = cfg.get_bool("data.split_docs");
  spec.threads = resolve_threads(cfg);
  spec.tokenizer = in.index().at("tokenizer");
  spec.tokenizer_files_from_dataset = inputs[0];
  spec.vocab_size = 0;
  for (auto& d : datasets) spec.vocab_size = std::max(spec.vocab_size, d.vocab_size());
  spec.eot_id = in.eot_id();
  spec.sources = inputs;
  WriteResult r = write_dataset(src, spec);
  const bool use_mpi = mpi::initialized();
  if (!use_mpi || mpi::rank() == 0) {
    double gb = r.tokens * (shards::tokens_fit_uint16(spec.vocab_size) ? 2.0 : 4.0) / 1e9;
    CAIRN_LOG_INFO("resharded %zu -> %llu shards: %llu tokens (%.3f GB) in %.2f s (%.2f GB/s)%s", in_shards,
                   static_cast<unsigned long long>(spec.shards), static_cast<unsigned long long>(r.tokens), gb,
                   r.seconds, gb / r.seconds,
                   r.shards_resumed ? strprintf("; %llu shards already complete, skipped",
                                                static_cast<unsigned long long>(r.shards_resumed)).c_str() : "");
    write_json_output(json_out, r.to_json(dir).dump(2));
  }
  return 0;
}

}  // namespace cairn::reshard
