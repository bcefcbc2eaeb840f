// Provenance record shared by every output a tool writes.
#include "cairn/provenance.h"

#include <unistd.h>

#include <ctime>

#include "cairn/git_sha.h"
#include "cairn/version.h"

namespace cairn {

nlohmann::json Provenance::to_json() const {
  return {{"tool", tool},         {"version", version},           {"git_sha", git_sha},   {"host", host},
          {"time_utc", time_utc}, {"command_line", command_line}, {"config", config_toml}};
}

Provenance& provenance() {
  static Provenance p = [] {
    Provenance q;
    q.tool = "cairn";
    q.version = cairn_version();
    q.git_sha = cairn_git_sha();
    q.host = hostname_string();
    q.time_utc = utc_now_iso8601();
    return q;
  }();
  return p;
}

std::string cairn_version() { return CAIRN_VERSION; }
std::string cairn_git_sha() { return CAIRN_GIT_SHA; }

std::string hostname_string() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string utc_now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string shell_join(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) {
    if (!out.empty()) out += ' ';
    bool plain =
        !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
                          std::string::npos;
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) {
        if (c == '\'') out += "'\\''";
        else out += c;
      }
      out += '\'';
    }
  }
  return out;
}

}  // namespace cairn
