// Memory left to this process (sysinfo.h): /proc/meminfo, the cgroup's limits and ulimit -v.
#include "cairn/sysinfo.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>

#include "cairn/log.h"

namespace cairn {

namespace {
// The first number after `key` in a /proc- or /sys-style text file; -1 when absent or "max".
double read_number(const std::string& path, const char* key) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return -1;
  char line[256];
  double v = -1;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0) {
      unsigned long long x = 0;
      if (std::sscanf(line + n, " %llu", &x) == 1) v = static_cast<double>(x);
      break;
    }
  std::fclose(f);
  return v;
}

// Memory left under this process's cgroup limits (v2 memory.max, v1 memory.limit_in_bytes), its
// own group and every parent; -1 when there is no limit to be read. A container or batch job can
// hold far less than the machine has free: MemAvailable does not see it, the OOM killer does.
double cgroup_memory_left() {
  FILE* f = std::fopen("/proc/self/cgroup", "r");
  if (!f) return -1;
  double left = -1;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    std::string l = line;
    while (!l.empty() && l.back() == '\n') l.pop_back();
    const size_t c1 = l.find(':'), c2 = c1 == std::string::npos ? c1 : l.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    const std::string controllers = l.substr(c1 + 1, c2 - c1 - 1);
    std::string group = l.substr(c2 + 1);
    const bool v2 = l.compare(0, c1, "0") == 0 && controllers.empty();
    if (!v2 && controllers != "memory") continue;
    const std::string base = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    for (;;) {
      const std::string dir = base + (group == "/" ? std::string() : group);
      const double max = read_number(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"), "");
      const double cur = read_number(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"), "");
      if (max > 0 && max < 9e18 && cur >= 0) {  // v1 says "no limit" with about 2^63
        const double here = std::max(max - cur, 0.0);
        left = left < 0 ? here : std::min(left, here);
      }
      if (group.size() <= 1) break;
      group.erase(std::max<size_t>(group.rfind('/'), 1));
    }
  }
  std::fclose(f);
  return left;
}
}  // namespace

double available_memory_bytes() {
  const double kb = read_number("/proc/meminfo", "MemAvailable:");
  double avail = kb > 0 ? kb * 1024
                        : static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (const double left = cgroup_memory_left(); left >= 0) avail = std::min(avail, left);
  // ulimit -v: what is left of the address space (mapped shards count against it too).
  rlimit rl{};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const double vm_kb = read_number("/proc/self/status", "VmSize:");
    avail = std::min(avail, std::max(static_cast<double>(rl.rlim_cur) - std::max(vm_kb, 0.0) * 1024, 0.0));
  }
  return avail;
}

std::string human_bytes(double b) {
  const char* units[] = {"MB", "GB", "TB", "PB"};
  double v = b / 1e6;
  size_t u = 0;
  for (; u + 1 < std::size(units) && v >= 999.5; ++u) v /= 1e3;
  return strprintf(v < 999.5 ? "%.3g %s" : "%.0f %s", v, units[u]);
}

}  // namespace cairn
