// Pre-tokenizers: UTF-8 validation, PCRE2 regex splitting, and hand-written equivalents of the GPT-2
// and Llama 3 split patterns (the fast path; PCRE2 stays the general path and the tests' oracle).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "cairn/error.h"
#include "cairn/log.h"
#include "internal.h"

namespace cairn::tokenizer {

// White space as Unicode's White_Space property: tab to carriage return, NEL and the separators Z*. It is \s in
// OpenAI's encoder.py and tiktoken (Rust's regex), in Hugging Face's Oniguruma and Rust's char::is_whitespace;
// PCRE2's \s also matches U+180E, JavaScript's matches U+FEFF but not NEL (the npm gpt-3-encoder port's), so it is
// spelled out. Split regexes read from tokenizer.json files are translated to it (pcre2_from_oniguruma).
#define CAIRN_WHITE_SPACE CAIRN_WHITE_SPACE_MEMBERS
// OpenAI's GPT-2 pattern, which Hugging Face's ByteLevel pre-tokenizer also uses when use_regex is true.
#define CAIRN_GPT2_PATTERN                                                                                  \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" CAIRN_WHITE_SPACE "\\p{L}\\p{N}]+|[" CAIRN_WHITE_SPACE \
  "]+(?![^" CAIRN_WHITE_SPACE "])|[" CAIRN_WHITE_SPACE "]+"
const char* const kGpt2Pattern = CAIRN_GPT2_PATTERN;
const char* const kHfByteLevelPattern = CAIRN_GPT2_PATTERN;
// Llama 3's Split regex as pcre2_from_oniguruma translates the one in its tokenizer.json.
const char* const kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" CAIRN_WHITE_SPACE
    "\\p{L}\\p{N}]+[\\r\\n]*|[" CAIRN_WHITE_SPACE "]*[\\r\\n]+|[" CAIRN_WHITE_SPACE "]+(?![^" CAIRN_WHITE_SPACE
    "])|[" CAIRN_WHITE_SPACE "]+";
const char* const kWhiteSpaceClass = "[" CAIRN_WHITE_SPACE "]";

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    // Fast path over 8 ASCII bytes at a time.
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
    else return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

// Throws UsageError naming the first invalid byte (PCRE2 and the fast splitters read valid UTF-8 only).
static void require_utf8(std::string_view text) {
  size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos)
    throw UsageError(
        strprintf("text is not valid UTF-8 (byte %zu of %zu); tokenizers take UTF-8 only", bad, text.size()));
}

// ---------------------------------------------------------------------------------------------
// RegexSplitter

RegexSplitter::RegexSplitter(const std::string& pattern, bool case_insensitive) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE erroff = 0;
  uint32_t opts = PCRE2_UTF | PCRE2_UCP | (case_insensitive ? PCRE2_CASELESS : 0);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts, &err, &erroff, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    throw UsageError(strprintf("bad pre-tokenizer regex at offset %zu: %s (pattern %s)", static_cast<size_t>(erroff),
                               reinterpret_cast<char*>(buf), pattern.c_str()));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

namespace {
// One match-data block per thread and pattern, reused across calls (allocation is costly).
struct MatchData {
  const void* code = nullptr;
  pcre2_match_data* md = nullptr;
  ~MatchData() {
    if (md) pcre2_match_data_free(md);
  }
};

// One match at `pos` of valid UTF-8. The JIT's fixed stack can run out on long matches; the
// interpreter (heap-backed) then takes over, so a long input is slow at worst, never an error.
int match_at(pcre2_code* code, bool jit, std::string_view text, size_t pos, pcre2_match_data* md) {
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  if (jit) {
    int rc = pcre2_jit_match(code, subject, text.size(), pos, 0, md, nullptr);
    if (rc != PCRE2_ERROR_JIT_STACKLIMIT) return rc;
  }
  return pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
}
}  // namespace

void RegexSplitter::split_impl(std::string_view text, void (*cb)(void*, size_t, size_t), void* ctx) const {
  require_utf8(text);
  detail::regex_split_trusted(*this, text, cb, ctx);
}

