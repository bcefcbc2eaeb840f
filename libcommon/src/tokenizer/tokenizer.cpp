// Byte, GPT-2 and Hugging Face BPE tokenizers (see cairn/tokenizer.h); regex pre-tokenizing via PCRE2.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "cairn/tokenizer.h"

#include <pcre2.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <unordered_map>

#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"

namespace cairn::tokenizer {

using json = nlohmann::json;

// OpenAI's GPT-2 pattern with JavaScript's \s spelled out, so it splits exactly like the reference
// encoder (gpt-3-encoder) whose output our tests compare against.
#define CAIRN_JS_SPACE \
  "\\t\\n\\x{0b}\\f\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}\\x{feff}"
const char* const kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" CAIRN_JS_SPACE
                                 "\\p{L}\\p{N}]+|[" CAIRN_JS_SPACE "]+(?![^" CAIRN_JS_SPACE "])|[" CAIRN_JS_SPACE "]+";
const char* const kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// The pattern Hugging Face's ByteLevel pre-tokenizer uses when use_regex is true.
const char* const kHfByteLevelPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

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
}  // namespace

void RegexSplitter::split_impl(std::string_view text, void (*cb)(void*, size_t, size_t), void* ctx) const {
  auto* code = static_cast<pcre2_code*>(code_);
  thread_local MatchData tl;
  if (tl.code != code_) {
    if (tl.md) pcre2_match_data_free(tl.md);
    tl.md = pcre2_match_data_create_from_pattern(code, nullptr);
    tl.code = code_;
  }
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t n = text.size(), pos = 0, gap = 0;
  while (pos < n) {
    int rc = jit_ ? pcre2_jit_match(code, subject, n, pos, 0, tl.md, nullptr)
                  : pcre2_match(code, subject, n, pos, PCRE2_NO_UTF_CHECK, tl.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof buf);
      throw RuntimeError(strprintf("pre-tokenizer regex failed: %s", reinterpret_cast<char*>(buf)));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(tl.md);
    size_t b = ov[0], e = ov[1];
    if (b > gap) cb(ctx, gap, b - gap);
    if (e == b) {  // empty match: step one code point so we always progress
      size_t step = 1;
      while (b + step < n && (static_cast<unsigned char>(text[b + step]) & 0xC0) == 0x80) ++step;
      pos = b + step;
      gap = b;
      continue;
    }
    cb(ctx, b, e - b);
    pos = gap = e;
  }
  if (gap < n) cb(ctx, gap, n - gap);
}

bool RegexSplitter::full_match(std::string_view text) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                       PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_NO_UTF_CHECK, md, nullptr);
  pcre2_match_data_free(md);
  return rc >= 0;
}

// ---------------------------------------------------------------------------------------------
// A hand-written equivalent of GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (same leftmost-alternative semantics), several times faster than running the regex. Character
// classes come from PCRE2 itself (a table for the BMP, computed at load), so they agree with the
// regex path; tests compare both on random Unicode text.

namespace {

enum CharClass : uint8_t { kLetter = 1, kNumber = 2, kSpace = 3, kOther = 4 };

class Gpt2FastSplitter {
 public:
  explicit Gpt2FastSplitter(const std::string& space_class) {
    letter_ = std::make_unique<RegexSplitter>("\\p{L}");
    number_ = std::make_unique<RegexSplitter>("\\p{N}");
    space_ = std::make_unique<RegexSplitter>(space_class);
    bmp_.resize(0x10000);
    for (uint32_t cp = 0; cp < 0x10000; ++cp)
      bmp_[cp] = (cp >= 0xD800 && cp <= 0xDFFF) ? static_cast<uint8_t>(kOther) : classify_slow(cp);
  }

