// Reading cairn token shards: index.json parsing and random access to token ranges and documents.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/h5.h"
#include "cairn/log.h"
#include "cairn/sections/data.h"
#include "cairn/sections/run.h"
#include "cairn/shards.h"

namespace cairn::shards {

using json = nlohmann::json;

std::string dataset_path(const Config& cfg) {
  const std::string p = read_section<DataSection>(cfg).path;
  return p.empty() ? join_path(read_section<RunSection>(cfg).dir, "data") : p;
}

std::string shard_file_name(size_t index) { return strprintf("shard_%05zu.h5", index); }

std::optional<size_t> shard_file_index(const std::string& name) {
  size_t index = 0;
  if (std::sscanf(name.c_str(), "shard_%zu.h5", &index) != 1 || name != shard_file_name(index)) return std::nullopt;
  return index;
}

std::string hex64(uint64_t v) { return strprintf("%016llx", static_cast<unsigned long long>(v)); }

uint64_t parse_hex64(const std::string& s) {
  if (s.empty() || s.size() > 16 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    throw UsageError("\"" + s + "\" is not a 64-bit hex checksum");
  return std::stoull(s, nullptr, 16);
}

uint64_t hash_tokens(const uint32_t* tokens, size_t n, bool as_uint16) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  if (!as_uint16) {
    XXH64_update(st, tokens, n * sizeof(uint32_t));  // little-endian hosts only (x86, arm)
  } else {
    uint16_t buf[4096];
    for (size_t i = 0; i < n;) {
      size_t m = std::min<size_t>(4096, n - i);
      for (size_t k = 0; k < m; ++k) buf[k] = static_cast<uint16_t>(tokens[i + k]);
      XXH64_update(st, buf, m * sizeof(uint16_t));
      i += m;
    }
  }
  uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return h;
}

std::vector<uint32_t> Shard::tokens(uint64_t offset, uint64_t count) const {
  std::vector<uint32_t> out(count);
  read_tokens(offset, count, out.data());
  return out;
}

std::vector<uint32_t> Shard::document(uint64_t d) const {
  uint64_t b = doc_begin(d), e = doc_end(d);
  return tokens(b, e - b);
}

namespace {

class H5Shard final : public Shard {
 public:
  explicit H5Shard(const std::string& path) : path_(path) {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    file_ = h5::File::open(path);
    if (!file_.exists("tokens") || !file_.exists("doc_offsets") || !file_.exists("doc_bytes"))
      throw RuntimeError(file_message("cannot read shard", path, "missing /tokens, /doc_offsets or /doc_bytes"));
    tokens_ = file_.dataset("tokens");
    if (tokens_.is_type(H5T_NATIVE_UINT16)) width_ = 2;
    else if (tokens_.is_type(H5T_NATIVE_UINT32)) width_ = 4;
    else throw RuntimeError(file_message("cannot read shard", path, "/tokens is neither uint16 nor uint32"));
    num_tokens_ = tokens_.size();
    // The document tables' shapes and ends are checked here; their contents are read on first use (load_tables):
    // cairn-train's and most of cairn-eval's windows need only the tokens, and 12 bytes per document on every rank
    // for every open shard came to 3.6 GB per rank for a 300 M-document dataset.
    h5::Dataset offsets = file_.dataset("doc_offsets"), bytes = file_.dataset("doc_bytes");
    check_arrays(offsets, bytes);
    if (offsets.size() == 0 || bytes.size() + 1 != offsets.size())
      throw RuntimeError(file_message("cannot read shard", path,
                                      strprintf("/doc_offsets has %llu entries but /doc_bytes %llu (want documents+1)",
                                                static_cast<unsigned long long>(offsets.size()),
                                                static_cast<unsigned long long>(bytes.size()))));
    num_documents_ = bytes.size();
    uint64_t first = 0, last = 0;
    offsets.read_range_into<uint64_t>(0, 1, &first);
    offsets.read_range_into<uint64_t>(offsets.size() - 1, 1, &last);
    if (first != 0 || last != num_tokens_)
      throw RuntimeError(file_message("cannot read shard", path,
                                      strprintf("/doc_offsets must run from 0 to %llu tokens",
                                                static_cast<unsigned long long>(num_tokens_))));
    try_map();
    attrs_ = read_attributes();
    // Mapped tokens need nothing more from HDF5: closing now frees its per-file metadata cache
    // (hundreds of KB, reused by the next open instead of fresh pages for every open shard).
    if (data_) {
      tokens_ = h5::Dataset();
      file_ = h5::File();
    }
  }
  ~H5Shard() override {
    if (map_) ::munmap(map_, map_len_);
    if (fd_ >= 0) ::close(fd_);
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    tokens_ = h5::Dataset();
    file_ = h5::File();
  }

