// BPE shared by the gpt2 and hf tokenizers (byte-level, or SentencePiece-style with byte fallback):
// added-token matching, pre-tokenizer levels, a per-thread word cache and the merge loop over flat tables.
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>

#include "cairn/error.h"
#include "cairn/log.h"
#include "internal.h"

namespace cairn::tokenizer::detail {

namespace {

using json = nlohmann::json;

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

std::atomic<uint64_t> g_tokenizer_serial{1};

// (left id, right id) -> (rank, merged id) in one open-addressing array: one multiply and usually one
// cache line per lookup (std::unordered_map chases a pointer per node).
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0, merged = 0;
  };
  static constexpr uint64_t kEmpty = UINT64_MAX;  // ids are < 2^24, so no real key is all ones
  // Keeps the first (lowest) rank of a pair, as the reference encoders do.
  void insert(uint32_t a, uint32_t b, uint32_t rank, uint32_t merged) {
    if ((used_ + 1) * 4 > slots_.size() * 3) grow();  // at most 3/4 full: small enough to stay in cache
    uint64_t key = pack(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      Entry& e = slots_[i];
      if (e.key == key) return;
      if (e.key == kEmpty) {
        e = {key, rank, merged};
        ++used_;
        return;
      }
    }
  }
  const Entry* find(uint32_t a, uint32_t b) const {
    if (slots_.empty()) return nullptr;
    uint64_t key = pack(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }

 private:
  static uint64_t pack(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }
  // The product's top bits depend on every bit of both ids (low bits would ignore the left id).
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ULL) >> shift_; }
  void grow() {
    std::vector<Entry> old(std::max<size_t>(1024, slots_.size() * 2));
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(slots_.size()));
    used_ = 0;
    for (const Entry& e : old)
      if (e.key != kEmpty) insert(static_cast<uint32_t>(e.key >> 32), static_cast<uint32_t>(e.key), e.rank, e.merged);
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0, used_ = 0;
  unsigned shift_ = 64;
};

// Byte string -> id over the vocabulary's own strings (no copies): open addressing on XXH3, for the
// whole-word lookups of ignore_merges and for resolving merges at load.
class VocabIndex {
 public:
  void build(const std::vector<std::string>& id_to_bytes, const std::vector<bool>& skip) {
    strings_ = &id_to_bytes;
    size_t n = 1024;
    while (n < id_to_bytes.size() * 2) n *= 2;
    slots_.assign(n, kEmpty);
    mask_ = n - 1;
    for (uint32_t id = 0; id < id_to_bytes.size(); ++id) {
      if (skip[id] || id_to_bytes[id].empty() || find(id_to_bytes[id]) != kEmpty) continue;  // first id wins
      size_t i = XXH3_64bits(id_to_bytes[id].data(), id_to_bytes[id].size()) & mask_;
      while (slots_[i] != kEmpty) i = (i + 1) & mask_;
      slots_[i] = id;
    }
  }
  static constexpr uint32_t kEmpty = UINT32_MAX;
  [[gnu::always_inline]] uint32_t find(std::string_view s) const {
    for (size_t i = XXH3_64bits(s.data(), s.size()) & mask_;; i = (i + 1) & mask_) {
      uint32_t id = slots_[i];
      if (id == kEmpty || (*strings_)[id] == s) return id;
    }
  }

 private:
  const std::vector<std::string>* strings_ = nullptr;
  std::vector<uint32_t> slots_;
  size_t mask_ = 0;
};

