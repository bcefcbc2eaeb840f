// Planning and writing output datasets: balanced shards, seeded shuffle, MPI/thread split, resume,
// index.json and stats.json; plus the document sources they read from.
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include "cairn/cli.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/json_text.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "cairn/stale_temps.h"
#include "reshard.h"

namespace cairn::reshard {

namespace fs = std::filesystem;

// ------------------------------------------------------------------------------------ sources

namespace {
void* map_huge(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  ::madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without THP it is ordinary memory
  return p;
}
}  // namespace

template <class T>
T* HugePageAllocator<T>::allocate(size_t n) {
  if (n * sizeof(T) < (size_t{4} << 20)) return static_cast<T*>(::operator new(n * sizeof(T)));
  return static_cast<T*>(map_huge(n * sizeof(T)));
}
template <class T>
void HugePageAllocator<T>::deallocate(T* p, size_t n) {
  if (n * sizeof(T) < (size_t{4} << 20)) ::operator delete(p);
  else ::munmap(p, n * sizeof(T));
}
template struct HugePageAllocator<uint64_t>;
template struct HugePageAllocator<uint32_t>;
template struct HugePageAllocator<char>;

void MemorySource::read_stream(uint64_t offset, uint64_t count, uint32_t* out) const {
  std::copy(tokens.begin() + offset, tokens.begin() + offset + count, out);
}

void MemorySource::add_document(const uint32_t* t, size_t n, uint32_t source_bytes) {
  tokens.insert(tokens.end(), t, t + n);
  starts.push_back(tokens.size());
  bytes.push_back(source_bytes);
}

DatasetSource::DatasetSource(const std::vector<shards::Dataset>& datasets) : datasets_(datasets) {
  doc_starts_.push_back(0);
  shard_token_starts_.push_back(0);
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  uint64_t total_docs = 0;
  for (const auto& ds : datasets) total_docs += ds.total_documents();
  doc_starts_.reserve(total_docs + 1);  // grown once: fresh pages are costly on VMs
  doc_bytes_.reserve(total_docs);
  for (size_t di = 0; di < datasets.size(); ++di) {
    const shards::Dataset& ds = datasets[di];
    for (size_t i = 0; i < ds.num_shards(); ++i) {
      auto sh = ds.shard(i);
      shard_origin_.emplace_back(di, i);
      const auto& info = ds.info(i);
      // The counts index.json gives must hold before they place documents (verify() checks the rest).
      if (sh->num_tokens() != info.tokens || sh->num_documents() != info.documents)
        throw GateFailure(file_message("corrupt dataset shard", ds.shard_path(i),
                                       strprintf("has %llu tokens / %llu documents, index.json says %llu / %llu "
                                                 "(cairn-reshard verify %s lists every problem)",
                                                 static_cast<unsigned long long>(sh->num_tokens()),
                                                 static_cast<unsigned long long>(sh->num_documents()),
                                                 static_cast<unsigned long long>(info.tokens),
                                                 static_cast<unsigned long long>(info.documents), ds.dir().c_str())));
      uint64_t base = shard_token_starts_.back();
      const uint64_t nd = sh->num_documents();
      if (const uint64_t* ends = sh->doc_offsets_data()) {  // straight from the arrays the shard read
        const uint32_t* bytes = sh->doc_bytes_data();
        for (uint64_t d = 0; d < nd; ++d) doc_starts_.push_back(base + ends[d + 1]);
        doc_bytes_.insert(doc_bytes_.end(), bytes, bytes + nd);
      } else {
        for (uint64_t d = 0; d < nd; ++d) {
          doc_starts_.push_back(base + sh->doc_end(d));
          doc_bytes_.push_back(sh->doc_bytes(d));
        }
      }
      shard_token_starts_.push_back(base + sh->num_tokens());
      XXH64_update(st, &info.xxh64, sizeof info.xxh64);
      XXH64_update(st, &info.tokens, sizeof info.tokens);
      XXH64_update(st, &info.documents, sizeof info.documents);
      shards_.push_back(std::move(sh));
    }
  }
  identity_ = "dataset:" + shards::hex64(XXH64_digest(st)) + ":" + datasets.front().tokenizer_id();
  XXH64_freeState(st);
}

struct DatasetSource::Loaded {
  char* data = nullptr;
  size_t bytes = 0;
  explicit Loaded(size_t n) : data(HugePageAllocator<char>().allocate(n)), bytes(n) {}
  ~Loaded() { HugePageAllocator<char>().deallocate(data, bytes); }
  Loaded(const Loaded&) = delete;
  Loaded& operator=(const Loaded&) = delete;
};

DatasetSource::~DatasetSource() = default;

double available_disk_bytes(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return -1;
  while (p.has_relative_path() && fs::symlink_status(p, ec).type() == fs::file_type::not_found) p = p.parent_path();
  const fs::space_info space = fs::space(p, ec);
  return ec ? -1 : static_cast<double>(space.available);
}

bool DatasetSource::load_and_verify(int threads, size_t first, size_t stride, int ranks_on_node) {
  double bytes = 0;
  for (const auto& sh : shards_) {
    if (!sh->read_stored(0, 0, nullptr)) return false;  // not one contiguous array in its file
    bytes += static_cast<double>(sh->num_tokens()) * sh->token_width();
  }
  if (bytes * std::max(ranks_on_node, 1) > available_memory_bytes() / 2) return false;
  std::vector<std::unique_ptr<Loaded>> loaded(shards_.size());
  Progress progress = check_progress("loading and checking", first, stride);
  shards::for_each_index_parallel(0, shards_.size(), 1, threads, [&](size_t g) {
    const shards::Shard& sh = *shards_[g];
    const int width = sh.token_width();
    loaded[g] = std::make_unique<Loaded>(std::max<size_t>(sh.num_tokens() * width, 1));
    const bool check = g >= first && (g - first) % stride == 0;
    const auto& ds = datasets_[shard_origin_[g].first];
    std::unique_ptr<shards::TokenScanner> scan;
    if (check) scan = std::make_unique<shards::TokenScanner>(width, ds.vocab_size(), &progress);
    // Pieces that stay in cache between the read and the scan.
    const uint64_t step = (uint64_t{1} << 18) / width;
    for (uint64_t o = 0; o < sh.num_tokens(); o += step) {
      const uint64_t n = std::min(step, sh.num_tokens() - o);
      char* at = loaded[g]->data + o * width;
      sh.read_stored(o, n, at);
      if (scan) scan->update(at, n);
    }
    if (scan) ds.check_scan(shard_origin_[g].second, sh, scan->finish());
  });
  progress.finish();
  loaded_ = std::move(loaded);
  return true;
}

Progress DatasetSource::check_progress(const std::string& what, size_t first, size_t stride) const {
  uint64_t tokens = 0;
  for (size_t g = first; g < shards_.size(); g += std::max<size_t>(stride, 1)) tokens += shards_[g]->num_tokens();
  const std::string inputs =
      datasets_.size() == 1 ? datasets_.front().dir() : strprintf("%zu datasets", datasets_.size());
  return Progress(what + " " + inputs, tokens, "tokens");
}

size_t DatasetSource::shard_of(uint64_t offset) const {
  return std::upper_bound(shard_token_starts_.begin(), shard_token_starts_.end(), offset) -
         shard_token_starts_.begin() - 1;
}

void DatasetSource::read_stream(uint64_t offset, uint64_t count, uint32_t* out) const {
  while (count > 0) {
    size_t s = std::upper_bound(shard_token_starts_.begin(), shard_token_starts_.end(), offset) -
               shard_token_starts_.begin() - 1;
    uint64_t local = offset - shard_token_starts_[s];
    uint64_t take = std::min(count, shards_[s]->num_tokens() - local);
    shards_[s]->read_tokens(local, take, out);
    out += take;
    offset += take;
    count -= take;
  }
}

bool DatasetSource::raw_range(uint64_t offset, uint64_t count, const void*& ptr, int& width) const {
  size_t s = std::upper_bound(shard_token_starts_.begin(), shard_token_starts_.end(), offset) -
             shard_token_starts_.begin() - 1;
  if (s >= shards_.size()) return false;
  uint64_t local = offset - shard_token_starts_[s];
  const auto& sh = *shards_[s];
  const void* base = loaded_.empty() ? sh.mapped_tokens() : loaded_[s]->data;
  if (!base || local + count > sh.num_tokens()) return false;
  width = sh.token_width();
  ptr = static_cast<const char*>(base) + local * width;
  return true;
}

void DatasetSource::prefetch_doc(uint64_t d) const {
  __builtin_prefetch(&doc_starts_[d]);
  __builtin_prefetch(&doc_bytes_[d]);
}

void DatasetSource::prefetch_tokens(uint64_t offset) const {
  const void* p = nullptr;
  int w = 0;
  if (raw_range(offset, 1, p, w)) {
    __builtin_prefetch(p);
    __builtin_prefetch(static_cast<const char*>(p) + 64);
    __builtin_prefetch(static_cast<const char*>(p) + 128);
    __builtin_prefetch(static_cast<const char*>(p) + 192);
  }
}

void DatasetSource::verify(int threads, size_t first, size_t stride) const {
  Progress progress = check_progress("checking", first, stride);
  shards::for_each_index_parallel(first, shards_.size(), stride, threads, [&](size_t g) {
    datasets_[shard_origin_[g].first].verify_shard(shard_origin_[g].second, *shards_[g], &progress);
  });
  progress.finish();
}

void check_dataset(const shards::Dataset& ds, int threads) {
  Progress progress("checking " + ds.dir(), ds.total_tokens(), "tokens");
  ds.verify_shards(threads, &progress);
  progress.finish();
}

// ------------------------------------------------------------------------------------ in-pass verification

// One input shard's check while it is copied: the scan covers its tokens [0, scanned()) in order.
struct DatasetSource::ShardCheck {
  std::mutex m;
  std::unique_ptr<shards::TokenScanner> scan;
  std::atomic<bool> done{false};
};

void DatasetSource::verify_while_copying() {
  checks_.clear();
  for (size_t g = 0; g < shards_.size(); ++g) {
    auto c = std::make_unique<ShardCheck>();
    const auto& ds = datasets_[shard_origin_[g].first];
    c->scan = std::make_unique<shards::TokenScanner>(shards_[g]->token_width(), ds.vocab_size());
    checks_.push_back(std::move(c));
  }
  for (size_t g = 0; g < shards_.size(); ++g)
    if (shards_[g]->num_tokens() == 0) {  // nothing to read: checked now
      std::lock_guard<std::mutex> lock(checks_[g]->m);
      complete(g, *checks_[g]);
    }
}

uint64_t DatasetSource::read_raw(uint64_t offset, uint64_t count, void* out, size_t out_bytes, int& width) const {
  const size_t s = shard_of(offset);
  if (s >= shards_.size()) return 0;
  const shards::Shard& sh = *shards_[s];
  const uint64_t local = offset - shard_token_starts_[s];
  const uint64_t take = std::min({count, sh.num_tokens() - local, static_cast<uint64_t>(out_bytes / sh.token_width())});
  if (take == 0 || !sh.read_stored(local, take, out)) return 0;
  width = sh.token_width();
  if (!checks_.empty()) feed(s, local, out, take);
  return take;
}

// Hashes tokens [local, local + n) of shard s, just read, when they continue its hash in order; a
// piece read out of order (another thread's part of the shard) is left to finish_verification.
void DatasetSource::feed(size_t s, uint64_t local, const void* stored, uint64_t n) const {
  ShardCheck& c = *checks_[s];
  if (c.done.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(c.m);
  if (c.done.load(std::memory_order_relaxed) || c.scan->scanned() != local) return;
  c.scan->update(stored, n);
  if (c.scan->scanned() == shards_[s]->num_tokens()) complete(s, c);
}

void DatasetSource::complete(size_t s, ShardCheck& c) const {
  try {
    const auto [di, i] = shard_origin_[s];
    datasets_[di].check_scan(i, *shards_[s], c.scan->finish());
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(fail_mutex_);
    if (s < fail_shard_) fail_shard_ = s, fail_message_ = e.what(), fail_code_ = e.code();
    failed_ = true;
  }
  c.done = true;
}

bool DatasetSource::verified(uint64_t begin, uint64_t end) const {
  if (checks_.empty() || begin >= end) return !failed_;
  for (size_t s = shard_of(begin); s < shards_.size() && shard_token_starts_[s] < end; ++s)
    if (!checks_[s]->done.load()) return false;
  return !failed_;
}

void DatasetSource::finish_verification(uint64_t begin, uint64_t end, int threads) const {
  if (checks_.empty()) return;
  std::vector<size_t> todo;
  for (size_t s = 0; s < shards_.size(); ++s)
    if (shard_token_starts_[s] >= begin && shard_token_starts_[s] < end && !checks_[s]->done) todo.push_back(s);
  // The rest of each shard, from where its in-order hash stopped (all of it when the copy read it
  // out of order, or not at all because the output was already complete).
  shards::for_each_index_parallel(0, todo.size(), 1, threads, [&](size_t k) {
    const size_t s = todo[k];
    ShardCheck& c = *checks_[s];
    std::lock_guard<std::mutex> lock(c.m);
    if (c.done) return;
    const shards::Shard& sh = *shards_[s];
    const uint64_t step = 1 << 17;
    std::vector<char> buf(step * sh.token_width());
    std::vector<uint32_t> wide;
    std::vector<uint16_t> narrow;
    for (uint64_t o = c.scan->scanned(); o < sh.num_tokens(); o += step) {
      const uint64_t n = std::min(step, sh.num_tokens() - o);
      if (sh.read_stored(o, n, buf.data())) {
        c.scan->update(buf.data(), n);
        continue;
      }
      wide.resize(n);  // not stored contiguously: widened reads, narrowed back to the stored layout
      sh.read_tokens(o, n, wide.data());
      if (sh.token_width() == 2) {
        narrow.assign(wide.begin(), wide.end());
        c.scan->update(narrow.data(), n);
      } else {
        c.scan->update(wide.data(), n);
      }
    }
    complete(s, c);
  });
  std::lock_guard<std::mutex> lock(fail_mutex_);
  if (failed_) throw Error(fail_code_ ? fail_code_ : kExitGate, fail_message_);
}

void DatasetSource::release_mapped() const {
  // Whole pages inside the token arrays only: the mappings' other pages (HDF5 metadata) are tiny.
  for (const auto& sh : shards_) sh->release_tokens(0, sh->num_tokens());
}

// ------------------------------------------------------------------------------------ planning

namespace {
// splitmix64: a fixed, portable generator (std distributions differ between standard libraries).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
uint64_t bounded(uint64_t& state, uint64_t n) {  // unbiased value in [0, n)
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t r;
  do r = splitmix64(state);
  while (r >= limit);
  return r % n;
}
}  // namespace

std::vector<uint64_t> shuffled_order(uint64_t n, uint64_t seed) {
  std::vector<uint64_t> p(n);
  for (uint64_t i = 0; i < n; ++i) p[i] = i;
  uint64_t state = seed;
  for (uint64_t i = n; i > 1; --i) std::swap(p[i - 1], p[bounded(state, i)]);
  return p;
}

std::vector<uint64_t> plan_bounds(std::span<const uint64_t> prefix, uint64_t shards, bool split_docs) {
  const uint64_t total = prefix.back();
  std::vector<uint64_t> b(shards + 1, 0);
  b[shards] = total;
  for (uint64_t k = 1; k < shards; ++k) {
    // Ideal cut, rounded so shard sizes differ by at most one token.
    uint64_t target = static_cast<uint64_t>((static_cast<unsigned __int128>(total) * k) / shards);
    if (split_docs) {
      b[k] = target;
      continue;
    }
    // The document boundary nearest to the ideal cut, never before the previous cut.
    auto it = std::lower_bound(prefix.begin(), prefix.end(), target);
    uint64_t hi = it == prefix.end() ? total : *it;
    uint64_t lo = it == prefix.begin() ? 0 : *(it - 1);
    uint64_t cut = (target - lo <= hi - target) ? lo : hi;
    b[k] = std::max(cut, b[k - 1]);
  }
  return b;
}

// ------------------------------------------------------------------------------------ helpers

std::string dataset_dir(const Config& cfg, const std::string& explicit_dir) {
  return explicit_dir.empty() ? shards::dataset_path(cfg) : explicit_dir;
}

int resolve_threads(const DataSection& data) {
  int64_t t = data.threads;
  // The cores this process may run on (its affinity: taskset, a cpuset, Slurm's --cpus-per-task) shared among the
  // node's ranks, as cairn-train and cairn-eval count them; not the machine's core count.
  if (t <= 0) t = mpi::cores_per_local_rank();
  return static_cast<int>(t);
}

void check_output_not_input(const std::string& out, const std::vector<std::string>& inputs) {
  std::error_code ec;
  fs::path o = fs::weakly_canonical(out, ec);
  for (const auto& in : inputs) {
    if (in == "-") continue;
    fs::path i = fs::weakly_canonical(in, ec);
    const bool is_dir = fs::is_directory(i, ec);
    auto inside = [](const fs::path& child, const fs::path& parent) {
      auto c = child.begin(), p = parent.begin();
      for (; p != parent.end(); ++p, ++c)
        if (c == child.end() || *c != *p) return false;
      return true;
    };
    // A directory input must not contain the output (its shards would be read back as input) nor be
    // inside it; a file input's own directory is off limits (we never write next to inputs).
    if (is_dir ? (inside(o, i) || inside(i, o)) : (o == i || o == i.parent_path() || inside(i, o)))
      throw UsageError(file_message("refusing to write into", out,
                                    "it is or overlaps the input " + in + " (inputs are never modified)"));
  }
}

// ------------------------------------------------------------------------------------ writing

// A hidden directory inside the output (readers and verify only look at index.json and the shard_* files beside
// it; renames stay on one filesystem).
std::string staging_dir(const std::string& dir) { return join_path(dir, ".staging"); }

void lock_dataset_dir(DirLock& lock, const std::string& dir, bool every_rank) {
  const std::string path = join_path(dir, ".reshard.lock");
  const char* taken = "another cairn-reshard is writing";
  if (every_rank) acquire_on_rank0(lock, path, dir, taken, "wait for it to exit, or use another --out");
  else lock.acquire(path, dir, taken, "wait for it to exit, then run stats again");
}

void remove_created_dataset_dir(DirLock& lock, const std::string& dir) {
  std::error_code ec;
  const std::string lock_file = join_path(dir, ".reshard.lock");
  std::vector<std::filesystem::path> entries;
  for (const auto& de : std::filesystem::directory_iterator(dir, ec))
    if (de.path().filename() != ".reshard.lock") entries.push_back(de.path());
  for (const auto& p : entries) std::filesystem::remove_all(p, ec);
  std::filesystem::remove(lock_file, ec);
  lock.release();
  std::filesystem::remove(dir, ec);  // only when empty
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What one shard stores of one document: its tokens there and its source bytes.
struct Piece {
  uint64_t tokens;
  uint32_t bytes;
};

// Where every document goes: the output order (seeded shuffle, or the source's order), prefix sums
// of document lengths in that order, and the shard boundaries in tokens of the output stream.
struct OutputPlan {
  const DocSource& src;
  const uint64_t ndocs, nshards;
  std::vector<uint64_t> order;  // output position -> source document; empty: the source's order
  // Shuffled: each output position's source start and bytes, gathered once while planning, so that
  // copying reads the source's tables in order and only the tokens at random.
  huge_vector<uint64_t> start_at;
  huge_vector<uint32_t> bytes_at;
  huge_vector<uint64_t> own_prefix;
  std::span<const uint64_t> prefix;  // prefix[p]: tokens before output position p (own_prefix or the source's)
  std::vector<uint64_t> bounds;      // shard k holds tokens [bounds[k], bounds[k + 1])
  uint64_t total = 0;

  OutputPlan(const DocSource& s, const OutputSpec& spec) : src(s), ndocs(s.num_docs()), nshards(spec.shards) {
    if (spec.seed >= 0) order = shuffled_order(ndocs, static_cast<uint64_t>(spec.seed));
    const uint64_t* starts = order.empty() ? src.doc_starts_data() : nullptr;
    if (starts && starts[0] == 0) {  // in order: the source's own document starts are the prefix sums
      prefix = std::span<const uint64_t>(starts, ndocs + 1);
    } else {
      own_prefix.assign(ndocs + 1, 0);
      if (!order.empty()) start_at.resize(ndocs), bytes_at.resize(ndocs);
      for (uint64_t p = 0; p < ndocs; ++p) {
        uint64_t d = doc_of(p);
        if (!order.empty() && p + 16 < ndocs) src.prefetch_doc(order[p + 16]);
        const uint64_t start = src.doc_start(d);
        own_prefix[p + 1] = own_prefix[p] + (src.doc_start(d + 1) - start);
        if (!order.empty()) start_at[p] = start, bytes_at[p] = src.doc_bytes(d);
      }
      prefix = own_prefix;
    }
    total = prefix.back();
    bounds = plan_bounds(prefix, nshards, spec.split_docs);
  }

  uint64_t doc_of(uint64_t pos) const { return order.empty() ? pos : order[pos]; }
  uint64_t start_of(uint64_t pos) const { return order.empty() ? src.doc_start(pos) : start_at[pos]; }
  uint32_t bytes_of(uint64_t pos) const { return order.empty() ? src.doc_bytes(pos) : bytes_at[pos]; }

  // What shard [t_begin, t_end) stores of the document at output position p (a split document's
  // bytes are shared in proportion to its tokens, sums kept). The writer and the statistics both
  // use it, so stats.json describes the shards without reading them.
  Piece piece(uint64_t p, uint64_t t_begin, uint64_t t_end) const {
    uint64_t len = prefix[p + 1] - prefix[p];
    uint64_t lo = std::max(prefix[p], t_begin) - prefix[p], hi = std::min(prefix[p + 1], t_end) - prefix[p];
    uint32_t b = bytes_of(p);
    uint32_t part = (lo == 0 && hi == len) ? b
                                           : static_cast<uint32_t>((static_cast<unsigned __int128>(b) * hi) / len -
                                                                   (static_cast<unsigned __int128>(b) * lo) / len);
    return {hi - lo, part};
  }

  // Documents overlapping tokens [t_begin, t_end) of the output stream: positions [first, second).
  std::pair<uint64_t, uint64_t> doc_range(uint64_t t_begin, uint64_t t_end) const {
    uint64_t p_begin = std::upper_bound(prefix.begin(), prefix.end(), t_begin) - prefix.begin() - 1;
    if (t_begin == total) p_begin = ndocs;
    uint64_t p_end = std::lower_bound(prefix.begin(), prefix.end(), t_end) - prefix.begin();
    if (t_end == t_begin) p_end = p_begin;
    return {p_begin, p_end};
  }
};

void warn_if_unbalanced(const OutputPlan& plan, bool split_docs) {
  if (split_docs || plan.total == 0) return;
  double ideal = static_cast<double>(plan.total) / plan.nshards, worst = 0;
  uint64_t empty = 0;
  for (uint64_t k = 0; k < plan.nshards; ++k) {
    worst = std::max(worst, std::fabs((plan.bounds[k + 1] - plan.bounds[k]) - ideal) / ideal);
    empty += plan.bounds[k + 1] == plan.bounds[k];
  }
  // An empty shard is worse than an uneven one: a loader that hands each rank or worker its own shards
  // (MosaicML streaming, a DP rank per shard) gives that one nothing.
  if (empty)
    CAIRN_LOG_WARN("%llu of %llu shards are empty: the input has fewer documents than shards, or documents longer "
                   "than a shard's share (ask for fewer shards, or --split-docs to cut documents at shard bounds)",
                   static_cast<unsigned long long>(empty), static_cast<unsigned long long>(plan.nshards));
  else if (worst > 0.01)
    CAIRN_LOG_WARN("shards differ from the mean by up to %.1f%% (documents are long relative to shards; "
                   "--split-docs balances exactly)",
                   100 * worst);
}

// The plan identity: same inputs + same settings => same shard contents (resume is safe).
std::string plan_identity(const DocSource& src, const OutputSpec& spec) {
  return src.identity() + strprintf("|n=%llu|seed=%lld|split=%d|tok=%s", static_cast<unsigned long long>(spec.shards),
                                    static_cast<long long>(spec.seed), spec.split_docs ? 1 : 0,
                                    shards::tokenizer_id_of(spec.tokenizer).c_str());
}

// Rank 0, before any shard is written: temp files of killed runs go (in the output and its staging directory).
// Returns whether this run stages: when the directory holds a complete dataset (index.json), every shard this run
// writes goes to staging_dir() and replaces the old dataset only once all are written (swap_in_staged), so a
// failed run (a full disk, an I/O error, a kill) leaves the old dataset complete, whatever its plan. A shard of
// the old dataset that this plan would write unchanged (same plan hash) is kept where it is, so a rerun of the
// same plan over its finished dataset writes nothing. Without index.json there is no dataset to keep: shards go
// straight into place, as do those a killed run of the same plan left (resume), wherever they are.
bool prepare_output_dir(const std::string& dir, bool locked) {
  ensure_dir(dir);
  // Temp files of killed runs (atomic_write/ShardWriter name them .<file>.tmp.<host>.<pid>.<hex>): shards,
  // index.json, stats.json and the tokenizer copies.
  auto dataset_file = [](const std::string& n) {
    return n.rfind("shard_", 0) == 0 || n == "index.json" || n == "stats.json";
  };
  auto any_file = [](const std::string&) { return true; };
  // Under the dataset's lock, before this run writes: whatever node a killed run wrote them from.
  const StaleTempScope scope = locked ? StaleTempScope::Locked : StaleTempScope::ThisHost;
  std::error_code ec;
  for (const std::string& d : {dir, staging_dir(dir)}) {
    if (!fs::is_directory(d, ec)) continue;
    remove_stale_temps(d, dataset_file, scope);
    if (fs::is_directory(join_path(d, "tokenizer"), ec)) remove_stale_temps(join_path(d, "tokenizer"), any_file, scope);
  }
  const bool staged = path_exists(join_path(dir, "index.json"));
  if (staged) {
    ensure_dir(staging_dir(dir));
    CAIRN_LOG_INFO("%s holds a dataset: it stays in place until every shard of this run is written (to %s)",
                   dir.c_str(), staging_dir(dir).c_str());
  }
  return staged;
}

shards::ShardMeta base_shard_meta(const OutputSpec& spec) {
  shards::ShardMeta m;
  m.shard_count = spec.shards;
  m.tokenizer_id = shards::tokenizer_id_of(spec.tokenizer);
  m.vocab_size = spec.vocab_size;
  m.eot_id = spec.eot_id;
  m.seed = spec.seed;
  return m;
}

// Writes this rank's shards (a contiguous block of shard indices, so the rank reads one contiguous
// part of the source) on a pool of threads, each taking a contiguous part of the block: in order,
// every input shard is then read front to back by one thread, which verifies it while copying
// (DocSource::read_raw). A shard an earlier run of the same plan completed is kept (resume), in the output or in
// its staging directory. A written shard waits (fsynced later, not renamed) until every input shard it holds has
// passed its check. Staged (prepare_output_dir), shards are written to the staging directory instead of into place.
// The first error stops the other threads from starting new shards.
class ShardWriterPool {
 public:
  ShardWriterPool(const OutputPlan& plan, const OutputSpec& spec, const std::string& plan_base,
                  const shards::ShardMeta& base_meta, int rank, int size, bool staging)
      : plan_(plan),
        spec_(spec),
        plan_base_(plan_base),
        base_meta_(base_meta),
        staging_(staging),
        progress_("writing shards", (plan.total + size - 1) / size, "tokens"),
        // Tokens a thread copies through the mapping between unmapping what it read: resident memory
        // stays near threads x this x token width. Shuffled reads come back to every page, which then
        // has to be mapped again (expensive), so not at all when the input fits in half the memory.
        release_every_(plan.order.empty()     ? (uint64_t{1} << 24)
                       : fits_in_memory(plan) ? UINT64_MAX
                                              : (uint64_t{1} << 27)) {
    const uint64_t first = plan.nshards * static_cast<uint64_t>(rank) / size,
                   last = plan.nshards * static_cast<uint64_t>(rank + 1) / size;
    for (uint64_t k = first; k < last; ++k) mine.push_back(k);
    stream_begin = plan.bounds[first];
    stream_end = plan.bounds[last];
    infos.resize(mine.size());
    resumed.assign(mine.size(), 0);
    staged.assign(mine.size(), 0);
  }

  // Writes the shards and completes the verification of the input shards that start in this rank's
  // part of the stream; errors land in first_error (a failed input check takes precedence).
  void run() {
    const int nthreads = std::max(1, std::min<int>(spec_.threads, static_cast<int>(mine.size())));
    // Commits (fsync + rename) run on their own thread, so the writers keep the disk busy instead of
    // each waiting for its own shard to reach the disk.
    std::thread committer([this] { commit_loop(); });
    std::vector<std::thread> pool;
    for (int t = 1; t < nthreads; ++t) pool.emplace_back([this, t, nthreads] { worker(t, nthreads); });
    worker(0, nthreads);
    for (auto& t : pool) t.join();
    try {
      plan_.src.finish_verification(stream_begin, stream_end, std::max(1, spec_.threads));
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(err_mutex_);
      first_error = e.what(), error_code = e.code();
    }
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      writers_done_ = true;
    }
    pending_cv_.notify_all();
    committer.join();
    progress_.finish();
  }

  // Once every rank agrees the inputs passed: the shards still waiting are fsynced and renamed.
  void commit_pending() {
    for (auto& p : pending_) p.writer->commit();
    pending_.clear();
  }
  // After a failure: the shards this run renamed into place (or into the staging directory) go too (nothing is
  // kept that was written from a run whose inputs failed), the waiting ones are removed with their writers.
  void discard() {
    pending_.clear();
    for (const auto& path : committed_) std::filesystem::remove(path);
    committed_.clear();
  }

  // After a failure that is not an input's: the waiting shards whose inputs have passed are complete, and are
  // committed for a rerun to resume (the committer stops at the first error); the others are removed.
  void keep_finished() {
    for (auto& p : pending_) {
      if (!plan_.src.verified(p.t_begin, p.t_end)) continue;
      try {
        p.writer->commit();
      } catch (const Error& e) {
        CAIRN_LOG_DEBUG("%s", e.what());  // the run fails with its first error anyway
      }
    }
    pending_.clear();
  }

  std::vector<uint64_t> mine;                 // this rank's shard indices
  std::vector<shards::ShardInfo> infos;       // per entry of mine
  std::vector<char> resumed;                  // per entry of mine: kept from an earlier run
  std::vector<char> staged;                   // per entry of mine: in the staging directory, to be swapped in
  uint64_t stream_begin = 0, stream_end = 0;  // the source tokens this rank's shards hold
  std::string first_error;
  int error_code = 0;

 private:
  struct ThreadState {
    std::vector<uint32_t> buf;
    std::vector<char> raw;  // read_raw's cache-sized buffer
    bool mapped = false;    // read through the source's mapping since the last release
    uint64_t since_progress = 0, since_release = 0;
  };
  struct Pending {
    std::unique_ptr<shards::ShardWriter> writer;
    std::string path;
    uint64_t t_begin, t_end;
  };
  // Thrown to abandon a shard when an input check has failed (the failure itself is reported).
  struct Abandon {};

  static bool fits_in_memory(const OutputPlan& plan) {
    const double mem = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
    return static_cast<double>(plan.total) * 4 <= mem / 2;
  }

  void worker(int t, int nthreads) {
    ThreadState ts;
    ts.raw.resize(size_t{256} << 10);
    const size_t lo = mine.size() * t / nthreads, hi = mine.size() * (t + 1) / nthreads;
    for (size_t i = lo; i < hi; ++i) {
      {
        std::lock_guard<std::mutex> lock(err_mutex_);
        if (!first_error.empty()) return;
      }
      if (plan_.src.verification_failed()) return;
      try {
        write_shard(i, ts);
      } catch (const Abandon&) {
        return;
      } catch (const Error& e) {
        record_error(e.what(), e.code());
      } catch (const std::exception& e) {
        record_error(e.what(), kExitRuntime);
      }
    }
  }

  void record_error(const char* what, int code) {
    std::lock_guard<std::mutex> lock(err_mutex_);
    if (first_error.empty()) first_error = what, error_code = code;
  }

  // The committer: renames waiting shards once their input shards have all passed (checked again
  // whenever a shard is added, and finally once the writers are done), oldest first.
  void commit_loop() {
    std::unique_lock<std::mutex> lock(pending_mutex_);
    for (;;) {
      bool done = writers_done_;
      std::vector<Pending> ready;
      if (!failed()) {
        for (size_t j = 0; j < pending_.size();) {
          if (plan_.src.verified(pending_[j].t_begin, pending_[j].t_end)) {
            ready.push_back(std::move(pending_[j]));
            pending_.erase(pending_.begin() + j);
          } else {
            ++j;
          }
        }
      }
      if (!ready.empty()) {
        lock.unlock();
        for (auto& p : ready) {
          try {
            p.writer->commit();
          } catch (const Error& e) {
            record_error(e.what(), e.code());
            continue;
          }
          std::lock_guard<std::mutex> relock(committed_mutex_);
          committed_.push_back(p.path);
        }
        lock.lock();
        continue;  // shards may have been added meanwhile
      }
      if (done) return;
      pending_cv_.wait(lock);
    }
  }
  bool failed() {
    std::lock_guard<std::mutex> lock(err_mutex_);
    return !first_error.empty();
  }

  void write_shard(size_t i, ThreadState& ts) {
    const uint64_t k = mine[i];
    const uint64_t t_begin = plan_.bounds[k], t_end = plan_.bounds[k + 1];
    const auto [p_begin, p_end] = plan_.doc_range(t_begin, t_end);
    std::string hash_input =
        plan_base_ + strprintf("|k=%llu|%llu-%llu", static_cast<unsigned long long>(k),
                               static_cast<unsigned long long>(t_begin), static_cast<unsigned long long>(t_end));
    shards::ShardMeta meta = base_meta_;
    meta.shard_index = k;
    meta.plan_hash = shards::hex64(XXH64(hash_input.data(), hash_input.size(), 0));
    const std::string name = shards::shard_file_name(k);
    const std::string in_place = join_path(spec_.dir, name), in_staging = join_path(staging_dir(spec_.dir), name);
    shards::ShardInfo info;
    const bool done_in_place = shards::existing_shard_matches(in_place, meta.plan_hash, info);
    if (done_in_place || shards::existing_shard_matches(in_staging, meta.plan_hash, info)) {
      // Done by an earlier run of this plan. One that staged it: kept there to be swapped in, or, when this run
      // writes in place (the old dataset's index.json is gone, e.g. a crash in the swap), moved into place now.
      if (!done_in_place && !staging_) rename_path(in_staging, in_place);
      staged[i] = !done_in_place && staging_;
      info.file = name;
      infos[i] = info;
      resumed[i] = 1;
      done_tokens_ += t_end - t_begin;
      return;
    }
    const std::string path = staging_ ? in_staging : in_place;
    staged[i] = staging_;
    auto w = std::make_unique<shards::ShardWriter>(path, meta, t_end - t_begin, p_end - p_begin);
    w->set_ids_checked(spec_.ids_checked);
    for (uint64_t p = p_begin; p < p_end;) p = append_run(*w, p, p_end, t_begin, t_end, ts);
    infos[i] = w->finish_pending();
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      pending_.push_back({std::move(w), path, t_begin, t_end});
    }
    pending_cv_.notify_all();
  }

  // Appends the documents from output position p on that are consecutive in the source stream (up
  // to 4096 of them), read as one range; returns the position after them.
  uint64_t append_run(shards::ShardWriter& w, uint64_t p, uint64_t p_end, uint64_t t_begin, uint64_t t_end,
                      ThreadState& ts) {
    const DocSource& src = plan_.src;
    if (!plan_.order.empty() && p + 16 < p_end) src.prefetch_tokens(plan_.start_at[p + 16]);  // shuffled: ahead of use
    uint64_t q = p + 1;
    while (q < p_end && plan_.doc_of(q) == plan_.doc_of(q - 1) + 1 && q - p < 4096) ++q;
    uint64_t s_lo = std::max(plan_.prefix[p], t_begin), s_hi = std::min(plan_.prefix[q], t_end);
    uint64_t src_off = plan_.start_of(p) + (s_lo - plan_.prefix[p]);
    uint64_t n = s_hi - s_lo;
    copy_tokens(w, src_off, n, ts);
    for (uint64_t r = p; r < q; ++r) {
      Piece pc = plan_.piece(r, t_begin, t_end);
      w.append_document(pc.tokens, pc.bytes);
    }
    account(n, ts);
    return q;
  }

  // Tokens [src_off, src_off + n) of the source stream, in chunks: in order, read with pread into a
  // cache-sized buffer (hashed there for the input's check, then for the output, then written);
  // shuffled, straight from the source's mapped shard; else through buf.
  void copy_tokens(shards::ShardWriter& w, uint64_t src_off, uint64_t n, ThreadState& ts) {
    const DocSource& src = plan_.src;
    const uint64_t chunk = 1 << 20;
    for (uint64_t o = 0; o < n;) {
      if (src.verification_failed()) throw Abandon{};
      const uint64_t c = std::min(chunk, n - o);
      int width = 0;
      if (plan_.order.empty()) {
        if (uint64_t got = src.read_raw(src_off + o, c, ts.raw.data(), ts.raw.size(), width)) {
          w.append_raw(ts.raw.data(), got, width);
          o += got;
          continue;
        }
      }
      const void* raw = nullptr;
      if (src.raw_range(src_off + o, c, raw, width)) {
        ts.mapped = true;
        w.append_raw(raw, c, width);
      } else {
        ts.buf.resize(c);
        src.read_stream(src_off + o, c, ts.buf.data());
        w.append_tokens(ts.buf.data(), c);
      }
      o += c;
    }
  }

  // Counts n copied tokens: releases the source's mapped pages and updates the progress now and then.
  void account(uint64_t n, ThreadState& ts) {
    done_tokens_ += n;
    ts.since_progress += n;
    ts.since_release += n;
    if (ts.since_release >= release_every_ && ts.mapped) {
      ts.since_release = 0;
      ts.mapped = false;
      plan_.src.release_mapped();
    }
    if (ts.since_progress >= (1u << 22) && progress_mutex_.try_lock()) {
      ts.since_progress = 0;
      progress_.update(done_tokens_.load());
      progress_mutex_.unlock();
    }
  }

  const OutputPlan& plan_;
  const OutputSpec& spec_;
  const std::string& plan_base_;
  const shards::ShardMeta& base_meta_;
  const bool staging_;  // shards this run writes go to the staging directory
  Progress progress_;
  const uint64_t release_every_;
  std::atomic<size_t> next_{0};
  std::atomic<uint64_t> done_tokens_{0};
  std::mutex err_mutex_, progress_mutex_, pending_mutex_, committed_mutex_;
  std::condition_variable pending_cv_;
  bool writers_done_ = false;           // under pending_mutex_
  std::vector<Pending> pending_;        // written, waiting for their inputs' checks
  std::vector<std::string> committed_;  // renamed into place (or into the staging directory) by this run
};

// Every rank's shard infos, as JSON lines gathered on every rank: {"k", "staged", "file", "tokens", ...}.
std::vector<std::string> gather_shard_infos(const ShardWriterPool& w, bool use_mpi) {
  json local = json::array();
  for (size_t i = 0; i < w.mine.size(); ++i) {
    local.push_back({{"k", w.mine[i]},
                     {"staged", w.staged[i] != 0},
                     {"file", w.infos[i].file},
                     {"tokens", w.infos[i].tokens},
                     {"documents", w.infos[i].documents},
                     {"xxh64", shards::hex64(w.infos[i].xxh64)}});
  }
  return use_mpi ? mpi::allgather_strings(local.dump()) : std::vector<std::string>{local.dump()};
}

// index.json's shard list in shard order, from the gathered lines; staged[k]: shard k is in the staging directory.
std::vector<json> shard_list_of(const std::vector<std::string>& all, uint64_t nshards, std::vector<char>& staged) {
  std::vector<json> shard_list(nshards);
  staged.assign(nshards, 0);
  for (auto& s : all)
    for (auto& e : json::parse(s)) {
      uint64_t k = e["k"].get<uint64_t>();
      staged[k] = e["staged"].get<bool>();
      e.erase("k");
      e.erase("staged");
      shard_list[k] = e;
    }
  return shard_list;
}

// Shards of an earlier run with more shards are no longer part of the dataset.
void remove_stale_shards(const std::string& dir, uint64_t nshards) {
  for (auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    const std::optional<size_t> idx = shards::shard_file_index(n);
    if (idx && *idx >= nshards) {
      CAIRN_LOG_INFO("removing stale %s from an earlier run", n.c_str());
      fs::remove(e.path());
    }
  }
}

// Tokenizer files travel with the dataset so readers (cairn-eval) can decode and encode; copied to
// <dir>/tokenizer (the output's, or its staging directory's).
void copy_tokenizer_files(const OutputSpec& spec, const std::string& dir) {
  std::string tokdir = join_path(dir, "tokenizer");
  if (!spec.tokenizer_files.empty() || !spec.tokenizer_files_from_dataset.empty()) ensure_dir(tokdir);
  for (auto& f : spec.tokenizer_files) atomic_write(join_path(tokdir, fs::path(f).filename().string()), read_file(f));
  if (!spec.tokenizer_files_from_dataset.empty()) {
    std::string from = join_path(spec.tokenizer_files_from_dataset, "tokenizer");
    if (fs::is_directory(from))
      for (auto& e : fs::directory_iterator(from))
        if (e.is_regular_file())
          atomic_write(join_path(tokdir, e.path().filename().string()), read_file(e.path().string()));
  }
}

json index_json(const OutputSpec& spec, uint64_t total, uint64_t total_docs, uint64_t total_bytes,
                const std::vector<json>& shard_list) {
  json index = {{"format", "cairn-shards"},
                {"format_version", shards::kFormatVersion},
                {"tokenizer", spec.tokenizer},
                {"vocab_size", spec.vocab_size},
                {"eot_id", spec.eot_id},
                {"token_dtype", shards::tokens_fit_uint16(spec.vocab_size) ? "uint16" : "uint32"},
                {"seed", spec.seed >= 0 ? json(spec.seed) : json(nullptr)},
                {"split_docs", spec.split_docs},
                {"total_tokens", total},
                {"total_documents", total_docs},
                {"total_bytes", total_bytes},
                {"skipped_records", spec.skipped_records},
                {"shards", shard_list},
                {"sources", spec.sources},
                {"provenance", provenance().to_json()}};
  // An input without a tokenizer entry gives an output without one (a null would be a malformed description).
  if (spec.tokenizer.is_null()) index.erase("tokenizer");
  return index;
}

// Statistics from the plan, not from a second pass over the written shards (rank 0 computes them
// while the shards are written).
json plan_stats_json(const OutputPlan& plan, const OutputSpec& spec, const std::string& tokenizer_id) {
  json per_shard = json::array();
  std::vector<uint64_t> lengths;
  lengths.reserve(plan.ndocs);
  uint64_t stat_bytes = 0;
  for (uint64_t k = 0; k < plan.nshards; ++k) {
    const auto [p_begin, p_end] = plan.doc_range(plan.bounds[k], plan.bounds[k + 1]);
    for (uint64_t p = p_begin; p < p_end; ++p) {
      Piece pc = plan.piece(p, plan.bounds[k], plan.bounds[k + 1]);
      lengths.push_back(pc.tokens);
      stat_bytes += pc.bytes;
    }
    per_shard.push_back({{"file", shards::shard_file_name(k)},
                         {"tokens", plan.bounds[k + 1] - plan.bounds[k]},
                         {"documents", p_end - p_begin}});
  }
  return stats_json(tokenizer_id, spec.vocab_size, per_shard, std::move(lengths), stat_bytes);
}

// Rank 0, a staged run whose every shard, tokenizer file, stats.json and index.json is in the staging directory
// `st` and on disk: replaces the old dataset by renames (no new space needed, nothing left to fail but the
// machine). From the removal of the old index.json until the new one is renamed into place the directory holds no
// dataset (the old one's index is gone, its shards are being replaced). A crash inside that window is repaired
// by rerunning the same command: without index.json it writes in place, takes the shards already swapped in or
// still staged (plan hash) and writes the index; the old dataset is lost only to a crash inside this window.
void swap_in_staged(const std::string& dir, const std::string& st, const std::vector<char>& staged) {
  std::error_code ec;
  const bool tokenizer = fs::is_directory(join_path(st, "tokenizer"), ec);
  if (tokenizer) {
    ensure_dir(join_path(dir, "tokenizer"));  // before the old index goes: the only step that needs space
    fsync_path(join_path(st, "tokenizer"));
  }
  fsync_path(st);
  for (const char* f : {"index.json", "stats.json"}) {  // index.json first: the old dataset's commit point
    const std::string path = join_path(dir, f);
    if (!fs::remove(path, ec) && ec) throw RuntimeError(file_message("cannot remove", path, ec.message()));
  }
  fsync_path(dir);  // the old index is gone for good before any of its shards is replaced
  for (size_t k = 0; k < staged.size(); ++k)
    if (staged[k]) rename_path(join_path(st, shards::shard_file_name(k)), join_path(dir, shards::shard_file_name(k)));
  remove_stale_shards(dir, staged.size());
  if (tokenizer) {
    for (auto& e : fs::directory_iterator(join_path(st, "tokenizer")))
      if (e.is_regular_file())
        rename_path(e.path().string(), join_path(join_path(dir, "tokenizer"), e.path().filename().string()));
    fsync_path(join_path(dir, "tokenizer"));
  }
  rename_path(join_path(st, "stats.json"), join_path(dir, "stats.json"));
  fsync_path(dir);  // every rename is durable before index.json names the shards
  rename_path(join_path(st, "index.json"), join_path(dir, "index.json"));
  fsync_path(dir);
}

// Rank 0, once every shard is written and on disk: copies the tokenizer files, writes stats.json and index.json
// (last: the commit point) and drops stale shards; staged, all of it in the staging directory, then swapped in.
// The staging directory (this run's, or one an interrupted run left) goes. Returns the number of documents.
uint64_t write_index_and_stats(const OutputPlan& plan, const OutputSpec& spec, json stats,
                               const std::vector<std::string>& all, bool staging,
                               std::chrono::steady_clock::time_point t0) {
  std::vector<char> staged;
  std::vector<json> shard_list = shard_list_of(all, plan.nshards, staged);
  uint64_t total_docs = 0, total_bytes = 0;
  for (auto& s : shard_list) total_docs += s["documents"].get<uint64_t>();
  for (uint64_t d = 0; d < plan.ndocs; ++d) total_bytes += plan.src.doc_bytes(d);
  const std::string st = staging_dir(spec.dir), at = staging ? st : spec.dir;
  if (!staging) remove_stale_shards(spec.dir, plan.nshards);
  copy_tokenizer_files(spec, at);
  json index = index_json(spec, plan.total, total_docs, total_bytes, shard_list);
  index.update(spec.index_extra);
  stats.update(spec.stats_extra);
  atomic_write(join_path(at, "stats.json"), json_text(stats, 2) + "\n");
  atomic_write(join_path(at, "index.json"), json_text(index, 2) + "\n");
  if (staging) swap_in_staged(spec.dir, st, staged);
  CAIRN_LOG_DEBUG("wrote stats.json and index.json at %.3f s", seconds_since(t0));
  std::error_code ec;
  fs::remove_all(st, ec);  // what is left there is of no use (shards of other plans)
  if (ec) CAIRN_LOG_WARN("%s", file_message("cannot remove", st, ec.message()).c_str());
  return total_docs;
}

}  // namespace

