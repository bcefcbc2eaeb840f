// Tokenizer loading: raw bytes, GPT-2 (encoder.json + vocab.bpe) and Hugging Face tokenizer.json BPE files,
// checked field by field; the models themselves live in bpe.cpp and pretokenize.cpp.
#include "cairn/tokenizer.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <unordered_map>

#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/sections/data.h"
#include "internal.h"

namespace cairn::tokenizer {

using json = nlohmann::json;
using detail::BpeConfig;
using detail::byte_level_to_bytes;

namespace {

std::string hex64(uint64_t v) { return strprintf("%016llx", static_cast<unsigned long long>(v)); }

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

// Fills id_to_bytes from a {token: id} object of UTF-8 token strings (SentencePiece-style BPE).
void load_plain_vocab(const JsonFields& vocab, std::vector<std::string>& id_to_bytes, std::vector<bool>& present) {
  if (vocab.raw().empty())
    throw UsageError(file_message("tokenizer file", vocab.file(), "has no {token: id} vocabulary object"));
  for (auto& [tok, idv] : vocab.raw().items()) {
    if (!idv.is_number_unsigned() || idv.get<uint64_t>() > kMaxTokenId) vocab.fail(tok, "a token id in [0, 16777215]");
    uint32_t id = idv.get<uint32_t>();
    if (id >= id_to_bytes.size()) id_to_bytes.resize(id + 1), present.resize(id + 1, false);
    id_to_bytes[id] = tok;
    present[id] = true;
  }
}

// The BpeTokenizer compiles the split patterns: a bad regex is named with the file it came from.
std::unique_ptr<Tokenizer> make_bpe(const BpeConfig& cfg, std::vector<std::string> id_to_bytes,
                                    std::vector<bool> special, const std::string& path,
                                    const std::vector<bool>& special_in_model = {}) {
  try {
    return detail::make_bpe_tokenizer(cfg, std::move(id_to_bytes), std::move(special), special_in_model);
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
  if (!detail::bpe_has_all_bytes(*tok))
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
        !detail::bpe_add_merge(*tok, ab, bb, rank++))
      throw UsageError(file_message("tokenizer file", merges_path + ":" + std::to_string(lineno),
                                    "merge \"" + line + "\" uses or makes a token missing from " + vocab_path));
  }
  if (rank == 0) throw UsageError(file_message("tokenizer file", merges_path, "has no merges"));
  return tok;
}

// A Split level: `pattern` (PCRE2) with `behavior`; the levels before it are Isolated and not inverted.
void add_split(BpeConfig& cfg, const std::string& pattern, detail::SplitBehavior behavior, bool invert) {
  cfg.split_behaviors.resize(cfg.split_patterns.size(), detail::SplitBehavior::Isolated);
  cfg.split_invert.resize(cfg.split_patterns.size(), false);
  cfg.split_patterns.push_back(pattern);
  cfg.split_behaviors.push_back(behavior);
  cfg.split_invert.push_back(invert);
}

constexpr const char* kWhiteSpaceMembers = CAIRN_WHITE_SPACE_MEMBERS;

// Hugging Face compiles Split and Replace regexes with Oniguruma, where `[` inside a character class opens a nested
// class (a union): BLOOM's " ?[^(\\s|[.,!?…])]+" excludes white space and the listed punctuation. PCRE2 reads that
// `[` as a literal and the pattern as unbalanced, so nested non-negated classes are flattened into their parent;
// negated nested classes and `&&` (intersections) have no flat form and are refused. \\w and \\s are spelled out as
// Oniguruma reads them; \\W in a class, \\b, \\B and \\h (a hex digit to Oniguruma) are refused.
std::string pcre2_from_oniguruma(const JsonFields& node, const std::string& re) {
  std::string out;
  out.reserve(re.size());
  int depth = 0;             // character classes open (1: an ordinary class)
  bool class_start = false;  // just after "[" or "[^": a "]" here is a literal
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      // Oniguruma's Unicode \w is letters, marks, numbers and connector punctuation; PCRE2's (10.42) lacks marks
      // and connectors other than "_".
      const char e = re[i + 1];
      if (e == 'w') out.append(depth ? "\\p{L}\\p{M}\\p{N}\\p{Pc}" : "[\\p{L}\\p{M}\\p{N}\\p{Pc}]");
      // \s and \S as White_Space (PCRE2's \s also matches U+180E): inside a class \S as the ranges outside it.
      else if (e == 's') out.append(depth ? kWhiteSpaceMembers : std::string("[") + kWhiteSpaceMembers + "]");
      else if (e == 'S')
        out.append(depth ? CAIRN_NOT_WHITE_SPACE_MEMBERS : std::string("[^") + kWhiteSpaceMembers + "]");
      else if (e == 'W' && depth == 0) out.append("[^\\p{L}\\p{M}\\p{N}\\p{Pc}]");
      else if (e == 'W' || e == 'b' || e == 'B' || e == 'h' || e == 'H')
        node.fail("pattern",
                  std::string("a regex without \\") + e + " (Oniguruma's differs from PCRE2's: not reproduced)");
      else out.append(re, i, 2);
      ++i;
      class_start = false;
      continue;
    }
    if (depth == 0) {
      if (c == '[') depth = 1, class_start = true;
      out.push_back(c);
      if (class_start && i + 1 < re.size() && re[i + 1] == '^') out.push_back(re[++i]);
      continue;
    }
    if (c == '[' && re.compare(i, 2, "[:") == 0) {  // POSIX class [:alpha:] stays as it is
      const size_t close = re.find(":]", i + 2);
      if (close != std::string::npos) {
        out.append(re, i, close + 2 - i);
        i = close + 1;
        class_start = false;
        continue;
      }
    }
    if (c == '[') {
      if (i + 1 < re.size() && re[i + 1] == '^')
        node.fail("pattern", "a regex without a negated class nested in another (Oniguruma's [a[^b]] has no "
                             "PCRE2 form)");
      ++depth;  // flattened: its members join the enclosing class
      class_start = true;
      continue;
    }
    if (c == '&' && i + 1 < re.size() && re[i + 1] == '&')
      node.fail("pattern", "a regex without class intersections (Oniguruma's &&)");
    if (c == ']' && !class_start) {
      if (--depth > 0) continue;  // the end of a flattened nested class
    }
    class_start = false;
    out.push_back(c);
  }
  return out;
}

