// Window numbering of a dataset for training and evaluation (see shards.h WindowIndex).
#include <algorithm>
#include <cmath>

#include "cairn/shards.h"

namespace cairn::shards {

std::pair<size_t, uint64_t> WindowIndex::locate(uint64_t w) const {
  // first_window has one entry per shard plus the end; find the shard whose range holds w.
  auto it = std::upper_bound(first_window.begin(), first_window.end(), w);
  size_t shard = static_cast<size_t>(it - first_window.begin()) - 1;
  return {shard, (w - first_window[shard]) * static_cast<uint64_t>(T)};
}

uint64_t val_window_count(uint64_t total, double val_fraction, uint64_t min_val_windows) {
  if (!(val_fraction > 0)) return 0;
  const uint64_t n =
      std::max<uint64_t>(static_cast<uint64_t>(std::ceil(val_fraction * static_cast<double>(total))), min_val_windows);
  return std::min(n, total / 2);
}

WindowIndex build_window_index(const Dataset& ds, int T, double val_fraction, uint64_t min_val_windows) {
  WindowIndex idx;
  idx.T = T;
  uint64_t total = 0;
  for (size_t i = 0; i < ds.num_shards(); ++i) {
    idx.first_window.push_back(total);
    uint64_t n = ds.info(i).tokens;
    total += n > static_cast<uint64_t>(T) ? (n - 1) / static_cast<uint64_t>(T) : 0;
  }
  idx.first_window.push_back(total);
  idx.total = total;
  idx.val_windows = val_window_count(total, val_fraction, min_val_windows);
  return idx;
}

}  // namespace cairn::shards