bool detail::regex_find(const RegexSplitter& re, std::string_view text, size_t pos, size_t& begin, size_t& end) {
  auto* code = static_cast<pcre2_code*>(re.code_);
  thread_local MatchData tl;
  if (tl.code != re.code_) {
    if (tl.md) pcre2_match_data_free(tl.md);
    tl.md = pcre2_match_data_create_from_pattern(code, nullptr);
    tl.code = re.code_;
  }
  int rc = match_at(code, re.jit_, text, pos, tl.md);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(rc, buf, sizeof buf);
    throw RuntimeError(strprintf("pre-tokenizer regex failed: %s", reinterpret_cast<char*>(buf)));
  }
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(tl.md);
  begin = ov[0], end = ov[1];
  return true;
}

namespace {
// Length of the code point starting at i (valid UTF-8).
size_t code_point_length(std::string_view text, size_t i) {
  size_t step = 1;
  while (i + step < text.size() && (static_cast<unsigned char>(text[i + step]) & 0xC0) == 0x80) ++step;
  return step;
}
}  // namespace

void detail::regex_split_trusted(const RegexSplitter& re, std::string_view text, PieceFn cb, void* ctx) {
  size_t n = text.size(), pos = 0, gap = 0, b = 0, e = 0;
  while (pos < n && regex_find(re, text, pos, b, e)) {
    if (b > gap) cb(ctx, gap, b - gap);
    if (e == b) {  // empty match: step one code point so we always progress
      pos = b + code_point_length(text, b);
      gap = b;
      continue;
    }
    cb(ctx, b, e - b);
    pos = gap = e;
  }
  if (gap < n) cb(ctx, gap, n - gap);
}

namespace {
struct Segment {
  size_t b, e;
  bool match;
};

// Matches (empty ones too, as Hugging Face's find_matches reports them) and the gaps between them.
std::vector<Segment> regex_segments(const RegexSplitter& re, std::string_view text) {
  std::vector<Segment> seg;
  size_t n = text.size(), pos = 0, gap = 0, b = 0, e = 0;
  while (pos <= n && detail::regex_find(re, text, pos, b, e)) {
    if (b > gap) seg.push_back({gap, b, false});
    seg.push_back({b, e, true});
    gap = e;
    pos = e > b ? e : b + (b < n ? code_point_length(text, b) : 1);
  }
  if (gap < n) seg.push_back({gap, n, false});
  return seg;
}

// Hugging Face's SplitDelimiterBehavior folds (tokenizers/src/tokenizer/normalizer.rs), in place.
void combine(std::vector<Segment>& seg, detail::SplitBehavior behavior) {
  using B = detail::SplitBehavior;
  if (behavior == B::Isolated) return;
  const bool reversed = behavior == B::MergedWithNext;
  if (reversed) std::reverse(seg.begin(), seg.end());
  size_t w = 0;  // segments kept so far: seg[0, w)
  bool previous_match = false;
  for (size_t r = 0; r < seg.size(); ++r) {
    const Segment s = seg[r];
    bool join = false;
    if (behavior == B::Removed && s.match) continue;
    // A match joins the piece before it (MergedWithPrevious) or after it (MergedWithNext, walked
    // backwards) unless that one is a match too; Contiguous joins runs of matches and of gaps.
    if (behavior == B::MergedWithPrevious || behavior == B::MergedWithNext) join = s.match && !previous_match && w > 0;
    if (behavior == B::Contiguous) join = s.match == previous_match && w > 0;
    previous_match = s.match;
    if (!join) {
      seg[w++] = s;
    } else if (reversed) {
      seg[w - 1].b = s.b;
    } else {
      seg[w - 1].e = s.e;
    }
  }
  seg.resize(w);
  if (reversed) std::reverse(seg.begin(), seg.end());
}
}  // namespace

void detail::regex_split_behavior(const RegexSplitter& re, std::string_view text, SplitBehavior behavior, bool invert,
                                  PieceFn piece, void* ctx) {
  std::vector<Segment> seg = regex_segments(re, text);
  if (invert)
    for (Segment& s : seg) s.match = !s.match;
  combine(seg, behavior);
  for (const Segment& s : seg)
    if (s.e > s.b) piece(ctx, s.b, s.e - s.b);
}

bool RegexSplitter::full_match(std::string_view text) const {
  require_utf8(text);
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                       PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_NO_UTF_CHECK, md, nullptr);
  pcre2_match_data_free(md);
  return rc >= 0;
}

// ---------------------------------------------------------------------------------------------
// Character classes for the hand-written splitters. They come from PCRE2 itself (\p{L}, \p{N} and
// the pattern's whitespace class), tabulated once for the first three planes (letters, CJK, emoji),
// so the fast path and the regex agree on every code point.

