// Strict single-pass JSON scanner for metrics.jsonl records (see fastjson.h).
#include "fastjson.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace cairn::report {
namespace {

struct Scanner {
  const char* p;
  const char* end;
  int depth = 0;

  void ws() {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
  }
  bool lit(const char* word, size_t n) {
    if (static_cast<size_t>(end - p) < n || std::memcmp(p, word, n) != 0) return false;
    p += n;
    return true;
  }
  static bool hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

  // A string; `raw` gets its contents between the quotes, `escaped` whether it had escapes.
  bool string(std::string_view* raw, bool* escaped) {
    if (p >= end || *p != '"') return false;
    const char* start = ++p;
    bool esc = false;
    while (p < end) {
      unsigned char c = static_cast<unsigned char>(*p);
      if (c == '"') {
        if (raw) *raw = std::string_view(start, static_cast<size_t>(p - start));
        if (escaped) *escaped = esc;
        ++p;
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        esc = true;
        if (++p >= end) return false;
        char e = *p;
        if (e == 'u') {
          if (end - p < 5 || !hex(p[1]) || !hex(p[2]) || !hex(p[3]) || !hex(p[4])) return false;
          p += 5;
          continue;
        }
        if (!std::strchr("\"\\/bfnrt", e) || e == '\0') return false;
      }
      ++p;
    }
    return false;
  }

  // A number in JSON's grammar; its value in *v.
  bool number(double* v) {
    const char* s = p;
    if (p < end && *p == '-') ++p;
    if (p >= end) return false;
    if (*p == '0') ++p;
    else if (*p >= '1' && *p <= '9')
      while (p < end && *p >= '0' && *p <= '9') ++p;
    else return false;
    if (p < end && *p == '.') {
      ++p;
      if (p >= end || *p < '0' || *p > '9') return false;
      while (p < end && *p >= '0' && *p <= '9') ++p;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
      ++p;
      if (p < end && (*p == '+' || *p == '-')) ++p;
      if (p >= end || *p < '0' || *p > '9') return false;
      while (p < end && *p >= '0' && *p <= '9') ++p;
    }
    auto r = std::from_chars(s, p, *v);
    if (r.ec == std::errc::result_out_of_range) {
      // Overflow is invalid (as for nlohmann::json); underflow reads as the nearest double.
      std::string copy(s, p);
      double d = std::strtod(copy.c_str(), nullptr);
      if (std::isinf(d)) return false;
      *v = d;
    } else if (r.ec != std::errc()) {
      return false;
    }
    return true;
  }

  // Any value; numbers (and bools as 0/1) go to *num, which stays NaN otherwise.
  bool value(double* num) {
    if (p >= end) return false;
    switch (*p) {
      case '"': return string(nullptr, nullptr);
      case '{': return object(nullptr, nullptr);
      case '[': {
        if (++depth > 64) return false;
        ++p;
        ws();
        if (p < end && *p == ']') {
          ++p;
          --depth;
          return true;
        }
        while (true) {
          ws();
          if (!value(nullptr)) return false;
          ws();
          if (p < end && *p == ',') {
            ++p;
            continue;
          }
          if (p < end && *p == ']') {
            ++p;
            --depth;
            return true;
          }
          return false;
        }
      }
      case 't':
        if (!lit("true", 4)) return false;
        if (num) *num = 1;
        return true;
      case 'f':
        if (!lit("false", 5)) return false;
        if (num) *num = 0;
        return true;
      case 'n': return lit("null", 4);
      default: {
        double v;
        if (!number(&v)) return false;
        if (num) *num = v;
        return true;
      }
    }
  }

  static int top_field(std::string_view k) {
    switch (k.size()) {
      case 2: return k == "lr" ? kFieldLr : -1;
      case 3: return k == "mfu" ? kFieldMfu : -1;
      case 4:
        if (k == "step") return kFieldStep;
        if (k == "loss") return kFieldLoss;
        return -1;
      case 6:
        if (k == "tokens") return kFieldTokens;
        if (k == "tflops") return kFieldTflops;
        return -1;
      case 7: return k == "skipped" ? kFieldSkipped : -1;
      case 8: return k == "val_loss" ? kFieldValLoss : -1;
      case 9:
        if (k == "grad_norm") return kFieldGradNorm;
        if (k == "wall_time") return kFieldWallTime;
        return -1;
      case 12: return k == "tokens_per_s" ? kFieldTokensPerS : -1;
      case 13: return k == "skipped_total" ? kFieldSkippedTotal : -1;
      default: return -1;
    }
  }
  static int time_field(std::string_view k) {
    if (k == "data") return kFieldTimeData;
    if (k == "forward") return kFieldTimeForward;
    if (k == "backward") return kFieldTimeBackward;
    if (k == "comm") return kFieldTimeComm;
    if (k == "optimizer") return kFieldTimeOptimizer;
    if (k == "total") return kFieldTimeTotal;
    return -1;
  }

  // An object. With `rec`, top-level (level 0) or time_s (level 1) members are recorded.
  bool object(MetricRecord* rec, int (*field_of)(std::string_view)) {
    if (++depth > 64) return false;
    ++p;  // '{'
    ws();
    if (p < end && *p == '}') {
      ++p;
      --depth;
      return true;
    }
    while (true) {
      ws();
      std::string_view key;
      bool key_escaped = false;
      if (!string(&key, &key_escaped)) return false;
      ws();
      if (p >= end || *p != ':') return false;
      ++p;
      ws();
      bool handled = false;
      if (rec && !key_escaped) {
        if (field_of == &top_field && key == "kind" && p < end && *p == '"') {
          if (!string(&rec->kind, &rec->kind_escaped)) return false;
          rec->has_kind = true;
          handled = true;
        } else if (field_of == &top_field && key == "time_s" && p < end && *p == '{') {
          if (!object(rec, &time_field)) return false;
          handled = true;
        } else {
          int f = field_of(key);
          if (f >= 0) {
            double v = std::nan("");
            if (!value(&v)) return false;
            rec->values[f] = v;
            handled = true;
          }
        }
      }
      if (!handled && !value(nullptr)) return false;
      ws();
      if (p < end && *p == ',') {
        ++p;
        continue;
      }
      if (p < end && *p == '}') {
        ++p;
        --depth;
        return true;
      }
      return false;
    }
  }
};

}  // namespace

ScanResult scan_metric_record(std::string_view line, MetricRecord& out) {
  for (double& v : out.values) v = std::nan("");
  out.kind = {};
  out.has_kind = false;
  out.kind_escaped = false;
  Scanner s{line.data(), line.data() + line.size()};
  s.ws();
  if (s.p < s.end && *s.p == '{') {
    if (!s.object(&out, &Scanner::top_field)) return ScanResult::Invalid;
    s.ws();
    return s.p == s.end ? ScanResult::Ok : ScanResult::Invalid;
  }
  if (!s.value(nullptr)) return ScanResult::Invalid;
  s.ws();
  return s.p == s.end ? ScanResult::NotObject : ScanResult::Invalid;
}

}  // namespace cairn::report