  template <typename F>
  void split(std::string_view t, F&& piece) const {
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
      uint8_t c0 = cls(t, i, l0);
      size_t start = n;
      uint8_t run = 0;
      if (c0 != kSpace) {
        start = i, run = c0;
      } else if (t[i] == ' ' && i + 1 < n) {
        size_t l1;
        uint8_t c1 = cls(t, i + 1, l1);
        if (c1 != kSpace) start = i + 1, run = c1;
      }
      if (run) {  // optional space, then a run of one class (letters, numbers or other)
        size_t k = start, l;
        while (k < n && cls(t, k, l) == run) k += l;
        piece(i, k - i);
        i = k;
        continue;
      }
      // Whitespace: the run minus its last character when a non-space follows (\s+(?!\S)), else all.
      size_t k = i, last = i, l;
      while (k < n && cls(t, k, l) == kSpace) last = k, k += l;
      size_t end = (k < n && last > i) ? last : k;
      piece(i, end - i);
      i = end;
    }
  }

 private:
  uint8_t classify_slow(uint32_t cp) const {
    char buf[4];
    std::string_view v(buf, encode_utf8(cp, buf));
    if (letter_->full_match(v)) return kLetter;
    if (number_->full_match(v)) return kNumber;
    if (space_->full_match(v)) return kSpace;
    return kOther;
  }
  static size_t encode_utf8(uint32_t cp, char* out) {
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
  // Class of the (valid UTF-8) character at i; sets its length.
  uint8_t cls(std::string_view t, size_t i, size_t& len) const {
    unsigned c = static_cast<unsigned char>(t[i]);
    if (c < 0x80) return len = 1, bmp_[c];
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else len = 4, cp = c & 0x07;
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(t[i + k]) & 0x3F);
    return cp < 0x10000 ? bmp_[cp] : classify_slow(cp);
  }

  std::unique_ptr<RegexSplitter> letter_, number_, space_;
  std::vector<uint8_t> bmp_;
};

}  // namespace

namespace {
// The shared fast splitter for GPT-2's pattern with JavaScript's (gpt2) or PCRE2's (hf) whitespace.
const Gpt2FastSplitter& fast_gpt2(bool js_whitespace) {
  static const Gpt2FastSplitter js("[" CAIRN_JS_SPACE "]"), pcre("\\s");
  return js_whitespace ? js : pcre;
}
const Gpt2FastSplitter* fast_splitter_for(const std::string& pattern) {
  if (std::getenv("CAIRN_TOKENIZER_REGEX_ONLY")) return nullptr;  // debugging aid: always use PCRE2
  if (pattern == kGpt2Pattern) return &fast_gpt2(true);
  if (pattern == kHfByteLevelPattern) return &fast_gpt2(false);
  return nullptr;
}
}  // namespace

void split_gpt2_fast(std::string_view text, bool js_whitespace, const std::function<void(size_t, size_t)>& piece) {
  fast_gpt2(js_whitespace).split(text, piece);
}

// ---------------------------------------------------------------------------------------------
// Byte-level BPE shared by the gpt2 and hf tokenizers.

namespace {

// GPT-2's reversible byte <-> printable code point map (bytes_to_unicode in OpenAI's encoder).
struct ByteUnicode {
  std::array<uint32_t, 256> byte_to_cp{};
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;
  ByteUnicode() {
    std::vector<bool> direct(256, false);
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) byte_to_cp[b] = direct[b] ? b : 256 + n++;
    for (int b = 0; b < 256; ++b) cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
  }
};
const ByteUnicode& byte_unicode() {
  static const ByteUnicode m;
  return m;
}

// Decodes a byte-level token string (each code point stands for one byte) to raw bytes; false if a
// code point is not one of the 256 byte symbols (the vocabulary is then not byte-level).
bool byte_level_to_bytes(std::string_view s, std::string& out) {
  out.clear();
  const auto& bu = byte_unicode();
  size_t i = 0;
  while (i < s.size()) {
    unsigned c = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    if (i + len > s.size()) return false;
    cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    auto it = bu.cp_to_byte.find(cp);
    if (it == bu.cp_to_byte.end()) return false;
    out.push_back(static_cast<char>(it->second));
    i += len;
  }
  return true;
}

std::atomic<uint64_t> g_tokenizer_serial{1};

std::string hex64(uint64_t v) { return strprintf("%016llx", static_cast<unsigned long long>(v)); }

