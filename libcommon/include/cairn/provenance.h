// Provenance of every result a tool writes: tool, version, git sha, host, time, command line, config.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cairn {

struct Provenance {
  std::string tool;     // "cairn-sweep"
  std::string version;  // project version
  std::string git_sha;  // at build time ("unknown" outside a checkout)
  std::string host;
  std::string time_utc;      // ISO 8601 of tool start
  std::string command_line;  // argv joined with shell quoting
  std::string config_toml;   // effective config as TOML
  nlohmann::json to_json() const;
};

// Process-wide provenance, filled by run_tool() before the tool's code runs.
Provenance& provenance();

std::string cairn_version();
std::string cairn_git_sha();
std::string hostname_string();
std::string utc_now_iso8601();
// Quotes args the way a shell would need them, joined by spaces.
std::string shell_join(const std::vector<std::string>& args);

}  // namespace cairn