// Per-thread cache of word -> ids, an open-addressing table over flat key/value arrays (no
// allocation per entry); tagged with the tokenizer's serial so tokenizers never share entries.
struct WordCache {
  // Direct-mapped entries for words of up to 16 bytes and 3 tokens (most words of real text), 32 bytes
  // each, keys compared as two words.
  static constexpr size_t kHotKey = 16, kHotIds = 3, kHotSlots = 16384;
  struct Hot {
    uint64_t k0 = 0, k1 = 0;
    uint32_t ids[kHotIds] = {};
    uint8_t len = 0, n = 0;  // len 0 = empty
    void set(uint64_t a, uint64_t b, size_t word_len, const uint32_t* v, size_t count) {
      if (count > kHotIds) return;
      k0 = a, k1 = b, len = static_cast<uint8_t>(word_len), n = static_cast<uint8_t>(count);
      std::memcpy(ids, v, count * sizeof(uint32_t));
    }
  };
  static size_t hot_slot(uint64_t a, uint64_t b, size_t len) {
    uint64_t h = (a ^ (b * 0xC2B2AE3D27D4EB4FULL) ^ len) * 0x9E3779B97F4A7C15ULL;
    return (h ^ (h >> 32)) * 0x9E3779B97F4A7C15ULL >> 50;  // top 14 bits: kHotSlots = 16384
  }
  std::vector<Hot> hot;
  struct Slot {  // 16 bytes: keys are at most 64 bytes, values at most 64 ids
    uint32_t hash = 0;
    uint32_t key_off = 0, val_off = 0;
    uint8_t key_len = 0, val_len = 0;  // key_len 0 = empty slot
  };
  uint64_t serial = 0;
  std::vector<Slot> slots;
  std::string keys;
  std::vector<uint32_t> vals;
  size_t used = 0;
  void reset() {
    hot.assign(kHotSlots, Hot{});
    slots.assign(1 << 14, Slot{});
    keys.clear();
    vals.clear();
    used = 0;
  }
  const Slot* find(std::string_view w, uint64_t h) const {
    size_t mask = slots.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots[i];
      if (s.key_len == 0) return nullptr;
      if (s.hash == static_cast<uint32_t>(h) && s.key_len == w.size() &&
          std::memcmp(keys.data() + s.key_off, w.data(), w.size()) == 0)
        return &s;
    }
  }
  void insert(std::string_view w, uint64_t h, const uint32_t* ids, size_t n) {
    if (used * 2 >= slots.size()) {
      if (slots.size() >= (1u << 20)) {  // 16 MiB of slots per thread at most
        reset();                         // bounded memory: start over rather than grow without limit
      } else {                           // grow x2 and reinsert
        std::vector<Slot> old(slots.size() * 2);
        old.swap(slots);
        size_t mask = slots.size() - 1;
        for (const Slot& s : old) {
          if (s.key_len == 0) continue;
          size_t i = s.hash & mask;  // masks stay below 2^32
          while (slots[i].key_len != 0) i = (i + 1) & mask;
          slots[i] = s;
        }
      }
    }
    size_t mask = slots.size() - 1, i = h & mask;
    while (slots[i].key_len != 0) i = (i + 1) & mask;
    Slot& s = slots[i];
    s.hash = static_cast<uint32_t>(h);
    s.key_off = static_cast<uint32_t>(keys.size());
    s.key_len = static_cast<uint8_t>(w.size());
    s.val_off = static_cast<uint32_t>(vals.size());
    s.val_len = static_cast<uint8_t>(n);
    keys.append(w);
    vals.insert(vals.end(), ids, ids + n);
    ++used;
  }
};

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(BpeConfig cfg, std::vector<std::string> id_to_bytes, std::vector<bool> is_special)
      : cfg_(std::move(cfg)), id_to_bytes_(std::move(id_to_bytes)), is_special_(std::move(is_special)) {
    for (uint32_t id = 0; id < id_to_bytes_.size(); ++id)
      if (is_special_[id] && !id_to_bytes_[id].empty()) specials_.emplace_back(id_to_bytes_[id], id);
    vocab_.build(id_to_bytes_, is_special_);
    // Longest special first so that overlapping specials match greedily (leftmost-longest, as
    // Hugging Face's added-vocabulary matcher does).
    std::sort(specials_.begin(), specials_.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    for (auto& [s, id] : specials_) special_first_[static_cast<unsigned char>(s[0])] = true;
    byte_id_.fill(UINT32_MAX);
    for (int b = 0; b < 256; ++b) byte_id_[b] = vocab_.find(std::string(1, static_cast<char>(b)));
    for (int b = 0; b < 256; ++b) fallback_id_[b] = vocab_.find(strprintf("<0x%02X>", b));
    for (size_t i = 0; i < cfg_.split_patterns.size(); ++i) {
      const std::string& p = cfg_.split_patterns[i];
      splitters_.push_back(std::make_unique<RegexSplitter>(p));
      behaviors_.push_back(i < cfg_.split_behaviors.size() ? cfg_.split_behaviors[i] : SplitBehavior::Isolated);
      invert_.push_back(i < cfg_.split_invert.size() && cfg_.split_invert[i]);
      // The hand-written splitters do Isolated, not inverted, only.
      bool plain = behaviors_.back() == SplitBehavior::Isolated && !invert_.back();
      fast_.push_back(plain ? fast_splitter_for(p) : nullptr);
    }
    space_split_ = can_split_at_spaces();
  }

  // SentencePiece-style files without a pre-tokenizer make the whole document one word: no cache, a heap
  // merge over thousands of symbols. When no token holds the space symbol after another character (▁
  // only in a leading run, as SentencePiece trains them) and ▁ itself is a token, no merge can cross
  // the point before a ▁ that follows another character, so cutting words there gives the same tokens
  // (and unknown characters on both sides never fuse: ▁ between them is known).
  bool can_split_at_spaces() const {
    const std::string& sym = cfg_.space_symbol;
    // ignore_merges looks the whole word up first: cutting it would change which words are looked up.
    if (cfg_.byte_level || cfg_.ignore_merges || sym.empty() || vocab_.find(sym) == VocabIndex::kEmpty) return false;
    for (uint32_t id = 0; id < id_to_bytes_.size(); ++id) {
      if (is_special_[id]) continue;
      const std::string& t = id_to_bytes_[id];
      for (size_t p = t.find(sym, 1); p != std::string::npos; p = t.find(sym, p + 1))
        if (p < sym.size() || t.compare(p - sym.size(), sym.size(), sym) != 0) return false;
    }
    return true;
  }
  // Cuts before each space symbol that follows another character ("▁the▁▁cat" -> "▁the", "▁▁cat").
  void split_at_spaces(std::string_view text, std::vector<std::string_view>& words) const {
    const std::string& sym = cfg_.space_symbol;
    size_t begin = 0, prev_end = std::string_view::npos;
    for (size_t p = text.find(sym); p != std::string_view::npos; p = text.find(sym, prev_end)) {
      if (p > begin && p != prev_end) words.push_back(text.substr(begin, p - begin)), begin = p;
      prev_end = p + sym.size();
    }
    if (begin < text.size()) words.push_back(text.substr(begin));
  }

  bool add_merge(const std::string& a, const std::string& b, uint32_t rank) {
    thread_local std::string ab;
    ab.assign(a).append(b);
    uint32_t ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(ab);
    if (ia == VocabIndex::kEmpty || ib == VocabIndex::kEmpty || im == VocabIndex::kEmpty) return false;
    merges_.insert(ia, ib, rank, im);
    return true;
  }
  bool has_fallback(std::string_view chars) const {
    return std::all_of(chars.begin(), chars.end(),
                       [&](char c) { return fallback_id_[static_cast<unsigned char>(c)] != UINT32_MAX; });
  }
  // Byte-level: every byte has a token; SentencePiece-style with byte_fallback: every <0xNN> exists.
  bool has_all_bytes() const {
    const auto& ids = cfg_.byte_level ? byte_id_ : fallback_id_;
    return std::all_of(ids.begin(), ids.end(), [](uint32_t v) { return v != UINT32_MAX; });
  }
  std::string id() const override { return cfg_.id; }
  std::string type() const override { return cfg_.type; }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(id_to_bytes_.size()); }
  uint32_t eot_id() const override { return cfg_.eot; }

  void encode_into(std::string_view text, std::vector<uint32_t>& out) const override {
    // Everything below (PCRE2 without its UTF check, the hand-written splitters) reads valid UTF-8 only.
    size_t bad = find_invalid_utf8(text);
    if (bad != std::string_view::npos)
      throw UsageError(
          strprintf("text is not valid UTF-8 (byte %zu of %zu); tokenizers take UTF-8 only", bad, text.size()));
    if (specials_.empty()) return encode_ordinary(text, true, out);
    // Added tokens are matched literally before the pre-tokenizer, as Hugging Face does.
    const size_t n = text.size();
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    size_t start = 0, i = 0;
    while (i < n) {
      while (i < n && !special_first_[p[i]]) ++i;  // the per-byte scan: kept a tight loop of its own
      if (i == n) break;
      size_t len = 0;
      for (auto& [s, sid] : specials_) {
        if (text.compare(i, s.size(), s) == 0) {
          encode_ordinary(text.substr(start, i - start), start == 0, out);
          out.push_back(sid);
          len = s.size();
          break;
        }
      }
      i += len ? len : 1;
      if (len) start = i;
    }
    encode_ordinary(text.substr(start), start == 0, out);
  }

  std::string decode(const uint32_t* ids, size_t n) const override {
    std::string s;
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] >= id_to_bytes_.size())
        throw UsageError(strprintf("token id %u is outside the vocabulary (size %zu)", ids[i], id_to_bytes_.size()));
      if (cfg_.byte_level) s += id_to_bytes_[ids[i]];
      else decode_piece(ids[i], s);
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
  // SentencePiece-style tokens: <0xNN> is its byte, the space symbol a space (the normalized text).
  void decode_piece(uint32_t id, std::string& s) const {
    const std::string& t = id_to_bytes_[id];
    if (cfg_.byte_fallback && t.size() == 6 && fallback_id_[std::strtoul(t.c_str() + 3, nullptr, 16) & 0xFF] == id)
      return void(s.push_back(static_cast<char>(std::strtoul(t.c_str() + 3, nullptr, 16))));
    if (cfg_.space_symbol.empty()) return void(s += t);
    size_t pos = 0;
    for (size_t hit; (hit = t.find(cfg_.space_symbol, pos)) != std::string::npos; pos = hit + cfg_.space_symbol.size())
      s.append(t, pos, hit - pos).push_back(' ');
    s.append(t, pos);
  }

  // `first`: the text starts the document (Metaspace's prepend_scheme "first"). Files without a
  // normalizer (most byte-level ones) go straight to the pre-tokenizer: no new work per byte.
  // Not inlined: encode_into's per-byte scan for added tokens compiles tighter on its own.
  [[gnu::noinline]] void encode_ordinary(std::string_view text, bool first, std::vector<uint32_t>& out) const {
    if (text.empty()) return;
    if (!cfg_.normalizers.empty()) return encode_normalized(text, first, out);
    encode_pretokenized(text, out);
  }
  [[gnu::noinline]] void encode_normalized(std::string_view text, bool first, std::vector<uint32_t>& out) const {
    std::string normalized;
    normalize(cfg_.normalizers, text, first, normalized);
    if (!normalized.empty()) encode_pretokenized(normalized, out);
  }
  void encode_pretokenized(std::string_view text, std::vector<uint32_t>& out) const {
    std::string prefixed;
    if (cfg_.add_prefix_space && text[0] != ' ') {
      // Built by append: GCC 12 warns falsely (-Wrestrict) on `" " + std::string`.
      prefixed.reserve(text.size() + 1);
      prefixed.append(1, ' ').append(text);
      text = prefixed;
    }
    thread_local std::vector<std::string_view> words;
    words.clear();
    split_level(text, 0, words);
    encode_words(words, out);
  }

  struct LevelCtx {
    const BpeTokenizer* self;
    std::string_view text;
    size_t level;
    std::vector<std::string_view>* words;
  };
  static void on_piece(void* p, size_t b, size_t n) {
    auto* c = static_cast<LevelCtx*>(p);
    c->self->split_level(c->text.substr(b, n), c->level + 1, *c->words);
  }
  // Appends the words (pieces of the last level) of `text` to `words`.
  void split_level(std::string_view text, size_t level, std::vector<std::string_view>& words) const {
    if (level == splitters_.size()) return space_split_ ? split_at_spaces(text, words) : words.push_back(text);
    LevelCtx ctx{this, text, level, &words};
    if (fast_[level]) fast_[level]->split(text, on_piece, &ctx);
    else if (behaviors_[level] == SplitBehavior::Isolated && !invert_[level])
      regex_split_trusted(*splitters_[level], text, on_piece, &ctx);
    else regex_split_behavior(*splitters_[level], text, behaviors_[level], invert_[level], on_piece, &ctx);
  }

  void encode_words(const std::vector<std::string_view>& words, std::vector<uint32_t>& out) const;
  void bpe_word(std::string_view word, uint64_t hash, std::vector<uint32_t>& out) const;
  void merge_small(std::vector<uint32_t>& sym) const;
  void merge_large(std::vector<uint32_t>& sym) const;
  void char_symbols(std::string_view word, std::vector<uint32_t>& sym) const;

  BpeConfig cfg_;
  std::vector<std::string> id_to_bytes_;
  std::vector<bool> is_special_;
  VocabIndex vocab_;  // non-special tokens' bytes -> id
  std::vector<std::pair<std::string, uint32_t>> specials_;
  std::array<bool, 256> special_first_{};  // bytes some added token starts with
  std::array<uint32_t, 256> byte_id_{};
  std::array<uint32_t, 256> fallback_id_{};  // <0xNN> tokens (SentencePiece-style byte fallback)
  MergeTable merges_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;
  std::vector<SplitBehavior> behaviors_;   // per level
  std::vector<bool> invert_;               // per level
  std::vector<const FastSplitter*> fast_;  // hand-written equivalent of a level's regex, if any
  bool space_split_ = false;               // words are also cut before ▁ (can_split_at_spaces)
  uint64_t serial_ = g_tokenizer_serial.fetch_add(1);
};