WriteResult write_dataset(const DocSource& src, const OutputSpec& spec) {
  auto t0 = std::chrono::steady_clock::now();
  const bool use_mpi = mpi::initialized();
  const int rank = use_mpi ? mpi::rank() : 0, size = use_mpi ? mpi::size() : 1;

  const OutputPlan plan(src, spec);
  warn_if_unbalanced(plan, spec.split_docs);
  const std::string plan_base = plan_identity(src, spec);
  // Whether this run stages is rank 0's decision, the same on every rank (the broadcast, like a barrier, holds
  // the other ranks until the directory is prepared).
  bool staging = false;
  if (rank == 0) staging = prepare_output_dir(spec.dir, spec.dir_locked);
  if (use_mpi) staging = mpi::broadcast_value<int>(staging ? 1 : 0) != 0;
  CAIRN_LOG_DEBUG("planned %llu shards in %.3f s", static_cast<unsigned long long>(plan.nshards), seconds_since(t0));

  const shards::ShardMeta base_meta = base_shard_meta(spec);
  std::future<json> stats;
  if (rank == 0)
    stats = std::async(std::launch::async, [&] { return plan_stats_json(plan, spec, base_meta.tokenizer_id); });
  ShardWriterPool writers(plan, spec, plan_base, base_meta, rank, size, staging);
  writers.run();
  CAIRN_LOG_DEBUG("wrote shards at %.3f s", seconds_since(t0));
  try {
    if (use_mpi)
      mpi::agree_or_throw(writers.first_error.empty(), writers.first_error,
                          writers.error_code ? writers.error_code : kExitRuntime);
    else if (!writers.first_error.empty()) throw Error(writers.error_code, writers.first_error);
  } catch (const Error& e) {
    if (e.code() == kExitGate) writers.discard();  // an input failed its check: keep nothing written from it
    else writers.keep_finished();
    if (!staging) throw;
    // Staged shards stay for a rerun to resume; an empty staging directory goes (fs::remove keeps a full one).
    std::error_code ec;
    const bool resumable = !fs::remove(staging_dir(spec.dir), ec) && e.code() != kExitGate;
    throw Error(e.code(),
                e.what() + strprintf(" (the dataset already in \"%s\" is unchanged%s)", spec.dir.c_str(),
                                     resumable ? "; the same command rerun resumes from what it staged" : ""));
  }
  writers.commit_pending();
  // The shard renames are durable before index.json names them (staged: before the swap).
  fsync_path(staging ? staging_dir(spec.dir) : spec.dir);
  CAIRN_LOG_DEBUG("committed shards at %.3f s", seconds_since(t0));

  // Gather every shard's info on rank 0 (as JSON lines) to write the index.
  uint64_t n_resumed = 0;
  for (char r : writers.resumed) n_resumed += r;
  std::vector<std::string> all = gather_shard_infos(writers, use_mpi);
  if (use_mpi) n_resumed = mpi::allreduce<uint64_t>(n_resumed);
  WriteResult result;
  // After the allgather every rank has committed its shards: rank 0 writes the index (staged: swaps them in).
  if (rank == 0) result.documents = write_index_and_stats(plan, spec, stats.get(), all, staging, t0);
  if (use_mpi) mpi::barrier();
  result.tokens = plan.total;
  result.shards_resumed = n_resumed;
  result.shards_written = plan.nshards - n_resumed;
  result.seconds = seconds_since(t0);
  return result;
}

