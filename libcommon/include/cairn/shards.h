// Reader (and writer) of cairn token shards: HDF5 files + index.json (see docs/shard-format.md).
// CONTRACT used by cairn-train/cairn-eval; implemented by the cairn-reshard work (libcommon/src/shards/).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cairn {
class Config;
class Progress;
}  // namespace cairn

namespace cairn::shards {

// The dataset directory a config names: [data] path, or <run.dir>/data when that is "".
std::string dataset_path(const Config& cfg);

struct ShardInfo {
  std::string file;  // file name relative to the dataset directory
  uint64_t tokens = 0;
  uint64_t documents = 0;
  uint64_t xxh64 = 0;  // xxHash64 of the token bytes as stored
};

// One open shard: random access to token ranges and documents.
class Shard {
 public:
  virtual ~Shard() = default;
  virtual uint64_t num_tokens() const = 0;
  virtual uint64_t num_documents() const = 0;
  // Tokens [offset, offset+count) widened to uint32.
  virtual void read_tokens(uint64_t offset, uint64_t count, uint32_t* out) const = 0;
  std::vector<uint32_t> tokens(uint64_t offset, uint64_t count) const;
  // Document d: token range [begin, end) (end-of-text included) and its source UTF-8 byte length.
  virtual uint64_t doc_begin(uint64_t d) const = 0;
  virtual uint64_t doc_end(uint64_t d) const = 0;
  virtual uint32_t doc_bytes(uint64_t d) const = 0;
  std::vector<uint32_t> document(uint64_t d) const;
  // Stored width (2 or 4 bytes) and, when the file could be memory-mapped, the raw little-endian
  // token array (nullptr otherwise); lets bulk copiers avoid widening.
  virtual int token_width() const = 0;
  virtual const void* mapped_tokens() const { return nullptr; }
  // The document tables in memory when the shard holds them (documents + 1 offsets, documents byte
  // counts), for bulk readers; nullptr otherwise.
  virtual const uint64_t* doc_offsets_data() const { return nullptr; }
  virtual const uint32_t* doc_bytes_data() const { return nullptr; }
  // Copies tokens [offset, offset+count) as stored (little-endian, token_width() bytes each) into `out`
  // with pread, without mapping them: on VMs where every page-table change is expensive this reads
  // at page-cache copy speed. False when the shard cannot (then use read_tokens or the mapping).
  virtual bool read_stored(uint64_t offset, uint64_t count, void* out) const { return false; }
  // Tells the shard that tokens [offset, offset+count) will not be read again soon: a mapped shard drops those
  // pages from this process (they stay in the page cache), so a pass over a multi-gigabyte shard (verify, convert
  // --to) does not show the whole file as resident memory, which Slurm's memory accounting counts against the job.
  virtual void release_tokens(uint64_t offset, uint64_t count) const {}
  // Root attributes of the file (format_version, tokenizer, vocab_size, eot_id, tokens_xxh64, ...).
  virtual nlohmann::json attributes() const = 0;
};

struct TokenScan;

// The id in index.json's tokenizer entry: its "id" when it is described (an object), the string itself when only
// the id is given, "" when there is none.
std::string tokenizer_id_of(const nlohmann::json& description);

// A dataset directory (index.json + shard files).
class Dataset {
 public:
  // Opens and checks index.json; throws UsageError naming the path if missing or malformed.
  static Dataset open(const std::string& dir);
  const std::string& dir() const { return dir_; }
  const nlohmann::json& index() const { return index_; }
  size_t num_shards() const { return shards_.size(); }
  const ShardInfo& info(size_t i) const { return shards_[i]; }
  uint64_t total_tokens() const;
  uint64_t total_documents() const;
  int64_t seed() const;  // -1 when the documents were not shuffled
  std::string shard_path(size_t i) const;
  uint32_t vocab_size() const;  // tokenizer vocabulary (max id + 1)
  uint32_t eot_id() const;      // end-of-text token id
  std::string tokenizer_id() const;
  std::unique_ptr<Shard> shard(size_t i) const;  // opens shard file i
  // What identifies the tokens a run reads: xxh64 (16 hex digits) over each shard's token count and token xxh64
  // (index.json's, which readers check every shard against), in index order, with the vocabulary size and the
  // end-of-text id. Cheap (index.json only); a copy or move of the dataset keeps it, other shards, another order or
  // another tokenizer change it. cairn-train records it in checkpoints; cairn-eval compares it.
  std::string content_fingerprint() const;

