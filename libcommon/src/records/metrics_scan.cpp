// The fast path of metrics.jsonl (records.h, scan_metrics_line): one pass over a line's text, JSON's grammar checked
// exactly, the members of MetricsLine filled from field tables generated from the same lists as to_json/from_json.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cairn/records.h"

namespace cairn::records {
namespace {

// A scalar as the scanner saw it; objects, arrays, strings and null are Other (the member reads as absent).
struct Scalar {
  enum Type { Other, Number, Bool } type = Other;
  double number = 0;
  bool boolean = false;
};

void assign(std::optional<double>& out, const Scalar& s) {
  if (s.type == Scalar::Number) out = s.number;
}
void assign(std::optional<int64_t>& out, const Scalar& s) {
  // Exact integers only (2^63 itself is out of range).
  if (s.type == Scalar::Number && s.number >= 0 && s.number < 9223372036854775808.0 && std::floor(s.number) == s.number)
    out = static_cast<int64_t>(s.number);
}
void assign(std::optional<bool>& out, const Scalar& s) {
  // Hand-made and older files write a flag as 0/1 (tests/report/make_runs.py): read as false/true.
  if (s.type == Scalar::Bool) out = s.boolean;
  else if (s.type == Scalar::Number && (s.number == 0 || s.number == 1)) out = s.number == 1;
}

// key -> member, generated from CAIRN_METRICS_LINE_FIELDS and CAIRN_STEP_TIME_FIELDS.
struct LineField {
  std::string_view key;
  void (*set)(MetricsLine&, const Scalar&);
};
constexpr LineField kLineFields[] = {
#define CAIRN_RECORDS_SCAN_FIELD(type, name) {#name, [](MetricsLine& m, const Scalar& s) { assign(m.name, s); }},
    CAIRN_METRICS_LINE_FIELDS(CAIRN_RECORDS_SCAN_FIELD)
#undef CAIRN_RECORDS_SCAN_FIELD
};
struct TimeField {
  std::string_view key;
  double StepTimes::*member;
};
constexpr TimeField kTimeFields[] = {
#define CAIRN_RECORDS_SCAN_TIME(name) {#name, &StepTimes::name},
    CAIRN_STEP_TIME_FIELDS(CAIRN_RECORDS_SCAN_TIME)
#undef CAIRN_RECORDS_SCAN_TIME
};

template <class Table, size_t N>
const Table* find_field(const Table (&table)[N], std::string_view key) {
  for (const Table& f : table)
    if (f.key.size() == key.size() && std::memcmp(f.key.data(), key.data(), key.size()) == 0) return &f;
  return nullptr;
}

class Scanner {
 public:
  Scanner(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

  ScanResult line(MetricsLine& out) {
    ws();
    if (p_ < end_ && *p_ == '{') {
      if (!object(&out, nullptr, nullptr)) return ScanResult::Invalid;
    } else if (!value(nullptr)) {
      return ScanResult::Invalid;
    } else {
      ws();
      return p_ == end_ ? ScanResult::NotObject : ScanResult::Invalid;
    }
    ws();
    return p_ == end_ ? ScanResult::Ok : ScanResult::Invalid;
  }

 private:
  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool word(const char* w, size_t n) {
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, w, n) != 0) return false;
    p_ += n;
    return true;
  }
  static bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  void digits() {
    while (p_ < end_ && is_digit(*p_)) ++p_;
  }

  // One UTF-8 sequence at p_ (its lead byte >= 0x80), left with p_ on its last byte. Overlong forms, surrogates and
  // code points past U+10FFFF are invalid (RFC 3629), as nlohmann::json has them: a line the full parser would refuse
  // must not be read here.
  bool utf8_sequence() {
    const unsigned char lead = static_cast<unsigned char>(*p_);
    int more = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the first continuation byte's range
    if (lead >= 0xC2 && lead <= 0xDF) more = 1;
    else if (lead == 0xE0) more = 2, lo = 0xA0;
    else if (lead == 0xED) more = 2, hi = 0x9F;
    else if (lead >= 0xE1 && lead <= 0xEF) more = 2;
    else if (lead == 0xF0) more = 3, lo = 0x90;
    else if (lead == 0xF4) more = 3, hi = 0x8F;
    else if (lead >= 0xF1 && lead <= 0xF3) more = 3;
    else return false;
    if (end_ - p_ <= more) return false;
    for (int k = 1; k <= more; ++k) {
      const unsigned char b = static_cast<unsigned char>(p_[k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    p_ += more;
    return true;
  }

  // A string: its raw text between the quotes, and whether it holds escapes.
  bool string(std::string_view* raw, bool* escaped) {
    const char* start = ++p_;  // past '"'
    bool esc = false;
    for (; p_ < end_; ++p_) {
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        if (raw) *raw = std::string_view(start, static_cast<size_t>(p_ - start));
        if (escaped) *escaped = esc;
        ++p_;
        return true;
      }
      if (c < 0x20) return false;
      if (c >= 0x80) {
        if (!utf8_sequence()) return false;
        continue;
      }
      if (c != '\\') continue;
      esc = true;
      if (++p_ >= end_) return false;
      if (*p_ == 'u') {
        if (end_ - p_ < 5 || !is_hex(p_[1]) || !is_hex(p_[2]) || !is_hex(p_[3]) || !is_hex(p_[4])) return false;
        p_ += 4;
      } else if (*p_ == '\0' || !std::strchr("\"\\/bfnrt", *p_)) {
        return false;
      }
    }
    return false;
  }

  // A number in JSON's grammar. A value beyond a double is invalid, as nlohmann::json has it.
  bool number(double* v) {
    const char* s = p_;
    if (p_ < end_ && *p_ == '-') ++p_;
    if (p_ >= end_) return false;
    if (*p_ == '0') ++p_;
    else if (is_digit(*p_)) digits();
    else return false;
    if (p_ < end_ && *p_ == '.') {
      if (++p_ >= end_ || !is_digit(*p_)) return false;
      digits();
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      if (++p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ >= end_ || !is_digit(*p_)) return false;
      digits();
    }
    auto r = std::from_chars(s, p_, *v);
    if (r.ec == std::errc::result_out_of_range) {  // overflow is invalid; underflow reads as the nearest double
      const double d = std::strtod(std::string(s, p_).c_str(), nullptr);
      if (std::isinf(d)) return false;
      *v = d;
      return true;
    }
    return r.ec == std::errc();
  }

  // An array; with `stages` given (a train line's "stages"), its object elements are read into it.
  bool array(std::vector<StageTimes>* stages = nullptr) {
    if (++depth_ > kMaxDepth) return false;
    ++p_;  // '['
    ws();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
      --depth_;
      return true;
    }
    while (true) {
      ws();
      if (stages && p_ < end_ && *p_ == '{') {
        StageTimes& st = stages->emplace_back();
#define CAIRN_RECORDS_STAGE_NAN(name) st.time.name = std::nan("");
        CAIRN_STEP_TIME_FIELDS(CAIRN_RECORDS_STAGE_NAN)
#undef CAIRN_RECORDS_STAGE_NAN
        if (!object(nullptr, nullptr, &st)) return false;
      } else if (!value(nullptr)) {
        return false;
      }
      ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == ']') break;
      return false;
    }
    ++p_;
    --depth_;
    return true;
  }

