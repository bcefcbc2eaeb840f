// cairn-reshard internals: document sources, the shard planner/writer, and the five subcommands.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cairn/config.h"
#include "cairn/dir_lock.h"
#include "cairn/error.h"
#include "cairn/provenance.h"
#include "cairn/sections/data.h"
#include "cairn/shards.h"
#include "cairn/sysinfo.h"
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
  // doc_start(0..num_docs()) as one array when the source holds it (an in-order plan uses it as is
  // instead of building a copy); nullptr otherwise.
  virtual const uint64_t* doc_starts_data() const { return nullptr; }
  // Tokens [offset, offset+count) of the stream.
  virtual void read_stream(uint64_t offset, uint64_t count, uint32_t* out) const = 0;
  // Identifies the content (for resume): equal identities mean equal streams.
  virtual std::string identity() const = 0;
  // When tokens [offset, offset+count) lie contiguous in memory in stored layout (a mapped shard),
  // returns true with the pointer and width (2 or 4 bytes), so writers copy without widening.
  virtual bool raw_range(uint64_t offset, uint64_t count, const void*& ptr, int& width) const { return false; }
  // Copies tokens from `offset` in stored layout into `out` (at most `count` tokens and `out_bytes`
  // bytes) with pread, not through a mapping, stopping where a stored piece (an input shard) ends;
  // returns how many tokens, with their width, or 0 when the source cannot (then raw_range or
  // read_stream). The bulk path of in-order copies: a page-cache copy costs less than mapping.
  virtual uint64_t read_raw(uint64_t offset, uint64_t count, void* out, size_t out_bytes, int& width) const {
    return 0;
  }
  // Verification during the copy (DatasetSource::verify_while_copying): whether every input shard
  // holding stream tokens [begin, end) has been checked; a shard is committed only then.
  virtual bool verified(uint64_t begin, uint64_t end) const { return true; }
  // Set as soon as a checked input shard fails: writers stop.
  virtual bool verification_failed() const { return false; }
  // Completes the check of every input shard that starts in stream tokens [begin, end) (this rank's
  // part), hashing what the copy did not read in order; throws the failure of the lowest bad shard
  // (GateFailure, exit 3).
  virtual void finish_verification(uint64_t begin, uint64_t end, int threads) const {}
  // Hints for shuffled order, which is memory-latency bound: document d's start and byte count
  // (planning), and the tokens from stream offset `offset` on (copying), will be read soon.
  virtual void prefetch_doc(uint64_t d) const {}
  virtual void prefetch_tokens(uint64_t offset) const {}
  // Drops this process's mappings of pages already copied (they stay in the page cache), so resident
  // memory stays bounded while a dataset larger than memory streams through. Thread-safe; a later
  // read maps the pages again.
  virtual void release_mapped() const {}
};

