// JSON text for files and stdout that never throws on bytes that are not UTF-8 (a path given as raw bytes).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace cairn {

// `j.dump(indent)`, with each byte that is not UTF-8 written as U+FFFD: such a path in a command line or an input list
// used to throw once the work was done, and the tool then left its outputs without their index or summary.
inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}
// The same for a document that keeps its keys in insertion order.
inline std::string json_text(const nlohmann::ordered_json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace cairn