// Words up to this many symbols merge in fixed arrays; longer ones use a heap (O(n log n)), so a
// megabyte without whitespace cannot take quadratic time.
constexpr size_t kSmallWord = 64;

// The reference rule (OpenAI's encoder): take the lowest-ranked adjacent pair and merge every
// occurrence of it, left to right; repeat until no pair has a rank. Ranks of pairs that did not
// change are kept from the previous round, so a round costs a scan plus lookups for new pairs only.
void BpeTokenizer::merge_small(std::vector<uint32_t>& sym) const {
  size_t m = sym.size();
  uint32_t rk[kSmallWord], mg[kSmallWord];
  bool fresh[kSmallWord];
  auto lookup = [&](size_t k) {
    const MergeTable::Entry* e = merges_.find(sym[k], sym[k + 1]);
    rk[k] = e ? e->rank : UINT32_MAX;
    mg[k] = e ? e->merged : 0;
  };
  for (size_t k = 0; k + 1 < m; ++k) lookup(k);
  while (m > 1) {
    uint32_t best = UINT32_MAX;
    for (size_t k = 0; k + 1 < m; ++k) best = std::min(best, rk[k]);
    if (best == UINT32_MAX) break;
    size_t w = 0;
    for (size_t k = 0; k < m; ++w) {
      if (k + 1 < m && rk[k] == best) {
        sym[w] = mg[k], fresh[w] = true, k += 2;
      } else {  // unchanged: its pair with the next symbol keeps its rank unless that one merged
        sym[w] = sym[k], rk[w] = rk[k], mg[w] = mg[k], fresh[w] = false, k += 1;
      }
    }
    m = w;
    for (size_t k = 0; k + 1 < m; ++k)
      if (fresh[k] || fresh[k + 1]) lookup(k);
  }
  sym.resize(m);
}