// A PCRE2 pattern matching `s` literally.
std::string quote_pattern(const std::string& s) {
  // Appended piecewise: GCC 12 warns falsely (-Wrestrict) on `"\\Q" + std::string`.
  std::string quoted("\\Q");
  quoted.append(s).append("\\E");
  return quoted;
}

// Collects a normalizer node into cfg.normalizers; anything that is not reproduced exactly is refused,
// naming the normalizer.
void collect_normalizer(const JsonFields& node, BpeConfig& cfg, int depth = 0) {
  using K = detail::NormStep::Kind;
  std::string type = node.str("type");
  detail::NormStep step;
  if (type == "Sequence") {
    if (depth >= 16) node.fail("normalizers", "Sequence normalizers nested at most 16 deep");
    const json& list = node.array("normalizers");
    for (size_t i = 0; i < list.size(); ++i)
      collect_normalizer(node.nested(list[i], "normalizers[" + std::to_string(i) + "]"), cfg, depth + 1);
    return;
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = type == "NFC" ? K::NFC : type == "NFD" ? K::NFD : type == "NFKC" ? K::NFKC : K::NFKD;
  } else if (type == "Lowercase") {
    step.kind = K::Lowercase;
  } else if (type == "Strip") {
    step.kind = K::Strip;
    step.first_only = node.boolean_or("strip_left", true);
    step.last_only = node.boolean_or("strip_right", true);
  } else if (type == "StripAccents") {
    step.kind = K::StripAccents;
  } else if (type == "Prepend") {
    step.kind = K::Prepend;
    step.a = node.str("prepend");
  } else if (type == "Replace") {
    JsonFields pat = node.object("pattern");
    step.b = node.str("content");
    if (pat.has("String")) {
      step.kind = K::Replace;
      step.a = pat.str("String");
      if (step.a.empty()) pat.fail("String", "a non-empty string");
      if (step.a == " ") cfg.space_symbol = step.b;
    } else if (pat.has("Regex")) {
      step.kind = K::ReplaceRegex;
      try {
        step.re = std::make_shared<RegexSplitter>(pcre2_from_oniguruma(pat, pat.str("Regex")));
      } catch (const UsageError& e) {
        throw UsageError(file_message("tokenizer file", node.file(), e.what()));
      }
    } else {
      throw UsageError(file_message("tokenizer file", node.file(), "has a Replace pattern without Regex or String"));
    }
  } else {
    throw UsageError(
        file_message("tokenizer file", node.file(),
                     "uses normalizer \"" + type +
                         "\" (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Prepend, Replace, "
                         "Sequence)"));
  }
  cfg.normalizers.push_back(std::move(step));
}

