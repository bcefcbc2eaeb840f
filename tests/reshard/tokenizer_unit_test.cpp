// Unit tests of the tokenizers' safety and fast paths: invalid UTF-8 is refused (never reaches PCRE2),
// the hand-written Llama 3 and GPT-2 splitters equal the regexes, and the BPE merge loop and the word cache
// give what the reference rule gives.
#define BOOST_TEST_MODULE tokenizer_unit
#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "cairn/error.h"
#include "cairn/tokenizer.h"

namespace fs = std::filesystem;
using namespace cairn;
using json = nlohmann::json;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("cairn-tokenizer-unit-" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// GPT-2's bytes_to_unicode: the printable code point standing for each byte in byte-level vocabularies.
std::string byte_symbol(unsigned char b) {
  auto direct = [](int c) { return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
  uint32_t cp = b;
  if (!direct(b)) {
    uint32_t n = 0;
    for (int c = 0; c < b; ++c) n += !direct(c);
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}
std::string byte_level(const std::string& bytes) {
  std::string s;
  for (unsigned char c : bytes) s += byte_symbol(c);
  return s;
}

// A tokenizer.json: all 256 bytes, `merges` (pairs of byte strings) in rank order, the given
// pre-tokenizer and <|endoftext|> as an added token.
std::string write_tokenizer(const fs::path& dir, const std::string& name,
                            const std::vector<std::pair<std::string, std::string>>& merges, const json& pre) {
  json vocab = json::object();
  uint32_t next = 0;
  for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = next++;
  json m = json::array();
  for (auto& [a, b] : merges) {
    std::string ab = byte_level(a + b);
    if (!vocab.contains(ab)) vocab[ab] = next++;
    m.push_back(byte_level(a) + " " + byte_level(b));
  }
  json tok = {{"added_tokens", json::array({{{"id", next}, {"content", "<|endoftext|>"}, {"special", true}}})},
              {"pre_tokenizer", pre},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}}};
  std::string path = (dir / name).string();
  std::ofstream(path) << tok.dump();
  return path;
}

json byte_level_only() { return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}; }
json split_then_byte_level(const std::string& regex) {
  return {{"type", "Sequence"},
          {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}},
                                         byte_level_only()})}};
}

std::vector<std::string> regex_pieces(const tokenizer::RegexSplitter& s, const std::string& text) {
  std::vector<std::string> out;
  s.split(text, [&](size_t b, size_t n) { out.push_back(text.substr(b, n)); });
  return out;
}

struct Rng {
  uint64_t state;
  uint64_t next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  }
};

// The reference rule on byte strings (OpenAI's encoder): merge every occurrence of the lowest-ranked
// pair, left to right, until no pair has a rank.
std::vector<std::string> reference_bpe(const std::string& word,
                                       const std::map<std::pair<std::string, std::string>, int>& rank) {
  std::vector<std::string> sym;
  for (char c : word) sym.emplace_back(1, c);
  while (sym.size() > 1) {
    int best = INT32_MAX;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = rank.find({sym[i], sym[i + 1]});
      if (it != rank.end()) best = std::min(best, it->second);
    }
    if (best == INT32_MAX) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < sym.size();) {
      auto it = i + 1 < sym.size() ? rank.find({sym[i], sym[i + 1]}) : rank.end();
      if (it != rank.end() && it->second == best) next.push_back(sym[i] + sym[i + 1]), i += 2;
      else next.push_back(sym[i]), i += 1;
    }
    sym.swap(next);
  }
  return sym;
}