  // Corruption is caught, not copied: every reader of a dataset (reshard, convert, cairn-train's and
  // cairn-eval's loaders) checks each shard's tokens against index.json before using them.
  // verify_shard hashes shard i's tokens as stored (streamed from the mapping, at memory speed) and
  // checks them against index.json's xxh64 and the file's tokens_xxh64 attribute, and that every id
  // is below vocab_size(); throws GateFailure (exit 3, like `cairn-reshard verify`) naming the shard
  // file, the document and token of a bad id, and the expected and computed checksums.
  // Thread-safe; call it once per shard (cairn-train and cairn-eval: one rank per shard, before training or scoring,
  // verify_shards_across_ranks in cairn/shards_mpi.h; a loader's prefetch thread on first touch). `progress`, when
  // given, counts the tokens hashed, a few MB at a time (Progress::add): a multi-GB shard shows its progress.
  void verify_shard(size_t i, const Shard& sh, Progress* progress = nullptr) const;
  void verify_shard(size_t i, Progress* progress = nullptr) const;  // opens the shard itself
  // verify_shard's verdict on a scan made elsewhere (e.g. a copy that hashed shard i's tokens while
  // reading them, TokenScanner): the same checks and messages (GateFailure).
  void check_scan(size_t i, const Shard& sh, const TokenScan& r) const;
  // verify_shard for every shard on `threads` threads (one process; MPI ranks that share the work:
  // verify_shards_across_ranks); rethrows the first failure. `progress`, when given, counts their tokens as
  // verify_shard hashes them.
  void verify_shards(int threads, Progress* progress = nullptr) const;