// Metaspace: spaces become the replacement, which is prepended per prepend_scheme, then (split) each
// replacement starts a new piece. Reproduced as normalizer steps plus a Split level, so it must come
// before any other pre-tokenizer.
void add_metaspace(const JsonFields& node, BpeConfig& cfg, bool byte_level) {
  if (byte_level || !cfg.split_patterns.empty())
    throw UsageError(file_message("tokenizer file", node.file(),
                                  "has a Metaspace pre-tokenizer after another pre-tokenizer (not supported: "
                                  "Metaspace must come first)"));
  using K = detail::NormStep::Kind;
  std::string rep = node.str_or("replacement", "\u2581");
  if (rep.empty()) node.fail("replacement", "a non-empty string");
  // Files written before prepend_scheme existed say add_prefix_space (true = always); as in Hugging Face,
  // add_prefix_space=false means never, whatever prepend_scheme says.
  std::string scheme = node.str_or("prepend_scheme", "always");
  if (!node.boolean_or("add_prefix_space", true)) scheme = "never";
  if (scheme != "first" && scheme != "always" && scheme != "never")
    node.fail("prepend_scheme", "\"first\", \"always\" or \"never\"");
  detail::NormStep replace;
  replace.kind = K::Replace, replace.a = " ", replace.b = rep;
  cfg.normalizers.push_back(replace);
  cfg.space_symbol = rep;
  if (scheme != "never") {
    detail::NormStep prepend;
    prepend.kind = K::MetaspacePrepend, prepend.a = rep, prepend.first_only = scheme == "first";
    cfg.normalizers.push_back(prepend);
  }
  if (node.boolean_or("split", true)) add_split(cfg, quote_pattern(rep), detail::SplitBehavior::MergedWithNext, false);
}

// The split behaviour named by `key` of a Split or Punctuation node.
detail::SplitBehavior split_behavior(const JsonFields& node, const char* key, const char* fallback) {
  using B = detail::SplitBehavior;
  const std::string behavior = node.str_or(key, fallback);
  const std::pair<const char*, B> behaviors[] = {{"Isolated", B::Isolated},
                                                 {"Removed", B::Removed},
                                                 {"MergedWithPrevious", B::MergedWithPrevious},
                                                 {"MergedWithNext", B::MergedWithNext},
                                                 {"Contiguous", B::Contiguous}};
  auto known =
      std::find_if(std::begin(behaviors), std::end(behaviors), [&](const auto& b) { return behavior == b.first; });
  if (known == std::end(behaviors))
    node.fail(key, "Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous");
  return known->second;
}

// Pre-tokenizers that Hugging Face defines by a character class, as PCRE2 patterns. White space is Unicode
// White_Space (Rust's char::is_whitespace, Oniguruma's \s): tab to carriage return, NEL and the separators Z*. Spelled
// out because PCRE2's \s also matches U+180E, which Oniguruma's does not (checked against Hugging Face's library).
constexpr const char* kWhiteSpaceRun = "[" CAIRN_WHITE_SPACE_MEMBERS "]+";
constexpr const char* kPunctuationPattern = "[\\p{P}!-/:-@\\[-`{-~]";
constexpr const char* kWhitespacePattern =
    "[\\p{L}\\p{M}\\p{N}\\p{Pc}]+|[^\\p{L}\\p{M}\\p{N}\\p{Pc}" CAIRN_WHITE_SPACE_MEMBERS "]+";