struct BpeConfig {
  std::string type;  // "gpt2" | "hf"
  std::string id;
  std::vector<std::string> files;           // source paths
  std::vector<std::string> file_roles;      // "vocab", "merges", "tokenizer_json"
  std::vector<std::string> split_patterns;  // applied in order, each piece split by the next
  bool add_prefix_space = false;
  bool ignore_merges = false;
  uint32_t eot = 0;
};

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(BpeConfig cfg, std::vector<std::string> id_to_bytes, std::vector<bool> is_special)
      : cfg_(std::move(cfg)), id_to_bytes_(std::move(id_to_bytes)), is_special_(std::move(is_special)) {
    for (uint32_t id = 0; id < id_to_bytes_.size(); ++id) {
      if (is_special_[id]) {
        if (!id_to_bytes_[id].empty()) specials_.emplace_back(id_to_bytes_[id], id);
        continue;
      }
      if (!id_to_bytes_[id].empty()) bytes_to_id_.emplace(id_to_bytes_[id], id);
    }
    // Longest special first so that overlapping specials match greedily.
    std::sort(specials_.begin(), specials_.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    byte_id_.fill(UINT32_MAX);
    for (int b = 0; b < 256; ++b) {
      auto it = bytes_to_id_.find(std::string(1, static_cast<char>(b)));
      if (it != bytes_to_id_.end()) byte_id_[b] = it->second;
    }
    for (auto& p : cfg_.split_patterns) {
      splitters_.push_back(std::make_unique<RegexSplitter>(p));
      fast_.push_back(fast_splitter_for(p));
    }
  }

  // Registers merge (a, b) -> merged at `rank`; returns false if a token is unknown.
  bool add_merge(const std::string& a, const std::string& b, uint32_t rank) {
    auto ia = bytes_to_id_.find(a), ib = bytes_to_id_.find(b), im = bytes_to_id_.find(a + b);
    if (ia == bytes_to_id_.end() || ib == bytes_to_id_.end() || im == bytes_to_id_.end()) return false;
    uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | ib->second;
    merges_.emplace(key, (static_cast<uint64_t>(rank) << 32) | im->second);  // first rank wins
    return true;
  }
  bool has_all_bytes() const {
    return std::all_of(byte_id_.begin(), byte_id_.end(), [](uint32_t v) { return v != UINT32_MAX; });
  }
  std::string id() const override { return cfg_.id; }
  std::string type() const override { return cfg_.type; }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(id_to_bytes_.size()); }
  uint32_t eot_id() const override { return cfg_.eot; }

  void encode_into(std::string_view text, std::vector<uint32_t>& out) const override {
    if (specials_.empty()) return encode_ordinary(text, out);
    // Added tokens are matched literally before the pre-tokenizer, as Hugging Face does.
    size_t start = 0, i = 0;
    while (i < text.size()) {
      bool hit = false;
      for (auto& [s, sid] : specials_) {
        if (text.compare(i, s.size(), s) == 0) {
          encode_ordinary(text.substr(start, i - start), out);
          out.push_back(sid);
          i += s.size();
          start = i;
          hit = true;
          break;
        }
      }
      if (!hit) ++i;
    }
    encode_ordinary(text.substr(start), out);
  }

  std::string decode(const uint32_t* ids, size_t n) const override {
    std::string s;
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] >= id_to_bytes_.size())
        throw UsageError(strprintf("token id %u is outside the vocabulary (size %zu)", ids[i], id_to_bytes_.size()));
      s += id_to_bytes_[ids[i]];
    }
    return s;
  }

  json describe() const override {
    json files = json::object();
    for (size_t i = 0; i < cfg_.files.size(); ++i)
      files[cfg_.file_roles[i]] = "tokenizer/" + std::filesystem::path(cfg_.files[i]).filename().string();
    return {{"type", cfg_.type}, {"id", cfg_.id}, {"vocab_size", vocab_size()}, {"eot_id", eot_id()}, {"files", files}};
  }
  std::vector<std::string> source_files() const override { return cfg_.files; }

 private:
  void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const {
    if (text.empty()) return;
    std::string prefixed;
    if (cfg_.add_prefix_space && text[0] != ' ') {
      prefixed = " " + std::string(text);
      text = prefixed;
    }
    split_level(text, 0, out);
  }

  void split_level(std::string_view text, size_t level, std::vector<uint32_t>& out) const {
    if (level == splitters_.size()) return bpe_word(text, out);
    if (fast_[level]) {
      fast_[level]->split(text, [&](size_t b, size_t n) { split_level(text.substr(b, n), level + 1, out); });
      return;
    }
    splitters_[level]->split(text, [&](size_t b, size_t n) { split_level(text.substr(b, n), level + 1, out); });
  }

  // Per-thread cache of word -> ids, an open-addressing table over flat key/value arrays (no
  // allocation per entry); tagged with the tokenizer's serial so tokenizers never share entries.
  struct Cache {
    struct Slot {
      uint64_t hash = 0;
      uint32_t key_off = 0, val_off = 0;
      uint16_t key_len = 0, val_len = 0;  // key_len 0 = empty slot
    };
    uint64_t serial = 0;
    std::vector<Slot> slots;
    std::string keys;
    std::vector<uint32_t> vals;
    size_t used = 0;
    void reset() {
      slots.assign(1 << 16, Slot{});
      keys.clear();
      vals.clear();
      used = 0;
    }
    const Slot* find(std::string_view w, uint64_t h) const {
      size_t mask = slots.size() - 1;
      for (size_t i = h & mask;; i = (i + 1) & mask) {
        const Slot& s = slots[i];
        if (s.key_len == 0) return nullptr;
        if (s.hash == h && s.key_len == w.size() && std::memcmp(keys.data() + s.key_off, w.data(), w.size()) == 0)
          return &s;
      }
    }
    void insert(std::string_view w, uint64_t h, const std::vector<uint32_t>& ids) {
      if (used * 2 >= slots.size()) {
        if (slots.size() >= (1u << 20)) {  // 24 MiB of slots per thread at most
          reset();                         // bounded memory: start over rather than grow without limit
        } else {                           // grow x2 and reinsert
          std::vector<Slot> old(slots.size() * 2);
          old.swap(slots);
          size_t mask = slots.size() - 1;
          for (const Slot& s : old) {
            if (s.key_len == 0) continue;
            size_t i = s.hash & mask;
            while (slots[i].key_len != 0) i = (i + 1) & mask;
            slots[i] = s;
          }
        }
      }
      size_t mask = slots.size() - 1, i = h & mask;
      while (slots[i].key_len != 0) i = (i + 1) & mask;
      Slot& s = slots[i];
      s.hash = h;
      s.key_off = static_cast<uint32_t>(keys.size());
      s.key_len = static_cast<uint16_t>(w.size());
      s.val_off = static_cast<uint32_t>(vals.size());
      s.val_len = static_cast<uint16_t>(ids.size());
      keys.append(w);
      vals.insert(vals.end(), ids.begin(), ids.end());
      ++used;
    }
  };

  void bpe_word(std::string_view word, std::vector<uint32_t>& out) const {
    if (word.empty()) return;
    if (word.size() == 1) {  // spaces, punctuation: one byte is one token, no cache needed
      out.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
      return;
    }
    thread_local Cache cache;
    const bool cacheable = word.size() <= 64;
    uint64_t h = 0;
    if (cacheable) {
      if (cache.serial != serial_ || cache.slots.empty() || cache.keys.size() > (1u << 30)) {
        cache.reset();
        cache.serial = serial_;
      }
      h = XXH3_64bits(word.data(), word.size());
      if (const Cache::Slot* hit = cache.find(word, h)) {
        out.insert(out.end(), cache.vals.begin() + hit->val_off, cache.vals.begin() + hit->val_off + hit->val_len);
        return;
      }
    }
    thread_local std::vector<uint32_t> sym;
    sym.clear();
    bool direct = false;
    if (cfg_.ignore_merges) {
      auto it = bytes_to_id_.find(std::string(word));
      if (it != bytes_to_id_.end()) {
        sym.push_back(it->second);
        direct = true;
      }
    }
    if (!direct) {
      for (unsigned char c : word) sym.push_back(byte_id_[c]);
      while (sym.size() > 1) {
        // The lowest-ranked adjacent pair is merged everywhere it occurs (left to right).
        uint64_t best = UINT64_MAX;
        for (size_t i = 0; i + 1 < sym.size(); ++i) {
          auto it = merges_.find((static_cast<uint64_t>(sym[i]) << 32) | sym[i + 1]);
          if (it != merges_.end() && it->second < best) best = it->second;
        }
        if (best == UINT64_MAX) break;
        // Recover the pair of the best merge: scan again (words are short).
        uint32_t merged = static_cast<uint32_t>(best & 0xFFFFFFFFu);
        size_t w = 0;
        for (size_t i = 0; i < sym.size();) {
          if (i + 1 < sym.size()) {
            auto it = merges_.find((static_cast<uint64_t>(sym[i]) << 32) | sym[i + 1]);
            if (it != merges_.end() && it->second == best) {
              sym[w++] = merged;
              i += 2;
              continue;
            }
          }
          sym[w++] = sym[i++];
        }
        sym.resize(w);
      }
    }
    out.insert(out.end(), sym.begin(), sym.end());
    if (cacheable) cache.insert(word, h, sym);
  }

  BpeConfig cfg_;
  std::vector<std::string> id_to_bytes_;
  std::vector<bool> is_special_;
  std::unordered_map<std::string, uint32_t> bytes_to_id_;
  std::vector<std::pair<std::string, uint32_t>> specials_;
  std::array<uint32_t, 256> byte_id_{};
  std::unordered_map<uint64_t, uint64_t> merges_;  // (a<<32|b) -> (rank<<32|merged)
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;
  std::vector<const Gpt2FastSplitter*> fast_;  // hand-written equivalent of a level's regex, if any
  uint64_t serial_ = g_tokenizer_serial.fetch_add(1);
};