// Allocates through mmap with transparent huge pages requested: tables of millions of entries then
// cost a fault per 2 MiB instead of per 4 KiB page (faults are expensive on VMs).
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n);
  void deallocate(T* p, size_t n);
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};
template <class T>
using huge_vector = std::vector<T, HugePageAllocator<T>>;

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
  // Replaces the identity (build names its parts by the inputs they came from, not by how the
  // inputs were cut into parts).
  void set_identity(std::string id) { identity_ = std::move(id); }
  uint64_t num_docs() const override { return doc_starts_.size() - 1; }
  uint64_t doc_start(uint64_t d) const override { return doc_starts_[d]; }
  uint32_t doc_bytes(uint64_t d) const override { return doc_bytes_[d]; }
  const uint64_t* doc_starts_data() const override { return doc_starts_.data(); }
  void read_stream(uint64_t offset, uint64_t count, uint32_t* out) const override;
  std::string identity() const override { return identity_; }
  bool raw_range(uint64_t offset, uint64_t count, const void*& ptr, int& width) const override;
  void prefetch_doc(uint64_t d) const override;
  void prefetch_tokens(uint64_t offset) const override;
  void release_mapped() const override;
  // Checks shards first, first+stride, ... (numbered across the datasets) against their index.json
  // on `threads` threads with the shards already open (Dataset::verify_shard): GateFailure (exit 3)
  // naming the lowest bad shard. A progress line by tokens ("checking DIR").
  void verify(int threads, size_t first = 0, size_t stride = 1) const;
  // Instead of verify() for shuffled copies, whose every output shard reads documents of every input
  // shard in random order: reads every input shard's tokens with pread into huge-page memory and
  // checks shards first, first+stride, ... in the same pass (GateFailure as verify()). Random
  // document reads then cost a cache miss each, where through the page cache's mapping each costs a
  // TLB miss too, and on VMs a page-table trap per 4 KiB first touched. Returns false, having loaded
  // nothing, when the tokens of `ranks_on_node` copies would take more than half of the node's
  // available memory or a shard is not stored contiguously: then verify() and copy from the mapping.
  // A progress line by the tokens checked ("loading and checking DIR").
  bool load_and_verify(int threads, size_t first, size_t stride, int ranks_on_node);
  // Instead of verify() before copying: every read_raw hashes the tokens it reads (in the same pass)
  // when they continue its shard's hash in order, and finish_verification() hashes the rest. The
  // writer commits an output shard once all of its input shards have passed.
  void verify_while_copying();
  uint64_t read_raw(uint64_t offset, uint64_t count, void* out, size_t out_bytes, int& width) const override;
  bool verified(uint64_t begin, uint64_t end) const override;
  bool verification_failed() const override { return failed_.load(std::memory_order_relaxed); }
  void finish_verification(uint64_t begin, uint64_t end, int threads) const override;
  ~DatasetSource() override;

 private:
  struct ShardCheck;
  // The progress line of `what` ("checking") over shards first, first+stride, ...: their tokens, named by the inputs.
  Progress check_progress(const std::string& what, size_t first, size_t stride) const;
  size_t shard_of(uint64_t offset) const;
  void feed(size_t s, uint64_t local, const void* stored, uint64_t n) const;
  void complete(size_t s, ShardCheck& c) const;              // c.m held
  mutable std::vector<std::unique_ptr<ShardCheck>> checks_;  // per shard; empty: not verifying in-pass
  mutable std::mutex fail_mutex_;
  mutable std::atomic<bool> failed_{false};
  mutable size_t fail_shard_ = SIZE_MAX;
  mutable std::string fail_message_;
  mutable int fail_code_ = 0;
  std::vector<shards::Dataset> datasets_;
  std::vector<std::pair<size_t, size_t>> shard_origin_;  // (dataset, shard in it) per shard
  std::vector<std::unique_ptr<shards::Shard>> shards_;
  std::vector<uint64_t> shard_token_starts_;
  struct Loaded;                                 // a shard's tokens in memory (load_and_verify)
  std::vector<std::unique_ptr<Loaded>> loaded_;  // per shard; empty: read through the mapping
  huge_vector<uint64_t> doc_starts_;
  huge_vector<uint32_t> doc_bytes_;
  std::string identity_;
};

// What an output dataset is: its tokenizer, shard count, order and where it goes.
struct OutputSpec {
  std::string dir;
  // Rank 0 holds dir's .reshard.lock (lock_dataset_dir; not where flock does not work): the temps of every node's
  // killed runs may then go before this run writes (StaleTempScope::Locked).
  bool dir_locked = false;
  uint64_t shards = 1;
  int64_t seed = -1;
  bool split_docs = false;
  int threads = 0;
  json tokenizer;                            // description stored in index.json
  std::vector<std::string> tokenizer_files;  // copied to <dir>/tokenizer/
  std::string tokenizer_files_from_dataset;  // or: copy <that dataset>/tokenizer/
  uint32_t vocab_size = 0, eot_id = 0;
  std::vector<std::string> sources;
  uint64_t skipped_records = 0;
  bool ids_checked = false;           // every source id is known to be below vocab_size (verified inputs)
  json index_extra = json::object();  // keys added to index.json (mix: "mixture")
  json stats_extra = json::object();  // keys added to stats.json
};

// Summary of a written dataset.
struct WriteResult {
  uint64_t tokens = 0, documents = 0, shards_written = 0, shards_resumed = 0;
  double seconds = 0;
  // The --json summary of build, reshard, convert and mix, with its provenance like every result a tool writes.
  json to_json(const std::string& dir) const {
    return {{"dataset", dir},
            {"tokens", tokens},
            {"documents", documents},
            {"shards_written", shards_written},
            {"shards_resumed", shards_resumed},
            {"seconds", seconds},
            {"provenance", provenance().to_json()}};
  }
};