namespace {

enum CharClass : uint8_t { kLetter = 1, kNumber = 2, kSpace = 3, kOther = 4 };

size_t encode_utf8(uint32_t cp, char* out) {
  if (cp < 0x80) return out[0] = static_cast<char>(cp), 1;
  if (cp < 0x800)
    return out[0] = static_cast<char>(0xC0 | (cp >> 6)), out[1] = static_cast<char>(0x80 | (cp & 0x3F)), 2;
  if (cp < 0x10000)
    return out[0] = static_cast<char>(0xE0 | (cp >> 12)), out[1] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
           out[2] = static_cast<char>(0x80 | (cp & 0x3F)), 3;
  out[0] = static_cast<char>(0xF0 | (cp >> 18));
  out[1] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<char>(0x80 | (cp & 0x3F));
  return 4;
}

class CharTable {
 public:
  static constexpr uint32_t kTabulated = 0x30000;
  explicit CharTable(const std::string& space_class)
      : letter_("\\p{L}"), number_("\\p{N}"), space_(space_class), table_(kTabulated) {
    for (uint32_t cp = 0; cp < kTabulated; ++cp)
      table_[cp] = (cp >= 0xD800 && cp <= 0xDFFF) ? static_cast<uint8_t>(kOther) : classify_slow(cp);
  }
  // Class of the (valid UTF-8) character at i; sets its length.
  uint8_t cls(std::string_view t, size_t i, size_t& len) const {
    unsigned c = static_cast<unsigned char>(t[i]);
    if (c < 0x80) return len = 1, table_[c];
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else len = 4, cp = c & 0x07;
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(t[i + k]) & 0x3F);
    return cp < kTabulated ? table_[cp] : classify_slow(cp);
  }
  uint8_t ascii(unsigned char c) const { return table_[c]; }

 private:
  uint8_t classify_slow(uint32_t cp) const {
    char buf[4];
    std::string_view v(buf, encode_utf8(cp, buf));
    if (letter_.full_match(v)) return kLetter;
    if (number_.full_match(v)) return kNumber;
    if (space_.full_match(v)) return kSpace;
    return kOther;
  }
  RegexSplitter letter_, number_, space_;
  std::vector<uint8_t> table_;
};

// GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// by hand (same leftmost-alternative semantics; \s: White_Space, as kGpt2Pattern spells it). Runs of
// ASCII are scanned 16 bytes at a time (SSE2) and by a byte table, so most words cost no mispredicted
// branch per byte and no UTF-8 decoding (most text is ASCII).
class Gpt2Splitter final : public detail::FastSplitter {
 public:
  explicit Gpt2Splitter(const std::string& space_class) : ct_(space_class) {
    for (int c = 0; c < 0x80; ++c) byte_cls_[c] = ct_.ascii(static_cast<unsigned char>(c));
#ifdef __SSE2__
    // The vector classes below hard-code ASCII letters, digits and \t\n\v\f\r and space as space; used only if the
    // table (from PCRE2) agrees on every ASCII byte.
    simd_ = true;
    for (int c = 0; c < 0x80; ++c) {
      bool letter = (c | 0x20) >= 'a' && (c | 0x20) <= 'z', digit = c >= '0' && c <= '9';
      bool space = c == ' ' || (c >= 9 && c <= 13);
      uint8_t want = letter ? kLetter : digit ? kNumber : space ? kSpace : kOther;
      simd_ = simd_ && byte_cls_[c] == want;
    }
#endif
  }
  void split(std::string_view t, detail::PieceFn piece, void* ctx) const override {
    split_with(t, [&](size_t b, size_t n) { piece(ctx, b, n); });
  }
  void split_words(std::string_view t, std::vector<std::string_view>& words) const override {
    split_with(t, [&](size_t b, size_t n) { words.emplace_back(t.data() + b, n); });
  }

