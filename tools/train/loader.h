// Training data loader over cairn shards: fixed windows, a seeded per-epoch order, disjoint per-rank
// micro-batches, a background prefetch thread with a bounded queue, and a held-out validation split.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cairn/shards.h"

namespace cairn::train {

// HDF5 (the Debian build is not thread-safe) is entered only while holding the process's one HDF5 lock, the same
// one the shard reader takes, so the loader thread's shard checks never run beside a checkpoint save or load.
using shards::hdf5_mutex;

// Sample w of the dataset is the window of T+1 tokens starting at token w*T of its shard (windows do
// not cross shards; documents are concatenated with end-of-text as stored). Windows are numbered
// shard by shard. The validation split is the LAST `val_windows` windows of that numbering (a fixed,
// unshuffled tail, so cairn-eval can score exactly the same windows); the rest is the training split.
using shards::build_window_index;
using shards::WindowIndex;

// One micro-batch for this rank: B rows of T inputs and T targets (targets = inputs shifted by one).
struct MicroBatch {
  int64_t batch = 0;  // global batch counter (data position)
  int micro = 0;      // micro-step inside the batch
  int B = 0, T = 0;
  std::vector<int32_t> inputs, targets;
};

struct LoaderOptions {
  int B = 1;  // micro-batch rows per rank
  int T = 1;
  int rank = 0, world = 1;
  int accum = 1;  // micro-steps per global batch
  uint64_t seed = 0;
  int prefetch = 4;          // queue bound (micro-batches)
  uint32_t vocab_limit = 0;  // tokens must be < this (0 = no check)
  // Every shard's checksum was checked before the loader starts (cairn-train: each rank checks its share of the
  // shards and all agree); false: each shard is checked on first touch, by every loader that reads it.
  bool shards_checked = false;
};

// The last epoch's permutation (one per epoch, walked in order), kept by whoever draws batches.
struct PermutationCache {
  uint64_t epoch = ~0ull, n = 0, seed = 0;
  std::vector<uint32_t> perm32;  // below 2^32 windows: half the memory
  std::vector<uint64_t> perm64;
};

// Which training windows global batch `batch` assigns to (rank, micro): batch b belongs to epoch
// b / batches_per_epoch and uses positions [(b % bpe) * G, ... + G) of that epoch's permutation;
// inside, rows are laid out micro-major then rank: row (micro * world + rank) * B + i. `cache` (default: one per
// thread) keeps the epoch's permutation between calls.
std::vector<uint64_t> batch_windows(const WindowIndex& idx, uint64_t seed, int64_t batch, int micro, int rank,
                                    int world, int B, int accum, PermutationCache* cache = nullptr);
// The seeded permutation of [0, n) for an epoch (splitmix64-driven Fisher-Yates; portable).
std::vector<uint64_t> epoch_permutation(uint64_t n, uint64_t seed, uint64_t epoch);

class Loader {
 public:
  Loader(const shards::Dataset& ds, const WindowIndex& idx, LoaderOptions opt);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // (Re)starts the prefetch thread at global batch `batch`, micro-step 0.
  void start(int64_t batch);
  void stop();
  // Next micro-batch in order; rethrows a reader error (naming shard/offset). `wait_s` gets the time
  // the caller spent blocked on the queue.
  MicroBatch next(double* wait_s = nullptr);

  // Validation micro-batch k of this rank (read synchronously): windows of the val split, row
  // (k * world + rank) * B + i, wrapping around the split.
  MicroBatch val_batch(int k) const;

  // Reads window w into `row` (T+1 tokens), checking tokens against vocab_limit.
  void read_window(uint64_t w, uint32_t* row) const;

 private:
  void run(int64_t batch);
  MicroBatch make_batch(const std::vector<uint64_t>& windows, int64_t batch, int micro) const;

  const shards::Dataset& ds_;
  const WindowIndex& idx_;
  LoaderOptions opt_;
  std::vector<std::unique_ptr<shards::Shard>> shards_;
  // Each shard's checksum is verified once, on first touch, in whichever thread reads it first (the prefetch
  // thread during training): corruption stops the run (exit 3, naming the shard) instead of being trained on.
  std::unique_ptr<std::once_flag[]> verified_;
  // The loader's, not its thread's: the thread restarts at every checkpoint and restore, and rebuilding the epoch's
  // permutation each time cost a shuffle of every window (488 M windows: 2 GB and seconds) per checkpoint.
  PermutationCache perm_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<MicroBatch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  bool running_ = false;
};

}  // namespace cairn::train