// ------------------------------------------------------------------------------------ stats

json compute_stats(const shards::Dataset& ds) {
  json per_shard = json::array();
  std::vector<uint64_t> lengths;
  uint64_t bytes = 0;
  Progress progress("reading document lengths of " + ds.dir(), ds.total_documents(), "documents");
  for (size_t i = 0; i < ds.num_shards(); ++i) {
    auto sh = ds.shard(i);
    per_shard.push_back({{"file", ds.info(i).file}, {"tokens", sh->num_tokens()}, {"documents", sh->num_documents()}});
    for (uint64_t d = 0; d < sh->num_documents(); ++d) {
      lengths.push_back(sh->doc_end(d) - sh->doc_begin(d));
      bytes += sh->doc_bytes(d);
      if (lengths.size() % (1 << 16) == 0) progress.update(lengths.size());  // out of the loop's time
    }
  }
  progress.finish();
  return stats_json(ds.tokenizer_id(), ds.vocab_size(), per_shard, std::move(lengths), bytes);
}

json stats_json(const std::string& tokenizer_id, uint32_t vocab_size, const json& per_shard,
                std::vector<uint64_t> lengths, uint64_t bytes) {
  uint64_t tokens = 0;
  for (auto& s : per_shard) tokens += s["tokens"].get<uint64_t>();
  const size_t num_shards = per_shard.size();
  // Power-of-two buckets: [1,2), [2,4), ... tokens per document (end-of-text included).
  std::vector<uint64_t> counts;
  for (uint64_t l : lengths) {
    size_t b = l == 0 ? 0 : 63 - __builtin_clzll(l);
    if (counts.size() <= b) counts.resize(b + 1, 0);
    counts[b]++;
  }
  json edges = json::array();
  for (size_t b = 0; b <= counts.size(); ++b) edges.push_back(uint64_t{1} << b);
  // Percentiles by selection (a full sort of millions of lengths would dominate small reshards).
  std::vector<uint64_t>& sorted = lengths;  // reordered by the selections below; min/max come first
  const uint64_t lmin = lengths.empty() ? 0 : *std::min_element(lengths.begin(), lengths.end());
  const uint64_t lmax = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  // Lengths up to a few million tokens (the usual case) are counted instead: one pass, same values.
  std::vector<uint32_t> by_length;
  if (!lengths.empty() && lmax < (uint64_t{1} << 22)) {
    by_length.assign(lmax + 1, 0);
    for (uint64_t l : lengths) by_length[l]++;
  }
  auto pct = [&](double q) -> uint64_t {
    if (sorted.empty()) return 0;
    const size_t at = std::min(sorted.size() - 1, static_cast<size_t>(std::llround(q * double(sorted.size() - 1))));
    if (!by_length.empty()) {
      uint64_t below = 0;
      for (uint64_t l = 0; l < by_length.size(); ++l)
        if ((below += by_length[l]) > at) return l;
    }
    auto nth = sorted.begin() + at;
    std::nth_element(sorted.begin(), nth, sorted.end());
    return *nth;
  };
  json tps = json::array();
  uint64_t tmax = 0, tmin = UINT64_MAX;
  for (auto& s : per_shard) {
    uint64_t t = s["tokens"].get<uint64_t>();
    tps.push_back(t);
    tmax = std::max(tmax, t), tmin = std::min(tmin, t);
  }
  double mean = num_shards ? static_cast<double>(tokens) / num_shards : 0;
  return {{"provenance", provenance().to_json()},
          {"tokenizer", tokenizer_id},
          {"vocab_size", vocab_size},
          {"tokens", tokens},
          {"documents", lengths.size()},
          {"bytes", bytes},
          {"bytes_per_token", tokens ? static_cast<double>(bytes) / tokens : 0.0},
          {"shards", per_shard},
          {"tokens_per_shard", tps},
          {"shard_imbalance", mean > 0 ? (tmax - mean) / mean : 0.0},
          {"shard_min_tokens", num_shards ? tmin : 0},
          {"shard_max_tokens", tmax},
          {"doc_length",
           {{"min", lmin},
            {"max", lmax},
            {"mean", lengths.empty() ? 0.0 : static_cast<double>(tokens) / lengths.size()},
            {"p50", pct(0.5)},
            {"p90", pct(0.9)},
            {"p99", pct(0.99)}}},
          {"doc_length_histogram", {{"edges", edges}, {"counts", counts}}}};
}

