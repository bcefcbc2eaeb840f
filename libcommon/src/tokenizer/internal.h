// Interfaces shared by the tokenizer sources: fast pre-tokenizers, byte-level BPE and the loaders.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cairn/tokenizer.h"

namespace cairn::tokenizer::detail {

// Receives one piece (begin, length) of a split.
using PieceFn = void (*)(void* ctx, size_t begin, size_t length);

// A hand-written pre-tokenizer equal to one known regex (same pieces on every valid UTF-8 text).
class FastSplitter {
 public:
  virtual ~FastSplitter() = default;
  // `text` must be valid UTF-8 (the tokenizer validates once, at encode).
  virtual void split(std::string_view text, PieceFn piece, void* ctx) const = 0;
  // The same pieces appended to `words` (no call per piece: the common single-level case).
  virtual void split_words(std::string_view text, std::vector<std::string_view>& words) const {
    struct Ctx {
      std::string_view text;
      std::vector<std::string_view>* words;
    } ctx{text, &words};
    auto add = [](void* c, size_t b, size_t n) {
      auto* x = static_cast<Ctx*>(c);
      x->words->push_back(x->text.substr(b, n));
    };
    split(text, add, &ctx);
  }
};

// The fast splitter for `pattern` if one exists (GPT-2's patterns, Llama 3's), else null. Returns null
// when CAIRN_TOKENIZER_REGEX_ONLY is set (debugging aid: PCRE2 everywhere).
const FastSplitter* fast_splitter_for(const std::string& pattern);

// The first match at or after `pos` in valid UTF-8 (no validation: the caller has validated); false if none.
bool regex_find(const RegexSplitter& re, std::string_view text, size_t pos, size_t& begin, size_t& end);
// Splits valid UTF-8 with a compiled regex, Isolated (no validation: the caller has validated).
void regex_split_trusted(const RegexSplitter& re, std::string_view text, PieceFn piece, void* ctx);

// GPT-2's byte <-> printable code point mapping: decodes a byte-level token string to raw bytes, false if
// a code point is not one of the 256 byte symbols.
bool byte_level_to_bytes(std::string_view s, std::string& out);

// How a Split pre-tokenizer keeps the regex matches (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior : uint8_t { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };

// Splits valid UTF-8 like Hugging Face's Split pre-tokenizer: matches and the gaps between them (invert
// swaps which is which), then combined by `behavior`; empty pieces are not reported.
void regex_split_behavior(const RegexSplitter& re, std::string_view text, SplitBehavior behavior, bool invert,
                          PieceFn piece, void* ctx);

// One normalizer step of a tokenizer.json (or the text edits of a Metaspace pre-tokenizer), applied in
// order to each piece of text between added tokens.
struct NormStep {
  enum class Kind : uint8_t {
    NFC,
    NFD,
    NFKC,
    NFKD,
    Lowercase,
    Prepend,
    MetaspacePrepend,
    Replace,
    ReplaceRegex,
    Strip,        // white space off the left (first_only) and / or right (last_only) end
    StripAccents  // marks (Mn, Mc, Me) removed
  };
  Kind kind = Kind::NFC;
  std::string a;                      // Prepend / MetaspacePrepend: the prefix; Replace: the string replaced
  std::string b;                      // Replace / ReplaceRegex: the replacement
  bool first_only = false;            // MetaspacePrepend with prepend_scheme "first"; Strip: strip_left
  bool last_only = false;             // Strip: strip_right
  std::shared_ptr<RegexSplitter> re;  // ReplaceRegex
};

// Length of the Unicode White_Space character (Rust's char::is_whitespace) that starts at byte i of valid UTF-8 text,
// or 0; and of the one that ends at byte `end`, not reaching before `floor`.
size_t white_space_at(std::string_view t, size_t i);
size_t white_space_before(std::string_view t, size_t end, size_t floor);

// Applies `steps` to valid UTF-8 `text` into `out`; `first_piece`: the text starts the document.
void normalize(const std::vector<NormStep>& steps, std::string_view text, bool first_piece, std::string& out);

// What a BPE tokenizer is made of (filled by the gpt2 and hf loaders).
// Added-token options (Hugging Face's AddedToken): lstrip, rstrip, single_word.
constexpr uint8_t kStripLeft = 1, kStripRight = 2, kSingleWord = 4;

struct BpeConfig {
  std::string type;  // "gpt2" | "hf"
  std::string id;
  std::vector<std::string> files;           // source paths
  std::vector<std::string> file_roles;      // "vocab", "merges", "tokenizer_json"
  std::vector<std::string> split_patterns;  // applied in order, each piece split by the next
  // Per pattern (missing entries: Isolated, not inverted, the only form with a hand-written path).
  std::vector<SplitBehavior> split_behaviors;
  std::vector<bool> split_invert;
  // Levels from this index on come after a ByteLevel pre-tokenizer in a Sequence: Hugging Face runs them on the
  // byte-level characters (byte b as GPT-2's printable code point), not on the text.
  size_t byte_level_levels_from = SIZE_MAX;
  bool add_prefix_space = false;
  bool ignore_merges = false;
  uint32_t eot = 0;
  std::string eot_token;  // hf: named by the user ([data] eot_token; kept in the description), else ""
  // Added tokens that take the white space beside them (Hugging Face's lstrip: before them, rstrip: after) or that
  // match whole words only (single_word).
  std::unordered_map<uint32_t, uint8_t> added_flags;  // id -> kStripLeft | kStripRight | kSingleWord
  std::vector<NormStep> normalizers;                  // empty for most byte-level files: the text is used as is
  // false: SentencePiece-style BPE, tokens are UTF-8 strings and a word starts as its characters
  // (byte_fallback: a character without a token becomes its <0xNN> byte tokens; else unk).
  bool byte_level = true;
  bool byte_fallback = false;
  bool fuse_unk = false;
  uint32_t unk = UINT32_MAX;  // none
  std::string space_symbol;   // "▁" where spaces were replaced: decode writes a space for it
};

// Unicode's White_Space (tiktoken's, Oniguruma's and Rust's \s) as the members of a PCRE2 character class, and its
// complement (\S inside a class, which has no negated form there). PCRE2's own \s also takes U+180E.
#define CAIRN_WHITE_SPACE_MEMBERS "\\t-\\r\\x{85}\\p{Z}"
#define CAIRN_NOT_WHITE_SPACE_MEMBERS                                                                       \
  "\\x{0}-\\x{8}\\x{e}-\\x{1f}\\x{21}-\\x{84}\\x{86}-\\x{9f}\\x{a1}-\\x{167f}\\x{1681}-\\x{1fff}\\x{200b}-" \
  "\\x{2027}\\x{202a}-\\x{202e}\\x{2030}-\\x{205e}\\x{2060}-\\x{2fff}\\x{3001}-\\x{10ffff}"

// BPE (GPT-2 and Hugging Face, byte-level or not): builds from a vocabulary, then add_merge for each merge in
// rank order. Declared here so the loaders can fill it; defined in bpe.cpp.
// special_in_model: added tokens (is_special) that are also model vocabulary with the same string, which stay
// BPE tokens too (merges may build them).
std::unique_ptr<Tokenizer> make_bpe_tokenizer(const BpeConfig& cfg, std::vector<std::string> id_to_bytes,
                                              std::vector<bool> is_special,
                                              const std::vector<bool>& special_in_model = {});
// Registers merge (a, b) -> a+b at `rank` on a tokenizer from make_bpe_tokenizer; false if a token is unknown.
bool bpe_add_merge(Tokenizer& tok, const std::string& a, const std::string& b, uint32_t rank);
// True if every byte has a token.
bool bpe_has_all_bytes(const Tokenizer& tok);

}  // namespace cairn::tokenizer::detail