// Collects the regex split patterns of a pre_tokenizer node; throws for unsupported kinds.
void collect_pre_tokenizer(const JsonFields& node, BpeConfig& cfg, bool& byte_level, int depth = 0) {
  const std::string& path = node.file();
  std::string type = node.str("type");
  if (type == "Metaspace") {
    add_metaspace(node, cfg, byte_level);
  } else if (type == "Digits") {
    // Rust's char::is_numeric is Unicode's N categories; one piece per digit, or per run of them.
    add_split(cfg, node.boolean_or("individual_digits", false) ? "\\p{N}" : "\\p{N}+", detail::SplitBehavior::Isolated,
              false);
  } else if (type == "Punctuation") {
    // Rust's char::is_ascii_punctuation or Unicode punctuation (P*), one character per match: Contiguous joins runs.
    add_split(cfg, kPunctuationPattern, split_behavior(node, "behavior", "Isolated"), false);
  } else if (type == "Whitespace") {
    // Hugging Face's regex \w+|[^\w\s]+ (Oniguruma: \w is L, M, N and Pc; \s White_Space), the rest removed.
    add_split(cfg, kWhitespacePattern, detail::SplitBehavior::Removed, true);
  } else if (type == "WhitespaceSplit") {
    add_split(cfg, kWhiteSpaceRun, detail::SplitBehavior::Removed, false);
  } else if (type == "Sequence") {
    // Bounded: a pathological file must not recurse until the stack runs out.
    if (depth >= 16) node.fail("pretokenizers", "Sequence pre-tokenizers nested at most 16 deep");
    const json& list = node.array("pretokenizers");
    for (size_t i = 0; i < list.size(); ++i)
      collect_pre_tokenizer(node.nested(list[i], "pretokenizers[" + std::to_string(i) + "]"), cfg, byte_level,
                            depth + 1);
  } else if (type == "ByteLevel") {
    // Hugging Face prefixes each piece of the levels before it with a space: reproduced for the whole text only.
    if (node.boolean_or("add_prefix_space", false)) {
      if (!cfg.split_patterns.empty())
        throw UsageError(file_message("tokenizer file", path,
                                      "has a ByteLevel pre-tokenizer with add_prefix_space after another "
                                      "pre-tokenizer (not supported: it must come first)"));
      cfg.add_prefix_space = true;
    }
    if (byte_level) throw UsageError(file_message("tokenizer file", path, "has two ByteLevel pre-tokenizers"));
    byte_level = true;
    if (node.boolean_or("use_regex", true)) add_split(cfg, kHfByteLevelPattern, detail::SplitBehavior::Isolated, false);
    cfg.byte_level_levels_from = cfg.split_patterns.size();
  } else if (type == "Split") {
    JsonFields pat = node.object("pattern");
    const detail::SplitBehavior behavior = split_behavior(node, "behavior", "Isolated");
    if (pat.has("Regex")) {
      add_split(cfg, pcre2_from_oniguruma(pat, pat.str("Regex")), behavior, node.boolean_or("invert", false));
    } else if (pat.has("String")) {
      add_split(cfg, quote_pattern(pat.str("String")), behavior, node.boolean_or("invert", false));
    } else {
      throw UsageError(file_message("tokenizer file", path, "has a Split pattern without Regex or String"));
    }
  } else {
    throw UsageError(file_message(
        "tokenizer file", path,
        "uses pre-tokenizer \"" + type +
            "\" (supported: ByteLevel, Split, Digits, Punctuation, Whitespace, WhitespaceSplit, Metaspace, "
            "Sequence)"));
  }
}

