// Typed put/get of one optional record member, shared by the records' to_json and from_json (internal header).
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cairn/config.h"

namespace cairn::records::detail {

// JSON has no NaN or infinity: such a figure is written as null, which every reader takes as "absent".
inline nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

inline void put(nlohmann::json& j, const char* key, const std::optional<int64_t>& v) {
  if (v) j[key] = *v;
}
inline void put(nlohmann::json& j, const char* key, const std::optional<uint64_t>& v) {
  if (v) j[key] = *v;
}
inline void put(nlohmann::json& j, const char* key, const std::optional<bool>& v) {
  if (v) j[key] = *v;
}
inline void put(nlohmann::json& j, const char* key, const std::optional<double>& v) {
  if (v) j[key] = number_or_null(*v);
}
inline void put(nlohmann::json& j, const char* key, const std::optional<std::string>& v) {
  if (v) j[key] = *v;
}

// Absent or null leaves `out` empty; a present value must have the member's type (counts are never negative).
inline void get(const JsonFields& f, const char* key, std::optional<int64_t>& out) {
  if (f.has(key)) out = f.i64(key, 0, INT64_MAX);
}
inline void get(const JsonFields& f, const char* key, std::optional<uint64_t>& out) {
  if (f.has(key)) out = f.u64(key);
}
inline void get(const JsonFields& f, const char* key, std::optional<bool>& out) {
  if (f.has(key)) out = f.boolean_or(key, false);
}
inline void get(const JsonFields& f, const char* key, std::optional<double>& out) {
  if (f.has(key)) out = f.number(key, -DBL_MAX, DBL_MAX);
}
inline void get(const JsonFields& f, const char* key, std::optional<std::string>& out) {
  if (f.has(key)) out = f.str(key);
}

}  // namespace cairn::records::detail
