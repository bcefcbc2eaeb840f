// What this machine and process can still use: memory left to allocate (MemAvailable, cgroup limits, ulimit -v).
#pragma once
#include <string>

namespace cairn {

// Bytes this process can still allocate: MemAvailable (physical memory where it cannot be read), lowered by its
// cgroup's memory limit and by ulimit -v. Tools check large buffers against it before they allocate, so a request
// the node cannot hold is a clear error, not the OOM killer.
double available_memory_bytes();

// 297 GB, 2 TB, 31.6 PB: a size in decimal units, three digits at most before the unit (MB at least).
std::string human_bytes(double bytes);

}  // namespace cairn