  // Any value; a number or a bool is described in *out when out is given.
  bool value(Scalar* out) {
    if (p_ >= end_) return false;
    switch (*p_) {
      case '"': return string(nullptr, nullptr);
      case '{': return object(nullptr, nullptr, nullptr);
      case '[': return array();
      case 't':
        if (out) *out = {Scalar::Bool, 0, true};
        return word("true", 4);
      case 'f':
        if (out) *out = {Scalar::Bool, 0, false};
        return word("false", 5);
      case 'n': return word("null", 4);
      default: {
        double v = 0;
        if (!number(&v)) return false;
        if (out) *out = {Scalar::Number, v, false};
        return true;
      }
    }
  }

  // One member's value: into the line (top level, `line` given), a time_s (`times` given) or an entry of the line's
  // stages (`stage` given), else skipped.
  bool member(std::string_view key, MetricsLine* line, StepTimes* times, StageTimes* stage) {
    if (line && key == "kind" && p_ < end_ && *p_ == '"') return kind(*line);
    if (line && key == "stages" && p_ < end_ && *p_ == '[') {
      line->stages.clear();
      return array(&line->stages);
    }
    if (stage) {
      if (key == "time_s" && p_ < end_ && *p_ == '{') return object(nullptr, &stage->time, nullptr);
      Scalar s;
      if (!value(&s)) return false;
      std::optional<int64_t> n;
      assign(n, s);
      if (n && key == "stage") stage->stage = *n;
      if (n && key == "rank") stage->rank = *n;
      return true;
    }
    if (line && key == "time_s" && p_ < end_ && *p_ == '{') {
      line->time_s.emplace();
#define CAIRN_RECORDS_TIME_NAN(name) line->time_s->name = std::nan("");
      CAIRN_STEP_TIME_FIELDS(CAIRN_RECORDS_TIME_NAN)
#undef CAIRN_RECORDS_TIME_NAN
      return object(nullptr, &*line->time_s, nullptr);
    }
    Scalar s;
    if (line) {
      if (const LineField* f = find_field(kLineFields, key)) {
        if (!value(&s)) return false;
        f->set(*line, s);
        return true;
      }
    } else if (times) {
      if (const TimeField* f = find_field(kTimeFields, key)) {
        if (!value(&s)) return false;
        if (s.type == Scalar::Number) times->*(f->member) = s.number;
        return true;
      }
    }
    return value(nullptr);
  }

  bool kind(MetricsLine& line) {
    std::string_view raw;
    bool escaped = false;
    if (!string(&raw, &escaped)) return false;
    if (!escaped) {
      line.kind.assign(raw.data(), raw.size());
      return true;
    }
    // Rare: let the full parser decode the escapes (the text is known to be a valid JSON string).
    line.kind = nlohmann::json::parse(std::string_view(raw.data() - 1, raw.size() + 2)).get<std::string>();
    return true;
  }

  // An object; its members go to `line`, `times` or `stage` when given (member keys with escapes are never ours).
  bool object(MetricsLine* line, StepTimes* times, StageTimes* stage) {
    if (++depth_ > kMaxDepth) return false;
    ++p_;  // '{'
    ws();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      --depth_;
      return true;
    }
    while (true) {
      ws();
      std::string_view key;
      bool key_escaped = false;
      if (p_ >= end_ || *p_ != '"' || !string(&key, &key_escaped)) return false;
      ws();
      if (p_ >= end_ || *p_ != ':') return false;
      ++p_;
      ws();
      if (!(key_escaped ? value(nullptr) : member(key, line, times, stage))) return false;
      ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == '}') break;
      return false;
    }
    ++p_;
    --depth_;
    return true;
  }

  static constexpr int kMaxDepth = 64;
  const char* p_;
  const char* end_;
  int depth_ = 0;
};

}  // namespace

ScanResult scan_metrics_line(std::string_view text, MetricsLine& out) {
  out = MetricsLine{};
  return Scanner(text).line(out);
}

}  // namespace cairn::records
