// Config loading and validation: schema registry, TOML files with includes, env and --set layers.
#include "cairn/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "cairn/error.h"

extern char** environ;

namespace cairn {

namespace fs = std::filesystem;

const char* key_type_name(KeyType t) {
  switch (t) {
    case KeyType::Bool: return "a boolean";
    case KeyType::Int: return "an integer";
    case KeyType::Float: return "a number";
    case KeyType::String: return "a string";
    case KeyType::StringList: return "a list of strings";
    case KeyType::IntList: return "a list of integers";
    case KeyType::FloatList: return "a list of numbers";
    case KeyType::IntOrIntList: return "an integer or a list of integers";
    case KeyType::StringOrStringList: return "a string or a list of strings";
    case KeyType::Table: return "a table";
  }
  return "?";
}

// ---------------------------------------------------------------- Schema

Schema& Schema::add(KeySpec spec) {
  if (std::find(section_order_.begin(), section_order_.end(), spec.section) == section_order_.end()) {
    section_order_.push_back(spec.section);
  }
  keys_.push_back(std::move(spec));
  return *this;
}

Schema& Schema::add(const std::string& section, const std::string& key, KeyType type, json default_value,
                    const std::string& doc) {
  KeySpec k;
  k.section = section;
  k.key = key;
  k.type = type;
  k.default_value = std::move(default_value);
  k.doc = doc;
  return add(std::move(k));
}

Schema& Schema::add_range(const std::string& section, const std::string& key, KeyType type, json default_value,
                          std::optional<double> min, std::optional<double> max, const std::string& doc) {
  KeySpec k;
  k.section = section;
  k.key = key;
  k.type = type;
  k.default_value = std::move(default_value);
  k.min = min;
  k.max = max;
  k.doc = doc;
  return add(std::move(k));
}

Schema& Schema::add_choice(const std::string& section, const std::string& key, KeyType type, json default_value,
                           std::vector<std::string> choices, const std::string& doc) {
  KeySpec k;
  k.section = section;
  k.key = key;
  k.type = type;
  k.default_value = std::move(default_value);
  k.choices = std::move(choices);
  k.doc = doc;
  return add(std::move(k));
}

Schema& Schema::add_open_section(const std::string& section, KeyType type, const std::string& doc) {
  return add(section, "*", type, nullptr, doc);
}

const KeySpec* Schema::find(const std::string& section, const std::string& key) const {
  const KeySpec* open = nullptr;
  for (const auto& k : keys_) {
    if (k.section != section) continue;
    if (k.key == key) return &k;
    if (k.key == "*") open = &k;
  }
  return open;
}

bool Schema::has_section(const std::string& section) const {
  return std::find(section_order_.begin(), section_order_.end(), section) != section_order_.end();
}

bool Schema::is_open_section(const std::string& section) const {
  for (const auto& k : keys_)
    if (k.section == section && k.key == "*") return true;
  return false;
}

std::vector<std::string> Schema::sections() const { return section_order_; }

bool Schema::has_subsections(const std::string& section) const {
  std::string prefix = section + ".";
  for (const auto& s : section_order_)
    if (s.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

namespace {
// Close enough to suggest: within a third of the length (at least 2 edits) or a prefix match.
bool is_close(const std::string& typed, const std::string& candidate, size_t d) {
  size_t limit = std::max<size_t>(2, candidate.size() / 3);
  return d <= limit;
}
}  // namespace

std::string Schema::suggest(const std::string& section, const std::string& key) const {
  std::string best;
  size_t best_d = SIZE_MAX;
  // Same section first, then the key in another section (a key put under the wrong table).
  for (const auto& k : keys_) {
    if (k.key == "*") continue;
    size_t d = edit_distance(key, k.key);
    std::string full = k.section + "." + k.key;
    if (k.section != section) {
      if (k.key != key) continue;  // only exact key names count across sections
      d = 1;
    }
    if (d < best_d && is_close(key, k.key, d)) {
      best_d = d;
      best = full;
    }
  }
  return best;
}

std::string Schema::suggest_section(const std::string& section) const {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& s : section_order_) {
    size_t d = edit_distance(section, s);
    if (d < best_d && is_close(section, s, d)) {
      best_d = d;
      best = s;
    }
  }
  return best;
}

std::pair<std::string, std::string> split_dotted(const std::string& dotted) {
  auto pos = dotted.rfind('.');
  if (pos == std::string::npos) return {"", dotted};
  return {dotted.substr(0, pos), dotted.substr(pos + 1)};
}

// ---------------------------------------------------------------- Origin

std::string Origin::describe() const {
  switch (kind) {
    case Default: return "default";
    case File: return where;
    case Env: return "env " + where;
    case Set: return "--set" + (where.empty() ? std::string() : " " + where);
    case Program: return where.empty() ? "tool" : where;
  }
  return "";
}

// ---------------------------------------------------------------- value checking

namespace {

std::string short_json(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string value_kind(const json& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  if (v.is_object()) return "table";
  return "nothing";
}

bool all_of_array(const json& v, bool (*pred)(const json&)) {
  if (!v.is_array()) return false;
  for (const auto& e : v)
    if (!pred(e)) return false;
  return true;
}
bool is_int(const json& v) { return v.is_number_integer(); }
bool is_num(const json& v) { return v.is_number(); }
bool is_str(const json& v) { return v.is_string(); }

// Checks `v` against `spec`; returns the value coerced to its canonical type, or throws UsageError
// prefixed with `where` (a file position, env var or --set).
json check_value(const KeySpec& spec, const std::string& key, const json& v, const std::string& where) {
  std::string name = spec.section + "." + key;
  auto fail = [&](const std::string& what) -> json { throw UsageError(where + ": " + name + ": " + what); };
  bool ok = false;
  json out = v;
  switch (spec.type) {
    case KeyType::Bool: ok = v.is_boolean(); break;
    case KeyType::Int: ok = is_int(v); break;
    case KeyType::Float:
      ok = is_num(v);
      if (ok) out = v.get<double>();
      break;
    case KeyType::String: ok = v.is_string(); break;
    case KeyType::StringList: ok = all_of_array(v, is_str); break;
    case KeyType::IntList: ok = all_of_array(v, is_int); break;
    case KeyType::FloatList:
      ok = all_of_array(v, is_num);
      if (ok) {
        out = json::array();
        for (const auto& e : v) out.push_back(e.get<double>());
      }
      break;
    case KeyType::IntOrIntList: ok = is_int(v) || all_of_array(v, is_int); break;
    case KeyType::StringOrStringList: ok = v.is_string() || all_of_array(v, is_str); break;
    case KeyType::Table: ok = v.is_object(); break;
  }
  if (!ok) fail(std::string("expected ") + key_type_name(spec.type) + ", got " + value_kind(v) + " " + short_json(v));

  auto check_number = [&](const json& n) {
    double x = n.get<double>();
    if (!std::isfinite(x)) fail("value " + short_json(n) + " is not finite");
    if (spec.min && x < *spec.min) fail("value " + short_json(n) + " is below the minimum " + json(*spec.min).dump());
    if (spec.max && x > *spec.max) fail("value " + short_json(n) + " is above the maximum " + json(*spec.max).dump());
  };
  auto check_choice = [&](const json& s) {
    if (spec.choices.empty()) return;
    std::string str = s.get<std::string>();
    if (std::find(spec.choices.begin(), spec.choices.end(), str) != spec.choices.end()) return;
    std::string list;
    for (const auto& c : spec.choices) list += (list.empty() ? "" : ", ") + c;
    std::string best;
    size_t best_d = SIZE_MAX;
    for (const auto& c : spec.choices) {
      size_t d = edit_distance(str, c);
      if (d < best_d && is_close(str, c, d)) {
        best_d = d;
        best = c;
      }
    }
    fail("\"" + str + "\" is not one of " + list + (best.empty() ? "" : " (did you mean \"" + best + "\"?)"));
  };
  if (out.is_number()) check_number(out);
  if (out.is_array())
    for (const auto& e : out) {
      if (e.is_number()) check_number(e);
      if (e.is_string()) check_choice(e);
    }
  if (out.is_string()) check_choice(out);
  return out;
}

// ---------------------------------------------------------------- TOML conversion

json toml_to_json(const toml::node& node) {
  if (auto t = node.as_table()) {
    json obj = json::object();
    for (auto&& [k, v] : *t) obj[std::string(k.str())] = toml_to_json(v);
    return obj;
  }
  if (auto a = node.as_array()) {
    json arr = json::array();
    for (auto& e : *a) arr.push_back(toml_to_json(e));
    return arr;
  }
  if (auto s = node.as_string()) return s->get();
  if (auto i = node.as_integer()) return i->get();
  if (auto f = node.as_floating_point()) return f->get();
  if (auto b = node.as_boolean()) return b->get();
  // Dates and times: keep their TOML text.
  std::ostringstream os;
  node.visit([&](auto&& n) {
    if constexpr (toml::is_date<decltype(n)> || toml::is_time<decltype(n)> || toml::is_date_time<decltype(n)>) {
      os << n;
    }
  });
  return os.str();
}

std::string position(const std::string& file, const toml::source_region& src) {
  return file + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
}

// Why `path` cannot be read as a config file ("" when it is a readable regular file). Checked with
// stat() before anything opens it: opening a FIFO would block forever, a directory reads as garbage.
// A file named on the command line may be a pipe (`--config <(...)`, process substitution); an
// include may not: nobody is writing to it.
std::string config_file_problem(const std::string& path, bool allow_pipe = false) {
  if (path.empty()) return "empty file name";
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || st.type() == fs::file_type::not_found) return "No such file or directory";
  if (st.type() == fs::file_type::directory) return "is a directory, not a TOML file";
  if (st.type() == fs::file_type::regular) return "";
  if (allow_pipe && (st.type() == fs::file_type::fifo || st.type() == fs::file_type::character)) return "";
  return "not a regular file (a FIFO, socket or device)";
}

toml::table parse_toml_file(const std::string& path, bool allow_pipe = true) {
  if (std::string why = config_file_problem(path, allow_pipe); !why.empty())
    throw UsageError("cannot open config \"" + path + "\": " + why);
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw UsageError(position(path, e.source()) + ": invalid TOML: " + std::string(e.description()));
  }
}

// Parses the right-hand side of `key = value` text; bare words that are not TOML values are strings.
json parse_value_text(const std::string& text) {
  try {
    toml::table t = toml::parse("v = " + text);
    return toml_to_json(*t.get("v"));
  } catch (const toml::parse_error&) {
    return text;
  }
}

std::string toml_string_literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

bool bare_key_ok(const std::string& k) {
  return !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}
std::string toml_key(const std::string& k) { return bare_key_ok(k) ? k : toml_string_literal(k); }

std::string toml_value(const json& v) {
  if (v.is_string()) return toml_string_literal(v.get<std::string>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return v.dump();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", d);
    // Shortest form that round-trips.
    for (int prec = 1; prec <= 17; ++prec) {
      std::snprintf(buf, sizeof buf, "%.*g", prec, d);
      if (std::strtod(buf, nullptr) == d) break;
    }
    std::string s = buf;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_value(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{ ";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += (first ? "" : ", ") + toml_key(it.key()) + " = " + toml_value(it.value());
      first = false;
    }
    return out + (first ? "}" : " }");
  }
  return "\"\"";
}

std::string env_section_name(const std::string& section) {
  std::string s = section;
  std::replace(s.begin(), s.end(), '.', '_');
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

}  // namespace

// ---------------------------------------------------------------- Config

Config::Config(const Schema& schema) : schema_(&schema) {
  for (const auto& k : schema.keys()) {
    if (k.key == "*") continue;
    values_[k.section + "." + k.key] = Entry{k.default_value, Origin{}};
  }
}

const json& Config::get(const std::string& dotted) const {
  auto it = values_.find(dotted);
  if (it == values_.end()) {
    auto [section, key] = split_dotted(dotted);
    if (schema_->is_open_section(section)) {
      static const json null_value;
      return null_value;
    }
    throw UsageError("internal: config key '" + dotted + "' is not declared in the schema");
  }
  return it->second.value;
}

bool Config::has(const std::string& dotted) const {
  auto it = values_.find(dotted);
  return it != values_.end() && !it->second.value.is_null();
}

namespace {
[[noreturn]] void unset_key(const std::string& dotted) {
  throw UsageError("config key '" + dotted + "' is required but not set (set it in the config file or with --set " +
                   dotted + "=...)");
}
}  // namespace

int64_t Config::get_int(const std::string& dotted) const {
  const json& v = get(dotted);
  if (v.is_null()) unset_key(dotted);
  if (v.is_array()) {
    if (v.size() != 1)
      throw UsageError("config key '" + dotted + "' must be a single integer here, got " + short_json(v));
    return v[0].get<int64_t>();
  }
  return v.get<int64_t>();
}

double Config::get_float(const std::string& dotted) const {
  const json& v = get(dotted);
  if (v.is_null()) unset_key(dotted);
  return v.get<double>();
}

bool Config::get_bool(const std::string& dotted) const {
  const json& v = get(dotted);
  if (v.is_null()) unset_key(dotted);
  return v.get<bool>();
}

std::string Config::get_string(const std::string& dotted) const {
  const json& v = get(dotted);
  if (v.is_null()) unset_key(dotted);
  if (v.is_array()) {
    if (v.size() != 1)
      throw UsageError("config key '" + dotted + "' must be a single value here, got " + short_json(v));
    return v[0].get<std::string>();
  }
  return v.get<std::string>();
}

std::vector<std::string> Config::get_strings(const std::string& dotted) const {
  const json& v = get(dotted);
  if (v.is_null()) return {};
  if (v.is_string()) return {v.get<std::string>()};
  return v.get<std::vector<std::string>>();
}

std::vector<int64_t> Config::get_ints(const std::string& dotted) const {
  const json& v = get(dotted);
  if (v.is_null()) return {};
  if (v.is_number()) return {v.get<int64_t>()};
  return v.get<std::vector<int64_t>>();
}

std::vector<double> Config::get_floats(const std::string& dotted) const {
  const json& v = get(dotted);
  if (v.is_null()) return {};
  if (v.is_number()) return {v.get<double>()};
  return v.get<std::vector<double>>();
}

json Config::section(const std::string& section) const {
  json out = json::object();
  std::string prefix = section + ".";
  for (const auto& [k, e] : values_) {
    if (k.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = k.substr(prefix.size());
    if (rest.find('.') != std::string::npos) continue;
    out[rest] = e.value;
  }
  return out;
}

const Origin& Config::origin(const std::string& dotted) const {
  static const Origin none;
  auto it = values_.find(dotted);
  return it == values_.end() ? none : it->second.origin;
}

void Config::set(const std::string& dotted, const json& value, Origin origin) {
  auto [section, key] = split_dotted(dotted);
  std::string where = origin.kind == Origin::Default ? "default" : origin.describe();
  if (!schema_->has_section(section)) {
    std::string hint = schema_->suggest_section(section);
    throw UsageError(where + ": unknown section [" + section + "]" +
                     (hint.empty() ? "" : " (did you mean [" + hint + "]?)"));
  }
  const KeySpec* spec = schema_->find(section, key);
  if (!spec) {
    std::string hint = schema_->suggest(section, key);
    throw UsageError(where + ": unknown key '" + key + "' in [" + section + "]" +
                     (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
  }
  json checked = check_value(*spec, key, value, where);
  values_[dotted] = Entry{std::move(checked), std::move(origin)};
}

void Config::set_from_text(const std::string& assignment, Origin origin) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw UsageError("--set expects section.key=value, got '" + assignment + "'");
  }
  std::string dotted = assignment.substr(0, eq);
  dotted.erase(std::remove_if(dotted.begin(), dotted.end(), [](unsigned char c) { return std::isspace(c); }),
               dotted.end());
  std::string text = assignment.substr(eq + 1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.erase(text.begin());
  if (dotted.find('.') == std::string::npos) {
    throw UsageError("--set expects section.key=value, got '" + assignment + "' (no section)");
  }
  if (origin.where.empty()) origin.where = assignment;
  set(dotted, parse_value_text(text), std::move(origin));
}

std::string Config::to_toml(bool with_origins, const std::vector<std::string>& only_sections) const {
  std::ostringstream os;
  for (const auto& section : schema_->sections()) {
    if (!only_sections.empty() &&
        std::find(only_sections.begin(), only_sections.end(), section) == only_sections.end()) {
      continue;
    }
    std::vector<std::pair<std::string, const Entry*>> rows;
    std::vector<const KeySpec*> specs;
    for (const auto& k : schema_->keys()) {
      if (k.section != section) continue;
      if (k.key == "*") {
        std::string prefix = section + ".";
        for (const auto& [name, e] : values_) {
          if (name.compare(0, prefix.size(), prefix) != 0) continue;
          std::string rest = name.substr(prefix.size());
          if (rest.find('.') != std::string::npos) continue;
          rows.emplace_back(rest, &e);
          specs.push_back(&k);
        }
        continue;
      }
      auto it = values_.find(section + "." + k.key);
      if (it != values_.end()) {
        rows.emplace_back(k.key, &it->second);
        specs.push_back(&k);
      }
    }
    if (rows.empty()) continue;
    os << "[" << section << "]\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& [key, e] = rows[i];
      std::string line;
      if (e->value.is_null()) {
        line = "# " + toml_key(key) + " = (unset)";
      } else {
        line = toml_key(key) + " = " + toml_value(e->value);
      }
      if (with_origins) {
        if (line.size() < 40) line.resize(40, ' ');
        line += "  # " + e->origin.describe();
        if (!specs[i]->doc.empty() && specs[i]->key != "*") line += " | " + specs[i]->doc;
      }
      os << line << "\n";
    }
    os << "\n";
  }
  return os.str();
}

json Config::to_json() const {
  json out = json::object();
  for (const auto& [name, e] : values_) {
    if (e.value.is_null()) continue;
    auto [section, key] = split_dotted(name);
    json* node = &out;
    std::stringstream ss(section);
    std::string part;
    while (std::getline(ss, part, '.')) node = &(*node)[part];
    (*node)[key] = e.value;
  }
  return out;
}

// ---------------------------------------------------------------- loading

namespace {

void apply_table(Config& cfg, const Schema& schema, const toml::table& table, const std::string& section,
                 const std::string& file) {
  for (auto&& [k, v] : table) {
    std::string key(k.str());
    std::string where = position(file, k.source());
    std::string child = section.empty() ? key : section + "." + key;
    if (section.empty() && key == "include") continue;
    if (v.is_table() && (schema.has_section(child) || schema.has_subsections(child))) {
      apply_table(cfg, schema, *v.as_table(), child, file);
      continue;
    }
    if (section.empty()) {
      if (v.is_table()) {
        std::string hint = schema.suggest_section(key);
        throw UsageError(where + ": unknown section [" + key + "]" +
                         (hint.empty() ? "" : " (did you mean [" + hint + "]?)"));
      }
      throw UsageError(where + ": key '" + key + "' must be inside a [section]");
    }
    Origin origin{Origin::File, where};
    cfg.set(child, toml_to_json(v), origin);
  }
}

void apply_file(Config& cfg, const Schema& schema, const std::string& path, std::vector<std::string>& stack,
                std::vector<std::string>& files_read, bool included = false) {
  std::error_code ec;
  std::string canon = fs::weakly_canonical(path, ec).string();
  if (ec) canon = path;
  if (std::find(stack.begin(), stack.end(), canon) != stack.end()) {
    std::string chain;
    for (const auto& s : stack) chain += s + " -> ";
    throw UsageError("include cycle: " + chain + canon);
  }
  toml::table table = parse_toml_file(path, !included);
  files_read.push_back(path);
  stack.push_back(canon);
  if (auto inc = table.get("include")) {
    std::vector<std::pair<std::string, std::string>> includes;  // (path, where)
    auto add = [&](const toml::node& n) {
      if (!n.is_string()) {
        throw UsageError(position(path, n.source()) + ": include: expected a string or a list of strings");
      }
      includes.emplace_back(n.as_string()->get(), position(path, n.source()));
    };
    if (auto arr = inc->as_array()) {
      for (auto& e : *arr) add(e);
    } else {
      add(*inc);
    }
    fs::path base = fs::path(path).parent_path();
    for (const auto& [rel, where] : includes) {
      if (rel.empty()) throw UsageError(where + ": cannot include \"\": empty file name");
      fs::path p = fs::path(rel).is_absolute() ? fs::path(rel) : base / rel;
      if (std::string why = config_file_problem(p.string()); !why.empty())
        throw UsageError(where + ": cannot include \"" + p.string() + "\": " + why);
      apply_file(cfg, schema, p.string(), stack, files_read, true);
    }
  }
  apply_table(cfg, schema, table, "", path);
  stack.pop_back();
}

void apply_env(Config& cfg, const Schema& schema) {
  // Longest section name first so CAIRN_REPORT_GATES_X binds to [report.gates], not [report].
  std::vector<std::string> sections = schema.sections();
  std::sort(sections.begin(), sections.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  std::vector<std::pair<std::string, std::string>> vars;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    if (entry.rfind("CAIRN_", 0) != 0) continue;
    auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    vars.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  std::sort(vars.begin(), vars.end());
  for (const auto& [name, text] : vars) {
    std::string rest = name.substr(6);
    for (const auto& section : sections) {
      std::string prefix = env_section_name(section) + "_";
      if (rest.rfind(prefix, 0) != 0) continue;
      std::string key = rest.substr(prefix.size());
      std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
      if (key.empty()) break;
      // Variables naming no declared key (e.g. CAIRN_SOURCE_DIR used by scripts) are not config.
      if (!schema.find(section, key)) {
        bool other_section_matches = false;
        for (const auto& s2 : sections) {
          if (s2 != section && rest.rfind(env_section_name(s2) + "_", 0) == 0 && s2.size() > section.size()) {
            other_section_matches = true;
          }
        }
        if (!other_section_matches) {
          std::string hint = schema.suggest(section, key);
          throw UsageError("env " + name + ": unknown key '" + key + "' in [" + section + "]" +
                           (hint.empty() ? ""
                                         : " (did you mean CAIRN_" + env_section_name(split_dotted(hint).first) + "_" +
                                               env_section_name(split_dotted(hint).second) + "?)"));
        }
        continue;
      }
      cfg.set(section + "." + key, parse_value_text(text), Origin{Origin::Env, name});
      break;
    }
  }
}

}  // namespace

Config load_config(const ConfigSources& sources, const Schema& schema) {
  Config cfg(schema);
  std::vector<std::string> stack;
  for (const auto& f : sources.files) apply_file(cfg, schema, f, stack, cfg.files_read_);
  if (sources.use_env) apply_env(cfg, schema);
  for (const auto& s : sources.sets) cfg.set_from_text(s, Origin{Origin::Set, s});
  return cfg;
}

json read_toml_file_as_json(const std::string& path) { return toml_to_json(parse_toml_file(path, false)); }

// ---------------------------------------------------------------- typed stage-file reading

namespace {
std::string describe_value(const json& v) {
  if (v.is_number_float()) {
    double x = v.get<double>();
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  }
  if (v.is_null()) return "null";
  return value_kind(v) + " " + short_json(v);
}
}  // namespace

JsonFields::JsonFields(const json& j, std::string file, std::string kind, std::string prefix)
    : j_(&j), file_(std::move(file)), kind_(std::move(kind)), prefix_(std::move(prefix)) {
  if (!j.is_object())
    throw UsageError("malformed " + kind_ + " \"" + file_ + "\"" +
                     (prefix_.empty() ? std::string(": ") : ": key \"" + prefix_ + "\": ") +
                     "expected a table/object, got " + describe_value(j));
}

std::string JsonFields::key_path(const std::string& key) const {
  if (prefix_.empty()) return key;
  if (!key.empty() && key[0] == '[') return prefix_ + key;
  return prefix_ + "." + key;
}

void JsonFields::fail(const std::string& key, const std::string& expectation) const {
  auto it = j_->find(key);
  if (it != j_->end()) fail_value(key, *it, expectation);
  throw UsageError("malformed " + kind_ + " \"" + file_ + "\": key \"" + key_path(key) + "\": expected " + expectation +
                   ", got nothing (missing)");
}

void JsonFields::fail_value(const std::string& key, const json& value, const std::string& expectation) const {
  throw UsageError("malformed " + kind_ + " \"" + file_ + "\": key \"" + key_path(key) + "\": expected " + expectation +
                   ", got " + describe_value(value));
}

bool JsonFields::has(const std::string& key) const {
  auto it = j_->find(key);
  return it != j_->end() && !it->is_null();
}

uint64_t JsonFields::u64(const std::string& key, uint64_t max) const {
  auto it = j_->find(key);
  const std::string want =
      max == UINT64_MAX ? "a non-negative integer" : "an integer in [0, " + std::to_string(max) + "]";
  if (it == j_->end()) fail(key, want);
  if (it->is_number_unsigned() && it->get<uint64_t>() <= max) return it->get<uint64_t>();
  if (it->is_number_integer() && it->get<int64_t>() >= 0 && static_cast<uint64_t>(it->get<int64_t>()) <= max)
    return static_cast<uint64_t>(it->get<int64_t>());
  fail(key, want);
}

uint64_t JsonFields::u64_or(const std::string& key, uint64_t dflt, uint64_t max) const {
  return has(key) ? u64(key, max) : dflt;
}

int64_t JsonFields::i64(const std::string& key, int64_t min, int64_t max) const {
  auto it = j_->find(key);
  const std::string want = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (it == j_->end()) fail(key, want);
  if (it->is_number_unsigned()) {
    uint64_t u = it->get<uint64_t>();
    if (u <= static_cast<uint64_t>(INT64_MAX) && static_cast<int64_t>(u) >= min && static_cast<int64_t>(u) <= max)
      return static_cast<int64_t>(u);
  } else if (it->is_number_integer()) {
    int64_t x = it->get<int64_t>();
    if (x >= min && x <= max) return x;
  }
  fail(key, want);
}

int64_t JsonFields::i64_or(const std::string& key, int64_t dflt, int64_t min, int64_t max) const {
  return has(key) ? i64(key, min, max) : dflt;
}

double JsonFields::number(const std::string& key, double min, double max) const {
  auto it = j_->find(key);
  std::string want = "a finite number";
  if (min > -1e300 || max < 1e300) {
    if (min == 0 && max >= 1e300) want = "a finite number >= 0";
    else want += " in [" + short_json(json(min)) + ", " + short_json(json(max)) + "]";
  }
  if (it == j_->end() || !it->is_number()) fail(key, want);
  double x = it->get<double>();
  if (!std::isfinite(x) || x < min || x > max) fail(key, want);
  return x;
}

double JsonFields::number_or(const std::string& key, double dflt, double min, double max) const {
  return has(key) ? number(key, min, max) : dflt;
}

std::string JsonFields::str(const std::string& key) const {
  auto it = j_->find(key);
  if (it == j_->end() || !it->is_string()) fail(key, "a string");
  return it->get<std::string>();
}

std::string JsonFields::str_or(const std::string& key, const std::string& dflt) const {
  return has(key) ? str(key) : dflt;
}

bool JsonFields::boolean_or(const std::string& key, bool dflt) const {
  if (!has(key)) return dflt;
  const json& v = j_->at(key);
  if (!v.is_boolean()) fail(key, "true or false");
  return v.get<bool>();
}

JsonFields JsonFields::object(const std::string& key) const {
  auto it = j_->find(key);
  if (it == j_->end() || !it->is_object()) fail(key, "a table/object");
  return JsonFields(*it, file_, kind_, key_path(key));
}

const json& JsonFields::array(const std::string& key, bool non_empty) const {
  auto it = j_->find(key);
  if (it == j_->end() || !it->is_array() || (non_empty && it->empty()))
    fail(key, non_empty ? "a non-empty array" : "an array");
  return *it;
}

JsonFields JsonFields::nested(const json& value, const std::string& key) const {
  return JsonFields(value, file_, kind_, key_path(key));
}

std::string json_error_text(const std::exception& e) {
  std::string w = e.what();
  if (auto p = w.find("] "); w.rfind("[json.exception", 0) == 0 && p != std::string::npos) w = w.substr(p + 2);
  if (auto p = w.find("; last read:"); p != std::string::npos) w = w.substr(0, p);
  return w;
}

json parse_json_text(const std::string& text, const std::string& file, const std::string& kind) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number that overflows a double: both are bad input.
    throw UsageError("malformed " + kind + " \"" + file + "\": invalid JSON: " + json_error_text(e));
  }
}

std::string json_to_toml(const json& tables) {
  std::ostringstream os;
  // Scalars first (TOML requires them before any [table]).
  for (auto it = tables.begin(); it != tables.end(); ++it) {
    if (!it.value().is_object()) os << toml_key(it.key()) << " = " << toml_value(it.value()) << "\n";
  }
  std::function<void(const std::string&, const json&)> emit = [&](const std::string& name, const json& obj) {
    bool has_scalars = false;
    for (auto it = obj.begin(); it != obj.end(); ++it) has_scalars |= !it.value().is_object();
    if (has_scalars || obj.empty()) {
      os << "\n[" << name << "]\n";
      for (auto it = obj.begin(); it != obj.end(); ++it) {
        if (!it.value().is_object()) os << toml_key(it.key()) << " = " << toml_value(it.value()) << "\n";
      }
    }
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      if (it.value().is_object()) emit(name + "." + toml_key(it.key()), it.value());
    }
  };
  for (auto it = tables.begin(); it != tables.end(); ++it) {
    if (it.value().is_object()) emit(toml_key(it.key()), it.value());
  }
  std::string s = os.str();
  if (!s.empty() && s[0] == '\n') s.erase(0, 1);
  return s;
}

}  // namespace cairn