std::string format_stats(const json& s) {
  std::string out;
  out += strprintf("tokenizer        %s (vocab %u)\n", s["tokenizer"].get<std::string>().c_str(),
                   s["vocab_size"].get<uint32_t>());
  out += strprintf("tokens           %llu\n", static_cast<unsigned long long>(s["tokens"].get<uint64_t>()));
  out += strprintf("documents        %llu\n", static_cast<unsigned long long>(s["documents"].get<uint64_t>()));
  out += strprintf("source bytes     %llu\n", static_cast<unsigned long long>(s["bytes"].get<uint64_t>()));
  out += strprintf("bytes/token      %.3f\n", s["bytes_per_token"].get<double>());
  const json& dl = s["doc_length"];
  out += strprintf("doc length       min %llu  p50 %llu  mean %.1f  p90 %llu  p99 %llu  max %llu tokens\n",
                   static_cast<unsigned long long>(dl["min"].get<uint64_t>()),
                   static_cast<unsigned long long>(dl["p50"].get<uint64_t>()), dl["mean"].get<double>(),
                   static_cast<unsigned long long>(dl["p90"].get<uint64_t>()),
                   static_cast<unsigned long long>(dl["p99"].get<uint64_t>()),
                   static_cast<unsigned long long>(dl["max"].get<uint64_t>()));
  out += strprintf("shards           %zu  (min %llu, max %llu tokens, imbalance %.3f%%)\n", s["shards"].size(),
                   static_cast<unsigned long long>(s["shard_min_tokens"].get<uint64_t>()),
                   static_cast<unsigned long long>(s["shard_max_tokens"].get<uint64_t>()),
                   100 * s["shard_imbalance"].get<double>());
  if (s.contains("mixture") && s["mixture"].is_object()) out += format_mixture(s["mixture"]);
  out += "doc length histogram (tokens):\n";
  const json& h = s["doc_length_histogram"];
  uint64_t peak = 1;
  for (auto& c : h["counts"]) peak = std::max(peak, c.get<uint64_t>());
  for (size_t b = 0; b < h["counts"].size(); ++b) {
    uint64_t c = h["counts"][b].get<uint64_t>();
    if (c == 0) continue;
    out +=
        strprintf("  [%7llu, %7llu) %10llu %s\n", static_cast<unsigned long long>(h["edges"][b].get<uint64_t>()),
                  static_cast<unsigned long long>(h["edges"][b + 1].get<uint64_t>()),
                  static_cast<unsigned long long>(c), std::string(static_cast<size_t>(40.0 * c / peak), '#').c_str());
  }
  return out;
}

}  // namespace cairn::reshard