  uint64_t num_tokens() const override { return num_tokens_; }
  uint64_t num_documents() const override { return num_documents_; }
  void read_tokens(uint64_t offset, uint64_t count, uint32_t* out) const override {
    if (offset > num_tokens_ || count > num_tokens_ - offset)
      throw RuntimeError(file_message("cannot read", path_ + "/tokens",
                                      strprintf("range [%llu, %llu) is outside its %llu tokens",
                                                static_cast<unsigned long long>(offset),
                                                static_cast<unsigned long long>(offset) + count,
                                                static_cast<unsigned long long>(num_tokens_))));
    if (count == 0) return;
    if (data_) {
      if (width_ == 2) {
        const auto* p = static_cast<const uint16_t*>(data_) + offset;
        for (uint64_t i = 0; i < count; ++i) out[i] = p[i];
      } else {
        std::memcpy(out, static_cast<const uint32_t*>(data_) + offset, count * 4);
      }
      return;
    }
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    tokens_.read_range_into<uint32_t>(offset, count, out);
  }
  uint64_t doc_begin(uint64_t d) const override { return tables().offsets.at(d); }
  uint64_t doc_end(uint64_t d) const override { return tables().offsets.at(d + 1); }
  uint32_t doc_bytes(uint64_t d) const override { return tables().bytes.at(d); }
  int token_width() const override { return width_; }
  const void* mapped_tokens() const override { return data_; }
  void release_tokens(uint64_t offset, uint64_t count) const override {
    if (!data_ || count == 0) return;
    release_mapped_range(static_cast<const char*>(data_) + offset * static_cast<uint64_t>(width_),
                         count * static_cast<uint64_t>(width_));
  }
  const uint64_t* doc_offsets_data() const override { return tables().offsets.data(); }
  const uint32_t* doc_bytes_data() const override { return tables().bytes.data(); }
  bool read_stored(uint64_t offset, uint64_t count, void* out) const override {
    if (fd_ < 0 || offset > num_tokens_ || count > num_tokens_ - offset) return false;
    char* p = static_cast<char*>(out);
    uint64_t at = static_cast<uint64_t>(tokens_off_) + offset * width_, left = count * width_;
    while (left > 0) {
      ssize_t n = ::pread(fd_, p, left, static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw RuntimeError(errno_message("cannot read", path_));
      p += n, at += static_cast<uint64_t>(n), left -= static_cast<uint64_t>(n);
    }
    return true;
  }
  json attributes() const override { return attrs_; }

 private:
  struct DocTables {
    std::vector<uint64_t> offsets;  // documents + 1 token offsets
    std::vector<uint32_t> bytes;    // UTF-8 bytes of each document
  };

  // The document tables, read once on first use (thread-safe) from the file, which a mapped shard has closed.
  const DocTables& tables() const {
    std::call_once(tables_once_, [this] {
      std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
      h5::File f;
      try {
        f = h5::File::open(path_);
      } catch (const Error&) {
        // Every open shard holds a descriptor for its mapping: reading a table needs one more.
        if (const std::string limit = open_file_limit_problem(); !limit.empty())
          throw RuntimeError(file_message("cannot read shard", path_, limit));
        throw;
      }
      h5::Dataset offsets = f.dataset("doc_offsets"), bytes = f.dataset("doc_bytes");
      check_arrays(offsets, bytes);
      DocTables t;
      t.offsets = offsets.read_all<uint64_t>();
      t.bytes = bytes.read_all<uint32_t>();
      if (t.bytes.size() != num_documents_ || t.offsets.size() != num_documents_ + 1 || t.offsets.front() != 0 ||
          t.offsets.back() != num_tokens_)
        throw RuntimeError(file_message("cannot read shard", path_,
                                        "its document tables changed since it was opened (rewritten in place?)"));
      tables_ = std::move(t);
    });
    return tables_;
  }

  // A damaged header can give an array more elements than the whole file holds, or an element size HDF5 then
  // allocates conversion buffers for: refuse both before HDF5 reads the array.
  void check_arrays(const h5::Dataset& offsets, const h5::Dataset& bytes) const {
    if (!offsets.is_type(H5T_NATIVE_UINT64) || !bytes.is_type(H5T_NATIVE_UINT32))
      throw RuntimeError(
          file_message("cannot read shard", path_, "/doc_offsets is not uint64 or /doc_bytes not uint32"));
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) throw RuntimeError(errno_message("cannot read shard", path_));
    const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
    if (num_tokens_ > file_bytes / width_ || offsets.size() > file_bytes / 8 || bytes.size() > file_bytes / 4)
      throw RuntimeError(file_message(
          "cannot read shard", path_,
          strprintf(
              "/tokens, /doc_offsets or /doc_bytes has more elements than its %llu bytes can hold (damaged header)",
              static_cast<unsigned long long>(file_bytes))));
  }