// Hugging Face's rule (tokenizers' Word::merge_all, a heap of (rank, position)): merge the leftmost of the
// lowest-ranked adjacent pairs, one at a time, until no pair has a rank. Equal to the rule above when every
// pair a merge forms ranks after it; not otherwise (Gemma's whitespace-run merges, Yi).
std::vector<std::string> reference_hf_bpe(const std::string& word,
                                          const std::map<std::pair<std::string, std::string>, int>& rank) {
  std::vector<std::string> sym;
  for (char c : word) sym.emplace_back(1, c);
  for (;;) {
    int best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = rank.find({sym[i], sym[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == INT32_MAX) break;
    sym[at] += sym[at + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  return sym;
}

}  // namespace

// Before the fix, invalid UTF-8 went to PCRE2's JIT (which does no UTF check) and to the hand-written
// splitters, which read past the end of a truncated sequence: cairn-reshard-bench-tokenizer on the
// Latin-1 and binary fortune files crashed in pcre2_match. Every entry point now refuses it.
BOOST_AUTO_TEST_CASE(invalid_utf8_is_refused_by_every_entry_point) {
  TempDir t;
  const std::vector<std::string> bad{"caf\xe9 au lait",  // Latin-1
                                     "abc\xe2\x82",      // truncated at the end
                                     "\x80\x80\x80",     // lone continuation bytes
                                     "x\xed\xa0\x80y",   // surrogate
                                     "\xc0\xaf",         // overlong
                                     std::string("\xff\xfe\x00\x01\xf8", 5)};
  std::string binary;
  Rng rng{7};
  for (int i = 0; i < 100000; ++i) binary += static_cast<char>(rng.next());
  const std::string custom = "[^\\s\\p{L}]+|\\p{L}+|\\s+";  // no fast path: PCRE2 (JIT) splits
  std::vector<std::unique_ptr<tokenizer::Tokenizer>> toks;
  tokenizer::Spec spec;
  spec.type = "hf";
  spec.tokenizer_json =
      write_tokenizer(t.path, "l3.json", {{"a", "b"}}, split_then_byte_level(tokenizer::kLlama3Pattern));
  toks.push_back(tokenizer::load(spec));
  spec.tokenizer_json = write_tokenizer(t.path, "custom.json", {{"a", "b"}}, split_then_byte_level(custom));
  toks.push_back(tokenizer::load(spec));
  spec.tokenizer_json = write_tokenizer(t.path, "bl.json", {{"a", "b"}}, {{"type", "ByteLevel"}});
  toks.push_back(tokenizer::load(spec));
  tokenizer::RegexSplitter re(custom), l3(tokenizer::kLlama3Pattern);
  auto ignore = [](size_t, size_t) {};
  for (std::string text : bad) {
    for (const std::string& s : {text, binary, "ok " + text + " ok"}) {
      for (auto& tok : toks) BOOST_CHECK_THROW(tok->encode(s), UsageError);
      BOOST_CHECK_THROW(re.split(s, ignore), UsageError);
      BOOST_CHECK_THROW(l3.split(s, ignore), UsageError);
      BOOST_CHECK_THROW(re.full_match(s), UsageError);
      BOOST_CHECK_THROW(tokenizer::split_gpt2_fast(s, ignore), UsageError);
      BOOST_CHECK_THROW(tokenizer::split_fast(tokenizer::kLlama3Pattern, s, ignore), UsageError);
    }
  }
  // The message names the first bad byte.
  try {
    toks[0]->encode("abc\xff");
    BOOST_FAIL("no error");
  } catch (const UsageError& e) {
    BOOST_TEST(std::string(e.what()).find("not valid UTF-8 (byte 3") != std::string::npos, e.what());
  }
  // Valid text still encodes and round-trips; bytes take anything.
  for (auto& tok : toks)
    BOOST_TEST(tok->decode(tok->encode("ab c\xc3\xa9 \xf0\x9f\x98\x80")) == "ab c\xc3\xa9 \xf0\x9f\x98\x80");
  auto bytes = tokenizer::load({});
  BOOST_TEST(bytes->encode(binary).size() == binary.size());
}

BOOST_AUTO_TEST_CASE(fast_llama3_splitter_equals_the_regex_on_random_unicode) {
  // Contractions in every case (and U+017F, which PCRE2's caseless matching folds to s), letters,
  // digit runs, punctuation, every kind of whitespace incl. CR/LF runs, CJK, combining marks, emoji.
  const std::vector<std::string> atoms{"a",
                                       "Z",
                                       "\xc3\xa9",
                                       "\xc3\x9f",
                                       "\xd0\xb6",
                                       "\xe4\xb8\xad",
                                       "7",
                                       "\xd9\xa3",
                                       "\xe2\x85\xab",
                                       "'",
                                       "'s",
                                       "'S",
                                       "'ll",
                                       "'LL",
                                       "'Re",
                                       "'vE",
                                       "'t",
                                       "'M",
                                       "'d",
                                       "'x",
                                       "'\xc5\xbf",
                                       "\xc5\xbf",
                                       " ",
                                       "  ",
                                       "\t",
                                       "\n",
                                       "\r",
                                       "\r\n",
                                       "\n\n",
                                       "\xc2\x85",
                                       "\xef\xbb\xbf",
                                       "\xc2\xa0",
                                       "\xe2\x80\x83",
                                       "\xe3\x80\x80",
                                       ",",
                                       "--",
                                       "!?",
                                       "\xcc\x81",
                                       "\xf0\x9f\x98\x80",
                                       "\xf0\xa0\x80\x80",
                                       "$",
                                       "_",
                                       "123",
                                       "4567"};
  tokenizer::RegexSplitter re(tokenizer::kLlama3Pattern);
  Rng rng{12345};
  for (int trial = 0; trial < 5000; ++trial) {
    std::string text;
    int len = 1 + static_cast<int>(rng.next() % 24);
    for (int k = 0; k < len; ++k) text += atoms[rng.next() % atoms.size()];
    std::vector<std::string> fast;
    BOOST_TEST_REQUIRE(tokenizer::split_fast(tokenizer::kLlama3Pattern, text,
                                             [&](size_t b, size_t n) { fast.push_back(text.substr(b, n)); }));
    std::vector<std::string> slow = regex_pieces(re, text);
    BOOST_TEST_REQUIRE(fast == slow, "text \"" << text << "\"");
  }
  BOOST_TEST(!tokenizer::split_fast("\\p{L}+", "abc", [](size_t, size_t) {}));
}

// Appends `count` random merges of known tokens (results at most max_len bytes; with space_right false the right
// part never contains a space, so no merge crosses a pre-tokenizer's space boundary) to merges/rank/tokens.
void random_merges(Rng& rng, std::vector<std::string>& tokens, std::vector<std::pair<std::string, std::string>>& merges,
                   std::map<std::pair<std::string, std::string>, int>& rank, size_t count, size_t max_len,
                   bool space_right) {
  std::set<std::string> known(tokens.begin(), tokens.end());
  while (merges.size() < count) {
    std::string a = tokens[rng.next() % tokens.size()], b = tokens[rng.next() % tokens.size()];
    if (known.count(a + b) || (a + b).size() > max_len || (!space_right && b.find(' ') != std::string::npos)) continue;
    rank[{a, b}] = static_cast<int>(merges.size());
    merges.emplace_back(a, b);
    tokens.push_back(a + b);
    known.insert(a + b);
  }
}

// A word of mostly "a" (60 %) and a-d, `len` bytes: repeated and overlapping pairs ("aaaa").
std::string random_word(Rng& rng, size_t len) {
  std::string word;
  for (size_t k = 0; k < len; ++k) word += static_cast<char>('a' + (rng.next() % 100 < 60 ? 0 : rng.next() % 4));
  return word;
}

// The ids of `word` as token strings.
std::vector<std::string> token_strings(const tokenizer::Tokenizer& tok, const std::string& word) {
  std::vector<std::string> out;
  for (uint32_t id : tok.encode(word)) out.push_back(tok.decode(&id, 1));
  return out;
}

// Words short and long (the long ones take the heap path) merge exactly as the reference rule does,
// with merges that make the same pair appear many times and overlap ("aaaa").
BOOST_AUTO_TEST_CASE(bpe_merges_equal_the_reference_rule_on_short_and_long_words) {
  TempDir t;
  Rng rng{99};
  std::vector<std::string> tokens{"a", "b", "c", "d"};
  std::vector<std::pair<std::string, std::string>> merges;
  std::map<std::pair<std::string, std::string>, int> rank;
  random_merges(rng, tokens, merges, rank, 60, 12, true);
  tokenizer::Spec spec;
  spec.type = "hf";
  spec.tokenizer_json = write_tokenizer(t.path, "m.json", merges, byte_level_only());
  auto tok = tokenizer::load(spec);
  for (int trial = 0; trial < 3000; ++trial) {
    size_t len = trial < 2000 ? 1 + rng.next() % 70 : 60 + rng.next() % 2000;
    const std::string word = random_word(rng, len);
    std::vector<std::string> got = token_strings(*tok, word);
    std::vector<std::string> want = reference_bpe(word, rank);
    BOOST_TEST_REQUIRE(got == want, "word of " << len << " bytes: " << word);
  }
}

// Merge lists whose ranks are not monotone (a merge builds a token that a lower-ranked merge takes as a part, as
// Gemma's hand-placed whitespace runs do) follow Hugging Face's one-merge-at-a-time rule on short and long words;
// merging every pair of the lowest rank per round gives "aa aa" for "aaaa" below, Hugging Face "aaa a".
BOOST_AUTO_TEST_CASE(non_monotone_merges_follow_hugging_face_one_merge_at_a_time) {
  TempDir t;
  tokenizer::Spec spec;
  spec.type = "hf";
  spec.tokenizer_json = write_tokenizer(t.path, "tiny.json", {{"aa", "a"}, {"a", "a"}}, byte_level_only());
  auto tiny = tokenizer::load(spec);
  BOOST_TEST((token_strings(*tiny, "aaaa") == std::vector<std::string>{"aaa", "a"}));

  Rng rng{7};
  std::vector<std::string> tokens{"a", "b", "c", "d"};
  std::vector<std::pair<std::string, std::string>> merges;
  std::map<std::pair<std::string, std::string>, int> ignored;
  random_merges(rng, tokens, merges, ignored, 80, 12, true);
  for (size_t i = merges.size() - 1; i > 0; --i) std::swap(merges[i], merges[rng.next() % (i + 1)]);  // any order
  std::map<std::pair<std::string, std::string>, int> rank;
  for (size_t i = 0; i < merges.size(); ++i) rank[merges[i]] = static_cast<int>(i);
  spec.tokenizer_json = write_tokenizer(t.path, "shuffled.json", merges, byte_level_only());
  auto tok = tokenizer::load(spec);
  for (int trial = 0; trial < 3000; ++trial) {
    size_t len = trial < 2000 ? 1 + rng.next() % 70 : 60 + rng.next() % 600;
    const std::string word = random_word(rng, len);
    std::vector<std::string> want = reference_hf_bpe(word, rank);
    std::vector<std::string> got = token_strings(*tok, word);
    BOOST_TEST_REQUIRE(got == want, "word of " << len << " bytes: " << word);
  }
}

// The hand-written GPT-2 splitter (gpt2 and hf ByteLevel, \s as White_Space) equals PCRE2 on
// real text (every fortune file, whole) and on generated text: all ASCII bytes, letters and digits in
// and out of ASCII, contractions (and near misses: 'S, 'x, a final '), whitespace runs before non-space,
// \r\n, tabs, NBSP and other Unicode spaces, emoji, CJK, combining marks, and runs long enough to take
// the 16-byte vector path and end at every offset, including at the end of the text.
BOOST_AUTO_TEST_CASE(fast_gpt2_splitter_equals_the_regex_on_real_and_generated_text) {
  tokenizer::RegexSplitter gpt2(tokenizer::kGpt2Pattern);
  auto check = [&](const std::string& text, const std::string& what) {
    std::vector<std::string> fast;
    tokenizer::split_gpt2_fast(text, [&](size_t b, size_t n) { fast.push_back(text.substr(b, n)); });
    std::vector<std::string> slow = regex_pieces(gpt2, text);
    BOOST_TEST_REQUIRE(fast == slow, what << ": \"" << text.substr(0, 2000) << "\"");
  };
  size_t real_bytes = 0;
  for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes")) {
    std::string name = e.path().filename().string();
    if (!e.is_regular_file() || e.is_symlink() || name.ends_with(".dat") || name.ends_with(".u8")) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (tokenizer::find_invalid_utf8(text) != std::string::npos) continue;
    check(text, e.path().string());
    real_bytes += text.size();
  }
  BOOST_TEST_REQUIRE(real_bytes > 1000000u, "fortunes text (/usr/share/games/fortunes) is needed");

  std::vector<std::string> atoms{"a",
                                 "Z",
                                 "é",
                                 "ß",
                                 "ж",
                                 "中",
                                 "ǅ",
                                 "7",
                                 "٣",
                                 "Ⅻ",
                                 "²",
                                 "'",
                                 "'s",
                                 "'S",
                                 "'ll",
                                 "'re",
                                 "'ve",
                                 "'m",
                                 "'d",
                                 "'t",
                                 "'x",
                                 " '",
                                 " ",
                                 "  ",
                                 "   ",
                                 "\t",
                                 "\n",
                                 "\r\n",
                                 "\r",
                                 "\n\n",
                                 "\v",
                                 "\f",
                                 "\x1c",
                                 "\x1f",
                                 "\xc2\x85",
                                 "\xef\xbb\xbf",
                                 "\xc2\xa0",
                                 "\xe2\x80\x83",
                                 "\xe3\x80\x80",
                                 "\xe2\x80\xa8",
                                 ",",
                                 "--",
                                 "!?",
                                 ".",
                                 "\xcc\x81",
                                 "\xf0\x9f\x98\x80",
                                 "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
                                 "\xf0\x9d\x90\x80",
                                 "$",
                                 "_",
                                 "\x7f",
                                 "\x01",
                                 "hello",
                                 "The",
                                 "1234567890",
                                 "a1b2",
                                 "..."};
  for (int c = 1; c < 0x80; ++c) atoms.emplace_back(1, static_cast<char>(c));
  const std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  Rng rng{2024};
  for (int trial = 0; trial < 20000; ++trial) {
    std::string text;
    const int len = 1 + static_cast<int>(rng.next() % 40);
    for (int k = 0; k < len; ++k) {
      if (rng.next() % 8 == 0) {  // a long run of one class: letters, digits or punctuation
        const size_t run = 1 + rng.next() % 40, kind = rng.next() % 3;
        if (rng.next() % 2) text += ' ';
        for (size_t r = 0; r < run; ++r)
          text += kind == 0   ? letters[rng.next() % letters.size()]
                  : kind == 1 ? "0123456789"[rng.next() % 10]
                              : "-=*.#"[rng.next() % 5];
      } else {
        text += atoms[rng.next() % atoms.size()];
      }
    }
    check(text, "generated text " + std::to_string(trial));
  }
}

// The word cache returns each word's merges: 60,000 distinct words (2 to 40 bytes, so both the inline
// table of short words, grown past its first size, and the table of longer ones) in documents of
// every length, encoded cold and again warm, against the reference rule on the regex's pieces.
BOOST_AUTO_TEST_CASE(word_cache_keeps_every_words_merges_through_growth) {
  TempDir t;
  Rng rng{7};
  std::vector<std::string> tokens{"a", "b", "c", "d", " "};
  std::vector<std::pair<std::string, std::string>> merges;
  std::map<std::pair<std::string, std::string>, int> rank;
  random_merges(rng, tokens, merges, rank, 80, 10, false);
  tokenizer::Spec spec;
  spec.type = "hf";
  json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  spec.tokenizer_json = write_tokenizer(t.path, "cache.json", merges, pre);
  auto tok = tokenizer::load(spec);
  tokenizer::RegexSplitter re(tokenizer::kHfByteLevelPattern);
  std::set<std::string> seen;
  std::vector<std::string> docs;
  while (seen.size() < 60000) {
    std::string doc;
    const size_t words = 1 + rng.next() % 30;
    for (size_t w = 0; w < words; ++w) {
      std::string word;
      const size_t len = 1 + (rng.next() % 8 == 0 ? rng.next() % 40 : rng.next() % 12);
      for (size_t k = 0; k < len; ++k) word += static_cast<char>('a' + rng.next() % 4);
      seen.insert(word);
      doc += (w ? " " : "") + word;
    }
    docs.push_back(doc);
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (const std::string& doc : docs) {
      std::vector<std::string> want;
      for (const std::string& piece : regex_pieces(re, doc))
        for (const std::string& s : reference_bpe(piece, rank)) want.push_back(s);
      std::vector<std::string> got;
      for (uint32_t id : tok->encode(doc)) got.push_back(tok->decode(&id, 1));
      BOOST_TEST_REQUIRE(got == want, (pass ? "warm" : "cold") << " document \"" << doc << "\"");
    }
  }
}

BOOST_AUTO_TEST_CASE(added_tokens_split_out_of_text_with_many_candidates) {
  TempDir t;
  tokenizer::Spec spec;
  spec.type = "hf";
  spec.tokenizer_json = write_tokenizer(t.path, "s.json", {{"<", "|"}}, byte_level_only());
  auto tok = tokenizer::load(spec);
  const uint32_t eot = tok->eot_id();
  std::vector<uint32_t> ids = tok->encode("<<|endoftext|><|end<|endoftext|>");
  BOOST_TEST(std::count(ids.begin(), ids.end(), eot) == 2);
  BOOST_TEST(ids.back() == eot);
  BOOST_TEST(tok->decode(ids) == "<<|endoftext|><|end<|endoftext|>");
}

// Options that would change the tokens and that cairn does not reproduce are refused with the reason.
BOOST_AUTO_TEST_CASE(unsupported_tokenizer_json_options_are_refused_with_the_reason) {
  TempDir t;
  std::string base = write_tokenizer(t.path, "base.json", {{"a", "b"}}, byte_level_only());
  json j = json::parse(std::ifstream(base));
  auto refused = [&](json variant, const std::string& reason) {
    std::string path = (t.path / "variant.json").string();
    std::ofstream(path) << variant.dump();
    tokenizer::Spec spec;
    spec.type = "hf";
    spec.tokenizer_json = path;
    try {
      tokenizer::load(spec);
      BOOST_ERROR("loaded despite " << reason);
    } catch (const UsageError& e) {
      BOOST_TEST(std::string(e.what()).find(reason) != std::string::npos, e.what());
      BOOST_TEST(std::string(e.what()).find(path) != std::string::npos, e.what());  // names the file
    }
  };
  json v = j;
  v["model"]["dropout"] = 0.1;
  refused(v, "dropout");
  v = j;
  v["model"]["continuing_subword_prefix"] = "##";
  refused(v, "continuing_subword_prefix");
  for (const char* n : {"BertNormalizer", "Precompiled", "NFKC_CF"}) {
    v = j;
    v["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}, {{"type", n}}})}};
    refused(v, std::string("normalizer \"") + n + "\"");
  }
  v = j;
  v["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({byte_level_only(), {{"type", "Metaspace"}}})}};
  refused(v, "Metaspace must come first");
  for (const char* n : {"BertPreTokenizer", "UnicodeScripts", "CharDelimiterSplit"}) {
    v = j;
    v["pre_tokenizer"] = {{"type", n}};
    refused(v, std::string("pre-tokenizer \"") + n + "\"");
  }
  // Oniguruma's nested classes: a plain one is a union (BLOOM's pattern loads), a negated one or && is refused.
  for (const char* re : {"[^a[^b]]", "[a-z&&[^c]]", "\\bx", "[\\W]", "\\h+"}) {
    v = j;
    v["pre_tokenizer"] = split_then_byte_level(re);
    refused(v, "Oniguruma");
  }
  // Hugging Face prefixes every piece of the levels before a ByteLevel with a space: not reproduced.
  v = j;
  v["pre_tokenizer"] = split_then_byte_level("\\d");
  v["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
  refused(v, "add_prefix_space after another pre-tokenizer");
  // An added token matched in the normalized text (normalized=true) is not reproduced with a normalizer.
  v = j;
  v["normalizer"] = {{"type", "NFC"}};
  v["added_tokens"][0]["normalized"] = true;
  refused(v, "normalized=true");
  // Without ByteLevel the vocabulary is SentencePiece-style: with neither byte_fallback nor unk_token a
  // character outside it would be dropped.
  v = j;
  v["pre_tokenizer"] = nullptr;
  refused(v, "would be dropped");
  v = j;
  v["pre_tokenizer"] = nullptr;
  v["model"]["unk_token"] = "<nope>";
  refused(v, "unk_token");
  v = j;
  v["pre_tokenizer"] = split_then_byte_level("\\d");
  v["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sometimes";
  refused(v, "MergedWithNext");
  // Null or zero dropout and empty affixes are the defaults: accepted.
  v = j;
  v["model"]["dropout"] = nullptr;
  v["model"]["continuing_subword_prefix"] = "";
  std::ofstream((t.path / "ok.json").string()) << v.dump();
  tokenizer::Spec spec;
  spec.type = "hf";
  spec.tokenizer_json = (t.path / "ok.json").string();
  BOOST_TEST(tokenizer::load(spec)->encode("ab").size() == 1u);
}

// Split behaviours and invert as Hugging Face's tokenizers define them (the cases of its own tests in
// pre_tokenizers/split.rs and normalizer.rs). With ignore_merges and every expected piece in the
// vocabulary, each piece comes back as one token.
BOOST_AUTO_TEST_CASE(split_behaviors_and_invert_follow_hugging_face) {
  TempDir t;
  struct Case {
    std::string regex, behavior, text;
    bool invert;
    std::vector<std::string> pieces;
  };
  const std::vector<Case> cases{
      {" ", "Removed", "How are you doing?", false, {"How", "are", "you", "doing?"}},
      {" ", "Isolated", "How are you doing?", false, {"How", " ", "are", " ", "you", " ", "doing?"}},
      {" ", "MergedWithPrevious", "How are you doing?", false, {"How ", "are ", "you ", "doing?"}},
      {" ", "MergedWithNext", "How are you doing?", false, {"How", " are", " you", " doing?"}},
      {" ", "Contiguous", "How are you doing?", false, {"How", " ", "are", " ", "you", " ", "doing?"}},
      {"-", "Contiguous", "The-final--countdown", false, {"The", "-", "final", "--", "countdown"}},
      {"-", "MergedWithPrevious", "The-final--countdown", false, {"The-", "final-", "-", "countdown"}},
      {"-", "MergedWithNext", "The-final--countdown", false, {"The", "-final", "-", "-countdown"}},
      {"\\w+", "Removed", "Hey friend!", true, {"Hey", "friend"}},
      {"\\w+", "Removed", "Hey friend!", false, {" ", "!"}},
      {"\\w+", "MergedWithPrevious", "Hey friend!  x", true, {"Hey ", "friend!  ", "x"}},
  };
  for (const Case& c : cases) {
    std::vector<std::pair<std::string, std::string>> merges;  // builds each piece left to right
    for (const std::string& p : c.pieces)
      for (size_t k = 1; k < p.size(); ++k) merges.emplace_back(p.substr(0, k), p.substr(k, 1));
    json pre = split_then_byte_level(c.regex);
    pre["pretokenizers"][0]["behavior"] = c.behavior;
    pre["pretokenizers"][0]["invert"] = c.invert;
    std::string path = write_tokenizer(t.path, "split.json", merges, pre);
    json j = json::parse(std::ifstream(path));
    j["model"]["ignore_merges"] = true;
    std::ofstream(path) << j.dump();
    tokenizer::Spec spec;
    spec.type = "hf";
    spec.tokenizer_json = path;
    auto tok = tokenizer::load(spec);
    std::vector<std::string> got;
    for (uint32_t id : tok->encode(c.text)) got.push_back(tok->decode(&id, 1));
    BOOST_TEST(got == c.pieces, c.behavior << " invert=" << c.invert << " on \"" << c.text << "\"");
  }
}

namespace {

const std::string kMeta = "\xe2\x96\x81";  // ▁, SentencePiece's space

// A SentencePiece-style tokenizer.json: <unk>, </s>, the 256 <0xNN> byte tokens (byte_fallback), then
// `tokens` and `merges` (pairs of tokens, each merge's result added to the vocabulary).
std::string write_sp_tokenizer(const fs::path& dir, const json& normalizer, const json& pre,
                               const std::vector<std::string>& tokens = {},
                               const std::vector<std::pair<std::string, std::string>>& merges = {},
                               bool byte_fallback = true) {
  json vocab = {{"<unk>", 0}, {"</s>", 1}};
  uint32_t next = 2;
  if (byte_fallback)
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      vocab[name] = next++;
    }
  for (const std::string& t : tokens)
    if (!vocab.contains(t)) vocab[t] = next++;
  json m = json::array();
  for (auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    m.push_back(a + " " + b);
  }
  json added = json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
                            {{"id", 1}, {"content", "</s>"}, {"special", true}, {"normalized", false}}});
  json tok = {
      {"added_tokens", added},
      {"normalizer", normalizer},
      {"pre_tokenizer", pre},
      {"model",
       {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", byte_fallback}, {"vocab", vocab}, {"merges", m}}}};
  std::string path = (dir / "sp.json").string();
  std::ofstream(path) << tok.dump();
  return path;
}

std::unique_ptr<tokenizer::Tokenizer> load_hf(const std::string& path) {
  tokenizer::Spec spec;
  spec.type = "hf";
  spec.tokenizer_json = path;
  return tokenizer::load(spec);
}

json replace_space() { return {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}; }

}  // namespace

// Each normalizer on a vocabulary of byte tokens only: every character falls back to its <0xNN> tokens,
// so decoding gives back the normalized text byte for byte. Expected forms are Unicode's (UAX #15) and
// Hugging Face's (Rust's char::to_lowercase: no final-sigma rule, İ -> i + U+0307).
BOOST_AUTO_TEST_CASE(normalizers_produce_the_unicode_and_hugging_face_forms) {
  TempDir t;
  struct Case {
    json normalizer;
    std::string text, want;
  };
  const json prepend = {{"type", "Prepend"}, {"prepend", kMeta}};
  const std::vector<Case> cases{
      {{{"type", "NFC"}}, "e\xcc\x81 A\xcc\x8a ok", "\xc3\xa9 \xc3\x85 ok"},
      {{{"type", "NFD"}},
       "\xc3\xa9\xc3\x85",
       "e\xcc\x81"
       "A\xcc\x8a"},
      {{{"type", "NFKC"}}, "\xef\xac\x81 \xe2\x91\xa0 \xef\xbc\xa1 \xef\xbd\xb6", "fi 1 A \xe3\x82\xab"},
      {{{"type", "NFKD"}}, "\xef\xac\x81\xc3\xa9", "fie\xcc\x81"},
      {{{"type", "Lowercase"}},
       "\xc3\x80"
       "B \xc4\xb0 \xce\xa3\xce\xa3 Z",
       "\xc3\xa0"
       "b i\xcc\x87 \xcf\x83\xcf\x83 z"},
      {prepend, "ab", kMeta + "ab"},
      {replace_space(), "a b  c", "a" + kMeta + "b" + kMeta + kMeta + "c"},
      {{{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "_"}}, "a   b c", "a_b_c"},
      // Oniguruma's nested class is a union: every character of both sets becomes "_".
      {{{"type", "Replace"}, {"pattern", {{"Regex", "[a[bc]]"}}}, {"content", "_"}}, "abcd", "___d"},
      // Strip: White_Space (NBSP, ideographic space) off the asked ends; StripAccents: marks (acute, Mc U+0903).
      {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, "\xc2\xa0 a \xe3\x80\x80", "a \xe3\x80\x80"},
      {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, "\t a b \n", "a b"},
      {{{"type", "StripAccents"}}, "e\xcc\x81\xe0\xa4\x95\xe0\xa4\x83x", "e\xe0\xa4\x95x"},
      {{{"type", "Sequence"}, {"normalizers", json::array({prepend, replace_space()})}},
       "a b</s>c </s>",
       kMeta + "a" + kMeta + "b</s>" + kMeta + "c" + kMeta + "</s>"},  // per piece between added tokens
  };
  for (const Case& c : cases) {
    auto tok = load_hf(write_sp_tokenizer(t.path, c.normalizer, nullptr));
    BOOST_TEST(tok->decode(tok->encode(c.text)) == c.want, c.normalizer.dump());
  }
  // ASCII-only text skips the Unicode forms and stays as it is.
  auto nfkc = load_hf(write_sp_tokenizer(t.path, {{"type", "NFKC"}}, nullptr));
  BOOST_TEST(nfkc->decode(nfkc->encode("plain ASCII\n")) == "plain ASCII\n");
}

// Metaspace as Hugging Face's pre_tokenizers/metaspace.rs defines it: spaces become ▁, prepended per
// prepend_scheme (not again when the text starts with ▁; "first" only at the start of the document, not
// after an added token); split=true starts a piece at each ▁ (MergedWithNext), so "▁▁" cannot merge.
BOOST_AUTO_TEST_CASE(metaspace_prepend_schemes_and_split) {
  TempDir t;
  auto meta = [](const std::string& scheme, bool split) {
    return json{{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", scheme}, {"split", split}};
  };
  const std::string m = kMeta;
  const std::vector<std::pair<std::string, std::string>> want{
      {"first", m + "a" + m + "b</s>c" + m + "</s>" + m + "d"},
      {"always", m + "a" + m + "b</s>" + m + "c" + m + "</s>" + m + "d"},
      {"never", "a" + m + "b</s>c" + m + "</s>" + m + "d"},
  };
  for (auto& [scheme, expect] : want) {
    auto tok = load_hf(write_sp_tokenizer(t.path, nullptr, meta(scheme, false)));
    BOOST_TEST(tok->decode(tok->encode("a b</s>c </s> d")) == expect, scheme);
    BOOST_TEST(tok->decode(tok->encode(" a")) == m + "a", scheme);  // already starts with ▁
  }
  // The legacy add_prefix_space=false means never.
  json legacy = meta("first", false);
  legacy["add_prefix_space"] = false;
  auto tok = load_hf(write_sp_tokenizer(t.path, nullptr, legacy));
  BOOST_TEST(tok->decode(tok->encode("a b")) == "a" + m + "b");
  // "▁▁" is one token when not split; split gives "▁" + "▁b" (each ▁ joins what follows it, and a ▁
  // followed by a ▁ stands alone, as in Hugging Face's MergedWithNext).
  const std::vector<std::pair<std::string, std::string>> merges{{m, m}, {m, "b"}};
  for (bool split : {false, true}) {
    auto sp = load_hf(write_sp_tokenizer(t.path, nullptr, meta("never", split), {"a", "b", m}, merges));
    std::vector<std::string> got;
    for (uint32_t id : sp->encode("a  b")) got.push_back(sp->decode(&id, 1));
    const std::vector<std::string> expect =
        split ? std::vector<std::string>{"a", " ", " b"} : std::vector<std::string>{"a", "  ", "b"};
    BOOST_TEST(got == expect, "split=" << split);
  }
}

// A character without a token becomes its <0xNN> byte tokens (byte_fallback), else <unk>: one per run of
// unknown characters with fuse_unk, one per character without.
BOOST_AUTO_TEST_CASE(byte_fallback_and_unk) {
  TempDir t;
  auto tok = load_hf(write_sp_tokenizer(t.path, nullptr, nullptr, {"a", "b"}));
  std::vector<uint32_t> ids = tok->encode("a\xe2\x82\xac"
                                          "b");  // a€b
  BOOST_TEST(ids.size() == 5u);
  BOOST_TEST(tok->decode(ids) == "a\xe2\x82\xac"
                                 "b");
  for (bool fuse : {true, false}) {
    std::string path = write_sp_tokenizer(t.path, nullptr, nullptr, {"a", "b"}, {}, false);
    json j = json::parse(std::ifstream(path));
    j["model"]["fuse_unk"] = fuse;
    std::ofstream(path) << j.dump();
    auto unk = load_hf(path);
    std::vector<uint32_t> got = unk->encode("a\xe2\x82\xac\xe2\x82\xac"
                                            "b\xe2\x82\xac");
    const std::vector<uint32_t> a_id = unk->encode("a"), b_id = unk->encode("b");
    std::vector<uint32_t> want{a_id[0], 0u};
    if (!fuse) want.push_back(0u);
    want.push_back(b_id[0]);
    want.push_back(0u);
    BOOST_TEST(got == want, "fuse_unk=" << fuse);
  }
}

// Words are cut before a ▁ that follows another character only when no token could span that point:
// with "a▁b" in the vocabulary the whole text stays one word and the merge happens.
BOOST_AUTO_TEST_CASE(space_cuts_only_where_no_token_spans_them) {
  TempDir t;
  const std::vector<std::pair<std::string, std::string>> merges{{"a", kMeta}, {"a" + kMeta, "b"}};
  auto spans = load_hf(write_sp_tokenizer(t.path, replace_space(), nullptr, {"a", "b", kMeta}, merges));
  BOOST_TEST(spans->encode("a b").size() == 1u);
  BOOST_TEST(spans->encode("a b a b").size() == 3u);  // "a▁b", "▁", "a▁b"
  auto plain = load_hf(write_sp_tokenizer(t.path, replace_space(), nullptr, {"a", "b", kMeta}, {{kMeta, "b"}}));
  const std::vector<uint32_t> ab = plain->encode("a b");
  BOOST_TEST(ab.size() == 2u);
  BOOST_TEST(plain->decode(ab) == "a b");
}

// Added tokens that are also model vocabulary stay BPE tokens (Gemma 2 and 3: runs of "\n" are added tokens that
// merges build; such files used to be refused as malformed). The end-of-text token is found by its usual names
// (here <EOT>, as Anthropic's file has) or named with eot_token, which the dataset's description keeps.
BOOST_AUTO_TEST_CASE(added_tokens_in_the_vocabulary_and_the_end_of_text_token) {
  TempDir t;
  json vocab = json::object();
  uint32_t next = 0;
  for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = next++;
  const std::string nl = byte_level("\n"), nn = byte_level("\n\n"), nnn = byte_level("\n\n\n");
  const uint32_t id_nn = next++, id_nnn = next++, id_eot = next++;
  vocab[nn] = id_nn, vocab[nnn] = id_nnn, vocab["<EOT>"] = id_eot;
  json file = {{"added_tokens", json::array({{{"id", id_nn}, {"content", "\n\n"}, {"special", false}},
                                             {{"id", id_eot}, {"content", "<EOT>"}, {"special", true}}})},
               {"pre_tokenizer", byte_level_only()},
               {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({nl + " " + nl, nn + " " + nl})}}}};
  fs::create_directories(t.path / "tokenizer");
  const std::string path = (t.path / "tokenizer" / "tokenizer.json").string();
  std::ofstream(path) << file.dump();
  tokenizer::Spec spec;
  spec.type = "hf";
  spec.tokenizer_json = path;
  auto tok = tokenizer::load(spec);
  BOOST_TEST(tok->eot_id() == id_eot);
  // "\n\n" is matched as the added token first; the third newline stays a byte token.
  BOOST_TEST((tok->encode("a\n\n\nb") == std::vector<uint32_t>{'a', id_nn, '\n', 'b'}));
  BOOST_TEST((tok->encode("\n\n\n") == std::vector<uint32_t>{id_nn, '\n'}));

  spec.eot_token = "\n\n";
  auto named = tokenizer::load(spec);
  BOOST_TEST(named->eot_id() == id_nn);
  BOOST_TEST(named->id() != tok->id());  // another end-of-text token: another stream
  const json desc = named->describe();
  BOOST_TEST(desc.value("eot_token", "") == "\n\n");
  BOOST_TEST(tokenizer::load_from_description(desc, t.path.string())->eot_id() == id_nn);

  spec.eot_token = "<nope>";
  try {
    tokenizer::load(spec);
    BOOST_FAIL("a missing eot_token was accepted");
  } catch (const UsageError& e) {
    BOOST_TEST(std::string(e.what()).find("data.eot_token") != std::string::npos, e.what());
  }
}

// lstrip / rstrip (Hugging Face's added-token flags): the white space before / after the token goes with it, any
// Unicode White_Space (Rust's char::is_whitespace: NEL and NBSP are, U+FEFF is not), never into the text of an
// earlier added token.
// A byte-level tokenizer (byte b is token b) with `added` (objects without "id") after its end-of-text token, whose
// id it returns in `eot`.
std::unique_ptr<tokenizer::Tokenizer> bytes_with_added_tokens(const TempDir& t, std::vector<json> added,
                                                              uint32_t& eot) {
  std::string path = write_tokenizer(t.path, "added.json", {}, byte_level_only());
  json j = json::parse(std::ifstream(path));
  eot = j["added_tokens"][0]["id"].get<uint32_t>();
  for (size_t i = 0; i < added.size(); ++i) {
    added[i]["id"] = eot + 1 + i;
    added[i]["special"] = true;
    j["added_tokens"].push_back(added[i]);
  }
  std::ofstream(path) << j.dump();
  tokenizer::Spec spec;
  spec.type = "hf";
  spec.tokenizer_json = path;
  return tokenizer::load(spec);
}

BOOST_AUTO_TEST_CASE(added_tokens_with_lstrip_and_rstrip_take_the_white_space_beside_them) {
  TempDir t;
  uint32_t eot = 0;
  auto tok =
      bytes_with_added_tokens(t, {{{"content", "<L>"}, {"lstrip", true}}, {{"content", "<R>"}, {"rstrip", true}}}, eot);
  auto ids = [&](const std::string& s) { return tok->encode(s); };
  using V = std::vector<uint32_t>;
  const uint32_t L = eot + 1, R = eot + 2;
  BOOST_TEST((ids("a \t<L> b") == V{'a', L, ' ', 'b'}));           // lstrip: only the white space before it
  BOOST_TEST((ids("a <R> \n b") == V{'a', ' ', R, 'b'}));          // rstrip: only the white space after it
  BOOST_TEST((ids("<R>  <L>x") == V{R, L, 'x'}));                  // both sides, nothing left between
  BOOST_TEST((ids("a\xc2\xa0\xe3\x80\x80<L>") == V{'a', L}));      // NBSP, ideographic space
  BOOST_TEST((ids("\xef\xbb\xbf<L>") == V{0xef, 0xbb, 0xbf, L}));  // U+FEFF is not White_Space
}

// single_word (Hugging Face's added-token flag): the token matches only where no word character (Rust regex's Unicode
// \w: letters and other Alphabetic, marks, decimal digits, connector punctuation) touches it; a discarded match is
// ordinary text, and no shorter token is looked for inside it (the leftmost-longest matcher continues after it).
// Cases from Hugging Face's added_vocabulary.rs tests, without their Lowercase normalizer.
BOOST_AUTO_TEST_CASE(added_tokens_with_single_word_match_whole_words_only) {
  TempDir t;
  uint32_t eot = 0;
  auto tok = bytes_with_added_tokens(t,
                                     {{{"content", "<mask>"}, {"single_word", true}},
                                      {{"content", "ask>"}},
                                      {{"content", "<m>"}, {"single_word", true}, {"lstrip", true}, {"rstrip", true}}},
                                     eot);
  auto ids = [&](const std::string& s) { return tok->encode(s); };
  auto bytes = [](const std::string& s) {
    std::vector<uint32_t> v;
    for (unsigned char c : s) v.push_back(c);
    return v;
  };
  auto cat = [](std::vector<std::vector<uint32_t>> parts) {
    std::vector<uint32_t> v;
    for (auto& p : parts) v.insert(v.end(), p.begin(), p.end());
    return v;
  };
  const uint32_t M = eot + 1, A = eot + 2, S = eot + 3;
  BOOST_TEST(ids("<mask> My name <mask> A<mask> <mask>ony <mask>") ==
             cat({{M}, bytes(" My name "), {M}, bytes(" A<mask> <mask>ony "), {M}}));
  // Punctuation is not a word character, a combining mark (U+0330) is.
  BOOST_TEST(ids("<mask>, <mask>- \xe2\x97\x8c\xcc\xb0<mask>") ==
             cat({{M}, bytes(", "), {M}, bytes("- \xe2\x97\x8c\xcc\xb0<mask>")}));
  BOOST_TEST(ids("_<mask>") == bytes("_<mask>"));                      // connector punctuation
  BOOST_TEST(ids("\xd9\xa3<mask>") == bytes("\xd9\xa3<mask>"));        // Arabic-Indic digit three (Nd)
  BOOST_TEST(ids("\xc2\xb2<mask>") == cat({bytes("\xc2\xb2"), {M}}));  // superscript two (No) is not
  BOOST_TEST(ids("x<mask>") == bytes("x<mask>"));                      // not "x<m" + ask>
  BOOST_TEST(ids("xask>") == cat({bytes("x"), {A}}));
  // With lstrip and rstrip: the neighbours are tested before the white space is taken.
  BOOST_TEST(ids("Hi <m> there\t<m>\t<m>\xe2\x80\x80") == cat({bytes("Hi"), {S}, bytes("there"), {S}, {S}}));
  BOOST_TEST(ids("a<m> b") == bytes("a<m> b"));
}