 private:
  std::string dir_;
  nlohmann::json index_;
  std::vector<ShardInfo> shards_;
};

constexpr int kFormatVersion = 1;

// The HDF5 library (Debian's build) is not thread-safe: every HDF5 call of a process that uses HDF5 from more than
// one thread (the shard reader/writer, cairn-train's loader thread beside its checkpoints) holds this one lock.
// Recursive, because callers that hold it call shard code that takes it again. Token reads from mapped shards and
// token writes go around HDF5 and need no lock.
std::recursive_mutex& hdf5_mutex();

// Opens one shard file directly (verify, resume checks); errors name the path.
std::unique_ptr<Shard> open_shard(const std::string& path);

// Token storage width: uint16 when every id fits (vocab_size <= 65536), else uint32.
inline bool tokens_fit_uint16(uint32_t vocab_size) { return vocab_size <= 65536; }
std::string shard_file_name(size_t index);  // "shard_00000.h5"
// The index of a file named as shard_file_name names shards ("shard_00042.h5" -> 42); nullopt for any other name.
std::optional<size_t> shard_file_index(const std::string& name);
std::string hex64(uint64_t v);               // 16 lowercase hex digits (how index.json stores hashes)
uint64_t parse_hex64(const std::string& s);  // throws UsageError if not hex

// What a shard file records about itself beyond its data (HDF5 root attributes).
struct ShardMeta {
  uint64_t shard_index = 0, shard_count = 1;
  std::string tokenizer_id;
  uint32_t vocab_size = 0, eot_id = 0;
  int64_t seed = -1;      // -1: not shuffled
  std::string plan_hash;  // identifies the inputs + settings that produced it (for resume)
};

// Streams one shard whose size is known up front into a temp file; finish() renames it into place,
// so a crash leaves the complete old file or none. Not thread-safe; one writer per shard.
class ShardWriter {
 public:
  ShardWriter(const std::string& path, const ShardMeta& meta, uint64_t num_tokens, uint64_t num_documents);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  // Appends tokens (each < vocab_size) in order; `doc_token_counts`/`bytes` describe whole documents.
  void append_tokens(const uint32_t* tokens, size_t n);
  // Appends tokens already in a stored layout (little-endian, `width` 2 or 4 bytes each), e.g.
  // straight from a mapped input shard: no widening, written without an intermediate copy.
  void append_raw(const void* tokens, size_t n, int width);
  // The caller guarantees every id it appends with append_raw is below vocab_size (e.g. they come
  // from shards verified against the same or a smaller vocabulary), so the writer skips its scan.
  void set_ids_checked(bool checked);
  void append_document(uint64_t tokens_in_doc, uint32_t source_bytes);
  ShardInfo finish();  // checks counts, writes offsets/attrs, fsyncs, renames
  // finish() in two steps: finish_pending() completes the temp file and starts its write-back;
  // commit() later fsyncs and renames it into place (a writer destroyed uncommitted removes it).
  // Resharding commits a shard only once every input token it holds has been verified.
  ShardInfo finish_pending();
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// If `path` holds a complete shard whose plan_hash attribute equals `plan_hash` and whose tokens
// still hash to the stored xxh64, returns its info (resume skips it); otherwise nullopt.
bool existing_shard_matches(const std::string& path, const std::string& plan_hash, ShardInfo& info);

// xxHash64 (seed 0) of tokens as stored: little-endian uint16 or uint32 values.
uint64_t hash_tokens(const uint32_t* tokens, size_t n, bool as_uint16);

// What a single pass over a shard's stored tokens computes: xxh64 (as in index.json) and the first
// token whose id is >= `vocab_size` (UINT64_MAX when none).
struct TokenScan {
  uint64_t xxh64 = 0;
  uint64_t first_bad = UINT64_MAX;
  uint32_t first_bad_id = 0;
};
TokenScan scan_shard_tokens(const Shard& sh, uint32_t vocab_size, Progress* progress = nullptr);
// The same scan fed in pieces, in order: update() with consecutive runs of stored tokens, then finish().
// `progress`, when given, counts the tokens scanned (Progress::add), kProgressTokens at a time and the rest at
// finish(): one add per few MB keeps the count out of the hashing loop's time.
class TokenScanner {
 public:
  static constexpr uint64_t kProgressTokens = uint64_t{1} << 20;
  TokenScanner(int width, uint32_t vocab_size, Progress* progress = nullptr);
  ~TokenScanner();
  TokenScanner(const TokenScanner&) = delete;
  TokenScanner& operator=(const TokenScanner&) = delete;
  void update(const void* stored, uint64_t n);  // n tokens of the scanner's width
  uint64_t scanned() const { return pos_; }
  TokenScan finish();

 private:
  void* state_;  // XXH64_state_t
  int width_;
  uint32_t vocab_;
  bool check_ids_;
  uint64_t pos_ = 0;
  TokenScan r_;
  Progress* progress_;
  uint64_t reported_ = 0;  // tokens counted on progress_ so far
};

// cairn-train's sample numbering, shared with cairn-eval so both score the same tokens: windows of T+1
// tokens at stride T, shard by shard (T inputs, T targets shifted by one), and a validation tail of
// ceil(val_fraction * total) windows (at least min_val_windows, at most half).
struct WindowIndex {
  int T = 0;
  std::vector<uint64_t> first_window;  // per shard, prefix sums of window counts (plus the end)
  uint64_t total = 0;
  uint64_t val_windows = 0;
  uint64_t train_windows() const { return total - val_windows; }
  uint64_t val_first() const { return total - val_windows; }
  // (shard, token offset) of window w.
  std::pair<size_t, uint64_t> locate(uint64_t w) const;
};
WindowIndex build_window_index(const Dataset& ds, int T, double val_fraction, uint64_t min_val_windows);
// The validation tail's windows out of `total` (build_window_index's rule).
uint64_t val_window_count(uint64_t total, double val_fraction, uint64_t min_val_windows);

// Runs fn(i) for i = first, first + stride, ... < end on `threads` threads; rethrows the exception of the lowest i
// that failed (deterministic whatever the thread count). Shard verification uses it.
void for_each_index_parallel(size_t first, size_t end, size_t stride, int threads,
                             const std::function<void(size_t)>& fn);

}  // namespace cairn::shards
