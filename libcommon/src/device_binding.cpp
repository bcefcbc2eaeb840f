// The rank-to-GPU rule (cairn/device_binding.h), without CUDA so that it is testable anywhere.
#include "cairn/device_binding.h"

#include <set>
#include <string>

#include "cairn/error.h"

namespace cairn {

int device_for_local_rank(int local_rank, int visible_devices, const char* what) {
  if (visible_devices <= 0) throw UsageError(std::string(what) + ": no CUDA device is visible to this rank");
  if (local_rank < 0) throw UsageError(std::string(what) + ": negative local rank " + std::to_string(local_rank));
  return local_rank % visible_devices;
}

int visible_devices_from_env(const char* value, int physical) {
  if (value == nullptr) return physical;
  const std::string s = value;
  std::set<int> seen;
  int count = 0;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    std::string item = s.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) break;
    if (item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0) {
      ++count;  // a UUID: trusted here, the driver resolves it
    } else {
      if (item.find_first_not_of("0123456789") != std::string::npos) break;  // "-1", "x": invalid, list ends
      const long idx = std::stol(item.size() > 9 ? item.substr(0, 9) : item);
      if (idx >= physical || !seen.insert(static_cast<int>(idx)).second) break;
      ++count;
    }
    pos = comma + 1;
  }
  return count;
}

}  // namespace cairn