class BytesTokenizer final : public Tokenizer {
 public:
  std::string id() const override { return "bytes"; }
  std::string type() const override { return "bytes"; }
  uint32_t vocab_size() const override { return 257; }
  uint32_t eot_id() const override { return 256; }
  void encode_into(std::string_view text, std::vector<uint32_t>& out) const override {
    size_t n = out.size();
    out.resize(n + text.size());
    for (size_t i = 0; i < text.size(); ++i) out[n + i] = static_cast<unsigned char>(text[i]);
  }
  std::string decode(const uint32_t* ids, size_t n) const override {
    std::string s;
    s.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] > 256) throw UsageError(strprintf("token id %u is outside the bytes vocabulary (257)", ids[i]));
      if (ids[i] < 256) s.push_back(static_cast<char>(ids[i]));
    }
    return s;
  }
  json describe() const override {
    return {{"type", "bytes"}, {"id", "bytes"}, {"vocab_size", 257}, {"eot_id", 256}, {"files", json::object()}};
  }
};

// Tokenizer files and descriptions are read through the typed reader (JsonFields): a wrong type, a
// missing key or an out-of-range id is a UsageError (exit 2) naming the file, the key and what was
// expected, never a raw library message. A file that cannot be read is bad input too.
std::string read_tokenizer_file(const std::string& path) {
  try {
    return read_file(path);
  } catch (const RuntimeError& e) {
    throw UsageError(std::string("tokenizer file: ") + e.what());
  }
}