// Plans the N output shards (balanced by tokens, optional seeded shuffle), writes them in parallel
// (MPI ranks take shards round-robin, threads within a rank), resumes complete ones, and writes
// index.json and stats.json (rank 0). Over a complete dataset it writes into <dir>/.staging and swaps
// the new dataset in only once every shard is on disk: a failed run leaves the old one intact and a
// rerun resumes from the staged shards. Collective under MPI.
WriteResult write_dataset(const DocSource& src, const OutputSpec& spec);
// Where write_dataset stages a run that would replace the complete dataset in `dir`: <dir>/.staging.
std::string staging_dir(const std::string& dir);
// One cairn-reshard writing a dataset directory at a time: build, reshard, mix, convert --from and stats take `lock`
// on <dir>/.reshard.lock (creating dir) before they write anything. Two runs on one --out would remove each other's
// temp files and swap shards of different plans in. A taken lock is exit 1 naming the holder; the lock goes when the
// process ends, killed or not. every_rank: collective under MPI (rank 0 takes it for all); false: this process
// takes it alone (stats, which runs on rank 0 only).
void lock_dataset_dir(DirLock& lock, const std::string& dir, bool every_rank = true);
// An output directory this command created and failed to fill goes again, on the rank holding `lock`: its contents
// while the lock is held, then the lock file, the lock, and the directory itself if nothing else appeared in it (no
// other run can have written there: it found the directory locked until the lock file was gone).
void remove_created_dataset_dir(DirLock& lock, const std::string& dir);

// Deterministic permutation of [0, n) from `seed` (same on every platform).
std::vector<uint64_t> shuffled_order(uint64_t n, uint64_t seed);
// Shard k covers stream tokens [bounds[k], bounds[k+1]) of the (permuted) document stream;
// without split_docs every bound falls on a document boundary.
std::vector<uint64_t> plan_bounds(std::span<const uint64_t> prefix, uint64_t shards, bool split_docs);

// ------------------------------------------------------------------------------------ mixtures
// A blend of sources in order: mixture document p is document doc[p] of source source[p], and
// tokens [prefix[p], prefix[p + 1]) of the mixture's stream.
struct MixPlan {
  std::vector<uint16_t> source;
  std::vector<uint64_t> doc;
  std::vector<uint64_t> prefix{0};
  std::vector<uint64_t> tokens, documents;  // per source: what the mixture holds of it
  std::vector<double> max_prefix_lag;       // per source: max over prefixes of |its tokens - weight x prefix|
};
// Megatron's greedy blending at token granularity: until `target_tokens` are reached, the source
// whose tokens lag their weight's share of the prefix the most gives its next whole document. Each
// source's documents come in epochs, shuffled per (seed, source, epoch) when seed >= 0, else in
// stored order; small sources repeat. `weights` sum to 1. `expected_documents` sizes the plan's
// arrays up front. Shows progress on stderr.
MixPlan plan_mixture(const std::vector<const DocSource*>& sources, const std::vector<double>& weights,
                     uint64_t target_tokens, int64_t seed, uint64_t expected_documents = 0);
// The mixture as one document stream (sources must outlive it).
class MixSource final : public DocSource {
 public:
  MixSource(MixPlan plan, std::vector<const DocSource*> sources, std::string id)
      : plan_(std::move(plan)), sources_(std::move(sources)), id_(std::move(id)) {}
  uint64_t num_docs() const override { return plan_.source.size(); }
  uint64_t doc_start(uint64_t d) const override { return plan_.prefix[d]; }
  uint32_t doc_bytes(uint64_t d) const override { return sources_[plan_.source[d]]->doc_bytes(plan_.doc[d]); }
  // The plan's prefix sums are the document starts: the writer uses them instead of a copy.
  const uint64_t* doc_starts_data() const override { return plan_.prefix.data(); }
  void read_stream(uint64_t offset, uint64_t count, uint32_t* out) const override;
  std::string identity() const override { return id_; }
  bool raw_range(uint64_t offset, uint64_t count, const void*& ptr, int& width) const override;
  void release_mapped() const override;

 private:
  uint64_t mix_doc(uint64_t offset) const;  // the mixture document holding token `offset`
  MixPlan plan_;
  std::vector<const DocSource*> sources_;
  std::string id_;
};
// The realised mix over cairn-train's windows of the stream cut at `bounds` (shards): windows of
// `sequences` consecutive sequences of seq_len tokens inside a shard. {sequences, tokens, windows,
// worst_deviation (max over windows and sources of |share - weight|), mean_deviation, worst_at,
// per_source [{min_share, max_share}]}.
json mix_window_stats(const MixPlan& plan, const std::vector<double>& weights, const std::vector<uint64_t>& bounds,
                      uint64_t seq_len, uint64_t sequences);
// The per-source table of a stats.json "mixture".
std::string format_mixture(const json& mixture);

// Every shard of `ds` checked against index.json (Dataset::verify_shards on `threads` threads; GateFailure naming a
// bad one) before its tokens are used, with a progress line by tokens ("checking DIR"): a pass over the whole dataset.
void check_dataset(const shards::Dataset& ds, int threads);

