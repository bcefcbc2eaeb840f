// Temp file names (host, pid, counter) and the removal of those a killed writer left (stale_temps.h).
#include "cairn/stale_temps.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include "cairn/provenance.h"

namespace cairn {

namespace fs = std::filesystem;

namespace {

// A live writer modifies its temp only after it started; this much later still counts as "at once": mtime's whole
// seconds on some file systems, /proc/stat's whole-second boot time, an NFS server's clock a little off this node's.
constexpr double kStartSlackSeconds = 5.0;
constexpr size_t kMaxHostTagChars = 32;

// The temp names (file names) of this process's writers still at work.
std::mutex g_own_mutex;
std::unordered_set<std::string>& own_temp_names() {
  static std::unordered_set<std::string> names;
  return names;
}

bool is_own_temp(const std::string& name) {
  std::lock_guard<std::mutex> hold(g_own_mutex);
  return own_temp_names().count(name) != 0;
}

bool all_chars(std::string_view s, bool (*ok)(char)) {
  if (s.empty()) return false;
  for (char c : s)
    if (!ok(c)) return false;
  return true;
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex_digit(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_host_char(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-'; }

struct ParsedTempName {
  std::string file;  // the file it would replace
  std::string host;  // empty: the old format, without a host
  pid_t pid = 0;
};

// Splits ".<file>.tmp.<host>.<pid>.<hex>" or the old ".<file>.tmp.<pid>.<hex>"; nullopt for any other name. A host
// tag is never "tmp" (temp_host_tag), so the field before the pid tells the two apart.
std::optional<ParsedTempName> parse_temp_name(std::string_view rest) {
  if (rest.size() < 2 || rest[0] != '.') return std::nullopt;
  auto take_last_field = [&rest]() -> std::string_view {
    const size_t dot = rest.rfind('.');
    if (dot == std::string_view::npos || dot == 0) return {};
    std::string_view field = rest.substr(dot + 1);
    rest = rest.substr(0, dot);
    return field;
  };
  if (!all_chars(take_last_field(), is_hex_digit)) return std::nullopt;
  const std::string_view pid_field = take_last_field();
  long pid = 0;
  if (!all_chars(pid_field, is_digit) ||
      std::from_chars(pid_field.data(), pid_field.data() + pid_field.size(), pid).ec != std::errc() || pid <= 0 ||
      pid > INT_MAX)
    return std::nullopt;
  ParsedTempName parsed;
  parsed.pid = static_cast<pid_t>(pid);
  std::string_view field = take_last_field();
  if (field != "tmp") {
    if (!all_chars(field, is_host_char) || take_last_field() != "tmp") return std::nullopt;
    parsed.host = field;
  }
  if (rest.size() < 2) return std::nullopt;  // "." and a file name
  parsed.file = rest.substr(1);
  return parsed;
}

// When the process with this pid started, in seconds since the epoch: /proc/<pid>/stat's field 22 (clock ticks
// after boot) plus /proc/stat's btime. nullopt where /proc cannot tell (not Linux, no such process any more).
std::optional<double> process_start_unix(pid_t pid) {
#ifdef __linux__
  std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat_file, line)) return std::nullopt;
  const size_t comm_end = line.rfind(')');  // the command name may hold spaces and parentheses
  if (comm_end == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(comm_end + 1));
  std::string skipped;
  for (int field = 3; field < 22; ++field) fields >> skipped;  // state (3) ... itrealvalue (21)
  unsigned long long start_ticks = 0;
  if (!(fields >> start_ticks)) return std::nullopt;
  std::ifstream system_stat("/proc/stat");
  long long boot_unix = -1;
  while (std::getline(system_stat, line))
    if (line.rfind("btime ", 0) == 0) {
      boot_unix = std::atoll(line.c_str() + 6);
      break;
    }
  const long ticks_per_second = ::sysconf(_SC_CLK_TCK);
  if (boot_unix <= 0 || ticks_per_second <= 0) return std::nullopt;
  return static_cast<double>(boot_unix) + static_cast<double>(start_ticks) / static_cast<double>(ticks_per_second);
#else
  (void)pid;
  return std::nullopt;
#endif
}

// Whether the writer of this host's temp `name` (last modified at `mtime_unix`) is gone (stale_temps.h).
bool writer_gone(const std::string& name, pid_t pid, double mtime_unix) {
  if (pid == ::getpid()) return !is_own_temp(name);
  if (::kill(pid, 0) != 0 && errno != EPERM) return true;
  const std::optional<double> started = process_start_unix(pid);
  return started && *started > mtime_unix + kStartSlackSeconds;
}

}  // namespace

const std::string& temp_host_tag() {
  static const std::string tag = [] {
    std::string host = hostname_string();
    host = host.substr(0, host.find('.'));  // the short name
    std::string out;
    for (char c : host) {
      if (out.size() == kMaxHostTagChars) break;
      out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : is_host_char(c) ? c : '-');
    }
    if (out.empty()) out = "unknown";
    if (out == "tmp") out = "tmp-host";  // "tmp" would read as the old format's ".tmp.<pid>"
    return out;
  }();
  return tag;
}

TempName::TempName(const std::string& path) {
  // Unique within the process (a counter), and across processes of one pid in different pid namespaces writing one
  // directory (a random start).
  static std::atomic<uint32_t> counter{static_cast<uint32_t>(std::random_device{}())};
  fs::path p(path);
  char suffix[96];
  std::snprintf(suffix, sizeof suffix, ".tmp.%s.%d.%06x", temp_host_tag().c_str(), static_cast<int>(::getpid()),
                static_cast<unsigned>(counter.fetch_add(1) & 0xffffffu));
  // Appended piecewise: GCC 12 warns falsely (-Wrestrict) on `"." + std::string`.
  std::string name(".");
  name.append(p.filename().string()).append(suffix);
  {
    std::lock_guard<std::mutex> hold(g_own_mutex);
    own_temp_names().insert(name);
  }
  path_ = (p.parent_path() / name).string();
}

TempName::~TempName() {
  std::lock_guard<std::mutex> hold(g_own_mutex);
  own_temp_names().erase(fs::path(path_).filename().string());
}

size_t remove_stale_temps(const std::string& dir, const std::function<bool(const std::string& name)>& wanted,
                          StaleTempScope scope) {
  std::error_code ec;
  size_t removed = 0;
  for (fs::directory_iterator it(dir.empty() ? "." : dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::optional<ParsedTempName> temp = parse_temp_name(name);
    if (!temp || !wanted(temp->file)) continue;
    const bool locked = scope == StaleTempScope::Locked;
    // Another node's: its pid means nothing here (under the lock no other run writes: it is a killed one's).
    if (!locked && !temp->host.empty() && temp->host != temp_host_tag()) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (locked ? is_own_temp(name) : !writer_gone(name, temp->pid, static_cast<double>(st.st_mtime))) continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

}  // namespace cairn