 private:
#ifdef __SSE2__
  // Bit i set where p[i] (of 16 bytes) is an ASCII character of class `run`.
  static unsigned ascii_class_mask(const unsigned char* p, uint8_t run) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    __m128i m;
    if (run == kLetter) {  // (c | 0x20) - 'a' < 26, unsigned, done as a signed compare after a shift by 128
      __m128i x = _mm_add_epi8(_mm_or_si128(v, _mm_set1_epi8(0x20)), _mm_set1_epi8(static_cast<char>(128 - 'a')));
      m = _mm_cmplt_epi8(x, _mm_set1_epi8(static_cast<char>(-128 + 26)));
    } else if (run == kNumber) {
      __m128i x = _mm_add_epi8(v, _mm_set1_epi8(static_cast<char>(128 - '0')));
      m = _mm_cmplt_epi8(x, _mm_set1_epi8(static_cast<char>(-128 + 10)));
    } else {  // other: ASCII and none of letter, digit, space
      __m128i letter = _mm_cmplt_epi8(_mm_add_epi8(_mm_or_si128(v, _mm_set1_epi8(0x20)),
                                                   _mm_set1_epi8(static_cast<char>(128 - 'a'))),
                                      _mm_set1_epi8(static_cast<char>(-128 + 26)));
      __m128i digit = _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8(static_cast<char>(128 - '0'))),
                                     _mm_set1_epi8(static_cast<char>(-128 + 10)));
      __m128i space = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')),
                                   _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8(static_cast<char>(128 - 9))),
                                                  _mm_set1_epi8(static_cast<char>(-128 + 5))));
      __m128i ascii = _mm_cmpgt_epi8(v, _mm_set1_epi8(-1));
      m = _mm_andnot_si128(_mm_or_si128(_mm_or_si128(letter, digit), space), ascii);
    }
    return static_cast<unsigned>(_mm_movemask_epi8(m));
  }