constexpr uint64_t kMaxTokenId = (1u << 24) - 1;  // ids index dense tables: 16M is far above real vocabularies

// Fills id_to_bytes from a {token: id} object of byte-level token strings.
void load_byte_level_vocab(const JsonFields& vocab, std::vector<std::string>& id_to_bytes, std::vector<bool>& present) {
  if (vocab.raw().empty())
    throw UsageError(file_message("tokenizer file", vocab.file(), "has no {token: id} vocabulary object"));
  std::string bytes;
  for (auto& [tok, idv] : vocab.raw().items()) {
    if (!idv.is_number_unsigned() || idv.get<uint64_t>() > kMaxTokenId) vocab.fail(tok, "a token id in [0, 16777215]");
    uint32_t id = idv.get<uint32_t>();
    if (id >= id_to_bytes.size()) id_to_bytes.resize(id + 1), present.resize(id + 1, false);
    if (!byte_level_to_bytes(tok, bytes)) {
      // Non byte-level entries are only allowed for marker tokens like <|endoftext|>.
      bytes = tok;
    }
    id_to_bytes[id] = bytes;
    present[id] = true;
  }
}

// The BpeTokenizer compiles the split patterns: a bad regex is named with the file it came from.
std::unique_ptr<BpeTokenizer> make_bpe(const BpeConfig& cfg, std::vector<std::string> id_to_bytes,
                                       std::vector<bool> special, const std::string& path) {
  try {
    return std::make_unique<BpeTokenizer>(cfg, std::move(id_to_bytes), std::move(special));
  } catch (const UsageError& e) {
    throw UsageError(file_message("tokenizer file", path, e.what()));
  }
}