  json read_attributes() const {
    json a = json::object();
    for (const char* s : {"tokenizer", "plan_hash", "tool", "version", "git_sha", "host", "time_utc"})
      if (file_.has_attr(s)) a[s] = file_.attr_string(s);
    for (const char* s : {"format_version", "vocab_size", "eot_id", "shard_index", "shard_count", "seed"})
      if (file_.has_attr(s)) a[s] = file_.attr_int(s);
    for (const char* s : {"tokens_xxh64", "num_tokens", "num_documents"})
      if (file_.has_attr(s)) a[s] = file_.attr_uint(s);
    return a;
  }

  // Maps /tokens straight from the file when it is contiguous and little-endian (the normal case).
  void try_map() {
    if (num_tokens_ == 0) return;
    int64_t off = tokens_.contiguous_offset();
    if (off < 0) return;
    h5::Handle t(tokens_.file_type(), H5Tclose);
    if (H5Tget_order(t.id()) != H5T_ORDER_LE) return;
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    uint64_t need = static_cast<uint64_t>(off) + num_tokens_ * width_;
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < need) {
      ::close(fd);
      throw RuntimeError(
          file_message("cannot read shard", path_,
                       strprintf("file is truncated (%lld bytes, tokens end at %llu)",
                                 static_cast<long long>(st.st_size), static_cast<unsigned long long>(need))));
    }
    // The descriptor stays open for read_stored (bulk copies read with pread, not through the mapping).
    fd_ = fd;
    tokens_off_ = off;
    void* m = ::mmap(nullptr, need, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return;
    // No MADV_SEQUENTIAL: shuffled resharding reads documents in random order, and the kernel would
    // drop pages right after each sequential-looking touch.
    map_ = m;
    map_len_ = need;
    data_ = static_cast<const char*>(m) + off;
  }