// Model options that change the tokens and that cairn does not implement: refused with the reason, so a
// file is never encoded approximately.
void refuse_unsupported_model(const JsonFields& model) {
  const json& m = model.raw();
  auto refuse = [&](const std::string& what) {
    throw UsageError(file_message("tokenizer file", model.file(), "model." + what + " (not supported)"));
  };
  if (m.contains("dropout") && !m["dropout"].is_null() &&
      !(m["dropout"].is_number() && m["dropout"].get<double>() == 0))
    refuse("dropout is set (BPE dropout samples tokens at random)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty())
      refuse(std::string(key) + " is \"" + m[key].get<std::string>() + "\" (word-piece style affixes)");
}

// Reads added_tokens into the id table (all matched literally in the raw text, before normalization).
// special_in_model[id]: the added token is also model.vocab's token `id`, with the same bytes.
void load_added_tokens(const JsonFields& top, BpeConfig& cfg, std::vector<std::string>& id_to_bytes,
                       std::vector<bool>& present, std::vector<bool>& special, std::vector<bool>& special_in_model,
                       std::unordered_map<std::string, uint32_t>& added) {
  const std::string& path = top.file();
  if (!top.has("added_tokens")) return;
  const json& added_tokens = top.array("added_tokens");
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    JsonFields t = top.nested(added_tokens[i], "added_tokens[" + std::to_string(i) + "]");
    uint32_t id = static_cast<uint32_t>(t.u64("id", kMaxTokenId));
    std::string content = t.str("content");
    // lstrip / rstrip take the white space before / after the token with it; single_word matches it only where
    // no word character touches it.
    const uint8_t flags = (t.boolean_or("lstrip", false) ? detail::kStripLeft : 0) |
                          (t.boolean_or("rstrip", false) ? detail::kStripRight : 0) |
                          (t.boolean_or("single_word", false) ? detail::kSingleWord : 0);
    // normalized=true tokens are matched in the normalized text; cairn matches the raw text, which is
    // the same only when there is no normalizer.
    if (!cfg.normalizers.empty() && t.boolean_or("normalized", !t.boolean_or("special", false)))
      throw UsageError(file_message("tokenizer file", path,
                                    "added token \"" + content +
                                        "\" has normalized=true with a normalizer (not supported: cairn matches "
                                        "added tokens in the raw text)"));
    if (id >= id_to_bytes.size())
      id_to_bytes.resize(id + 1), present.resize(id + 1, false), special.resize(id + 1, false);
    special_in_model.resize(id_to_bytes.size(), false);
    special_in_model[id] = present[id] && id_to_bytes[id] == content;
    if (flags) cfg.added_flags[id] = flags;
    id_to_bytes[id] = content;
    present[id] = true;
    special[id] = true;
    added[content] = id;
  }
}

// The end-of-text id: `wanted` when given ([data] eot_token), else the first of the usual names, among the added
// tokens or the vocabulary.
uint32_t find_eot(const JsonFields& vocab, const std::unordered_map<std::string, uint32_t>& added,
                  const std::string& wanted) {
  static const char* const kNames[] = {"<|endoftext|>", "<|end_of_text|>", "</s>",
                                       "<eos>",         "<|eot_id|>",      "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
                                       "<EOT>"};
  std::vector<std::string> names;
  if (!wanted.empty()) names = {wanted};
  else
    for (const char* n : kNames) names.emplace_back(n);
  for (const std::string& name : names) {
    auto it = added.find(name);
    if (it != added.end()) return it->second;
    auto v = vocab.raw().find(name);
    if (v != vocab.raw().end()) return v->get<uint32_t>();  // checked by the vocabulary loader
  }
  if (!wanted.empty())
    throw UsageError(
        file_message("tokenizer file", vocab.file(), "has no token \"" + wanted + "\" (key \"data.eot_token\")"));
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  throw UsageError(file_message("tokenizer file", vocab.file(),
                                "has no end-of-text token (" + list +
                                    "); name the one to use with --eot-token "
                                    "([data] eot_token)"));
}

// SentencePiece-style BPE (no ByteLevel pre-tokenizer): a character outside the vocabulary becomes its
// <0xNN> tokens (byte_fallback, all 256 needed) or unk; without either it would be dropped, so refused.
void configure_char_model(const JsonFields& model, BpeConfig& cfg) {
  cfg.byte_level = false;
  cfg.byte_fallback = model.boolean_or("byte_fallback", false);
  cfg.fuse_unk = model.boolean_or("fuse_unk", false);
  std::string unk = model.has("unk_token") ? model.str("unk_token") : "";
  if (!unk.empty()) {
    auto v = model.raw()["vocab"].find(unk);
    if (v == model.raw()["vocab"].end()) model.fail("unk_token", "a token of model.vocab (\"" + unk + "\" is not one)");
    cfg.unk = v->get<uint32_t>();
  }
  if (!cfg.byte_fallback && unk.empty())
    throw UsageError(file_message("tokenizer file", model.file(),
                                  "has neither a ByteLevel pre-tokenizer nor model.byte_fallback nor model.unk_token "
                                  "(characters outside the vocabulary would be dropped; not supported)"));
}

// Registers model.merges ("a b" strings or [a, b] pairs) in rank order.
void load_merges(const JsonFields& model, const BpeConfig& cfg, Tokenizer& tok) {
  const json no_merges = json::array();
  const json& merges = model.has("merges") ? model.array("merges") : no_merges;
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
    bool ok = cfg.byte_level ? byte_level_to_bytes(a, ab) && byte_level_to_bytes(b, bb) : (ab = a, bb = b, true);
    if (!ok || !detail::bpe_add_merge(tok, ab, bb, rank))
      model.fail_value(key, m, "a merge of two vocabulary tokens into a vocabulary token");
  }
}

