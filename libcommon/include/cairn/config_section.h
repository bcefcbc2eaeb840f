// Typed config sections: one declaration per key binds a struct field to its schema entry, reader and CLI flag.
//
// A section is a plain struct with default member values and a `keys` function that names each field once:
//
//   struct TrainSection {
//     static constexpr const char* kSection = "train";
//     int64_t steps = 1000;
//     std::string schedule = "cosine";
//     template <class K> static void keys(K& k) {
//       k(&TrainSection::steps, "steps", Range{1, 1e12}, Flag{"--steps"}, "optimizer steps to train");
//       k(&TrainSection::schedule, "schedule", Choices{"cosine", "linear"}, "learning-rate decay");
//     }
//   };
//
// From that one declaration come the schema entry (type from the field's C++ type, default from the
// member initialiser, range or choices, doc: declare_section), the typed reader (read_section, so tools
// receive structs and never look keys up by string), and the optional tool flag (add_section_flags).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "cairn/config.h"

namespace CLI {
class App;
}

namespace cairn {

// A numeric key's inclusive bounds (for list keys: of every element).
struct Range {
  double min, max;
};
// The values a string (or string-list) key accepts.
struct Choices {
  std::vector<std::string> values;
  Choices(std::initializer_list<const char*> v) : values(v.begin(), v.end()) {}
};
// A string key holding a byte count with an optional K/M/G suffix, which a plain integer may also give.
struct ByteCount {};
// A string key holding a range of steps "a:b" (parse_step_range) or "" for none.
struct StepRange {};
// A list key that must hold at least one value.
struct NonEmpty {};
// A tool flag that sets the key, in CLI11 syntax ("-n,--iters"); only tools that call add_section_flags get it.
struct Flag {
  const char* names;
};

namespace config_section_detail {

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

// The key type a field of C++ type T has. optional<vector<...>> is "a value or a list, unset by default"
// (cairn-plan's search constraints); json is an inline table.
template <class T>
constexpr KeyType key_type_for() {
  if constexpr (std::is_same_v<T, bool>) return KeyType::Bool;
  else if constexpr (std::is_integral_v<T>) return KeyType::Int;
  else if constexpr (std::is_floating_point_v<T>) return KeyType::Float;
  else if constexpr (std::is_same_v<T, std::string>) return KeyType::String;
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return KeyType::StringList;
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return KeyType::IntList;
  else if constexpr (std::is_same_v<T, std::vector<double>>) return KeyType::FloatList;
  else if constexpr (std::is_same_v<T, std::optional<std::vector<int64_t>>>) return KeyType::IntOrIntList;
  else if constexpr (std::is_same_v<T, std::optional<std::vector<std::string>>>) return KeyType::StringOrStringList;
  else if constexpr (std::is_same_v<T, json>) return KeyType::Table;
  else static_assert(!sizeof(T), "config fields are bool, integers, double, string, vectors of these, or json");
}

template <class T>
json to_json_value(const T& v) {
  if constexpr (std::is_same_v<T, std::optional<std::vector<int64_t>>> ||
                std::is_same_v<T, std::optional<std::vector<std::string>>>) {
    return v ? json(*v) : json(nullptr);
  } else {
    return json(v);
  }
}

// Reads the effective value of `dotted` into a field (the value was validated against the same type on entry).
template <class T>
void read_value(const Config& cfg, const std::string& dotted, T& out) {
  if constexpr (std::is_same_v<T, bool>) out = cfg.get_bool(dotted);
  else if constexpr (std::is_integral_v<T>) out = static_cast<T>(cfg.get_int(dotted));
  else if constexpr (std::is_floating_point_v<T>) out = static_cast<T>(cfg.get_float(dotted));
  else if constexpr (std::is_same_v<T, std::string>) out = cfg.get_string(dotted);
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) out = cfg.get_strings(dotted);
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>) out = cfg.get_ints(dotted);
  else if constexpr (std::is_same_v<T, std::vector<double>>) out = cfg.get_floats(dotted);
  else if constexpr (std::is_same_v<T, std::optional<std::vector<int64_t>>>) {
    out = cfg.has(dotted) ? std::optional(cfg.get_ints(dotted)) : std::nullopt;
  } else if constexpr (std::is_same_v<T, std::optional<std::vector<std::string>>>) {
    out = cfg.has(dotted) ? std::optional(cfg.get_strings(dotted)) : std::nullopt;
  } else {
    out = cfg.has(dotted) ? cfg.get(dotted) : json::object();
  }
}

inline void apply_option(KeySpec& k, const Range& r) {
  k.min = r.min;
  k.max = r.max;
}
inline void apply_option(KeySpec& k, const Choices& c) { k.choices = c.values; }
inline void apply_option(KeySpec& k, const Flag& f) { k.flag = f.names; }
inline void apply_option(KeySpec& k, const ByteCount&) { k.byte_count = true; }
inline void apply_option(KeySpec& k, const NonEmpty&) { k.non_empty = true; }
inline void apply_option(KeySpec& k, const StepRange&) { k.step_range = true; }
inline void apply_option(KeySpec& k, const char* doc) { k.doc = doc; }
inline void apply_option(KeySpec& k, const std::string& doc) { k.doc = doc; }

// Visitor that turns each key of S into a KeySpec.
template <class S>
struct Declarer {
  Schema& schema;
  const S defaults{};
  template <class T, class... Options>
  void operator()(T S::*field, const char* key, const Options&... options) {
    KeySpec k;
    k.section = S::kSection;
    k.key = key;
    k.type = key_type_for<T>();
    k.default_value = to_json_value(defaults.*field);
    (apply_option(k, options), ...);
    schema.add(std::move(k));
  }
};

// Visitor that fills each field of S from the effective config.
template <class S>
struct Reader {
  const Config& cfg;
  S& out;
  template <class T, class... Options>
  void operator()(T S::*field, const char* key, const Options&...) {
    read_value(cfg, std::string(S::kSection) + "." + key, out.*field);
  }
};

}  // namespace config_section_detail

// Adds every key of section S to the schema (in declaration order).
template <class S>
void declare_section(Schema& schema) {
  config_section_detail::Declarer<S> d{schema};
  S::keys(d);
}

// The section's effective values as S. Every key was type- and range-checked when it was set, so this
// cannot fail on a config that loaded.
template <class S>
S read_section(const Config& cfg) {
  S s;
  config_section_detail::Reader<S> r{cfg, s};
  S::keys(r);
  return s;
}

// Adds a CLI11 option for every key of `section` that declares a Flag (help: the key's doc and
// "sets [section] key"); values given on the command line are appended to `settings` as typed values,
// validated like any key when the config loads (errors name the flag). Call before parse_cli.
void add_section_flags(CLI::App& app, const std::string& section, ToolSettings& settings,
                       const Schema& schema = registry());

}  // namespace cairn