// Same rule on a linked list with a (rank, position) min-heap: each round pops every pair of the lowest
// rank (in position order, i.e. left to right) and merges those still present.
void BpeTokenizer::merge_large(std::vector<uint32_t>& sym) const {
  const size_t n = sym.size();
  constexpr uint32_t kDead = UINT32_MAX, kNone = UINT32_MAX;
  std::vector<uint32_t> next(n), prev(n);
  for (size_t k = 0; k < n; ++k) next[k] = k + 1 < n ? k + 1 : kNone, prev[k] = k ? k - 1 : kNone;
  using Item = std::pair<uint32_t, uint32_t>;  // (rank, left position)
  std::vector<Item> heap;
  auto push = [&](uint32_t p) {
    if (p == kNone || next[p] == kNone) return;
    if (const MergeTable::Entry* e = merges_.find(sym[p], sym[next[p]])) {
      heap.emplace_back(e->rank, p);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (uint32_t p = 0; p + 1 < n; ++p) push(p);
  std::vector<uint32_t> round;
  while (!heap.empty()) {
    const uint32_t rank = heap.front().first;
    round.clear();
    while (!heap.empty() && heap.front().first == rank) {
      round.push_back(heap.front().second);
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      heap.pop_back();
    }
    for (uint32_t p : round) {
      if (sym[p] == kDead || next[p] == kNone) continue;
      const MergeTable::Entry* e = merges_.find(sym[p], sym[next[p]]);
      if (!e || e->rank != rank) continue;  // stale: a neighbour merged first
      uint32_t q = next[p];
      sym[p] = e->merged;
      sym[q] = kDead;
      next[p] = next[q];
      if (next[q] != kNone) prev[next[q]] = p;
      push(prev[p]);
      push(p);
    }
  }
  size_t w = 0;
  for (uint32_t p = 0; p != kNone; p = next[p]) sym[w++] = sym[p];
  sym.resize(w);
}

thread_local WordCache t_cache;

// SentencePiece-style start of a word, as Hugging Face's BPE model does it: each character is its token;
// one without a token becomes its <0xNN> byte tokens (byte_fallback, when all of them exist), else the
// unk token, consecutive unknown characters one unk when fuse_unk (the loader refuses files without unk
// where a character could find neither).
[[gnu::noinline]] void BpeTokenizer::char_symbols(std::string_view word, std::vector<uint32_t>& sym) const {
  bool unk_pending = false;
  for (size_t i = 0; i < word.size();) {
    auto c = static_cast<unsigned char>(word[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    uint32_t id = len == 1 ? byte_id_[c] : vocab_.find(word.substr(i, len));
    if (id != VocabIndex::kEmpty) {
      if (unk_pending) sym.push_back(cfg_.unk), unk_pending = false;
      sym.push_back(id);
    } else if (cfg_.byte_fallback && has_fallback(word.substr(i, len))) {
      // As Hugging Face does, a pending unk is not written before the byte tokens (it follows them).
      for (size_t k = 0; k < len; ++k) sym.push_back(fallback_id_[static_cast<unsigned char>(word[i + k])]);
    } else {
      if (unk_pending && !cfg_.fuse_unk) sym.push_back(cfg_.unk);
      unk_pending = true;
    }
    i += len;
  }
  if (unk_pending) sym.push_back(cfg_.unk);
}

// Cache lookups are memory-bound (cold passes miss in both tables): hashes are computed a few words
// ahead and the slots prefetched, so the misses of neighbouring words overlap.
void BpeTokenizer::encode_words(const std::vector<std::string_view>& words, std::vector<uint32_t>& out) const {
  WordCache& cache = t_cache;
  if (cache.serial != serial_ || cache.slots.empty() || cache.keys.size() > (1u << 30)) {
    cache.reset();
    cache.serial = serial_;
  }
  constexpr size_t kAhead = 8;
  thread_local std::vector<uint64_t> hashes;
  hashes.resize(words.size());
  auto prefetch = [&](size_t i) {
    std::string_view w = words[i];
    if (w.size() < 2 || w.size() > 64) return;
    if (w.size() <= WordCache::kHotKey) {
      uint64_t k0 = 0, k1 = 0;
      std::memcpy(&k0, w.data(), std::min<size_t>(8, w.size()));
      if (w.size() > 8) std::memcpy(&k1, w.data() + 8, w.size() - 8);
      __builtin_prefetch(&cache.hot[WordCache::hot_slot(k0, k1, w.size())]);
    }
    hashes[i] = XXH3_64bits(w.data(), w.size());
    __builtin_prefetch(&cache.slots[hashes[i] & (cache.slots.size() - 1)]);
  };
  for (size_t i = 0; i < std::min(kAhead, words.size()); ++i) prefetch(i);
  for (size_t i = 0; i < words.size(); ++i) {
    if (i + kAhead < words.size()) prefetch(i + kAhead);
    bpe_word(words[i], hashes[i], out);
  }
}

// `hash` is XXH3 of the word for words of 2..64 bytes (the cacheable ones).
void BpeTokenizer::bpe_word(std::string_view word, uint64_t hash, std::vector<uint32_t>& out) const {
  if (word.empty()) return;
  if (word.size() == 1 && cfg_.byte_level) {  // spaces, punctuation: one byte is one token, no cache needed
    out.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    return;
  }
  WordCache& cache = t_cache;
  // Short words first try the small direct-mapped table (stays in L2), then the large one.
  WordCache::Hot* hot = nullptr;
  uint64_t k0 = 0, k1 = 0;
  if (word.size() <= WordCache::kHotKey) {
    std::memcpy(&k0, word.data(), std::min<size_t>(8, word.size()));
    if (word.size() > 8) std::memcpy(&k1, word.data() + 8, word.size() - 8);
    hot = &cache.hot[WordCache::hot_slot(k0, k1, word.size())];
    if (hot->len == word.size() && hot->k0 == k0 && hot->k1 == k1) {
      out.insert(out.end(), hot->ids, hot->ids + hot->n);
      return;
    }
  }
  const bool cacheable = word.size() >= 2 && word.size() <= 64;  // `hash` is set for these only
  const uint64_t h = hash;
  if (cacheable) {
    if (const WordCache::Slot* hit = cache.find(word, h)) {
      const uint32_t* ids = cache.vals.data() + hit->val_off;
      out.insert(out.end(), ids, ids + hit->val_len);
      if (hot) hot->set(k0, k1, word.size(), ids, hit->val_len);
      return;
    }
  }
  thread_local std::vector<uint32_t> sym;
  sym.clear();
  const uint32_t whole = cfg_.ignore_merges ? vocab_.find(word) : VocabIndex::kEmpty;
  if (whole != VocabIndex::kEmpty) {
    sym.push_back(whole);  // ignore_merges: a word in the vocabulary is one token
  } else {
    if (cfg_.byte_level)
      for (unsigned char c : word) sym.push_back(byte_id_[c]);
    else char_symbols(word, sym);
    if (sym.size() <= kSmallWord) merge_small(sym);
    else merge_large(sym);
  }
  out.insert(out.end(), sym.begin(), sym.end());
  if (cacheable) cache.insert(word, h, sym.data(), sym.size());
  if (hot) hot->set(k0, k1, word.size(), sym.data(), sym.size());
}

}  // namespace

bool byte_level_to_bytes(std::string_view s, std::string& out) {
  static const ByteUnicode bu;
  out.clear();
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

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const BpeConfig& cfg, std::vector<std::string> id_to_bytes,
                                              std::vector<bool> is_special) {
  return std::make_unique<BpeTokenizer>(cfg, std::move(id_to_bytes), std::move(is_special));
}

bool bpe_add_merge(Tokenizer& tok, const std::string& a, const std::string& b, uint32_t rank) {
  return static_cast<BpeTokenizer&>(tok).add_merge(a, b, rank);
}

bool bpe_has_all_bytes(const Tokenizer& tok) { return static_cast<const BpeTokenizer&>(tok).has_all_bytes(); }

}  // namespace cairn::tokenizer::detail