std::string file_hash_id(const std::string& type, const std::vector<std::string>& paths) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  for (auto& p : paths) {
    std::string t = read_file(p);
    XXH64_update(st, t.data(), t.size());
  }
  uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return type + ":" + hex64(h);
}

std::unique_ptr<Tokenizer> load_gpt2(const std::string& vocab_path, const std::string& merges_path) {
  if (vocab_path.empty() || merges_path.empty())
    throw UsageError("tokenizer gpt2 needs --vocab encoder.json and --merges vocab.bpe ([data] vocab, merges)");
  const std::string kind = "GPT-2 encoder.json";
  json vocab = parse_json_text(read_tokenizer_file(vocab_path), vocab_path, kind);
  std::vector<std::string> id_to_bytes;
  std::vector<bool> present;
  load_byte_level_vocab(JsonFields(vocab, vocab_path, kind), id_to_bytes, present);
  std::vector<bool> special(id_to_bytes.size(), false);
  BpeConfig cfg;
  cfg.type = "gpt2";
  cfg.files = {vocab_path, merges_path};
  cfg.file_roles = {"vocab", "merges"};
  cfg.id = file_hash_id("gpt2", cfg.files);
  cfg.split_patterns = {kGpt2Pattern};
  auto eot = vocab.find("<|endoftext|>");
  if (eot == vocab.end())
    throw UsageError(
        file_message("tokenizer file", vocab_path, "is not a GPT-2 encoder.json (no <|endoftext|> entry)"));
  cfg.eot = eot->get<uint32_t>();
  special[cfg.eot] = false;  // the reference encoder does not treat it specially in text
  auto tok = make_bpe(cfg, id_to_bytes, special, vocab_path);
  if (!tok->has_all_bytes())
    throw UsageError(
        file_message("tokenizer file", vocab_path, "is not a byte-level BPE vocabulary (a byte has no token)"));
  std::string merges = read_tokenizer_file(merges_path);
  std::istringstream in(merges);
  std::string line, a, b, ab, bb;
  size_t lineno = 0;
  uint32_t rank = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (lineno == 1 && line.rfind("#version", 0) == 0)) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size() || line.find(' ', sp + 1) != std::string::npos)
      throw UsageError(file_message("tokenizer file", merges_path + ":" + std::to_string(lineno),
                                    "is not a GPT-2 vocab.bpe merge line (want \"a b\")"));
    if (!byte_level_to_bytes(line.substr(0, sp), ab) || !byte_level_to_bytes(line.substr(sp + 1), bb) ||
        !tok->add_merge(ab, bb, rank++))
      throw UsageError(file_message("tokenizer file", merges_path + ":" + std::to_string(lineno),
                                    "merge \"" + line + "\" uses or makes a token missing from " + vocab_path));
  }
  if (rank == 0) throw UsageError(file_message("tokenizer file", merges_path, "has no merges"));
  return tok;
}