#endif
  // End of the run of characters of class `run` that starts at k: 16 bytes at a time while they are
  // ASCII of that class, then byte by byte, decoding longer characters.
  [[gnu::always_inline]] size_t run_end(std::string_view t, size_t k, uint8_t run) const {
    const size_t n = t.size();
    const auto* p = reinterpret_cast<const unsigned char*>(t.data());
    for (;;) {
#ifdef __SSE2__
      if (simd_) {
        while (k + 16 <= n) {
          const unsigned stop = ~ascii_class_mask(p + k, run) & 0xFFFF;
          if (stop) {
            k += static_cast<size_t>(__builtin_ctz(stop));
            break;
          }
          k += 16;
        }
      }
#endif
      while (k < n && byte_cls_[p[k]] == run) ++k;
      if (k >= n || p[k] < 0x80) return k;
      size_t l;
      if (ct_.cls(t, k, l) != run) return k;
      k += l;
    }
  }
  template <typename Piece>
  [[gnu::always_inline]] void split_with(std::string_view t, Piece&& piece) const {
    const size_t n = t.size();
    size_t i = 0;
    while (i < n) {
      // 's 't 're 've 'm 'll 'd
      if (t[i] == '\'' && i + 1 < n) {
        char a = t[i + 1], b = i + 2 < n ? t[i + 2] : 0;
        size_t len = (a == 's' || a == 't' || a == 'm' || a == 'd')                   ? 2
                     : ((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l') ? 3
                                                                                      : 0;
        if (len) {
          piece(i, len);
          i += len;
          continue;
        }
      }
      size_t l0;
      uint8_t c0 = ct_.cls(t, i, l0);
      size_t start = n;
      uint8_t run = 0;
      if (c0 != kSpace) {
        start = i + l0, run = c0;
      } else if (t[i] == ' ' && i + 1 < n) {
        size_t l1;
        uint8_t c1 = ct_.cls(t, i + 1, l1);
        if (c1 != kSpace) start = i + 1 + l1, run = c1;
      }
      if (run) {  // optional space, then a run of one class (letters, numbers or other)
        size_t k = run_end(t, start, run);
        piece(i, k - i);
        i = k;
        continue;
      }
      // Whitespace: the run minus its last character when a non-space follows (\s+(?!\S)), else all.
      size_t k = i, last = i, l;
      while (k < n && ct_.cls(t, k, l) == kSpace) last = k, k += l;
      size_t end = (k < n && last > i) ? last : k;
      piece(i, end - i);
      i = end;
    }
  }

  CharTable ct_;
  std::array<uint8_t, 256> byte_cls_{};  // ASCII bytes' classes; 0 (no class) for bytes of longer characters
  bool simd_ = false;                    // the SSE2 classes equal byte_cls_ on ASCII
};

// Length of a case-insensitive contraction ('s 't 're 've 'm 'll 'd) at i (t[i] == '\''), else 0.
// PCRE2's caseless matching also folds U+017F LATIN SMALL LETTER LONG S to s.
size_t contraction_ci(std::string_view t, size_t i) {
  const size_t n = t.size();
  auto lower = [&](size_t k) -> char {
    if (k >= n) return 0;
    char c = t[k];
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
  };
  const char a = lower(i + 1), b = lower(i + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (a == '\xc5' && t[i + 2] == '\xbf') return 3;  // 'ſ
  if (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

bool is_cr_lf(char c) { return c == '\r' || c == '\n'; }

// Llama 3's pattern by hand (\s: White_Space, as kLlama3Pattern spells it):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
class Llama3Splitter final : public detail::FastSplitter {
 public:
  Llama3Splitter() : ct_(kWhiteSpaceClass) {}
  void split(std::string_view t, detail::PieceFn piece, void* ctx) const override {
    const size_t n = t.size();
    size_t i = 0;
    while (i < n) {
      size_t end = next_piece(t, i);
      piece(ctx, i, end - i);
      i = end;
    }
  }

 private:
  // End of the piece that starts at i: the first alternative that matches there, as PCRE2 does.
  size_t next_piece(std::string_view t, size_t i) const {
    const size_t n = t.size();
    if (t[i] == '\'')
      if (size_t len = contraction_ci(t, i)) return i + len;
    size_t l0, l;
    const uint8_t c0 = ct_.cls(t, i, l0);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    size_t letters = n;
    if (c0 == kLetter) letters = i;
    else if (c0 != kNumber && !is_cr_lf(t[i]) && i + l0 < n && ct_.cls(t, i + l0, l) == kLetter) letters = i + l0;
    if (letters != n) {
      size_t k = letters;
      while (k < n && ct_.cls(t, k, l) == kLetter) k += l;
      return k;
    }
    // \p{N}{1,3}
    if (c0 == kNumber) {
      size_t k = i + l0;
      for (int m = 1; m < 3 && k < n && ct_.cls(t, k, l) == kNumber; ++m) k += l;
      return k;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    size_t other = n;
    if (c0 == kOther) other = i;
    else if (t[i] == ' ' && i + 1 < n && ct_.cls(t, i + 1, l) == kOther) other = i + 1;
    if (other != n) {
      size_t k = other;
      while (k < n && ct_.cls(t, k, l) == kOther) k += l;
      while (k < n && is_cr_lf(t[k])) ++k;
      return k;
    }
    // c0 is whitespace. \s*[\r\n]+ : up to the last CR/LF of the run; else \s+(?!\S) | \s+.
    size_t k = i, last = i, crlf = n;
    while (k < n && ct_.cls(t, k, l) == kSpace) {
      if (is_cr_lf(t[k])) crlf = k;
      last = k;
      k += l;
    }
    if (crlf != n) return crlf + 1;
    return (k < n && last > i) ? last : k;
  }

  CharTable ct_;
};

const Gpt2Splitter& gpt2_splitter() {
  static const Gpt2Splitter splitter(kWhiteSpaceClass);
  return splitter;
}

}  // namespace

const detail::FastSplitter* detail::fast_splitter_for(const std::string& pattern) {
  if (std::getenv("CAIRN_TOKENIZER_REGEX_ONLY")) return nullptr;
  if (pattern == kGpt2Pattern) return &gpt2_splitter();
  if (pattern == kLlama3Pattern) {
    static const Llama3Splitter llama3;
    return &llama3;
  }
  return nullptr;
}

void split_gpt2_fast(std::string_view text, const std::function<void(size_t, size_t)>& piece) {
  require_utf8(text);
  gpt2_splitter().split(
      text,
      [](void* ctx, size_t b, size_t n) { (*static_cast<const std::function<void(size_t, size_t)>*>(ctx))(b, n); },
      const_cast<std::function<void(size_t, size_t)>*>(&piece));
}

bool split_fast(const std::string& pattern, std::string_view text, const std::function<void(size_t, size_t)>& piece) {
  const detail::FastSplitter* fast = detail::fast_splitter_for(pattern);
  if (!fast) return false;
  require_utf8(text);
  fast->split(
      text,
      [](void* ctx, size_t b, size_t n) { (*static_cast<const std::function<void(size_t, size_t)>*>(ctx))(b, n); },
      const_cast<std::function<void(size_t, size_t)>*>(&piece));
  return true;
}

}  // namespace cairn::tokenizer
