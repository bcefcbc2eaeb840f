// BPE shared by the gpt2 and hf tokenizers (byte-level, or SentencePiece-style with byte fallback):
// added-token matching, pre-tokenizer levels, a per-thread word cache and the merge loop over flat tables.
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>

#include <sys/mman.h>

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

// Allocator for the big lookup tables (merge pairs, word cache): blocks of 1 MiB or more are 2 MiB-aligned
// and asked to be backed by transparent huge pages, so the random lookups of a cold pass do not also
// miss in the TLB (the system may refuse; then they are ordinary pages).
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t{2} << 20, kMin = size_t{1} << 20;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMin) return static_cast<T*>(::operator new(bytes));
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, rounded);
    if (!p) throw std::bad_alloc();
    madvise(p, rounded, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kMin) ::operator delete(p);
    else std::free(p);
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};
template <typename T>
using HugeVector = std::vector<T, HugePageAllocator<T>>;

// (left id, right id) -> (rank, merged id) in one open-addressing array: one multiply and usually one
// cache line per lookup (std::unordered_map chases a pointer per node). While every id and rank fits
// 16 bits (GPT-2: 50,257 tokens, 50,000 merges) an entry is 8 bytes, so GPT-2's table is 1 MiB and its
// used part stays in L2: the merge loop of a cold pass is bound by these lookups.
class MergeTable {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;  // find: no merge for the pair
  explicit MergeTable(size_t vocab_size = 0) : compact_(vocab_size < 0xFFFF) {}
  // Keeps the first (lowest) rank of a pair, as the reference encoders do.
  void insert(uint32_t a, uint32_t b, uint32_t rank, uint32_t merged) {
    if (compact_ && (rank >= 0xFFFF || a >= 0xFFFF || b >= 0xFFFF || merged >= 0xFFFF)) to_wide();
    if (compact_) insert_compact(a, b, rank, merged);
    else insert_wide(a, b, rank, merged);
  }
  // The rank of merging (a, b) and the merged id, or kNone.
  [[gnu::always_inline]] uint32_t find(uint32_t a, uint32_t b, uint32_t& merged) const {
    if (compact_) {
      if (small_.empty()) return kNone;
      const uint32_t key = (a << 16) | b;
      for (size_t i = (key * 0x9E3779B97F4A7C15ULL) >> shift_;; i = (i + 1) & mask_) {
        const uint64_t e = small_[i];
        if (static_cast<uint32_t>(e >> 32) == key) {
          merged = e & 0xFFFF;
          return (e >> 16) & 0xFFFF;
        }
        if (e == kSmallEmpty) return kNone;
      }
    }
    if (slots_.empty()) return kNone;
    const uint64_t key = pack(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) {
        merged = e.merged;
        return e.rank;
      }
      if (e.key == kEmpty) return kNone;
    }
  }

 private:
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0, merged = 0;
  };
  static constexpr uint64_t kEmpty = UINT64_MAX;       // ids are < 2^24, so no real key is all ones
  static constexpr uint64_t kSmallEmpty = UINT64_MAX;  // compact ids are < 0xFFFF: no real key is all ones
  static uint64_t pack(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }
  // The product's top bits depend on every bit of both ids (low bits would ignore the left id).
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ULL) >> shift_; }
  void resize_for(size_t slots) {
    mask_ = slots - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(slots));
  }
  void insert_compact(uint32_t a, uint32_t b, uint32_t rank, uint32_t merged) {
    if ((used_ + 1) * 2 > small_.size()) {  // at most half full: a missing pair is found absent in ~2 probes
      HugeVector<uint64_t> old(std::max<size_t>(1024, small_.size() * 2), kSmallEmpty);
      old.swap(small_);
      resize_for(small_.size());
      used_ = 0;
      for (uint64_t e : old)
        if (e != kSmallEmpty) insert_compact(e >> 48, (e >> 32) & 0xFFFF, (e >> 16) & 0xFFFF, e & 0xFFFF);
    }
    const uint32_t key = (a << 16) | b;
    for (size_t i = (key * 0x9E3779B97F4A7C15ULL) >> shift_;; i = (i + 1) & mask_) {
      uint64_t& e = small_[i];
      if (static_cast<uint32_t>(e >> 32) == key && e != kSmallEmpty) return;
      if (e == kSmallEmpty) {
        e = (static_cast<uint64_t>(key) << 32) | (rank << 16) | merged;
        ++used_;
        return;
      }
    }
  }
  void to_wide() {
    compact_ = false;
    HugeVector<uint64_t> old;
    old.swap(small_);
    used_ = 0;
    mask_ = 0, shift_ = 64;
    for (uint64_t e : old)
      if (e != kSmallEmpty) insert_wide(e >> 48, (e >> 32) & 0xFFFF, (e >> 16) & 0xFFFF, e & 0xFFFF);
  }
  void insert_wide(uint32_t a, uint32_t b, uint32_t rank, uint32_t merged) {
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
  void grow() {
    std::vector<Entry> old(std::max<size_t>(1024, slots_.size() * 2));
    old.swap(slots_);
    resize_for(slots_.size());
    used_ = 0;
    for (const Entry& e : old)
      if (e.key != kEmpty)
        insert_wide(static_cast<uint32_t>(e.key >> 32), static_cast<uint32_t>(e.key), e.rank, e.merged);
  }
  bool compact_;
  HugeVector<uint64_t> small_;
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

// A word of up to 16 bytes as two little-endian words, zero-padded: the key of the short-word table.
// `end` is the end of the buffer the word lies in: when 16 bytes from the word's start are inside it, two
// fixed loads and masks replace variable-length copies (which stall on store forwarding).
struct ShortKey {
  uint64_t k0 = 0, k1 = 0;
};
[[gnu::always_inline]] inline ShortKey short_key(const char* p, size_t len, const char* end) {
  ShortKey k;
  if (end - p >= 16) {
    std::memcpy(&k.k0, p, 8);
    std::memcpy(&k.k1, p + 8, 8);
    const uint64_t m0 = len >= 8 ? ~0ULL : (1ULL << (8 * len)) - 1;
    const uint64_t m1 = len >= 16 ? ~0ULL : len <= 8 ? 0 : (1ULL << (8 * (len - 8))) - 1;
    k.k0 &= m0, k.k1 &= m1;
  } else {
    std::memcpy(&k.k0, p, std::min<size_t>(8, len));
    if (len > 8) std::memcpy(&k.k1, p + 8, len - 8);
  }
  return k;
}
[[gnu::always_inline]] inline uint64_t short_hash(const ShortKey& k, size_t len) {
  uint64_t h = (k.k0 ^ (k.k1 * 0xC2B2AE3D27D4EB4FULL) ^ len) * 0x9E3779B97F4A7C15ULL;
  return (h ^ (h >> 32)) * 0x9E3779B97F4A7C15ULL;  // the top bits pick the slot
}

// Per-thread cache of word -> ids, tagged with the tokenizer's serial so tokenizers never share entries.
// Words of 2..16 bytes (nearly all words of real text) live in one open-addressing table whose 32-byte
// slots hold the key and up to 3 ids inline: a lookup is one hash of two registers and usually one cache
// line. Longer words (17..64 bytes) use a table over flat key/value arrays hashed with XXH3.
struct WordCache {
  static constexpr size_t kShortKey = 16, kInlineIds = 3;
  struct Short {
    uint64_t k0 = 0, k1 = 0;
    uint32_t ids[kInlineIds] = {};  // n <= 3: the ids; else ids[0] is an offset into `vals`
    uint8_t len = 0, n = 0;         // len 0 = empty
    uint16_t pad = 0;
  };
  static_assert(sizeof(Short) == 32);
  struct Slot {  // 16 bytes: keys are at most 64 bytes, values at most 64 ids
    uint32_t hash = 0;
    uint32_t key_off = 0, val_off = 0;
    uint8_t key_len = 0, val_len = 0;  // key_len 0 = empty slot
  };
  static constexpr unsigned kShortBits0 = 15, kShortBitsMax = 20;  // 1 MiB .. 32 MiB of short slots
  uint64_t serial = 0;
  HugeVector<Short> shorts;
  unsigned short_shift = 64 - kShortBits0;
  size_t short_used = 0;
  std::vector<Slot> slots;
  std::string keys;
  std::vector<uint32_t> vals;
  size_t used = 0;
  // Empties the tables but keeps their sizes: a thread that needed big tables will again, and clearing
  // memory already mapped costs far less than growing (rehashing, page faults) every time.
  void reset() {
    if (shorts.empty()) shorts.resize(size_t{1} << kShortBits0);
    else std::fill(shorts.begin(), shorts.end(), Short{});
    short_shift = 64 - static_cast<unsigned>(__builtin_ctzll(shorts.size()));
    short_used = 0;
    if (slots.empty()) slots.resize(1 << 12);
    else std::fill(slots.begin(), slots.end(), Slot{});
    keys.clear();
    vals.clear();
    used = 0;
  }
  size_t short_slot(uint64_t h) const { return h >> short_shift; }
  const uint32_t* short_ids(const Short& s) const { return s.n <= kInlineIds ? s.ids : vals.data() + s.ids[0]; }
  void place_short(const Short& e, uint64_t h) {
    const size_t mask = shorts.size() - 1;
    size_t i = short_slot(h);
    while (shorts[i].len != 0) i = (i + 1) & mask;
    shorts[i] = e;
  }
  void insert_short(const ShortKey& k, size_t len, uint64_t h, const uint32_t* ids, size_t n) {
    if ((short_used + 1) * 2 > shorts.size()) {
      if (64 - short_shift >= kShortBitsMax || vals.size() > (1u << 28)) return reset();  // bounded memory
      HugeVector<Short> old(shorts.size() * 2);
      old.swap(shorts);
      --short_shift;
      for (const Short& s : old)
        if (s.len != 0) place_short(s, short_hash({s.k0, s.k1}, s.len));
    }
    Short e;
    e.k0 = k.k0, e.k1 = k.k1, e.len = static_cast<uint8_t>(len), e.n = static_cast<uint8_t>(n);
    if (n <= kInlineIds) {
      std::memcpy(e.ids, ids, n * sizeof(uint32_t));
    } else {
      e.ids[0] = static_cast<uint32_t>(vals.size());
      vals.insert(vals.end(), ids, ids + n);
    }
    place_short(e, h);
    ++short_used;
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
      if (slots.size() >= (1u << 20) || keys.size() > (1u << 30)) {  // 16 MiB of slots per thread at most
        reset();  // bounded memory: start over rather than grow without limit
      } else {    // grow x2 and reinsert
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

// Whether a word character (Rust regex's Unicode \w, which Hugging Face's single_word test uses: Alphabetic, marks,
// decimal digits, connector punctuation, joiners) starts at byte `i` of valid UTF-8 text `t[0, end)`. \G anchors
// the match at `i`.
bool word_char_at(std::string_view t, size_t i, size_t end) {
  if (i >= end) return false;
  static const RegexSplitter word("\\G[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]");
  size_t b = 0, e = 0;
  return regex_find(word, t.substr(0, end), i, b, e);
}
// Whether the character that ends at byte `end` is a word character.
bool word_char_before(std::string_view t, size_t end) {
  if (end == 0) return false;
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(t[i]) & 0xC0) == 0x80) --i;
  return word_char_at(t, i, end);
}

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(BpeConfig cfg, std::vector<std::string> id_to_bytes, std::vector<bool> is_special,
               const std::vector<bool>& special_in_model)
      : cfg_(std::move(cfg)),
        id_to_bytes_(std::move(id_to_bytes)),
        is_special_(std::move(is_special)),
        merges_(id_to_bytes_.size()) {
    for (uint32_t id = 0; id < id_to_bytes_.size(); ++id)
      if (is_special_[id] && !id_to_bytes_[id].empty()) {
        auto flags = cfg_.added_flags.find(id);
        specials_.push_back({id_to_bytes_[id], id, flags == cfg_.added_flags.end() ? uint8_t{0} : flags->second});
      }
    // Added tokens are matched in the text first; those that are also model vocabulary stay BPE tokens too
    // (Gemma's newline and space runs: merges build them, as in Hugging Face's BPE model).
    std::vector<bool> not_bpe = is_special_;
    for (size_t id = 0; id < special_in_model.size() && id < not_bpe.size(); ++id)
      if (special_in_model[id]) not_bpe[id] = false;
    vocab_.build(id_to_bytes_, not_bpe);
    if (cfg_.byte_level) byte_pairs_.assign(65536, UINT64_MAX);
    // Longest special first so that overlapping specials match greedily (leftmost-longest, as
    // Hugging Face's added-vocabulary matcher does).
    std::sort(specials_.begin(), specials_.end(),
              [](const auto& a, const auto& b) { return a.text.size() > b.text.size(); });
    for (const Special& s : specials_) special_first_[static_cast<unsigned char>(s.text[0])] = true;
    byte_id_.fill(UINT32_MAX);
    for (int b = 0; b < 256; ++b) byte_id_[b] = vocab_.find(std::string(1, static_cast<char>(b)));
    for (int b = 0; b < 256; ++b) fallback_id_[b] = vocab_.find(strprintf("<0x%02X>", b));
    for (size_t i = 0; i < cfg_.split_patterns.size(); ++i) {
      const std::string& p = cfg_.split_patterns[i];
      splitters_.push_back(std::make_unique<RegexSplitter>(p));
      behaviors_.push_back(i < cfg_.split_behaviors.size() ? cfg_.split_behaviors[i] : SplitBehavior::Isolated);
      invert_.push_back(i < cfg_.split_invert.size() && cfg_.split_invert[i]);
      mapped_.push_back(i >= cfg_.byte_level_levels_from);
      // The hand-written splitters do Isolated, not inverted, on the text only.
      bool plain = behaviors_.back() == SplitBehavior::Isolated && !invert_.back() && !mapped_.back();
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
    // Byte-level words start as byte tokens: their first round of lookups reads a dense byte-pair table.
    if (cfg_.byte_level && a.size() == 1 && b.size() == 1) {
      uint64_t& e = byte_pairs_[static_cast<unsigned char>(a[0]) << 8 | static_cast<unsigned char>(b[0])];
      if (e == UINT64_MAX) e = static_cast<uint64_t>(rank) << 32 | im;  // the first (lowest) rank wins
    }
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
      size_t len = 0, skip = 0;
      for (const Special& s : specials_) {
        if (text.compare(i, s.text.size(), s.text) == 0) {
          // single_word: a word character beside the match discards it, and, as Hugging Face's leftmost-longest
          // matcher continues after a discarded match, the text it spans is ordinary text.
          if ((s.flags & kSingleWord) &&
              (word_char_before(text, i) || word_char_at(text, i + s.text.size(), text.size()))) {
            skip = s.text.size();
            break;
          }
          // lstrip: the white space before the token goes with it (not back into an earlier token's part).
          size_t end = i;
          if (s.flags & kStripLeft)
            while (size_t w = white_space_before(text, end, start)) end -= w;
          encode_ordinary(text.substr(start, end - start), start == 0, out);
          out.push_back(s.id);
          len = s.text.size();
          if (s.flags & kStripRight)
            while (size_t w = white_space_at(text, i + len)) len += w;
          break;
        }
      }
      i += len ? len : skip ? skip : 1;
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
    json d = {
        {"type", cfg_.type}, {"id", cfg_.id}, {"vocab_size", vocab_size()}, {"eot_id", eot_id()}, {"files", files}};
    if (!cfg_.eot_token.empty()) d["eot_token"] = cfg_.eot_token;
    return d;
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
    if (splitters_.size() == 1 && fast_[0] && !space_split_) fast_[0]->split_words(text, words);
    else split_level(text, 0, words);
    encode_words(words, text.data() + text.size(), out);
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
  // A level after ByteLevel splits the byte-level characters of `text`; its pieces map back to byte ranges.
  struct MappedCtx {
    LevelCtx* level;
    const std::vector<uint32_t>* byte_at;  // byte-level text offset (of a character start, or the end) -> text byte
  };
  static void on_mapped_piece(void* p, size_t b, size_t n) {
    auto* m = static_cast<MappedCtx*>(p);
    const size_t from = (*m->byte_at)[b], to = (*m->byte_at)[b + n];
    on_piece(m->level, from, to - from);
  }
  void split_mapped_level(std::string_view text, LevelCtx& ctx) const {
    static const ByteUnicode bu;
    std::string mapped;
    std::vector<uint32_t> byte_at;
    mapped.reserve(text.size() * 2);
    byte_at.reserve(text.size() * 2 + 1);
    for (size_t i = 0; i < text.size(); ++i) {
      const uint32_t cp = bu.byte_to_cp[static_cast<unsigned char>(text[i])];  // < 0x800: one or two bytes
      byte_at.push_back(static_cast<uint32_t>(i));
      if (cp < 0x80) {
        mapped.push_back(static_cast<char>(cp));
      } else {
        mapped.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        mapped.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        byte_at.push_back(static_cast<uint32_t>(i));  // inside a character: never a piece boundary
      }
    }
    byte_at.push_back(static_cast<uint32_t>(text.size()));
    MappedCtx m{&ctx, &byte_at};
    const size_t level = ctx.level;
    if (behaviors_[level] == SplitBehavior::Isolated && !invert_[level])
      regex_split_trusted(*splitters_[level], mapped, on_mapped_piece, &m);
    else regex_split_behavior(*splitters_[level], mapped, behaviors_[level], invert_[level], on_mapped_piece, &m);
  }
  // Appends the words (pieces of the last level) of `text` to `words`.
  void split_level(std::string_view text, size_t level, std::vector<std::string_view>& words) const {
    if (level == splitters_.size()) return space_split_ ? split_at_spaces(text, words) : words.push_back(text);
    LevelCtx ctx{this, text, level, &words};
    if (mapped_[level]) split_mapped_level(text, ctx);
    else if (fast_[level]) fast_[level]->split(text, on_piece, &ctx);
    else if (behaviors_[level] == SplitBehavior::Isolated && !invert_[level])
      regex_split_trusted(*splitters_[level], text, on_piece, &ctx);
    else regex_split_behavior(*splitters_[level], text, behaviors_[level], invert_[level], on_piece, &ctx);
  }

  void encode_words(const std::vector<std::string_view>& words, const char* end, std::vector<uint32_t>& out) const;
  void bpe_word(std::string_view word, uint64_t hash, const ShortKey* key, std::vector<uint32_t>& out) const;
  void merge_small(std::vector<uint32_t>& sym, const unsigned char* bytes) const;
  void merge_large(std::vector<uint32_t>& sym) const;
  void char_symbols(std::string_view word, std::vector<uint32_t>& sym) const;

  BpeConfig cfg_;
  std::vector<std::string> id_to_bytes_;
  std::vector<bool> is_special_;
  VocabIndex vocab_;  // non-special tokens' bytes -> id
  struct Special {
    std::string text;
    uint32_t id;
    uint8_t flags;  // kStripLeft | kStripRight | kSingleWord
  };
  std::vector<Special> specials_;
  std::array<bool, 256> special_first_{};  // bytes some added token starts with
  std::array<uint32_t, 256> byte_id_{};
  std::array<uint32_t, 256> fallback_id_{};  // <0xNN> tokens (SentencePiece-style byte fallback)
  MergeTable merges_;
  // (first byte << 8 | second byte) -> rank << 32 | merged id of merging the two byte tokens; all ones: none.
  std::vector<uint64_t> byte_pairs_;  // byte-level only
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;
  std::vector<SplitBehavior> behaviors_;   // per level
  std::vector<bool> invert_;               // per level
  std::vector<bool> mapped_;               // per level: runs on the byte-level characters (after ByteLevel)
  std::vector<const FastSplitter*> fast_;  // hand-written equivalent of a level's regex, if any
  bool space_split_ = false;               // words are also cut before ▁ (can_split_at_spaces)
  uint64_t serial_ = g_tokenizer_serial.fetch_add(1);
};

// Words up to this many symbols merge in fixed arrays; longer ones use a heap (O(n log n)), so a
// megabyte without whitespace cannot take quadratic time.
constexpr size_t kSmallWord = 64;

// Hugging Face's rule (tokenizers' Word::merge_all): merge the leftmost of the lowest-ranked adjacent pairs, one at a
// time, until no pair has a rank. Over fixed arrays: a merge scans the pairs' ranks for the lowest, shifts the tail
// left by one and looks up only the two pairs it formed. Where every pair a merge forms ranks after that merge (trained
// files) this equals OpenAI's rule (every pair of the lowest rank per round); where not (Gemma's and Yi's hand-placed
// merges), only this is exact. `bytes`: the word's bytes when `sym` are its byte tokens (byte-level), else null.
void BpeTokenizer::merge_small(std::vector<uint32_t>& sym, const unsigned char* bytes) const {
  size_t m = sym.size();
  if (m < 2) return;
  uint32_t rk[kSmallWord], mg[kSmallWord];
  for (size_t k = 0; k + 1 < m; ++k) {
    if (bytes) {
      const uint64_t e = byte_pairs_[bytes[k] << 8 | bytes[k + 1]];
      rk[k] = static_cast<uint32_t>(e >> 32), mg[k] = static_cast<uint32_t>(e);
    } else {
      rk[k] = merges_.find(sym[k], sym[k + 1], mg[k]);
    }
  }
  for (;;) {
    size_t at = 0;
    for (size_t k = 1; k + 1 < m; ++k)
      if (rk[k] < rk[at]) at = k;  // strictly lower: the leftmost among equals
    if (rk[at] == MergeTable::kNone) break;
    sym[at] = mg[at];
    for (size_t k = at + 1; k + 1 < m; ++k) sym[k] = sym[k + 1], rk[k] = rk[k + 1], mg[k] = mg[k + 1];
    --m;
    if (m < 2) break;
    if (at > 0) rk[at - 1] = merges_.find(sym[at - 1], sym[at], mg[at - 1]);
    if (at + 1 < m) rk[at] = merges_.find(sym[at], sym[at + 1], mg[at]);
  }
  sym.resize(m);
}

// The same rule for long words, on a linked list with a (rank, position) min-heap as tokenizers' Word::merge_all
// keeps it: O(n log n), so a megabyte without whitespace cannot take quadratic time.
void BpeTokenizer::merge_large(std::vector<uint32_t>& sym) const {
  const size_t n = sym.size();
  constexpr uint32_t kDead = UINT32_MAX, kNone = UINT32_MAX;
  std::vector<uint32_t> next(n), prev(n);
  for (size_t k = 0; k < n; ++k) next[k] = k + 1 < n ? k + 1 : kNone, prev[k] = k ? k - 1 : kNone;
  using Item = std::pair<uint32_t, uint32_t>;  // (rank, left position)
  std::vector<Item> heap;
  auto push = [&](uint32_t p) {
    if (p == kNone || next[p] == kNone) return;
    uint32_t merged = 0;
    if (uint32_t rank = merges_.find(sym[p], sym[next[p]], merged); rank != MergeTable::kNone) {
      heap.emplace_back(rank, p);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (uint32_t p = 0; p + 1 < n; ++p) push(p);
  while (!heap.empty()) {
    const auto [rank, p] = heap.front();
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    heap.pop_back();
    if (sym[p] == kDead || next[p] == kNone) continue;
    uint32_t merged = 0;
    if (merges_.find(sym[p], sym[next[p]], merged) != rank) continue;  // stale: a neighbour merged first
    const uint32_t q = next[p];
    sym[p] = merged;
    sym[q] = kDead;
    next[p] = next[q];
    if (next[q] != kNone) prev[next[q]] = p;
    push(prev[p]);
    push(p);
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

// Most words are one token: a push_back, not the general range insert.
[[gnu::always_inline]] inline void append_ids(std::vector<uint32_t>& out, const uint32_t* ids, size_t n) {
  if (n == 1) out.push_back(ids[0]);
  else out.insert(out.end(), ids, ids + n);
}

// Cache lookups are memory-bound (cold passes miss): hashes are computed a few words ahead and the slots
// prefetched, so the misses of neighbouring words overlap. `end`: end of the buffer the words lie in.
void BpeTokenizer::encode_words(const std::vector<std::string_view>& words, const char* end,
                                std::vector<uint32_t>& out) const {
  WordCache& cache = t_cache;
  if (cache.serial != serial_ || cache.shorts.empty()) {
    cache.reset();
    cache.serial = serial_;
  }
  // The short table's geometry in locals (the compiler cannot keep the thread-local's fields in
  // registers across the stores to `out`); refreshed after each miss, whose insert may grow the table.
  struct Table {
    const WordCache::Short* slots;
    size_t mask;
    unsigned shift;
  } tab{};
  auto refresh = [&] { tab = {cache.shorts.data(), cache.shorts.size() - 1, cache.short_shift}; };
  refresh();
  // A ring of the next kAhead words' keys and hashes (computed once, when their slots are prefetched).
  constexpr size_t kAhead = 8, kShort = WordCache::kShortKey;
  struct Ahead {
    ShortKey key;
    uint64_t hash = 0;
  } ahead[kAhead];
  auto prefetch = [&](size_t i) {
    std::string_view w = words[i];
    Ahead& a = ahead[i % kAhead];
    if (w.size() < 2 || w.size() > 64) return;
    if (w.size() <= kShort) {
      a.key = short_key(w.data(), w.size(), end);
      a.hash = short_hash(a.key, w.size());
      __builtin_prefetch(&tab.slots[a.hash >> tab.shift]);
    } else {
      a.hash = XXH3_64bits(w.data(), w.size());
      __builtin_prefetch(&cache.slots[a.hash & (cache.slots.size() - 1)]);
    }
  };
  const bool byte_level = cfg_.byte_level;
  const size_t n = words.size();
  for (size_t i = 0; i < std::min(kAhead, n); ++i) prefetch(i);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view w = words[i];
    const Ahead a = ahead[i % kAhead];
    if (i + kAhead < n) prefetch(i + kAhead);
    const size_t len = w.size();
    if (len == 1 && byte_level) {  // spaces, punctuation: one byte is one token, no cache needed
      out.push_back(byte_id_[static_cast<unsigned char>(w[0])]);
    } else if (len >= 2 && len <= kShort) {
      const WordCache::Short* hit = nullptr;
      for (size_t k = a.hash >> tab.shift;; k = (k + 1) & tab.mask) {
        const WordCache::Short& e = tab.slots[k];
        if (e.k0 == a.key.k0 && e.k1 == a.key.k1 && e.len == len) {
          hit = &e;
          break;
        }
        if (e.len == 0) break;
      }
      if (hit) {
        append_ids(out, cache.short_ids(*hit), hit->n);
      } else {
        bpe_word(w, a.hash, &a.key, out);
        refresh();
      }
    } else if (len > kShort && len <= 64) {
      if (const WordCache::Slot* hit = cache.find(w, a.hash)) {
        out.insert(out.end(), cache.vals.data() + hit->val_off, cache.vals.data() + hit->val_off + hit->val_len);
      } else {
        bpe_word(w, a.hash, nullptr, out);
        refresh();
      }
    } else if (len != 0) {
      bpe_word(w, 0, nullptr, out);
    }
  }
}

// A word the cache does not hold: merges it, appends its ids and caches them (words of 2..64 bytes:
// `key` is set for those of up to 16 bytes, `hash` is the hash encode_words computed).
[[gnu::noinline]] void BpeTokenizer::bpe_word(std::string_view word, uint64_t hash, const ShortKey* key,
                                              std::vector<uint32_t>& out) const {
  thread_local std::vector<uint32_t> sym;
  sym.clear();
  const uint32_t whole = cfg_.ignore_merges ? vocab_.find(word) : VocabIndex::kEmpty;
  if (whole != VocabIndex::kEmpty) {
    sym.push_back(whole);  // ignore_merges: a word in the vocabulary is one token
  } else {
    if (cfg_.byte_level)
      for (unsigned char c : word) sym.push_back(byte_id_[c]);
    else char_symbols(word, sym);
    const auto* bytes = cfg_.byte_level ? reinterpret_cast<const unsigned char*>(word.data()) : nullptr;
    if (sym.size() <= kSmallWord) merge_small(sym, bytes);
    else merge_large(sym);
  }
  out.insert(out.end(), sym.begin(), sym.end());
  WordCache& cache = t_cache;
  if (key) cache.insert_short(*key, word.size(), hash, sym.data(), sym.size());
  else if (word.size() >= 2 && word.size() <= 64) cache.insert(word, hash, sym.data(), sym.size());
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
                                              std::vector<bool> is_special, const std::vector<bool>& special_in_model) {
  return std::make_unique<BpeTokenizer>(cfg, std::move(id_to_bytes), std::move(is_special), special_in_model);
}

bool bpe_add_merge(Tokenizer& tok, const std::string& a, const std::string& b, uint32_t rank) {
  return static_cast<BpeTokenizer&>(tok).add_merge(a, b, rank);
}

bool bpe_has_all_bytes(const Tokenizer& tok) { return static_cast<const BpeTokenizer&>(tok).has_all_bytes(); }

// Length of the white-space character (Unicode White_Space: Rust's char::is_whitespace, which Hugging Face's lstrip
// and rstrip use) that starts at byte i of valid UTF-8 text, or 0.
size_t white_space_at(std::string_view t, size_t i) {
  if (i >= t.size()) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(t.data()) + i;
  const size_t left = t.size() - i;
  if ((p[0] >= 0x09 && p[0] <= 0x0D) || p[0] == 0x20) return 1;
  if (left >= 2 && p[0] == 0xC2 && (p[1] == 0x85 || p[1] == 0xA0)) return 2;  // NEL, NBSP
  if (left < 3) return 0;
  if (p[0] == 0xE1 && p[1] == 0x9A && p[2] == 0x80) return 3;  // U+1680
  if (p[0] == 0xE2 && p[1] == 0x80 && ((p[2] >= 0x80 && p[2] <= 0x8A) || p[2] == 0xA8 || p[2] == 0xA9 || p[2] == 0xAF))
    return 3;                                                  // U+2000-200A, U+2028, U+2029, U+202F
  if (p[0] == 0xE2 && p[1] == 0x81 && p[2] == 0x9F) return 3;  // U+205F
  if (p[0] == 0xE3 && p[1] == 0x80 && p[2] == 0x80) return 3;  // U+3000
  return 0;
}
// Length of the white-space character that ends at byte `end`, not reaching before `floor`, or 0. (ASCII bytes and
// the lead bytes C2, E1, E2, E3 a candidate starts with never continue another character.)
size_t white_space_before(std::string_view t, size_t end, size_t floor) {
  for (size_t len = 1; len <= 3; ++len)
    if (end >= floor + len && white_space_at(t, end - len) == len) return len;
  return 0;
}

}  // namespace cairn::tokenizer::detail