// Collects the regex split patterns of a pre_tokenizer node; throws for unsupported kinds.
void collect_pre_tokenizer(const JsonFields& node, BpeConfig& cfg, bool& byte_level, int depth = 0) {
  const std::string& path = node.file();
  std::string type = node.str("type");
  if (type == "Sequence") {
    // Bounded: a pathological file must not recurse until the stack runs out.
    if (depth >= 16) node.fail("pretokenizers", "Sequence pre-tokenizers nested at most 16 deep");
    const json& list = node.array("pretokenizers");
    for (size_t i = 0; i < list.size(); ++i)
      collect_pre_tokenizer(node.nested(list[i], "pretokenizers[" + std::to_string(i) + "]"), cfg, byte_level,
                            depth + 1);
  } else if (type == "ByteLevel") {
    byte_level = true;
    if (node.boolean_or("add_prefix_space", false)) cfg.add_prefix_space = true;
    if (node.boolean_or("use_regex", true)) cfg.split_patterns.push_back(kHfByteLevelPattern);
  } else if (type == "Split") {
    JsonFields pat = node.object("pattern");
    std::string behavior = node.str_or("behavior", "Isolated");
    if (behavior != "Isolated" || node.boolean_or("invert", false))
      throw UsageError(file_message("tokenizer file", path,
                                    "uses a Split pre-tokenizer with behavior " + behavior +
                                        " (only Isolated, invert=false is supported)"));
    if (pat.has("Regex")) {
      cfg.split_patterns.push_back(pat.str("Regex"));
    } else if (pat.has("String")) {
      // Appended piecewise: GCC 12 warns falsely (-Wrestrict) on `"\\Q" + std::string`.
      std::string quoted("\\Q");
      quoted.append(pat.str("String")).append("\\E");
      cfg.split_patterns.push_back(quoted);
    } else {
      throw UsageError(file_message("tokenizer file", path, "has a Split pattern without Regex or String"));
    }
  } else {
    throw UsageError(file_message("tokenizer file", path,
                                  "uses pre-tokenizer \"" + type + "\" (supported: ByteLevel, Split, Sequence)"));
  }
}

std::unique_ptr<Tokenizer> load_hf(const std::string& path) {
  if (path.empty()) throw UsageError("tokenizer hf needs --tokenizer-json FILE ([data] tokenizer_json)");
  const std::string kind = "Hugging Face tokenizer.json";
  json j = parse_json_text(read_tokenizer_file(path), path, kind);
  if (!j.is_object() || !j.contains("model"))
    throw UsageError(file_message("tokenizer file", path, "is not a Hugging Face tokenizer.json (no \"model\")"));
  JsonFields top(j, path, kind);
  JsonFields model = top.object("model");
  std::string mtype = model.str_or("type", "BPE");
  if (mtype != "BPE")
    throw UsageError(file_message("tokenizer file", path, "has a " + mtype + " model (only BPE is supported)"));
  if (top.has("normalizer"))
    throw UsageError(file_message("tokenizer file", path, "has a normalizer (not supported; byte-level BPE only)"));
  BpeConfig cfg;
  cfg.type = "hf";
  cfg.files = {path};
  cfg.file_roles = {"tokenizer_json"};
  cfg.id = file_hash_id("hf", cfg.files);
  cfg.ignore_merges = model.boolean_or("ignore_merges", false);
  bool byte_level = false;
  if (top.has("pre_tokenizer")) collect_pre_tokenizer(top.object("pre_tokenizer"), cfg, byte_level);
  if (!byte_level)
    throw UsageError(file_message("tokenizer file", path, "is not byte-level BPE (no ByteLevel pre-tokenizer)"));
  std::vector<std::string> id_to_bytes;
  std::vector<bool> present;
  const JsonFields vocab = model.object("vocab");
  load_byte_level_vocab(vocab, id_to_bytes, present);
  std::vector<bool> special(id_to_bytes.size(), false);
  std::unordered_map<std::string, uint32_t> added;
  const json no_tokens = json::array();
  const json& added_tokens = top.has("added_tokens") ? top.array("added_tokens") : no_tokens;
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    JsonFields t = top.nested(added_tokens[i], "added_tokens[" + std::to_string(i) + "]");
    uint32_t id = static_cast<uint32_t>(t.u64("id", kMaxTokenId));
    std::string content = t.str("content");
    if (id >= id_to_bytes.size())
      id_to_bytes.resize(id + 1), present.resize(id + 1, false), special.resize(id + 1, false);
    id_to_bytes[id] = content;
    present[id] = true;
    special[id] = true;
    added[content] = id;
  }
  bool found = false;
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>"}) {
    auto it = added.find(name);
    if (it == added.end()) {
      auto v = vocab.raw().find(name);
      if (v == vocab.raw().end()) continue;
      cfg.eot = v->get<uint32_t>();  // checked by load_byte_level_vocab
    } else {
      cfg.eot = it->second;
    }
    found = true;
    break;
  }
  if (!found)
    throw UsageError(
        file_message("tokenizer file", path, "has no end-of-text token (<|endoftext|>, <|end_of_text|>, </s>, <eos>)"));
  auto tok = make_bpe(cfg, id_to_bytes, special, path);
  if (!tok->has_all_bytes())
    throw UsageError(file_message("tokenizer file", path, "is not a byte-level BPE vocabulary (a byte has no token)"));
  const json& merges = model.has("merges") ? model.array("merges") : no_tokens;
  std::string ab, bb;
  for (uint32_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    const std::string key = "merges[" + std::to_string(rank) + "]";
    std::string a, b;
    if (m.is_string()) {
      std::string s = m.get<std::string>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos) model.fail_value(key, m, "\"a b\" (two tokens and a space)");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      model.fail_value(key, m, "\"a b\" or [\"a\", \"b\"]");
    }
    if (!byte_level_to_bytes(a, ab) || !byte_level_to_bytes(b, bb) || !tok->add_merge(ab, bb, rank))
      model.fail_value(key, m, "a merge of two vocabulary tokens into a vocabulary token");
  }
  return tok;
}

}  // namespace

