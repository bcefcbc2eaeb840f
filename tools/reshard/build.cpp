// `build` (raw text -> shards, multithreaded tokenization, MPI ranks share the batches) and
// `reshard` (M shards -> N shards).
#include <sys/stat.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "cairn/cli.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/json_text.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/sysinfo.h"
#include "reshard.h"

namespace cairn::reshard {

namespace {

struct Batch {
  size_t first = 0, last = 0;  // documents [first, last)
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> lengths;  // tokens per document (end-of-text included)
};

void fill_output_spec(const DataSection& data, const tokenizer::Tokenizer& tok, OutputSpec& spec) {
  spec.shards = static_cast<uint64_t>(data.shards);
  spec.seed = data.seed;
  spec.split_docs = data.split_docs;
  spec.threads = resolve_threads(data);
  spec.tokenizer = tok.describe();
  spec.tokenizer_files = tok.source_files();
  spec.vocab_size = tok.vocab_size();
  spec.eot_id = tok.eot_id();
}

}  // namespace

json part_index_entry(const std::string& dir, const std::string& file) {
  auto sh = shards::open_shard(join_path(dir, file));
  return {{"file", file},
          {"tokens", sh->num_tokens()},
          {"documents", sh->num_documents()},
          {"xxh64", shards::hex64(sh->attributes().value("tokens_xxh64", uint64_t{0}))}};
}

void write_parts_index(const std::string& dir, const json& shard_list, const tokenizer::Tokenizer& tok) {
  const json index = {{"format", "cairn-shards"},    {"format_version", shards::kFormatVersion},
                      {"tokenizer", tok.describe()}, {"vocab_size", tok.vocab_size()},
                      {"eot_id", tok.eot_id()},      {"shards", shard_list}};
  atomic_write(join_path(dir, "index.json"), json_text(index) + "\n");
}

namespace {

// One work item: raw records in, their documents' tokens out.
struct TokenBatch {
  RecordBatch records;
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> lengths;  // tokens per document (end-of-text included)
  std::vector<uint32_t> bytes;    // source bytes per document
  uint64_t skipped = 0;
  bool failed = false;
  RecordProblem problem;
  std::string error;  // a failure that is not the record's fault (tokenizer)
  int error_code = 0;
  size_t source = 0;  // the input of the group its records came from (for the error message)
  // Ready for the next records, keeping the memory (reused buffers: no page faults, no allocator churn).
  void reset() {
    records.clear();
    tokens.clear();
    lengths.clear();
    bytes.clear();
    skipped = 0;
    failed = false;
    problem = {};
    error.clear();
    error_code = 0;
  }
};

// The progress line over every input this rank reads: bytes of the files (compressed bytes for
// compressed files, so the ETA holds), documents, MB/s and ETA.
struct InputProgress {
  Progress progress;
  uint64_t done_files_bytes = 0;  // bytes of the inputs already finished
  uint64_t records = 0;           // records of the inputs already finished
  // MB, or kB when the inputs are under 1 MB (in MB they would show as 0/0).
  uint64_t unit;
  explicit InputProgress(uint64_t total_bytes)
      : progress("reading inputs", total_bytes / unit_for(total_bytes), unit_for(total_bytes) == 1000 ? "kB" : "MB"),
        unit(unit_for(total_bytes)) {}
  static uint64_t unit_for(uint64_t total) { return total > 0 && total < 1000000 ? 1000 : 1000000; }
  void update(const RecordReader& r) {
    progress.update((done_files_bytes + r.raw_consumed()) / unit,
                    strprintf("%llu documents", static_cast<unsigned long long>(records) + r.records()));
  }
};

std::string part_name(size_t group, size_t part) { return strprintf("part_%06zu_%05zu.h5", group, part); }
std::string sidecar_name(size_t group) { return strprintf("group_%06zu.json", group); }
std::string part_hash(const std::string& plan, size_t part) {
  std::string k = (plan.empty() ? std::string("stdin") : plan) + strprintf("|part=%zu", part);
  return shards::hex64(XXH64(k.data(), k.size(), 0));
}

// Consecutive inputs tokenized together into one run of parts: small files share part files. A part per file
// cost about 9 ms in file creation, fsyncs and threads whatever its size (3,000 one-line files: 16 s to
// tokenize 1 MB); a group is the unit an interrupted build reuses.
struct InputGroup {
  size_t first = 0, count = 0;
};

// The file whose size and mtime stand for an input (an LMDB environment's data.mdb).
std::string stat_path(const std::string& input) {
  return std::filesystem::is_directory(input) ? join_path(input, "data.mdb") : input;
}

uint64_t input_size(const std::string& file) {
  struct stat st {};
  if (file == "-" || ::stat(stat_path(file).c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

// Groups of consecutive inputs of up to part_bytes together (by size on disk; a larger file is a group of its
// own and is cut into several parts); stdin is always alone (it is never reused).
std::vector<InputGroup> group_inputs(const std::vector<std::string>& files, uint64_t part_bytes) {
  std::vector<InputGroup> groups;
  uint64_t bytes = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const uint64_t size = input_size(files[i]);
    const bool alone = files[i] == "-" || (i > 0 && files[i - 1] == "-");
    if (groups.empty() || alone || bytes + size > part_bytes) {
      groups.push_back({i, 0});
      bytes = 0;
    }
    ++groups.back().count;
    bytes += size;
  }
  return groups;
}

// Decodes and tokenizes the records of one batch (a tokenizing thread's work).
void tokenize_batch(TokenBatch& b, const TextSettings& ts, const tokenizer::Tokenizer& tok) {
  const uint32_t eot = tok.eot_id();
  std::string storage;
  std::string_view text;
  // Room for every token up front (the bytes tokenizer's count; BPE needs fewer; pages never
  // touched cost no memory): the vector is not regrown and copied document by document.
  b.tokens.reserve(b.records.raw.size() + b.records.records.size());
  try {
    for (size_t i = 0; i < b.records.records.size(); ++i) {
      if (!decode_record(b.records, i, ts, storage, text, b.problem)) {
        if (!ts.skip_bad) {
          b.failed = true;
          return;
        }
        ++b.skipped;
        continue;
      }
      if (text.empty()) continue;  // empty documents are not stored
      size_t before = b.tokens.size();
      tok.encode_into(text, b.tokens);
      b.tokens.push_back(eot);
      b.lengths.push_back(b.tokens.size() - before);
      b.bytes.push_back(static_cast<uint32_t>(text.size()));
    }
  } catch (const Error& e) {
    b.error = e.what(), b.error_code = e.code();
  } catch (const std::exception& e) {
    b.error = e.what(), b.error_code = kExitRuntime;
  }
}

// What a group's sidecar says of each of its inputs: the tokens of its documents as stored, their checksum (the
// dataset's identity is made of these, so it does not depend on how inputs were grouped or cut into parts).
struct InputTokens {
  uint64_t tokens = 0, documents = 0;
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> hash{XXH64_createState(), XXH64_freeState};
  InputTokens() { XXH64_reset(hash.get(), 0); }
};

// Writes one part file from a part's tokenized batches (then moved to `spare` for reuse) and adds their tokens, as
// stored, to their inputs' counts and checksums. Returns the part's {tokens, documents}.
std::pair<uint64_t, uint64_t> write_part(const std::string& path, const shards::ShardMeta& meta, bool narrow,
                                         std::vector<InputTokens>& inputs,
                                         std::vector<std::unique_ptr<TokenBatch>>& batches,
                                         std::vector<std::unique_ptr<TokenBatch>>& spare) {
  uint64_t tokens = 0, docs = 0;
  for (auto& b : batches) tokens += b->tokens.size(), docs += b->lengths.size();
  shards::ShardWriter w(path, meta, tokens, docs);
  uint16_t narrow_buf[4096];
  for (auto& b : batches) {
    w.append_tokens(b->tokens.data(), b->tokens.size());
    InputTokens& in = inputs[b->source];
    in.tokens += b->tokens.size();
    in.documents += b->lengths.size();
    if (narrow) {
      for (size_t o = 0; o < b->tokens.size(); o += 4096) {
        size_t m = std::min<size_t>(4096, b->tokens.size() - o);
        for (size_t k = 0; k < m; ++k) narrow_buf[k] = static_cast<uint16_t>(b->tokens[o + k]);
        XXH64_update(in.hash.get(), narrow_buf, m * 2);
      }
    } else {
      XXH64_update(in.hash.get(), b->tokens.data(), b->tokens.size() * 4);
    }
    for (size_t d = 0; d < b->lengths.size(); ++d) w.append_document(b->lengths[d], b->bytes[d]);
    spare.push_back(std::move(b));
  }
  w.finish();
  return {tokens, docs};
}

// Streams a group of inputs, in order, into part files of about part_bytes of text each (documents in order,
// each ending with end-of-text), reading on this thread while `nthreads` threads tokenize. Returns the sidecar:
// {first, files, plan, parts, documents, tokens, skipped, bytes (content bytes read), inputs: [{tokens, documents,
// xxh64 (of its tokens as stored)}, ...]}.
json tokenize_group(const DataSection& data, const tokenizer::Tokenizer& tok, const std::vector<std::string>& files,
                    const InputGroup& group, size_t index, size_t ngroups, const std::string& parts_dir,
                    const std::string& plan, int nthreads, InputProgress& ip) {
  const TextSettings ts = text_settings(data);
  const size_t batch_bytes = std::max<size_t>(1, static_cast<size_t>(data.batch_mb * (1 << 20)));
  const size_t part_limit = std::max<size_t>(1, static_cast<size_t>(data.part_mb * (1 << 20)));
  const bool narrow = shards::tokens_fit_uint16(tok.vocab_size());
  shards::ShardMeta meta;
  meta.shard_index = index;
  meta.shard_count = ngroups;
  meta.tokenizer_id = tok.id();
  meta.vocab_size = tok.vocab_size();
  meta.eot_id = tok.eot_id();
  std::vector<InputTokens> inputs(group.count);
  uint64_t group_tokens = 0, group_docs = 0, skipped = 0, content_bytes = 0;
  // The group's inputs are read one after another; a part takes documents of as many of them as fit.
  size_t source = 0;  // the input being read, within the group
  std::unique_ptr<RecordReader> reader = std::make_unique<RecordReader>(files[group.first], ts);
  std::vector<std::string> shown{reader->shown()};
  std::vector<bool> compressed{reader->compressed()};
  size_t part = 0;
  bool more = true;
  std::vector<std::unique_ptr<TokenBatch>> spare;  // batches of the previous part, for reuse
  while (more) {
    std::vector<std::unique_ptr<TokenBatch>> batches;
    std::mutex mu;
    std::condition_variable cv;
    size_t next = 0;
    bool closed = false;
    std::atomic<size_t> first_failed{SIZE_MAX};
    // Batches after a failed one are not tokenized (their work is wasted), those before it are:
    // the error reported is then always the input's first, whatever the thread count.
    auto run_one = [&](size_t i, TokenBatch& b) {
      if (i > first_failed.load()) return;
      tokenize_batch(b, ts, tok);
      if (b.failed || !b.error.empty()) {
        size_t cur = first_failed.load();
        while (i < cur && !first_failed.compare_exchange_weak(cur, i)) {
        }
      }
    };
    auto worker = [&]() {
      for (;;) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return next < batches.size() || closed; });
        if (next >= batches.size()) return;
        size_t i = next++;
        TokenBatch* b = batches[i].get();
        lock.unlock();
        run_one(i, *b);
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < nthreads; ++t) pool.emplace_back(worker);
    auto close_and_join = [&]() {
      {
        std::lock_guard<std::mutex> lock(mu);
        closed = true;
      }
      cv.notify_all();
      worker();  // this thread helps with what is queued
      for (auto& t : pool) t.join();
      pool.clear();
    };
    size_t part_bytes = 0;
    std::string stream_error;  // an input of the group ended early on unreadable data (without --skip-bad)
    // An error opening or reading the group's next input, thrown once the batches queued before it are checked:
    // a bad record of an earlier input comes first in input order.
    std::exception_ptr read_error;
    try {
      while (part_bytes < part_limit && first_failed.load() == SIZE_MAX) {
        std::unique_ptr<TokenBatch> b;
        if (spare.empty()) {
          b = std::make_unique<TokenBatch>();
        } else {
          b = std::move(spare.back());
          spare.pop_back();
          b->reset();
        }
        bool got = false;
        try {
          got = reader->next(b->records, batch_bytes);
        } catch (const Error&) {
          read_error = std::current_exception();
          more = false;
          break;
        }
        if (!got) {
          // This input is finished: account for it, then go on with the group's next one.
          ip.done_files_bytes += reader->raw_consumed();
          ip.records += reader->records();
          content_bytes += reader->decompressed_bytes();
          if (!reader->stream_error().empty()) {
            if (!ts.skip_bad) {
              // Reported once the batches before it are tokenized: a bad record earlier in the input wins.
              stream_error = reader->stream_error() + " (use --skip-bad to keep the documents before it)";
              more = false;
              break;
            }
            ++skipped;
            CAIRN_LOG_WARN("%s; keeping the documents before it (--skip-bad)", reader->stream_error().c_str());
          }
          spare.push_back(std::move(b));
          if (++source == group.count) {
            more = false;
            break;
          }
          try {
            reader = std::make_unique<RecordReader>(files[group.first + source], ts);
          } catch (const Error&) {
            read_error = std::current_exception();
            more = false;
            break;
          }
          shown.push_back(reader->shown());
          compressed.push_back(reader->compressed());
          continue;
        }
        b->source = source;
        part_bytes += b->records.raw.size();
        {
          std::lock_guard<std::mutex> lock(mu);
          batches.push_back(std::move(b));
        }
        cv.notify_one();
        ip.update(*reader);
      }
    } catch (...) {
      close_and_join();
      throw;
    }
    close_and_join();
    // The first problem in input order wins: a bad record before the point where the stream broke.
    for (auto& b : batches) {
      if (b->failed) throw UsageError(describe_problem(shown[b->source], compressed[b->source], b->problem));
      if (!b->error.empty()) throw Error(b->error_code, b->error);
      skipped += b->skipped;
    }
    if (read_error) std::rethrow_exception(read_error);
    if (!stream_error.empty()) throw InputStreamError(stream_error);
    if (batches.empty() && part > 0) break;  // the input ended exactly at a part boundary
    meta.plan_hash = part_hash(plan, part);
    const auto [tokens, docs] =
        write_part(join_path(parts_dir, part_name(index, part)), meta, narrow, inputs, batches, spare);
    CAIRN_LOG_DEBUG("%s: part %zu: %llu documents, %llu tokens", reader->shown().c_str(), part,
                    static_cast<unsigned long long>(docs), static_cast<unsigned long long>(tokens));
    group_tokens += tokens;
    group_docs += docs;
    ++part;
  }
  json per_input = json::array();
  for (const InputTokens& in : inputs)
    per_input.push_back(
        {{"tokens", in.tokens}, {"documents", in.documents}, {"xxh64", shards::hex64(XXH64_digest(in.hash.get()))}});
  return {{"first", group.first}, {"files", group.count},    {"plan", plan},
          {"parts", part},        {"documents", group_docs}, {"tokens", group_tokens},
          {"skipped", skipped},   {"bytes", content_bytes},  {"inputs", per_input}};
}

// What makes a part reusable on a rerun: the file (path, size, mtime), tokenizer and text settings.
std::string input_plan(const DataSection& data, const tokenizer::Tokenizer& tok, const std::string& file,
                       size_t index) {
  std::string key = tok.id();
  key += strprintf("|%zu|", index);
  key += file;
  if (file == "-") return "";  // stdin cannot be known unchanged: always tokenized again
  struct stat st {};
  if (::stat(stat_path(file).c_str(), &st) == 0)
    key += strprintf("|%lld|%lld.%09ld", static_cast<long long>(st.st_size), static_cast<long long>(st.st_mtim.tv_sec),
                     st.st_mtim.tv_nsec);
  for (const std::string* v : {&data.format, &data.delimiter, &data.jsonl_field}) {
    key += '|';
    key += *v;
  }
  key += data.skip_bad ? "|skip" : "|strict";
  return shards::hex64(XXH64(key.data(), key.size(), 0));
}

// A group's: its inputs' (stdin: never reused).
std::string group_plan(const DataSection& data, const tokenizer::Tokenizer& tok, const std::vector<std::string>& files,
                       const InputGroup& g) {
  std::string key;
  for (size_t i = g.first; i < g.first + g.count; ++i) {
    const std::string p = input_plan(data, tok, files[i], i);
    if (p.empty()) return "";
    key += p;
    key += '|';
  }
  return shards::hex64(XXH64(key.data(), key.size(), 0));
}

// True when an interrupted build left every part of group `index` complete under the same plan.
bool parts_reusable(const std::string& parts_dir, size_t index, const std::string& plan) {
  if (plan.empty()) return false;
  const std::string side = join_path(parts_dir, sidecar_name(index));
  if (!path_exists(side)) return false;
  json j;
  try {
    j = json::parse(read_file(side));
    if (j.value("plan", "") != plan) return false;
    const size_t n = j.at("parts").get<size_t>();
    for (size_t p = 0; p < n; ++p) {
      shards::ShardInfo info;
      if (!shards::existing_shard_matches(join_path(parts_dir, part_name(index, p)), part_hash(plan, p), info))
        return false;
    }
    return n > 0;
  } catch (const std::exception&) {
    return false;
  }
}

// What stage 1 left in the parts directory, summed over the inputs' sidecars.
struct PartsIndex {
  uint64_t skipped = 0, source_bytes = 0, documents = 0;
  std::string identity;  // "dataset:<hash of the inputs' token streams>:<tokenizer id>", for resume
};

// Writes <parts>/index.json listing every part file in input order, so the parts read as one dataset.
PartsIndex index_parts(size_t ngroups, const std::string& parts, const tokenizer::Tokenizer& tok) {
  PartsIndex pi;
  json shard_list = json::array();
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  for (size_t i = 0; i < ngroups; ++i) {
    json side = json::parse(read_file(join_path(parts, sidecar_name(i))));
    pi.skipped += side.value("skipped", uint64_t{0});
    pi.source_bytes += side.value("bytes", uint64_t{0});
    const size_t n = side.at("parts").get<size_t>();
    for (size_t p = 0; p < n; ++p) {
      shard_list.push_back(part_index_entry(parts, part_name(i, p)));
    }
    for (const json& in : side.at("inputs")) {  // per input, in order: the same whatever the grouping
      const uint64_t fx = shards::parse_hex64(in.at("xxh64").get<std::string>());
      const uint64_t ft = in.at("tokens").get<uint64_t>(), fd = in.at("documents").get<uint64_t>();
      XXH64_update(st, &fx, sizeof fx);
      XXH64_update(st, &ft, sizeof ft);
      XXH64_update(st, &fd, sizeof fd);
      pi.documents += fd;
    }
  }
  pi.identity = "dataset:" + shards::hex64(XXH64_digest(st)) + ":" + tok.id();
  XXH64_freeState(st);
  write_parts_index(parts, shard_list, tok);
  return pi;
}

}  // namespace

int run_build(const Config& cfg, const std::vector<std::string>& args, const std::string& out,
              const std::string& json_out) {
  const DataSection data = read_section<DataSection>(cfg);
  std::vector<std::string> inputs = args.empty() ? data.inputs : args;
  if (inputs.empty()) throw UsageError("build needs inputs (files, directories or -), or [data] inputs");
  const std::string dir = dataset_dir(cfg, out);
  check_output_not_input(dir, inputs);
  auto tok = tokenizer::load_configured(data);
  const bool use_mpi = mpi::initialized();
  const int rank = use_mpi ? mpi::rank() : 0, size = use_mpi ? mpi::size() : 1;
  const int nthreads = resolve_threads(data);
  auto t0 = std::chrono::steady_clock::now();

  // Stage 1: every input file becomes parts (shards of its documents, ~32 MB of text each) in
  // <dir>/.build-parts/, streamed by rank i % size (stdin by rank 0) and tokenized with all its
  // threads. Memory holds one part at a time whatever the file sizes; the parts of unchanged files
  // are reused when a build is rerun after an interruption.
  std::vector<std::string> input_dirs;
  const std::vector<std::string> files = expand_inputs(inputs, &input_dirs);
  // Globs and manifests name their files only once expanded: those (and the directories they
  // named) are off limits too.
  check_output_not_input(dir, files);
  check_output_not_input(dir, input_dirs);
  std::error_code exists_ec;
  const bool dir_existed = std::filesystem::exists(dir, exists_ec);
  DirLock lock;
  lock_dataset_dir(lock, dir);
  const std::string parts = join_path(dir, ".build-parts");
  if (rank == 0) ensure_dir(parts);
  if (use_mpi) mpi::barrier();
  // Groups of small consecutive inputs share parts; group g is tokenized by rank g % ranks (stdin's by rank 0).
  const std::vector<InputGroup> groups = group_inputs(files, static_cast<uint64_t>(data.part_mb * (1 << 20)));
  auto owner = [&](size_t g) { return files[groups[g].first] == "-" ? 0 : static_cast<int>(g % size); };
  auto group_bytes = [&](size_t g) {
    uint64_t bytes = 0;
    for (size_t i = groups[g].first; i < groups[g].first + groups[g].count; ++i) bytes += input_size(files[i]);
    return bytes;
  };
  uint64_t my_bytes = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    if (owner(g) == rank) my_bytes += group_bytes(g);
  InputProgress progress(my_bytes);
  std::string error;
  int error_code = 0;
  uint64_t reused = 0;  // inputs
  try {
    for (size_t g = 0; g < groups.size(); ++g) {
      if (owner(g) != rank) continue;
      const std::string plan = group_plan(data, *tok, files, groups[g]);
      const std::string sidecar = join_path(parts, sidecar_name(g));
      if (parts_reusable(parts, g, plan)) {
        reused += groups[g].count;
        progress.done_files_bytes += group_bytes(g);
        continue;
      }
      std::filesystem::remove(sidecar);  // its parts are being rewritten
      json summary = tokenize_group(data, *tok, files, groups[g], g, groups.size(), parts, plan, nthreads, progress);
      atomic_write(sidecar, json_text(summary) + "\n");
    }
  } catch (const Error& e) {
    error = e.what(), error_code = e.code();
  }
  progress.progress.finish(strprintf("%llu documents", static_cast<unsigned long long>(progress.records)));
  // An output directory this run created goes again when it holds nothing a rerun can use (with its lock: nobody
  // else can have found it worth locking); the parts go whenever `all_parts`, else only when no group finished.
  auto remove_created_output = [&](bool all_parts) {
    if (rank != 0) return;
    std::error_code ec;
    bool reusable = false;
    for (size_t g = 0; g < groups.size() && !all_parts && !reusable; ++g)
      reusable = std::filesystem::exists(join_path(parts, sidecar_name(g)), ec);
    if (reusable) return;  // finished groups are the unit of resume: the same command reuses them
    if (dir_existed) std::filesystem::remove_all(parts, ec);
    else remove_created_dataset_dir(lock, dir);
  };
  try {
    if (use_mpi) mpi::agree_or_throw(error.empty(), error, error_code ? error_code : kExitRuntime);
    else if (!error.empty()) throw Error(error_code, error);
  } catch (const Error&) {
    remove_created_output(false);
    throw;
  }
  if (use_mpi) reused = mpi::allreduce<uint64_t>(reused);
  double tok_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Stage 2: the parts, in input order, form a dataset that is planned and written like a reshard.
  // Its identity (for resume) is that of the inputs' token streams, however they were cut into parts.
  uint64_t skipped = 0, source_bytes = 0, docs = 0;
  std::string identity;
  if (rank == 0) {
    const PartsIndex pi = index_parts(groups.size(), parts, *tok);
    skipped = pi.skipped, source_bytes = pi.source_bytes, docs = pi.documents, identity = pi.identity;
    CAIRN_LOG_INFO(
        "tokenized %zu inputs (%.1f MB, %llu documents) in %.2f s (%.1f MB/s, %d threads x %d ranks)%s%s", files.size(),
        source_bytes / 1e6, static_cast<unsigned long long>(docs), tok_s, source_bytes / 1e6 / tok_s, nthreads, size,
        reused ? strprintf("; %llu inputs unchanged since an interrupted run", static_cast<unsigned long long>(reused))
                     .c_str()
               : "",
        skipped ? strprintf("; skipped %llu bad records", static_cast<unsigned long long>(skipped)).c_str() : "");
  }
  if (use_mpi) mpi::barrier();
  if (use_mpi) docs = mpi::broadcast_value<uint64_t>(docs);
  if (docs == 0) {
    remove_created_output(true);  // nothing to write
    throw UsageError("the inputs contain no documents");
  }
  if (use_mpi) identity = mpi::broadcast_string(identity);
  shards::Dataset parts_ds = shards::Dataset::open(parts);
  DatasetSource src({parts_ds});
  src.set_identity(identity);
  OutputSpec spec;
  spec.dir = dir;
  spec.dir_locked = lock.held();
  fill_output_spec(data, *tok, spec);
  spec.sources = files;
  spec.ids_checked = true;  // the parts were written by ShardWriter, which checked every id
  spec.skipped_records = use_mpi ? mpi::broadcast_value<uint64_t>(skipped) : skipped;
  WriteResult r = write_dataset(src, spec);
  if (rank == 0) {
    std::filesystem::remove_all(parts);
    CAIRN_LOG_INFO(
        // Bytes of input (JSON syntax and compression included) per token: the documents' own bytes per token are
        // stats' figure, and a number with the same label that differed from it (12.0 against 0.5) misled.
        "built %s: %llu documents, %llu tokens (%.3f input bytes/token) in %llu shards%s", dir.c_str(),
        static_cast<unsigned long long>(docs), static_cast<unsigned long long>(r.tokens),
        r.tokens ? source_bytes / double(r.tokens) : 0.0, static_cast<unsigned long long>(spec.shards),
        r.shards_resumed
            ? strprintf(" (%llu already complete)", static_cast<unsigned long long>(r.shards_resumed)).c_str()
            : "");
    json j = r.to_json(dir);
    j["skipped_records"] = skipped;
    j["source_bytes"] = source_bytes;
    j["tokenize_mb_per_s"] = source_bytes / 1e6 / tok_s;
    write_json_output(json_out, json_text(j, 2));
  }
  return 0;
}

namespace {

// The plan keeps tables per document (starts, byte counts, pieces, the shuffle's order): measured at about 35 bytes
// per document in order and 77 shuffled (100 M documents: 3.5 and 7.7 GB). Said before any work when the node's
// ranks would need more than the memory there is, instead of a kill or a bare bad_alloc minutes in.
void warn_if_document_tables_exceed_memory(const std::vector<shards::Dataset>& datasets, bool shuffled) {
  double docs = 0;
  for (const auto& d : datasets) docs += static_cast<double>(d.total_documents());
  const double ranks_on_node = mpi::initialized() ? std::max(mpi::topology().local_size, 1) : 1;
  const double need = docs * (shuffled ? 77.0 : 35.0) * ranks_on_node, have = available_memory_bytes();
  if (have > 0 && need > have && (!mpi::initialized() || mpi::rank() == 0))
    CAIRN_LOG_WARN("%.0f documents: the plan's per-document tables need about %.1f GB on this node (%g rank(s)), "
                   "%.1f GB is available; it may run out of memory (fewer ranks per node, or reshard parts of the "
                   "inputs)",
                   docs, need / 1e9, ranks_on_node, have / 1e9);
}

}  // namespace

int run_reshard(const Config& cfg, const std::vector<std::string>& inputs, const std::string& out,
                const std::string& json_out) {
  if (inputs.empty()) throw UsageError("reshard needs input dataset directories (they are concatenated in order)");
  const DataSection data = read_section<DataSection>(cfg);
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
  warn_if_document_tables_exceed_memory(datasets, data.seed >= 0);
  // Ours alone from here (the inputs open: a bad one has not created --out).
  DirLock lock;
  lock_dataset_dir(lock, dir);
  // Corruption is caught, not copied: every input shard's tokens are checked against index.json
  // (xxh64, counts, ids below the vocabulary). In order, while they are copied: each input shard is
  // hashed in the pass that reads it, and an output shard is renamed into place only once all of its
  // input shards have passed (a failure removes what this run wrote). Shuffled, before anything is
  // written (every output shard holds documents of every input shard), with the shards the copy then
  // reads (opened once), and loaded into memory by the same pass where it fits. Ranks split the shards and agree, so a
  // bad shard stops every rank with the same message (exit 3, naming it).
  std::unique_ptr<DatasetSource> src_ptr;
  {
    const bool use_mpi = mpi::initialized();
    const size_t rank = use_mpi ? static_cast<size_t>(mpi::rank()) : 0,
                 size = use_mpi ? static_cast<size_t>(mpi::size()) : 1;
    std::string err;
    int code = 0;
    try {
      src_ptr = std::make_unique<DatasetSource>(datasets);
      if (data.seed < 0) src_ptr->verify_while_copying();
      else if (!src_ptr->load_and_verify(resolve_threads(data), rank, size, use_mpi ? mpi::topology().local_size : 1))
        src_ptr->verify(resolve_threads(data), rank, size);
    } catch (const Error& e) {
      err = e.what();
      code = e.code();
    }
    if (use_mpi) mpi::agree_or_throw(err.empty(), err, code ? code : kExitRuntime);
    else if (!err.empty()) throw Error(code, err);
  }
  CAIRN_LOG_DEBUG("opened (and, shuffled, verified) the input shards in %.3f s",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  const shards::Dataset& in = datasets.front();
  const DatasetSource& src = *src_ptr;
  size_t in_shards = 0;
  for (auto& d : datasets) in_shards += d.num_shards();
  OutputSpec spec;
  spec.dir = dir;
  spec.dir_locked = lock.held();
  spec.shards = static_cast<uint64_t>(data.shards);
  spec.seed = data.seed;
  spec.split_docs = data.split_docs;
  spec.threads = resolve_threads(data);
  // The input's tokenizer entry as it is (a description, an id, or none: null, which the index leaves out)
  spec.tokenizer = in.index().value("tokenizer", nlohmann::json());
  spec.tokenizer_files_from_dataset = inputs[0];
  spec.vocab_size = 0;
  for (auto& d : datasets) spec.vocab_size = std::max(spec.vocab_size, d.vocab_size());
  spec.eot_id = in.eot_id();
  spec.sources = inputs;
  spec.ids_checked = true;  // verified above against each input's vocabulary, at most the output's
  WriteResult r = write_dataset(src, spec);
  const bool use_mpi = mpi::initialized();
  if (!use_mpi || mpi::rank() == 0) {
    double gb = r.tokens * (shards::tokens_fit_uint16(spec.vocab_size) ? 2.0 : 4.0) / 1e9;
    // The whole command's time: opening (and, shuffled, loading and checking) the inputs counts too.
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CAIRN_LOG_INFO("resharded %zu -> %llu shards: %llu tokens (%.3f GB) in %.2f s (%.2f GB/s; opening%s the inputs "
                   "%.2f s)%s",
                   in_shards, static_cast<unsigned long long>(spec.shards), static_cast<unsigned long long>(r.tokens),
                   gb, total, gb / total, data.seed >= 0 ? ", loading and checking" : "", total - r.seconds,
                   r.shards_resumed ? strprintf("; %llu shards already complete, skipped",
                                                static_cast<unsigned long long>(r.shards_resumed))
                                          .c_str()
                                    : "");
    json j = r.to_json(dir);
    j["total_seconds"] = total;  // "seconds": the copy alone
    write_json_output(json_out, json_text(j, 2));
  }
  return 0;
}

}  // namespace cairn::reshard