// Statistics of a dataset (also written as stats.json), with a progress line over its documents.
json compute_stats(const shards::Dataset& ds);
// The statistics of shards described by `per_shard` ([{file, tokens, documents}]), every stored
// document's length in tokens (shard order) and their source bytes.
json stats_json(const std::string& tokenizer_id, uint32_t vocab_size, const json& per_shard,
                std::vector<uint64_t> lengths, uint64_t bytes);
std::string format_stats(const json& stats);

// Refuses output directories that are, contain or sit inside an input (UsageError).
void check_output_not_input(const std::string& out, const std::vector<std::string>& inputs);
// The dataset directory to write/read: explicit value, else [data] path, else <run.dir>/data.
std::string dataset_dir(const Config& cfg, const std::string& explicit_dir);
// [data] threads, 0 = every hardware thread.
int resolve_threads(const DataSection& data);
// Bytes free for this user on the filesystem that holds (or will hold) `path`: std::filesystem::space() of its
// nearest existing ancestor; -1 when that cannot be told.
double available_disk_bytes(const std::string& path);

// Faults tests inject through the tool's own command line (tests/reshard/cairn-reshard-faults), so the real binary
// carries no test hooks.
struct ReshardFaults {
  double free_disk_bytes = -1;    // >= 0: the free space the output's disk reports (a full disk without filling one)
  std::string verify_after_open;  // verify: a shell command run once a dataset's index.json is read (a writer's swap)
};
// cairn-reshard's command line: parses argv, loads the config and runs the subcommand; returns the exit code.
int reshard_main(int argc, char** argv, const ReshardFaults& faults = {});

// Subcommands; each returns the exit code. Inputs are positional arguments.
// `json_out` ("" none, "-" stdout) receives a summary of what was written.
int run_build(const Config& cfg, const std::vector<std::string>& inputs, const std::string& out,
              const std::string& json_out = "");
int run_reshard(const Config& cfg, const std::vector<std::string>& inputs, const std::string& out,
                const std::string& json_out = "");
// llmc_format: llm.c export variant, "gpt-2" (uint16), "llama-3" (uint32) or "auto" (by vocabulary size).
int run_convert(const Config& cfg, const std::string& from, const std::string& to,
                const std::vector<std::string>& inputs, std::string out, const std::string& llmc_format = "auto",
                const std::string& json_out = "");
// [data.mix] sources (or positional datasets) blended by weight into one dataset.
int run_mix(const Config& cfg, const std::vector<std::string>& inputs, const std::string& out,
            const std::string& json_out = "", const ReshardFaults& faults = {});
int run_verify(const Config& cfg, const std::vector<std::string>& inputs, const std::string& json_out,
               const ReshardFaults& faults = {});
int run_stats(const Config& cfg, const std::vector<std::string>& inputs, const std::string& json_out);

// Intermediate part files (build's and convert --from's): one part's entry in an index.json shard list, read back
// from the written file, and the index.json that makes a directory of parts one dataset (shards::Dataset::open).
nlohmann::json part_index_entry(const std::string& dir, const std::string& file);
void write_parts_index(const std::string& dir, const nlohmann::json& shard_list, const tokenizer::Tokenizer& tok);

// ------------------------------------------------------------------------------------ build inputs
// Files named by the inputs: directories expanded (recursive, sorted, hidden and binary files
// skipped), glob patterns expanded (sorted), @FILE manifests read (one input per line, relative to
// the manifest), duplicates by real path removed, "-" kept for stdin. `dirs` receives the
// directories that were expanded (the output may not sit inside them).
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs,
                                       std::vector<std::string>* dirs = nullptr);

// The rest of an input cannot be read (truncated or corrupt compressed data): exit 2, or with
// --skip-bad one skipped record and the input ends there.
struct InputStreamError : UsageError {
  using UsageError::UsageError;
};