std::unique_ptr<Tokenizer> load(const Spec& spec) {
  if (spec.type == "bytes") return std::make_unique<BytesTokenizer>();
  if (spec.type == "gpt2") return load_gpt2(spec.vocab, spec.merges);
  if (spec.type == "hf") return load_hf(spec.tokenizer_json);
  throw UsageError("unknown tokenizer \"" + spec.type + "\" (bytes, gpt2, hf)");
}

std::unique_ptr<Tokenizer> load_from_description(const json& d, const std::string& dataset_dir) {
  // The description is index.json's "tokenizer" object: errors name that file and key.
  JsonFields desc(d, join_path(dataset_dir, "index.json"), "dataset index", "tokenizer");
  Spec spec;
  spec.type = desc.str("type");
  if (spec.type != "bytes" && spec.type != "gpt2" && spec.type != "hf")
    desc.fail("type", "\"bytes\", \"gpt2\" or \"hf\"");
  const json no_files = json::object();
  const JsonFields files =
      desc.has("files") ? desc.object("files") : JsonFields(no_files, desc.file(), "dataset index", "tokenizer.files");
  auto resolve = [&](const char* role) -> std::string {
    std::string f = files.str_or(role, "");
    if (f.empty()) return "";
    return std::filesystem::path(f).is_absolute() ? f : join_path(dataset_dir, f);
  };
  spec.vocab = resolve("vocab");
  spec.merges = resolve("merges");
  spec.tokenizer_json = resolve("tokenizer_json");
  const std::string want_id = desc.str_or("id", "");
  auto tok = load(spec);
  if (!want_id.empty() && want_id != tok->id())
    throw UsageError(strprintf("tokenizer files in %s do not match the dataset (id %s, files give %s)",
                               dataset_dir.c_str(), want_id.c_str(), tok->id().c_str()));
  return tok;
}

std::unique_ptr<Tokenizer> load_for_dataset(const std::string& dataset_dir) {
  std::string path = join_path(dataset_dir, "index.json");
  json index = parse_json_text(read_tokenizer_file(path), path, "dataset index");
  JsonFields ix(index, path, "dataset index");
  if (!ix.has("tokenizer")) throw UsageError(file_message("dataset index", path, "has no tokenizer"));
  return load_from_description(ix.raw().at("tokenizer"), dataset_dir);
}

}  // namespace cairn::tokenizer
