// Data loader implementation: window index, epoch permutations, prefetch thread.
#include "loader.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "cairn/error.h"
#include "cairn/log.h"

namespace cairn::train {

namespace {
uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

namespace {
// The permutation into a vector of any index width: 4-byte entries below 2^32 windows halve the memory each rank
// holds for it (488 M windows, 2 T tokens at seq 4096: 2 GB instead of 4), the same order either way.
template <class Index>
void fill_permutation(std::vector<Index>& p, uint64_t n, uint64_t seed, uint64_t epoch) {
  p.resize(n);
  for (uint64_t i = 0; i < n; ++i) p[i] = static_cast<Index>(i);
  uint64_t s = seed * 0x2545F4914F6CDD1Dull + epoch * 0x9E3779B97F4A7C15ull + 0x5851F42D4C957F2Dull;
  for (uint64_t i = n; i > 1; --i) {
    // Multiply-shift keeps the draw unbiased enough for shuffling and avoids a modulo per element.
    uint64_t j = static_cast<uint64_t>((static_cast<unsigned __int128>(splitmix64(s)) * i) >> 64);
    std::swap(p[i - 1], p[j]);
  }
}
}  // namespace

std::vector<uint64_t> epoch_permutation(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> p;
  fill_permutation(p, n, seed, epoch);
  return p;
}

std::vector<uint64_t> batch_windows(const WindowIndex& idx, uint64_t seed, int64_t batch, int micro, int rank,
                                    int world, int B, int accum, PermutationCache* cache) {
  uint64_t G = static_cast<uint64_t>(B) * world * accum;
  uint64_t bpe = idx.train_windows() / G;
  if (bpe == 0) throw UsageError("the training split has fewer windows than one global batch");
  uint64_t epoch = static_cast<uint64_t>(batch) / bpe;
  uint64_t in_epoch = static_cast<uint64_t>(batch) % bpe;
  thread_local PermutationCache per_thread;
  PermutationCache& c = cache ? *cache : per_thread;
  const bool narrow = idx.train_windows() <= (uint64_t{1} << 32);
  if (c.epoch != epoch || c.n != idx.train_windows() || c.seed != seed) {
    if (narrow) fill_permutation(c.perm32, idx.train_windows(), seed, epoch), c.perm64 = {};
    else fill_permutation(c.perm64, idx.train_windows(), seed, epoch), c.perm32 = {};
    c.epoch = epoch;
    c.n = idx.train_windows();
    c.seed = seed;
  }
  std::vector<uint64_t> out(B);
  uint64_t base = in_epoch * G + (static_cast<uint64_t>(micro) * world + rank) * B;
  for (int i = 0; i < B; ++i) out[i] = narrow ? c.perm32[base + i] : c.perm64[base + i];
  return out;
}

Loader::Loader(const shards::Dataset& ds, const WindowIndex& idx, LoaderOptions opt) : ds_(ds), idx_(idx), opt_(opt) {
  std::lock_guard<std::recursive_mutex> lk(hdf5_mutex());
  for (size_t i = 0; i < ds.num_shards(); ++i) shards_.push_back(ds.shard(i));
  verified_ = std::make_unique<std::once_flag[]>(ds.num_shards());
}

Loader::~Loader() { stop(); }

void Loader::read_window(uint64_t w, uint32_t* row) const {
  // Plain variables, not a structured binding: the lambda below captures s (clang 14 cannot capture bindings).
  const std::pair<size_t, uint64_t> where = idx_.locate(w);
  const size_t s = where.first;
  const uint64_t off = where.second;
  const shards::Shard& sh = *shards_[s];
  // not under hdf5_mutex(): verify_shard takes it itself where it reads attributes
  if (!opt_.shards_checked) std::call_once(verified_[s], [&] { ds_.verify_shard(s, sh); });
  const void* mapped = sh.mapped_tokens();
  size_t n = static_cast<size_t>(idx_.T) + 1;
  if (mapped) {
    if (sh.token_width() == 2) {
      const uint16_t* p = static_cast<const uint16_t*>(mapped) + off;
      for (size_t i = 0; i < n; ++i) row[i] = p[i];
    } else {
      const uint32_t* p = static_cast<const uint32_t*>(mapped) + off;
      std::copy(p, p + n, row);
    }
  } else {
    std::lock_guard<std::recursive_mutex> lk(hdf5_mutex());
    sh.read_tokens(off, n, row);
  }
  if (opt_.vocab_limit) {
    for (size_t i = 0; i < n; ++i) {
      if (row[i] >= opt_.vocab_limit) {
        throw UsageError(strprintf("\"%s\": token %u at offset %llu is >= the model vocabulary %u",
                                   ds_.shard_path(s).c_str(), row[i], static_cast<unsigned long long>(off) + i,
                                   opt_.vocab_limit));
      }
    }
  }
}

MicroBatch Loader::make_batch(const std::vector<uint64_t>& windows, int64_t batch, int micro) const {
  MicroBatch mb;
  mb.batch = batch;
  mb.micro = micro;
  mb.B = static_cast<int>(windows.size());
  mb.T = idx_.T;
  size_t T = static_cast<size_t>(idx_.T);
  mb.inputs.resize(windows.size() * T);
  mb.targets.resize(windows.size() * T);
  std::vector<uint32_t> row(T + 1);
  for (size_t b = 0; b < windows.size(); ++b) {
    read_window(windows[b], row.data());
    for (size_t t = 0; t < T; ++t) {
      mb.inputs[b * T + t] = static_cast<int32_t>(row[t]);
      mb.targets[b * T + t] = static_cast<int32_t>(row[t + 1]);
    }
  }
  return mb;
}

void Loader::start(int64_t batch) {
  stop();
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.clear();
    error_ = nullptr;
    stop_ = false;
    running_ = true;
  }
  thread_ = std::thread([this, batch] { run(batch); });
}

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  running_ = false;
}

void Loader::run(int64_t batch) {
  try {
    for (int64_t b = batch;; ++b) {
      for (int k = 0; k < opt_.accum; ++k) {
        MicroBatch mb =
            make_batch(batch_windows(idx_, opt_.seed, b, k, opt_.rank, opt_.world, opt_.B, opt_.accum, &perm_), b, k);
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || queue_.size() < static_cast<size_t>(opt_.prefetch); });
        if (stop_) return;
        queue_.push_back(std::move(mb));
        cv_.notify_all();
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

MicroBatch Loader::next(double* wait_s) {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return !queue_.empty() || error_ || !running_; });
  if (wait_s) wait_s[0] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (queue_.empty()) {
    if (error_) std::rethrow_exception(error_);
    throw RuntimeError("data loader is not running");
  }
  MicroBatch mb = std::move(queue_.front());
  queue_.pop_front();
  cv_.notify_all();
  return mb;
}

MicroBatch Loader::val_batch(int k) const {
  std::vector<uint64_t> w(opt_.B);
  uint64_t first = idx_.train_windows();
  for (int i = 0; i < opt_.B; ++i) {
    uint64_t row = (static_cast<uint64_t>(k) * opt_.world + opt_.rank) * opt_.B + i;
    w[i] = first + row % std::max<uint64_t>(idx_.val_windows, 1);
  }
  return make_batch(w, -1, k);
}

}  // namespace cairn::train
