// Config loading and validation: schema registry, TOML files with includes, env and --set layers.
#include "cairn/config.h"
#include "cairn/config_origin.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"

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

Schema& Schema::add_open_section(const std::string& section, KeyType type, const std::string& doc,
                                 std::vector<std::string> table_keys) {
  KeySpec k;
  k.section = section;
  k.key = "*";
  k.type = type;
  k.default_value = nullptr;
  k.doc = doc;
  k.table_keys = std::move(table_keys);
  return add(std::move(k));
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
      // Case-blind: `GLOBAL_BATCH` or `Train` is one keystroke habit away from the key, not a dozen edits.
      const bool same =
          std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      size_t sub = prev[j - 1] + (same ? 0 : 1);
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

std::string closest_match(const std::string& typed, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(typed, c);
    if (d < best_d && is_close(typed, c, d)) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

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

std::string Schema::suggest_section(const std::string& section) const { return closest_match(section, section_order_); }

std::vector<std::string> dotted_parts(const std::string& dotted) {
  std::vector<std::string> parts;
  if (dotted.find_first_of("\"'") == std::string::npos) {
    size_t start = 0;
    for (size_t dot; (dot = dotted.find('.', start)) != std::string::npos; start = dot + 1)
      parts.push_back(dotted.substr(start, dot - start));
    parts.push_back(dotted.substr(start));
    return parts;
  }
  // Quoted parts (eval.task."wiki.test"): TOML's own dotted-key rules, by parsing `<dotted> = 0`.
  toml::table t;
  try {
    t = toml::parse(dotted + " = 0");
  } catch (const toml::parse_error& e) {
    throw UsageError("invalid key " + dotted + ": " + std::string(e.description()));
  }
  const toml::table* level = &t;
  while (level && level->size() == 1) {
    auto it = level->begin();
    parts.emplace_back(it->first.str());
    level = it->second.as_table();
  }
  if (parts.empty() || level) throw UsageError("invalid key " + dotted);
  return parts;
}

namespace {
// The first n parts joined with dots: the section of a dotted name's key.
std::string joined_parts(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += (i ? "." : "") + parts[i];
  return out;
}
}  // namespace

std::pair<std::string, std::string> split_dotted(const std::string& dotted) {
  const std::vector<std::string> parts = dotted_parts(dotted);
  return {joined_parts(parts, parts.size() - 1), parts.back()};
}

namespace {
std::string toml_string_literal(const std::string& s);  // TOML conversion, below
bool bare_key_ok(const std::string& k) {
  return !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}
}  // namespace

UsageError with_origin(const Config& cfg, const std::string& dotted, const UsageError& e) {
  const Origin& from = cfg.origin(dotted);
  if (from.kind == Origin::Default || from.kind == Origin::Program) return e;
  return UsageError(from.describe() + ": " + e.what());
}

std::string dotted_name(const std::string& section, const std::string& key) {
  const std::string k = bare_key_ok(key) ? key : toml_string_literal(key);
  return section.empty() ? k : section + "." + k;
}

// ---------------------------------------------------------------- Origin

namespace {
// The length of the UTF-8 sequence at s[i], 0 when the bytes there are not UTF-8.
size_t utf8_length(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1fu) : n == 3 ? (c & 0x0fu) : (c & 0x07u);
  for (size_t k = 1; k < n; ++k) {
    const unsigned char d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3fu);
  }
  // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not UTF-8 (TOML rejects them).
  static const uint32_t min_for_length[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_for_length[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0, n = 0; i < s.size(); i += n)
    if ((n = utf8_length(s, i)) == 0) return false;
  return true;
}
}  // namespace

std::string printable_text(const std::string& s) {
  std::string out;
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    n = utf8_length(s, i);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (n == 0 || (c < 0x20 && c != '\t') || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
      n = 1;
    } else {
      out.append(s, i, n);
    }
  }
  return out;
}

std::string Origin::describe() const {
  switch (kind) {
    case Default: return "default";
    case File: return printable_text(where);
    case Env: return "env " + printable_text(where);
    case Set: return "--set" + (where.empty() ? std::string() : " " + printable_text(where));
    case Program: return where.empty() ? "tool" : printable_text(where);
  }
  return "";
}

// ---------------------------------------------------------------- value checking