// One input's bytes, decompressed when they start with gzip's or zstd's magic, in bounded memory.
class InputStream {
 public:
  explicit InputStream(const std::string& name);  // "-" is stdin
  ~InputStream();
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;
  // Up to n bytes of content; 0 at the end. Throws InputStreamError naming the file and the
  // compressed byte offset when the data is truncated or corrupt.
  size_t read(char* out, size_t n);
  uint64_t raw_consumed() const;  // bytes of the file itself consumed so far (for progress)
  const std::string& shown() const;
  const char* compression() const;  // "none", "gzip" or "zstd"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// How text inputs become documents ([data] format, delimiter, jsonl_field, skip_bad).
struct TextSettings {
  std::string format = "auto", delimiter, field = "text";
  bool skip_bad = false;
};
TextSettings text_settings(const DataSection& data);
// LMDB environments (a directory holding data.mdb, or a .mdb file opened without a subdirectory):
// each value of the main database, in key order, is a record.
bool is_lmdb_path(const std::string& path);
class LmdbInput {
 public:
  explicit LmdbInput(const std::string& path);
  ~LmdbInput();
  bool next(std::string_view& value);  // the next value (valid until the next call); false at the end
  void release_read_pages();           // unmaps pages already read (bounded resident memory)
  uint64_t bytes_read() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What records an input holds: by --format, else by name (.jsonl/.ndjson: JSONL; .tfrecord,
// .tfrecords, .tfrec: TFRecord; else text; a .gz/.zst/.zstd ending is looked through).
enum class InputKind { Text, Jsonl, TfRecord };
InputKind input_kind(const std::string& name, const TextSettings& s);

// Raw records of an input, in order: JSONL lines (without newline/CR, blank lines dropped), text
// documents (whole file, or the lines between delimiter lines, newlines included) or TFRecord
// payloads (serialized tf.train.Example). Decoding (JSON, protobuf, CRCs of TFRecord payloads,
// UTF-8 checks) happens later, on the tokenizing threads.
struct RecordBatch {
  struct Record {
    size_t begin = 0, end = 0;  // in raw
    uint64_t line = 0;          // 1-based line where the record starts (TFRecord: record number)
    uint64_t offset = 0;        // byte offset in the (decompressed) input
    uint32_t crc = 0;           // TFRecord: the payload's masked CRC32C as stored
  };
  InputKind kind = InputKind::Text;
  const char* unit = "line";  // what Record::line counts ("record" for TFRecord, "entry" for LMDB)
  std::string raw;
  std::vector<Record> records;
  void clear() {
    raw.clear();
    records.clear();
  }
};

// Reads one input as a sequence of RecordBatches of about max_bytes each: memory holds one batch
// and the record being read, whatever the size of the input.
class RecordReader {
 public:
  RecordReader(const std::string& name, const TextSettings& s);
  // Fills `batch` with the next records (at least max_bytes of them unless the input ends); false
  // when the input is exhausted and the batch is empty.
  bool next(RecordBatch& batch, size_t max_bytes);
  // Set when the input ended early on unreadable data (InputStreamError's message).
  const std::string& stream_error() const { return stream_error_; }
  uint64_t raw_consumed() const;        // bytes of the file consumed (compressed if compressed)
  uint64_t decompressed_bytes() const;  // content bytes read
  uint64_t records() const { return records_; }
  const std::string& shown() const { return shown_; }
  bool compressed() const;

 private:
  bool fill();
  bool ensure(size_t n);  // at least n unconsumed bytes in buf_; false when the input ends first
  bool next_line(std::string_view& line, uint64_t& offset, bool& complete);
  void next_tfrecords(RecordBatch& batch, size_t max_bytes);
  void add_record(RecordBatch& batch, std::string_view text, uint64_t line, uint64_t offset);
  void flush_doc(RecordBatch& batch);

  std::string shown_;
  std::unique_ptr<InputStream> stream_;  // a file or stdin
  std::unique_ptr<LmdbInput> lmdb_;      // or an LMDB environment
  TextSettings settings_;
  InputKind kind_ = InputKind::Text;
  std::string buf_;                // content read and not yet consumed from pos_ on
  std::unique_ptr<char[]> chunk_;  // fill()'s read block (allocated once, never zero-filled)
  size_t pos_ = 0;
  uint64_t buf_offset_ = 0;  // content offset of buf_[0]
  bool eof_ = false, done_ = false;
  uint64_t line_ = 1, records_ = 0;
  std::string doc_;  // the text document being assembled (delimiter mode)
  uint64_t doc_line_ = 1, doc_offset_ = 0;
  std::string stream_error_;
};

// Why a record is not a document, and where it is.
struct RecordProblem {
  uint64_t line = 0, offset = 0;
  std::string why;
  const char* unit = "line";  // what `line` counts ("record" for TFRecord, "entry" for LMDB: no offset)
};
// Record i of `batch` as document text (JSONL: the string field, TFRecord: the first value of the
// bytes feature, both named by `s.field`, decoded into `storage`); false with `problem` set when it
// is malformed (invalid UTF-8, broken JSON, no such field, payload CRC mismatch, not an Example,
// over 4 GiB).
bool decode_record(const RecordBatch& batch, size_t i, const TextSettings& s, std::string& storage,
                   std::string_view& text, RecordProblem& problem);
// `bad input "<file>": line L (byte offset O): why (use --skip-bad ...)` ("record R" for TFRecord).
std::string describe_problem(const std::string& shown, bool compressed, const RecordProblem& p);

}  // namespace cairn::reshard