  std::string path_;
  h5::File file_;
  h5::Dataset tokens_;
  int width_ = 2;
  uint64_t num_tokens_ = 0;
  uint64_t num_documents_ = 0;
  mutable std::once_flag tables_once_;
  mutable DocTables tables_;
  void* map_ = nullptr;
  size_t map_len_ = 0;
  const void* data_ = nullptr;
  int fd_ = -1;
  int64_t tokens_off_ = 0;
  json attrs_;
};

}  // namespace

std::unique_ptr<Shard> open_shard(const std::string& path) { return std::make_unique<H5Shard>(path); }

Dataset Dataset::open(const std::string& dir) {
  std::string path = join_path(dir, "index.json");
  if (!path_exists(path))
    throw UsageError(file_message("cannot open dataset", path,
                                  "No such file (build one with cairn-reshard build, or set [data] path)"));
  Dataset ds;
  ds.dir_ = dir;
  try {
    ds.index_ = json::parse(read_file(path));
  } catch (const json::exception& e) {
    // nlohmann's message without its "[json.exception.parse_error.101] " prefix or the echo of the
    // text it last read (which can be kilobytes of provenance).
    std::string w = e.what();
    if (auto p = w.find("] "); w.rfind("[json.exception", 0) == 0 && p != std::string::npos) w = w.substr(p + 2);
    if (auto p = w.find("; last read:"); p != std::string::npos) w = w.substr(0, p);
    throw UsageError(file_message("malformed dataset index", path, "invalid JSON: " + w));
  }
  // Every key through JsonFields: a wrong type or range is a UsageError naming the file and key.
  JsonFields ix(ds.index_, path, "dataset index");
  if (ix.has("format") && ix.str("format") != "cairn-shards") ix.fail("format", "\"cairn-shards\"");
  if (ix.i64("format_version", INT64_MIN, INT64_MAX) != kFormatVersion)
    ix.fail("format_version", strprintf("%d (the format this cairn reads)", kFormatVersion));
  const uint64_t vocab = ix.u64("vocab_size", UINT32_MAX);
  if (vocab == 0) ix.fail("vocab_size", "a positive integer");
  ix.u64("eot_id", vocab - 1);
  if (ix.has("seed")) ix.i64("seed", -1, INT64_MAX);
  ix.boolean_or("split_docs", false);
  for (const char* k : {"total_tokens", "total_documents", "total_bytes", "skipped_records"}) ix.u64_or(k, 0);
  // The tokenizer: described (an object, what cairn writes), its id alone (a string), or not given.
  if (ix.has("tokenizer") && !ix.raw()["tokenizer"].is_string()) {
    JsonFields tok = ix.object("tokenizer");
    tok.str_or("id", "");
    tok.str_or("type", "");
  }
  const json& list = ix.array("shards", true);
  std::set<std::string> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    JsonFields s = ix.nested(list[i], strprintf("shards[%zu]", i));
    ShardInfo info;
    info.file = s.str("file");
    if (info.file.empty() || info.file[0] == '/' || info.file.find("..") != std::string::npos)
      s.fail("file", "a file name inside the dataset directory");
    if (!seen.insert(info.file).second) s.fail("file", "a file not listed twice");
    info.tokens = s.u64("tokens");
    info.documents = s.u64("documents", info.tokens);
    std::string hx = s.str("xxh64");
    if (hx.size() != 16 || hx.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      s.fail("xxh64", "16 hex digits");
    info.xxh64 = parse_hex64(hx);
    ds.shards_.push_back(info);
  }
  return ds;
}

uint64_t Dataset::total_tokens() const {
  uint64_t t = 0;
  for (auto& s : shards_) t += s.tokens;
  return t;
}
uint64_t Dataset::total_documents() const {
  uint64_t t = 0;
  for (auto& s : shards_) t += s.documents;
  return t;
}
int64_t Dataset::seed() const {
  auto it = index_.find("seed");
  return it == index_.end() || it->is_null() ? -1 : it->get<int64_t>();
}
std::string Dataset::shard_path(size_t i) const { return join_path(dir_, shards_.at(i).file); }
uint32_t Dataset::vocab_size() const { return index_.at("vocab_size").get<uint32_t>(); }
uint32_t Dataset::eot_id() const { return index_.at("eot_id").get<uint32_t>(); }
std::string tokenizer_id_of(const json& description) {
  if (description.is_string()) return description.get<std::string>();
  if (!description.is_object()) return "";
  auto id = description.find("id");
  return id != description.end() && id->is_string() ? id->get<std::string>() : "";
}
std::string Dataset::tokenizer_id() const { return tokenizer_id_of(index_.value("tokenizer", json())); }
std::string Dataset::content_fingerprint() const {
  std::string text = strprintf("vocab %u eot %u", vocab_size(), eot_id());
  for (size_t i = 0; i < num_shards(); ++i)
    text += strprintf(";%llu %s", static_cast<unsigned long long>(info(i).tokens), hex64(info(i).xxh64).c_str());
  return hex64(XXH64(text.data(), text.size(), 0));
}
std::unique_ptr<Shard> Dataset::shard(size_t i) const {
  try {
    return open_shard(shard_path(i));
  } catch (const Error& e) {
    // A shard index.json lists that cannot be opened (missing, not HDF5, truncated): the dataset
    // fails verify (exit 3), like a checksum mismatch.
    if (e.code() != kExitRuntime) throw;
    // Out of file descriptors is this process's limit, not a damaged dataset.
    if (const std::string limit = open_file_limit_problem(); !limit.empty())
      throw RuntimeError(file_message("cannot open shard", shard_path(i), limit));
    throw GateFailure(std::string(e.what()) + " (a shard listed in " + join_path(dir_, "index.json") +
                      "; cairn-reshard verify " + dir_ + " lists every problem)");
  }
}

TokenScanner::TokenScanner(int width, uint32_t vocab_size, Progress* progress)
    : state_(XXH64_createState()),
      width_(width),
      vocab_(vocab_size),
      // uint16 storage cannot hold a bad id when the vocabulary has every uint16 value.
      check_ids_(!(width == 2 && vocab_size >= 65536)),
      progress_(progress) {
  XXH64_reset(static_cast<XXH64_state_t*>(state_), 0);
}

TokenScanner::~TokenScanner() { XXH64_freeState(static_cast<XXH64_state_t*>(state_)); }

namespace {
// The largest id, in the stored width (a 16-bit maximum vectorizes to two SSE2 instructions a lane).
uint32_t max_id(const uint16_t* p, uint64_t n) {
  uint16_t mx = 0;
  for (uint64_t k = 0; k < n; ++k) mx = p[k] > mx ? p[k] : mx;
  return mx;
}
uint32_t max_id(const uint32_t* p, uint64_t n) {
  uint32_t mx = 0;
  for (uint64_t k = 0; k < n; ++k) mx = p[k] > mx ? p[k] : mx;
  return mx;
}
}  // namespace

void TokenScanner::update(const void* stored, uint64_t n) {
  XXH64_update(static_cast<XXH64_state_t*>(state_), stored, n * width_);
  auto scan = [&](auto* p) {
    if (max_id(p, n) < vocab_) return;
    for (uint64_t k = 0; k < n; ++k)
      if (p[k] >= vocab_) {
        r_.first_bad = pos_ + k;
        r_.first_bad_id = p[k];
        return;
      }
  };
  if (check_ids_ && r_.first_bad == UINT64_MAX) {
    if (width_ == 2) scan(static_cast<const uint16_t*>(stored));
    else scan(static_cast<const uint32_t*>(stored));
  }
  pos_ += n;
  if (progress_ && pos_ - reported_ >= kProgressTokens) {
    progress_->add(pos_ - reported_);
    reported_ = pos_;
  }
}

TokenScan TokenScanner::finish() {
  if (progress_) progress_->add(pos_ - reported_);
  reported_ = pos_;
  r_.xxh64 = XXH64_digest(static_cast<XXH64_state_t*>(state_));
  return r_;
}

TokenScan scan_shard_tokens(const Shard& sh, uint32_t vocab_size, Progress* progress) {
  const uint64_t n = sh.num_tokens(), step = 1 << 17;  // chunks stay in cache between hash and id scan
  const int w = sh.token_width();
  TokenScanner scanner(w, vocab_size, progress);
  // pread into one cache-sized buffer first: no page-table work (mapping every page of a shard costs
  // more than copying it on VMs), then the mapping, then widened reads.
  std::vector<char> raw(n > 0 ? std::min(step, n) * w : 0);
  uint64_t o = 0;
  for (; o < n; o += step) {
    const uint64_t c = std::min(step, n - o);
    if (!sh.read_stored(o, c, raw.data())) break;
    scanner.update(raw.data(), c);
  }
  if (o >= n) return scanner.finish();
  if (const void* m = sh.mapped_tokens()) {
    for (; o < n; o += step) scanner.update(static_cast<const char*>(m) + o * w, std::min(step, n - o));
    return scanner.finish();
  }
  std::vector<uint32_t> buf;
  std::vector<uint16_t> narrow;
  for (; o < n; o += step) {
    uint64_t c = std::min(step, n - o);
    buf.resize(c);
    sh.read_tokens(o, c, buf.data());
    if (w == 2) {
      narrow.assign(buf.begin(), buf.end());
      scanner.update(narrow.data(), c);
    } else {
      scanner.update(buf.data(), c);
    }
  }
  return scanner.finish();
}

void Dataset::verify_shard(size_t i, const Shard& sh, Progress* progress) const {
  const ShardInfo& info = shards_.at(i);
  const std::string path = shard_path(i);
  const std::string hint = " (cairn-reshard verify " + dir_ + " lists every problem)";
  if (sh.num_tokens() != info.tokens || sh.num_documents() != info.documents)
    throw GateFailure(file_message("corrupt dataset shard", path,
                                   strprintf("has %llu tokens / %llu documents, index.json says %llu / %llu",
                                             static_cast<unsigned long long>(sh.num_tokens()),
                                             static_cast<unsigned long long>(sh.num_documents()),
                                             static_cast<unsigned long long>(info.tokens),
                                             static_cast<unsigned long long>(info.documents)) +
                                       hint));
  check_scan(i, sh, scan_shard_tokens(sh, vocab_size(), progress));
}

void Dataset::check_scan(size_t i, const Shard& sh, const TokenScan& r) const {
  const ShardInfo& info = shards_.at(i);
  const std::string path = shard_path(i);
  const std::string hint = " (cairn-reshard verify " + dir_ + " lists every problem)";
  if (r.xxh64 != info.xxh64)
    throw GateFailure(
        file_message("corrupt dataset shard", path,
                     "tokens hash to xxh64 " + hex64(r.xxh64) + " but index.json says " + hex64(info.xxh64) + hint));
  json a = sh.attributes();
  if (a.contains("tokens_xxh64") &&
      (!a["tokens_xxh64"].is_number_unsigned() || a["tokens_xxh64"].get<uint64_t>() != r.xxh64))
    throw GateFailure(file_message("corrupt dataset shard", path,
                                   "tokens hash to xxh64 " + hex64(r.xxh64) +
                                       " but the file's tokens_xxh64 attribute differs" + hint));
  if (r.first_bad != UINT64_MAX) {
    uint64_t d = 0, lo = 0, hi = sh.num_documents();
    while (lo < hi) {  // the document holding token first_bad: first d with doc_end(d) > first_bad
      uint64_t mid = lo + (hi - lo) / 2;
      if (sh.doc_end(mid) > r.first_bad) hi = mid;
      else lo = mid + 1;
    }
    d = lo;
    throw GateFailure(
        file_message("bad token in dataset shard", path,
                     strprintf("document %llu, token %llu: id %u is not below the vocabulary size %u",
                               static_cast<unsigned long long>(d), static_cast<unsigned long long>(r.first_bad),
                               r.first_bad_id, vocab_size()) +
                         hint));
  }
}

void Dataset::verify_shard(size_t i, Progress* progress) const { verify_shard(i, *shard(i), progress); }

void for_each_index_parallel(size_t first, size_t end, size_t stride, int threads,
                             const std::function<void(size_t)>& fn) {
  if (stride == 0) stride = 1;
  std::vector<size_t> todo;
  for (size_t i = first; i < end; i += stride) todo.push_back(i);
  std::atomic<size_t> next{0};
  std::mutex m;
  std::exception_ptr err;
  size_t err_index = SIZE_MAX;
  auto work = [&]() {
    for (;;) {
      size_t k = next.fetch_add(1);
      if (k >= todo.size()) return;
      try {
        fn(todo[k]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (todo[k] < err_index) err = std::current_exception(), err_index = todo[k];  // the lowest: deterministic
      }
    }
  };
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(todo.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (err) std::rethrow_exception(err);
}

void Dataset::verify_shards(int threads, Progress* progress) const {
  for_each_index_parallel(0, num_shards(), 1, threads, [&](size_t i) { verify_shard(i, progress); });
}

bool existing_shard_matches(const std::string& path, const std::string& plan_hash, ShardInfo& info) {
  if (!path_exists(path)) return false;
  try {
    auto sh = open_shard(path);
    json a = sh->attributes();
    if (a.value("plan_hash", "") != plan_hash || a.value("format_version", 0) != kFormatVersion) return false;
    if (!a.contains("tokens_xxh64")) return false;
    const uint64_t n = sh->num_tokens();
    const uint64_t h = scan_shard_tokens(*sh, UINT32_MAX).xxh64;
    if (!a["tokens_xxh64"].is_number_unsigned() || h != a["tokens_xxh64"].get<uint64_t>()) return false;
    info.tokens = n;
    info.documents = sh->num_documents();
    info.xxh64 = h;
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace cairn::shards
