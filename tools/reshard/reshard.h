// cairn-reshard internals: document sources, the shard planner/writer, and the five subcommands.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cairn/config.h"
#include "cairn/shards.h"
#include "cairn/tokenizer.h"

namespace cairn::reshard {

using json = nlohmann::json;

// A sequence of documents whose tokens form one stream in source order. Thread-safe reads.
class DocSource {
 public:
  virtual ~DocSource() = default;
  virtual uint64_t num_docs() const = 0;
  // Token offset of document d in the stream (d == num_docs() gives the total).
  virtual uint64_t doc_start(uint64_t d) const = 0;
  virtual uint32_t doc_bytes(uint64_t d) const = 0;
  // Tokens [offset, offset+count) of the stream.
  virtual void read_stream(uint64_t offset, uint64_t count, uint32_t* out) const = 0;
  // Identifies the content (for resume): equal identities mean equal streams.
  virtual std::string identity() const = 0;
  // When tokens [offset, offset+count) lie contiguous in memory in stored layout (a mapped shard),
  // returns true with the pointer and width (2 or 4 bytes), so writers copy without widening.
  virtual bool raw_range(uint64_t offset, uint64_t count, const void*& ptr, int& width) const { return false; }
  // Hints that document d will be read soon (shuffled order is memory-latency bound): stage 0 fetches
  // its metadata, stage 1 (issued later) its first tokens.
  virtual void prefetch(uint64_t d, int stage) const {}
};

// Documents held in memory (build, imports).
class MemorySource final : public DocSource {
 public:
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> starts{0};  // documents + 1
  std::vector<uint32_t> bytes;
  std::string id;
  uint64_t num_docs() const override { return bytes.size(); }
  uint64_t doc_start(uint64_t d) const override { return starts[d]; }
  uint32_t doc_bytes(uint64_t d) const override { return bytes[d]; }
  void read_stream(uint64_t offset, uint64_t count, uint32_t* out) const override;
  std::string identity() const override { return id; }
  void add_document(const uint32_t* t, size_t n, uint32_t source_bytes);
};

// The documents of one or more cairn datasets (same tokenizer), in dataset and shard order.
class DatasetSource final : public DocSource {
 public:
  explicit DatasetSource(const std::vector<shards::Dataset>& datasets);
  uint64_t num_docs() const override { return doc_starts_.size() - 1; }
  uint64_t doc_start(uint64_t d) const override { return doc_starts_[d]; }
  uint32_t doc_bytes(uint64_t d) const override { return doc_bytes_[d]; }
  void read_stream(uint64_t offset, uint64_t count, uint32_t* out) const override;
  std::string identity() const override { return identity_; }
  bool raw_range(uint64_t offset, uint64_t count, const void*& ptr, int& width) const override;
  void prefetch(uint64_t d, int stage) const override;

 private:
  std::vector<std::unique_ptr<shards::Shard>> shards_;
  std::vector<uint64_t> shard_token_starts_;
  std::vector<uint64_t> doc_starts_;
  std::vector<uint32_t> doc_bytes_;
  std::string identity_;
};

// What an output dataset is: its tokenizer, shard count, order and where it goes.
struct OutputSpec {
  std::string dir;
  uint64_t shards = 1;
  int64_t seed = -1;
  bool split_docs = false;
  int threads = 0;
  json tokenizer;  // description stored in index.json
  std::vector<std::string> tokenizer_files;  // copied to <dir>/tokenizer/
  std::string tokenizer_files_from_dataset;  // or: copy <that dataset>/tokenizer/
  uint32_t vocab_size = 0, eot_id = 0;
  std::vector<std::string> sources;
  uint64_t skipped_records = 0;
};

// Summary of a written dataset.
struct WriteResult {
  uint64_t tokens = 0, documents = 0, shards_written = 0, shards_resumed = 0;
  double seconds = 0;
  json to_json(const std::string& dir) const {
    return {{"dataset", dir}, {"tokens", tokens}, {"documents", documents}, {"shards_written", shards_written},
            {"shards_resumed", shards_resumed}, {"seconds", seconds}};
  }
};

// Plans the N output shards (balanced by tokens, optional seeded shuffle), writes them in parallel
// (MPI ranks take shards round-robin, threads within a rank), resumes complete ones, and writes
// index.json and stats.json (rank 0). Collective under MPI.
WriteResult write_dataset(const DocSource& src, const OutputSpec& spec);

// Deterministic permutation of [0, n) from `seed` (same on every platform).
std::vector<uint64_t> shuffled_order(uint64_t n, uint64_t seed);
// Shard k covers stream tokens [bounds[k], bounds[k+1]) of the (permuted) document stream;
// without split_docs every bound falls on a document boundary.
std::vector<uint64_t> plan_bounds(const std::vector<uint64_t>& prefix, uint64_t shards, bool split_docs);

// Statistics of a dataset (also written as stats.json).
json compute_stats(const shards::Dataset& ds);
std::string format_stats(const json& stats);

// Refuses output directories that are, contain or sit inside an input (UsageError).
void check_output_not_input(const std::string& out, const std::vector<std::string>& inputs);
// The dataset directory to write/read: explicit value, else [data] path, else <run.dir>/data.
std::string dataset_dir(const Config& cfg, const std::string& explicit_dir);
int resolve_threads(const Config& cfg);

// Subcommands; each returns the exit code. Inputs are positional arguments.
// `json_out` ("" none, "-" stdout) receives a summary of what was written.
int run_build(const Config& cfg, const std::vector<std::string>& inputs, const std::string& out,
              const std::string& json_out = "");
int run_reshard(const Config& cfg, const std::vector<std::string>& inputs, const std::string& out,
                const std::string& json_out = "");
// llmc_format: llm.c export variant, "gpt-2" (uint16), "llama-3" (uint32) or "auto" (by vocabulary size).
int run_convert(const Config& cfg, const std::string& from, const std::string& to,
                const std::vector<std::string>& inputs, const std::string& out,
                const std::string& llmc_format = "auto");
int run_verify(const Config& cfg, const std::vector<std::string>& inputs, const std::string& json_out);
int run_stats(const Config& cfg, const std::vector<std::string>& inputs, const std::string& json_out);

// The tokenizer the [data] section describes (tokenizer, vocab, merges, tokenizer_json).
std::unique_ptr<tokenizer::Tokenizer> load_configured_tokenizer(const Config& cfg);

// Reading raw text inputs into documents (build).
struct TextDocument {
  std::string_view text;
  uint32_t input = 0;  // index into the input file list
  uint64_t line = 0;   // 1-based line where it starts
};
struct TextCorpus {
  std::vector<std::string> files;               // expanded input names
  std::vector<std::unique_ptr<std::string>> storage;  // owns the text views point into
  std::vector<TextDocument> docs;
  uint64_t skipped = 0;
  uint64_t bytes = 0;
};
TextCorpus read_text_inputs(const Config& cfg, const std::vector<std::string>& inputs);
// Reads already expanded files (see expand_inputs).
TextCorpus read_text_files(const Config& cfg, const std::vector<std::string>& files);
// Files named by the inputs: directories expanded (recursive, sorted, hidden and binary files
// skipped), duplicates by real path removed, "-" kept for stdin.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

}  // namespace cairn::reshard