std::pair<int64_t, int64_t> parse_step_range(const std::string& text) {
  auto colon = text.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    // Digits only: stoll would also take leading blanks and a sign (" 5:7" was kept, and printed, as written).
    if (text.find_first_not_of("0123456789:") != std::string::npos) throw std::invalid_argument("not digits");
    size_t p1 = 0, p2 = 0;
    int64_t a = std::stoll(text.substr(0, colon), &p1);
    int64_t b = std::stoll(text.substr(colon + 1), &p2);
    if (p1 != colon || p2 != text.size() - colon - 1 || a < 1 || b <= a) throw std::invalid_argument("range");
    return {a, b};
  } catch (const std::exception&) {
    throw UsageError("\"" + text +
                     "\" is not a range of steps: expected a:b with 1 <= a < b (steps a..b-1, numbered from 1 as in "
                     "metrics.jsonl)");
  }
}

uint64_t parse_byte_count(const std::string& text, const std::string& what) {
  auto refuse = [&](const std::string& why) -> UsageError {
    return UsageError((what.empty() ? std::string() : what + ": ") + "'" + text + "' " + why);
  };
  std::string t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  // A unit: B, or K, M, G, T (binary, as nccl-tests reads them) with an optional B or iB after it (64M, 64MB and
  // 64MiB alike; 64MB was refused although a trailing B was meant to be allowed).
  auto upper_back = [&] {
    return t.empty() ? '\0' : static_cast<char>(std::toupper(static_cast<unsigned char>(t.back())));
  };
  const bool had_b = upper_back() == 'B';
  if (had_b) t.pop_back();
  if (had_b && t.size() >= 2 && t.back() == 'i' && std::strchr("KMGTkmgt", t[t.size() - 2])) t.pop_back();
  uint64_t mult = 1;
  const char s = upper_back();
  if (s == 'K') mult = 1ull << 10;
  else if (s == 'M') mult = 1ull << 20;
  else if (s == 'G') mult = 1ull << 30;
  else if (s == 'T') mult = 1ull << 40;
  if (mult != 1) t.pop_back();
  // A decimal number as nccl-tests' parsesize takes it (`-b 1.5K` = 1536; a fraction of a byte is dropped, as
  // its size_t cast drops it); digits with at most one point.
  const size_t point = t.find('.');
  const bool digits_only =
      std::all_of(t.begin(), t.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
  if (t.empty() || t == "." || !digits_only ||
      (point != std::string::npos && t.find('.', point + 1) != std::string::npos)) {
    throw refuse("is not a size (bytes, optionally with a K, M, G or T suffix, binary: 1.5K = 1536, 64MB = 64MiB)");
  }
  if (point != std::string::npos) {
    const double v = std::stod(t) * static_cast<double>(mult);
    if (!(v < 9.2e18)) throw refuse("is too large");
    return static_cast<uint64_t>(v);
  }
  // Digits past uint64 make stoull throw std::out_of_range, which would end the run as "stoull", exit 1.
  uint64_t v = UINT64_MAX;
  try {
    v = std::stoull(t);
  } catch (const std::out_of_range&) {
  }
  if (v > (UINT64_MAX >> 1) / mult) throw refuse("is too large");
  return v * mult;
}

namespace {

// The integer a whole number written in float or exponent notation stands for (TOML and --set read 1e10 and 2.0 as
// floats): std::nullopt, with `why`, for a value outside int64 or one past 2^53 that the float does not hold exactly.
std::optional<int64_t> whole_number_to_int(double x, std::string& why) {
  // [-2^63, 2^63): both bounds are exact doubles, INT64_MAX is not.
  constexpr double kTwo63 = 9223372036854775808.0;
  if (x < -kTwo63 || x >= kTwo63) {
    why = "is outside the 64-bit integer range [-9223372036854775808, 9223372036854775807]";
    return std::nullopt;
  }
  const auto n = static_cast<int64_t>(x);
  // Up to 2^53 a double holds every integer, so the decimal that was written is n. Past it a double is always whole,
  // whatever was written, and cannot tell which integer was meant: 1.0000000000000001e18 reads as
  // 1000000000000000128, 9007199254740993.0 as 2^53, 10000000000000001.0 as 1e16 (whose shortest form looks exact).
  // So from 2^53 on only an integer literal, which is read exactly, is taken.
  if (std::fabs(x) >= 9007199254740992.0) {
    why = "is past 2^53, where a float cannot say which integer was meant (this one reads as " + std::to_string(n) +
          "): write the integer without exponent or fraction";
    return std::nullopt;
  }
  return n;
}

// TOML conversion, defined below.
std::string toml_value(const json& v);
std::string toml_string_literal(const std::string& s);
std::string toml_key(const std::string& k);
json toml_to_json(const toml::node& node);

// Shortened TOML text of a value for messages: nan stays nan (JSON would print null).
std::string short_json(const json& v) {
  std::string s = v.is_null() ? std::string("null") : toml_value(v);
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
// A whole number written in float or exponent notation (TOML reads 1e10 and 2.0 as floats): an integer key takes it,
// converted by whole_number_to_int once its range is checked.
bool is_whole_float(const json& v) {
  if (!v.is_number_float()) return false;
  const double x = v.get<double>();
  return std::isfinite(x) && std::floor(x) == x;
}
bool is_int_like(const json& v) { return is_int(v) || is_whole_float(v); }
bool is_num(const json& v) { return v.is_number(); }
bool is_str(const json& v) { return v.is_string(); }

// "key = value" as the user would write it where the value came from: a --set argument, an env
// variable or a line of a file (for quoting hints).
std::string assignment_example(const Origin& origin, const std::string& dotted, const std::string& key,
                               const std::string& value) {
  switch (origin.kind) {
    case Origin::Env: return origin.where + "='" + value + "'";
    case Origin::File: return toml_key(key) + " = " + value;
    default: return "--set '" + dotted + "=" + value + "'";
  }
}

// The text the user typed for a value, where it is known (--set, env), else its TOML form.
std::string typed_text(const Origin& origin, const json& v) {
  if (origin.kind == Origin::Set) {
    if (auto eq = origin.where.find('='); eq != std::string::npos) return origin.where.substr(eq + 1);
  }
  if (origin.kind == Origin::Env) {
    if (const char* e = std::getenv(origin.where.c_str())) return e;
  }
  return toml_value(v);
}

bool expects_number(KeyType t) {
  return t == KeyType::Int || t == KeyType::Float || t == KeyType::IntList || t == KeyType::FloatList ||
         t == KeyType::IntOrIntList;
}
bool expects_integer(KeyType t) { return t == KeyType::Int || t == KeyType::IntList || t == KeyType::IntOrIntList; }
bool expects_string(KeyType t) {
  return t == KeyType::String || t == KeyType::StringList || t == KeyType::StringOrStringList;
}

// Why a string was given where a number (or boolean) belongs and the other way round: TOML's quotes
// decide, and --set/env read a word that is not a TOML value as a string. "" when no hint applies.
std::string quoting_hint(const KeySpec& spec, const std::string& dotted, const std::string& key, const json& v,
                         const Origin& origin) {
  if (origin.kind == Origin::Program) return "";  // a tool flag: CLI11 typed it
  if ((expects_number(spec.type) || spec.type == KeyType::Bool) && v.is_string()) {
    json unquoted;
    try {
      toml::table t = toml::parse("v = " + v.get<std::string>());
      if (t.size() == 1 && t.get("v")) unquoted = toml_to_json(*t.get("v"));
    } catch (const toml::parse_error&) {
    }
    const bool number = unquoted.is_number() && expects_number(spec.type);
    const bool boolean = unquoted.is_boolean() && spec.type == KeyType::Bool;
    if (number || boolean)
      return " (write " + std::string(number ? "a number" : "true or false") +
             " without quotes: " + assignment_example(origin, dotted, key, toml_value(unquoted)) + ")";
    if (spec.type == KeyType::Bool)
      return " (write true or false without quotes, e.g. " + assignment_example(origin, dotted, key, "true") + ")";
    json example = spec.default_value.is_number() ? spec.default_value : json(spec.min ? *spec.min : 1);
    if (spec.type == KeyType::Int || spec.type == KeyType::IntOrIntList || spec.type == KeyType::IntList)
      example = example.is_number_integer() ? example : json(static_cast<int64_t>(example.get<double>()));
    return " (write a number without quotes, e.g. " + assignment_example(origin, dotted, key, toml_value(example)) +
           (origin.kind == Origin::File ? std::string()
                                        : "; a value that is not a TOML number, boolean or list is read as a string") +
           ")";
  }
  if (expects_string(spec.type) && (v.is_number() || v.is_boolean())) {
    return " (to give it as a string, quote it: " +
           assignment_example(origin, dotted, key, toml_string_literal(typed_text(origin, v))) + ")";
  }
  if (expects_string(spec.type) && v.is_array()) {
    json quoted = json::array();
    for (const auto& e : v) quoted.push_back(e.is_string() ? e.get<std::string>() : toml_value(e));
    return " (quote each element: " + assignment_example(origin, dotted, key, toml_value(quoted)) + ")";
  }
  return "";
}

// "" if `k` may be a key of a table value of `spec`, else why not, with the closest allowed key.
std::string unknown_table_key(const KeySpec& spec, const std::string& k) {
  if (spec.table_keys.empty() || std::find(spec.table_keys.begin(), spec.table_keys.end(), k) != spec.table_keys.end())
    return "";
  std::string list;
  for (const auto& c : spec.table_keys) list += (list.empty() ? "" : ", ") + c;
  const std::string best = closest_match(k, spec.table_keys);
  return "unknown key '" + k + "'" + (best.empty() ? " (known keys: " + list + ")" : " (did you mean '" + best + "'?)");
}

// Checks `v` against `spec`; returns the value coerced to its canonical type, or throws UsageError
// prefixed with `where` (a file position, env var or --set).
json check_value(const KeySpec& spec, const std::string& key, const json& v, const Origin& origin,
                 const std::string& where) {
  std::string name = dotted_name(spec.section, key);
  auto fail = [&](const std::string& what) -> json { throw UsageError(where + ": " + name + ": " + what); };
  bool ok = false;
  json out = v;
  switch (spec.type) {
    case KeyType::Bool: ok = v.is_boolean(); break;
    case KeyType::Int: ok = is_int_like(v); break;
    case KeyType::Float:
      ok = is_num(v);
      if (ok) out = v.get<double>();
      break;
    case KeyType::String:
      ok = v.is_string();
      if (spec.byte_count && v.is_number_float())
        fail("value " + short_json(v) +
             " is not a byte count: write whole bytes (1048576) or a size with a suffix in "
             "quotes (\"1.5M\")");
      if (spec.byte_count && v.is_number_integer()) {
        if (v.get<int64_t>() < 0)
          fail("value " + short_json(v) + " is not a byte count (a size such as 1048576 or \"1M\")");
        out = std::to_string(v.get<int64_t>());
        ok = true;
      }
      // Text that is not a size fails where it was set, in every tool (cairn-sweep alone refused it, at run time)
      if (spec.byte_count && out.is_string()) {
        try {
          (void)parse_byte_count(out.get<std::string>(), "");
        } catch (const UsageError& e) {
          fail(e.what());
        }
      }
      if (spec.step_range && out.is_string() && !out.get<std::string>().empty()) {
        try {
          (void)parse_step_range(out.get<std::string>());
        } catch (const UsageError& e) {
          fail(e.what());
        }
      }
      break;
    case KeyType::StringList: ok = all_of_array(v, is_str); break;
    case KeyType::IntList: ok = all_of_array(v, is_int_like); break;
    case KeyType::FloatList:
      ok = all_of_array(v, is_num);
      if (ok) {
        out = json::array();
        for (const auto& e : v) out.push_back(e.get<double>());
      }
      break;
    case KeyType::IntOrIntList: ok = is_int_like(v) || all_of_array(v, is_int_like); break;
    case KeyType::StringOrStringList: ok = v.is_string() || all_of_array(v, is_str); break;
    case KeyType::Table: ok = v.is_object(); break;
  }
  if (!ok)
    fail(std::string("expected ") + key_type_name(spec.type) + ", got " + value_kind(v) + " " + short_json(v) +
         quoting_hint(spec, name, key, v, origin));
  // Text from the command line or the environment may be any bytes; a config is UTF-8 (as TOML is),
  // so --print-config can write it back.
  auto check_text = [&](const json& s) {
    if (!valid_utf8(s.get<std::string>())) fail("value " + short_json(s) + " is not valid UTF-8");
  };
  if (out.is_string()) check_text(out);
  if (out.is_array())
    for (const auto& e : out)
      if (e.is_string()) check_text(e);
  if (spec.non_empty && out.is_array() && out.empty()) fail("the list is empty: give at least one value");
  if (spec.type == KeyType::Table)
    for (auto it = out.begin(); it != out.end(); ++it)
      if (std::string why = unknown_table_key(spec, it.key()); !why.empty()) fail(why);

  auto check_number = [&](const json& n) {
    double x = n.get<double>();
    if (!std::isfinite(x)) fail("value " + short_json(n) + " is not finite");
    // Bounds as the key's values are written: "minimum 1", not "1.0".
    auto bound = [](double b) {
      return std::floor(b) == b && std::abs(b) < 1e15 ? std::to_string(static_cast<int64_t>(b)) : toml_value(b);
    };
    if (spec.min && x < *spec.min) fail("value " + short_json(n) + " is below the minimum " + bound(*spec.min));
    if (spec.max && x > *spec.max) fail("value " + short_json(n) + " is above the maximum " + bound(*spec.max));
  };
  auto check_choice = [&](const json& s) {
    if (spec.choices.empty()) return;
    std::string str = s.get<std::string>();
    if (std::find(spec.choices.begin(), spec.choices.end(), str) != spec.choices.end()) return;
    std::string list;
    for (const auto& c : spec.choices) list += (list.empty() ? "" : ", ") + c;
    const std::string best = closest_match(str, spec.choices);
    fail("\"" + str + "\" is not one of " + list + (best.empty() ? "" : " (did you mean \"" + best + "\"?)"));
  };
  if (out.is_number()) check_number(out);
  if (out.is_array())
    for (const auto& e : out) {
      if (e.is_number()) check_number(e);
      if (e.is_string()) check_choice(e);
    }
  if (out.is_string()) check_choice(out);
  // Integer keys store integers: a whole float (1e10, 2.0) becomes the integer it is, once it passed the key's range.
  if (expects_integer(spec.type)) {
    auto to_int = [&](json& n) {
      if (!is_whole_float(n)) return;
      std::string why;
      const std::optional<int64_t> i = whole_number_to_int(n.get<double>(), why);
      if (!i) fail("value " + short_json(n) + " " + why);
      n = *i;
    };
    to_int(out);
    if (out.is_array())
      for (auto& e : out) to_int(e);
  }
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

// How a config read from stdin (`--config -`) is named in messages and origins.
constexpr const char* kStdinName = "<stdin>";

// The name a config source has in messages: the path, or <stdin> for "-".
std::string source_name(const std::string& path, bool allow_stream) {
  return allow_stream && path == "-" ? kStdinName : path;
}

// Reads and parses a config. The text is read once, whole, before parsing: stdin ("-") and pipes
// (`--config <(...)`) cannot be read twice or sought, so nothing here may reopen or seek them.
toml::table parse_toml_file(const std::string& given, bool allow_stream = true) {
  const std::string shown = source_name(given, allow_stream);
  // A file named "-" where streams are not read (read_file would take "-" for stdin).
  const std::string path = !allow_stream && given == "-" ? "./-" : given;
  if (shown == given) {
    if (std::string why = config_file_problem(path, allow_stream); !why.empty())
      throw UsageError("cannot open config \"" + path + "\": " + why);
  }
  std::string text;
  try {
    text = read_file(path);
  } catch (const Error& e) {
    throw UsageError(shown == given ? std::string(e.what())
                                    : "cannot read config from stdin: " + std::string(e.what()));
  }
  try {
    return toml::parse(text, shown);
  } catch (const toml::parse_error& e) {
    throw UsageError(position(shown, e.source()) + ": invalid TOML: " + std::string(e.description()));
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
        // TOML's basic strings hold no control characters but tab: U+0000-U+001F and DEL are escaped.
        if (c < 0x20 || c == 0x7f) {
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
    // %g writes a whole number whose last digits are zeros in exponent form (90 as 9e+01): below a billion fixed
    // notation reads better (above it, 1e+13 does).
    if (std::strchr(buf, 'e') != nullptr && d == std::trunc(d) && std::fabs(d) < 1e9)
      std::snprintf(buf, sizeof buf, "%.1f", d);
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

// parse_config_value() whose errors name where the text came from (`--set a.b=...`, `env CAIRN_A_B`).
json parse_value_at(const std::string& text, const std::string& where) {
  try {
    return parse_config_value(text);
  } catch (const UsageError& e) {
    throw UsageError(where + ": " + e.what());
  }
}

std::string env_section_name(const std::string& section) {
  std::string s = section;
  std::replace(s.begin(), s.end(), '.', '_');
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

}  // namespace

std::string config_value_text(const json& v) { return short_json(v); }

std::string toml_value_text(const json& v) { return toml_value(v); }

json parse_config_value(const std::string& text) {
  toml::table t;
  try {
    t = toml::parse("v = " + text);
  } catch (const toml::parse_error& e) {
    // Quoted, it was meant as a TOML string or array: a broken one (an unterminated quote, a control character a script
    // did not escape) is an error, not a string that keeps its quotes (which became a directory named "\"/tmp/x").
    const size_t first = text.find_first_not_of(" \t");
    if (first != std::string::npos && (text[first] == '"' || text[first] == '\'' || text[first] == '['))
      throw UsageError("value " + short_json(json(text)) + " is not valid TOML (" + std::string(e.description()) +
                       "); a string with a quote, backslash or control character must be escaped as TOML escapes it");
    return text;  // not a TOML value (a bare word, a path): the text itself
  }
  // "1\nx = 2" parses as two keys: the rest would be dropped silently.
  if (t.size() != 1 || !t.get("v"))
    throw UsageError("value " + short_json(json(text)) +
                     " is more than one TOML value (a newline ends a value); quote it to give one string");
  return toml_to_json(*t.get("v"));
}

// ---------------------------------------------------------------- Config

Config::Config(const Schema& schema) : schema_(&schema) {
  for (const auto& k : schema.keys()) {
    if (k.key == "*") continue;
    values_[k.section + "." + k.key] = Entry{k.default_value, Origin{}, k.section, k.key};
  }
}

namespace {
// The map key of a dotted name: quoted parts as dotted_name writes them (eval.task."wiki.test").
std::string canonical_dotted(const std::string& dotted) {
  if (dotted.find_first_of("\"'") == std::string::npos) return dotted;
  auto [section, key] = split_dotted(dotted);
  return dotted_name(section, key);
}
}  // namespace

const json& Config::get(const std::string& given) const {
  const std::string dotted = canonical_dotted(given);
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
  auto it = values_.find(canonical_dotted(dotted));
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
  for (const auto& [k, e] : values_)
    if (e.section == section) out[e.key] = e.value;
  return out;
}

const Origin& Config::origin(const std::string& dotted) const {
  static const Origin none;
  auto it = values_.find(canonical_dotted(dotted));
  return it == values_.end() ? none : it->second.origin;
}

void Config::set(const std::string& dotted, const json& value, Origin origin) {
  std::pair<std::string, std::string> parts;
  try {
    parts = split_dotted(dotted);
  } catch (const UsageError& e) {
    throw UsageError((origin.kind == Origin::Default ? "default" : origin.describe()) + ": " + e.what());
  }
  set(parts.first, parts.second, value, std::move(origin));
}

void Config::set(const std::string& section, const std::string& key, const json& value, Origin origin) {
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
  json checked = check_value(*spec, key, value, origin, where);
  values_[dotted_name(section, key)] = Entry{std::move(checked), std::move(origin), section, key};
}

void Config::set_from_text(const std::string& assignment, Origin origin) {
  // The first '=' outside a quoted key part ends the key (eval.task."a=b"={...}).
  size_t eq = std::string::npos;
  char quote = 0;
  for (size_t i = 0; i < assignment.size() && eq == std::string::npos; ++i) {
    const char c = assignment[i];
    if (quote) {
      if (c == '\\' && quote == '"') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '=') {
      eq = i;
    }
  }
  if (eq == std::string::npos && quote)
    throw UsageError("--set " + printable_text(assignment) + ": unterminated " + quote +
                     " in the key (quote a key part as in TOML: eval.task.\"a.b\"=...)");
  if (eq == std::string::npos || eq == 0) {
    throw UsageError("--set expects section.key=value, got " + short_json(json(assignment)));
  }
  std::string dotted = assignment.substr(0, eq);
  // Spaces around the dots are allowed as in TOML; quoted parts keep theirs (split_dotted parses them).
  if (dotted.find_first_of("\"'") == std::string::npos)
    dotted.erase(std::remove_if(dotted.begin(), dotted.end(), [](unsigned char c) { return std::isspace(c); }),
                 dotted.end());
  std::string text = assignment.substr(eq + 1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.erase(text.begin());
  if (origin.where.empty()) origin.where = assignment;
  const std::string where = origin.describe();
  std::vector<std::string> parts;
  try {
    parts = dotted_parts(dotted);
  } catch (const UsageError& e) {
    throw UsageError(where + ": " + e.what());
  }
  const std::string section = joined_parts(parts, parts.size() - 1);
  if (section.empty()) {
    throw UsageError("--set expects section.key=value, got " + short_json(json(assignment)) + " (no section)");
  }
  if (!schema_->has_section(section) && set_inside_table(parts, text, origin)) return;
  set(section, parts.back(), parse_value_at(text, where), std::move(origin));
}

bool Config::set_inside_table(const std::vector<std::string>& parts, const std::string& text, const Origin& origin) {
  // eval.task.mc.limit=5 is one key of the table value [eval.task.mc] (which a config file may define): the key is
  // merged into that table, the rest of it kept. It was "unknown section [eval.task.mc]", so changing one setting of
  // a task meant restating the whole table.
  for (size_t n = parts.size() - 2; n >= 1; --n) {
    const std::string section = joined_parts(parts, n);
    if (!schema_->has_section(section)) continue;
    const KeySpec* spec = schema_->find(section, parts[n]);
    if (!spec || spec->type != KeyType::Table) return false;
    const std::string where = origin.describe();
    const std::string table_name = dotted_name(section, parts[n]);
    if (parts.size() != n + 2)
      throw UsageError(where + ": " + table_name + " holds single values: set " + table_name + "." +
                       toml_key(parts[n + 1]) + " itself");
    if (std::string why = unknown_table_key(*spec, parts[n + 1]); !why.empty())
      throw UsageError(where + ": " + table_name + ": " + why);
    auto it = values_.find(table_name);
    json table = it != values_.end() && it->second.value.is_object() ? it->second.value : json::object();
    table[parts[n + 1]] = parse_value_at(text, where);
    set(section, parts[n], table, origin);
    return true;
  }
  return false;
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
        for (const auto& [name, e] : values_) {
          if (e.section != section) continue;
          rows.emplace_back(e.key, &e);
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
        if (!specs[i]->doc.empty() && specs[i]->key != "*") line += " | " + printable_text(specs[i]->doc);
      }
      os << line << "\n";
    }
    os << "\n";
  }
  return os.str();
}

template <class F>
json Config::nested(F value_of) const {
  json out = json::object();
  for (const auto& [name, e] : values_) {
    if (e.value.is_null()) continue;
    json* node = &out;
    std::stringstream ss(e.section);
    std::string part;
    while (std::getline(ss, part, '.')) node = &(*node)[part];
    (*node)[e.key] = value_of(e);
  }
  return out;
}

json Config::to_json() const {
  return nested([](const Entry& e) { return e.value; });
}

json Config::origins_json() const {
  return nested([](const Entry& e) { return json(e.origin.describe()); });
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
    json value = toml_to_json(v);
    // A misspelled key inside a table value ([eval.task.x] pth = ...) is named at its own line.
    if (const KeySpec* spec = schema.find(section, key); spec && spec->type == KeyType::Table && v.is_table()) {
      for (auto&& [ik, iv] : *v.as_table())
        if (std::string why = unknown_table_key(*spec, std::string(ik.str())); !why.empty())
          throw UsageError(position(file, ik.source()) + ": " + dotted_name(section, key) + ": " + why);
      // A table written as a section ([eval.task.mc] limit = 50, in a file that includes the task's definition or in
      // a later --config) sets the keys it names and keeps the others, as sections merge and as --set
      // eval.task.mc.limit=50 does; an inline table (mc = { ... }) is the whole value, as with --set. The section
      // form replaced the table, so the included task lost its kind and path.
      if (!v.as_table()->is_inline()) {
        const json current = cfg.section(section);
        if (auto it = current.find(key); it != current.end() && it->is_object()) {
          json merged = *it;
          merged.update(value);
          value = std::move(merged);
        }
      }
    }
    cfg.set(section, key, value, Origin{Origin::File, where});
  }
}

void apply_file(Config& cfg, const Schema& schema, const std::string& path, std::vector<std::string>& stack,
                std::vector<std::string>& files_read, bool included = false) {
  const std::string shown = source_name(path, !included);  // <stdin> for `--config -`
  std::error_code ec;
  std::string canon = shown != path ? shown : fs::weakly_canonical(path, ec).string();
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
        throw UsageError(position(shown, n.source()) + ": include: expected a string or a list of strings");
      }
      includes.emplace_back(n.as_string()->get(), position(shown, n.source()));
    };
    if (auto arr = inc->as_array()) {
      for (auto& e : *arr) add(e);
    } else {
      add(*inc);
    }
    // Relative to the including file where it really is: a symlink to a shared experiment file (ln -s
    // /shared/exp/a.toml .) reads the includes its author wrote beside it, not files of the same name beside the
    // link (which failed, or silently read other files). A config read from stdin or a pipe (/dev/fd/63) has no
    // directory of its own, so its includes are relative to the current directory.
    const bool stream = shown != path || !fs::is_regular_file(path, ec);
    fs::path base = stream ? fs::path() : fs::path(canon).parent_path();
    for (const auto& [rel, where] : includes) {
      if (rel.empty()) throw UsageError(where + ": cannot include \"\": empty file name");
      fs::path p = fs::path(rel).is_absolute() ? fs::path(rel) : base / rel;
      if (std::string why = config_file_problem(p.string()); !why.empty())
        throw UsageError(where + ": cannot include \"" + p.string() + "\": " + why);
      apply_file(cfg, schema, p.string(), stack, files_read, true);
    }
  }
  apply_table(cfg, schema, table, "", shown);
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
    // The section is matched in any case, as the key is: CAIRN_train_lr would otherwise be dropped without a word.
    std::string rest = name.substr(6);
    std::transform(rest.begin(), rest.end(), rest.begin(), [](unsigned char c) { return std::toupper(c); });
    // A longer section's prefix matches too (CAIRN_REPORT_GATES_X is [report.gates], not [report]'s key gates_x).
    auto longer_section_matches = [&](const std::string& section) {
      return std::any_of(sections.begin(), sections.end(), [&](const std::string& s2) {
        return s2.size() > section.size() && rest.rfind(env_section_name(s2) + "_", 0) == 0;
      });
    };
    for (const auto& section : sections) {
      std::string prefix = env_section_name(section) + "_";
      if (rest.rfind(prefix, 0) != 0) continue;
      std::string key = rest.substr(prefix.size());
      std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
      if (key.empty()) {
        if (longer_section_matches(section)) continue;
        throw UsageError("env " + name + ": no key after [" + section + "]'s prefix (CAIRN_" +
                         env_section_name(section) + "_<KEY>)");
      }
      // Variables naming no declared key (e.g. CAIRN_SOURCE_DIR used by scripts) are not config.
      if (!schema.find(section, key)) {
        if (!longer_section_matches(section)) {
          // CAIRN_REPORT_GATES=...: a table of its own, set a key at a time.
          if (std::find(sections.begin(), sections.end(), section + "." + key) != sections.end())
            throw UsageError("env " + name + ": [" + section + "." + key +
                             "] is a table; set one of its keys as CAIRN_" + env_section_name(section + "." + key) +
                             "_<KEY>");
          std::string hint = schema.suggest(section, key);
          throw UsageError("env " + name + ": unknown key '" + key + "' in [" + section + "]" +
                           (hint.empty() ? ""
                                         : " (did you mean CAIRN_" + env_section_name(split_dotted(hint).first) + "_" +
                                               env_section_name(split_dotted(hint).second) + "?)"));
        }
        continue;
      }
      // An empty variable (`export CAIRN_RUN_DIR=$UNSET_VAR`) still sets the key, but not without a word: an empty run
      // directory is the current one.
      if (text.empty())
        CAIRN_LOG_WARN("env %s is set but empty: [%s] %s = \"\"", name.c_str(), section.c_str(), key.c_str());
      cfg.set(section, key, parse_value_at(text, "env " + name), Origin{Origin::Env, name});
      break;
    }
  }
}

}  // namespace

Config load_config(const ConfigSources& sources, const Schema& schema) {
  Config cfg(schema);
  std::vector<std::string> stack;
  if (std::count(sources.files.begin(), sources.files.end(), "-") > 1)
    throw UsageError("--config - (stdin) given more than once: stdin can be read only once");
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