std::unique_ptr<Tokenizer> load_hf(const std::string& path, const std::string& eot_token) {
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
  BpeConfig cfg;
  cfg.type = "hf";
  cfg.files = {path};
  cfg.file_roles = {"tokenizer_json"};
  cfg.id = file_hash_id("hf", cfg.files);
  // A named end-of-text token changes the dataset's stream: it is part of the identity.
  if (!eot_token.empty()) cfg.id += ":eot=" + eot_token;
  cfg.eot_token = eot_token;
  cfg.ignore_merges = model.boolean_or("ignore_merges", false);
  refuse_unsupported_model(model);
  if (top.has("normalizer")) collect_normalizer(top.object("normalizer"), cfg);
  bool byte_level = false;
  if (top.has("pre_tokenizer")) collect_pre_tokenizer(top.object("pre_tokenizer"), cfg, byte_level);
  if (!byte_level) configure_char_model(model, cfg);
  std::vector<std::string> id_to_bytes;
  std::vector<bool> present;
  const JsonFields vocab = model.object("vocab");
  if (byte_level) load_byte_level_vocab(vocab, id_to_bytes, present);
  else load_plain_vocab(vocab, id_to_bytes, present);
  std::vector<bool> special(id_to_bytes.size(), false);
  std::vector<bool> special_in_model;
  std::unordered_map<std::string, uint32_t> added;
  load_added_tokens(top, cfg, id_to_bytes, present, special, special_in_model, added);
  cfg.eot = find_eot(vocab, added, eot_token);
  auto tok = make_bpe(cfg, id_to_bytes, special, path, special_in_model);
  if (byte_level && !detail::bpe_has_all_bytes(*tok))
    throw UsageError(file_message("tokenizer file", path, "is not a byte-level BPE vocabulary (a byte has no token)"));
  if (!byte_level && cfg.byte_fallback && cfg.unk == UINT32_MAX && !detail::bpe_has_all_bytes(*tok))
    throw UsageError(file_message("tokenizer file", path,
                                  "has model.byte_fallback without all 256 <0xNN> byte tokens and no "
                                  "model.unk_token (a character could be dropped; not supported)"));
  load_merges(model, cfg, *tok);
  return tok;
}

}  // namespace

std::unique_ptr<Tokenizer> load(const Spec& spec) {
  if (spec.type == "bytes") return std::make_unique<BytesTokenizer>();
  if (spec.type == "gpt2") return load_gpt2(spec.vocab, spec.merges);
  if (spec.type == "hf") return load_hf(spec.tokenizer_json, spec.eot_token);
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
  spec.eot_token = desc.str_or("eot_token", "");
  const std::string want_id = desc.str_or("id", "");
  auto tok = load(spec);
  if (!want_id.empty() && want_id != tok->id())
    throw UsageError(strprintf("tokenizer files in %s do not match the dataset (id %s, files give %s)",
                               dataset_dir.c_str(), want_id.c_str(), tok->id().c_str()));
  return tok;
}

std::unique_ptr<Tokenizer> load_configured(const DataSection& data) {
  Spec s;
  s.type = data.tokenizer;
  s.vocab = data.vocab;
  s.merges = data.merges;
  s.tokenizer_json = data.tokenizer_json;
  s.eot_token = data.eot_token;
  if (!s.eot_token.empty() && s.type != "hf")
    throw UsageError("key \"data.eot_token\": applies to tokenizer = hf only (tokenizer is \"" + s.type + "\")");
  return load(s);
}

std::unique_ptr<Tokenizer> load_for_dataset(const std::string& dataset_dir) {
  std::string path = join_path(dataset_dir, "index.json");
  json index = parse_json_text(read_tokenizer_file(path), path, "dataset index");
  JsonFields ix(index, path, "dataset index");
  if (!ix.has("tokenizer")) throw UsageError(file_message("dataset index", path, "has no tokenizer"));
  return load_from_description(ix.raw().at("tokenizer"), dataset_dir);
}

std::string pcre2_pattern_from_oniguruma(const std::string& re) {
  const nlohmann::json node = {{"Regex", re}};
  return pcre2_from_oniguruma(JsonFields(node, "<regex>", "pre-tokenizer regex"), re);
}

}  // namespace cairn::tokenizer
