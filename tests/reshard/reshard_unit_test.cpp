// Unit tests of the shard reader/writer, tokenizers' building blocks, the reshard planner and mixtures.
#define BOOST_TEST_MODULE reshard_unit
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "cairn/error.h"
#include "cairn/shards.h"
#include "cairn/tokenizer.h"
#include "reshard.h"

namespace fs = std::filesystem;
using namespace cairn;

namespace {
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("cairn-reshard-unit-" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<std::string> split(const tokenizer::RegexSplitter& s, const std::string& text) {
  std::vector<std::string> out;
  s.split(text, [&](size_t b, size_t n) { out.push_back(text.substr(b, n)); });
  return out;
}
}  // namespace

BOOST_AUTO_TEST_CASE(bytes_tokenizer_round_trips) {
  auto tok = tokenizer::load({});
  BOOST_TEST(tok->vocab_size() == 257u);
  BOOST_TEST(tok->eot_id() == 256u);
  std::string text = "héllo\n\tworld";
  auto ids = tok->encode(text);
  BOOST_TEST(ids.size() == text.size());
  BOOST_TEST(tok->decode(ids) == text);
  BOOST_CHECK_THROW(tokenizer::load({"sentencepiece", "", "", "", ""}), UsageError);
  BOOST_CHECK_THROW(tokenizer::load({"gpt2", "", "", "", ""}), UsageError);
}

BOOST_AUTO_TEST_CASE(utf8_validation_finds_first_bad_byte) {
  BOOST_TEST(tokenizer::find_invalid_utf8("plain ascii text, long enough for the fast path") == std::string::npos);
  BOOST_TEST(tokenizer::find_invalid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == std::string::npos);
  BOOST_TEST(tokenizer::find_invalid_utf8("abc\xff") == 3u);
  BOOST_TEST(tokenizer::find_invalid_utf8("ab\xc0\xaf") == 2u);        // overlong
  BOOST_TEST(tokenizer::find_invalid_utf8("x\xed\xa0\x80") == 1u);     // surrogate
  BOOST_TEST(tokenizer::find_invalid_utf8("12345678\xe2\x82") == 8u);  // truncated
}

BOOST_AUTO_TEST_CASE(pre_tokenizer_regexes_split_like_gpt2_and_llama3) {
  tokenizer::RegexSplitter gpt2(tokenizer::kGpt2Pattern);
  std::vector<std::string> want{"Hello", ",", " world", "'s", " 12345", "  ", " ok", "\n"};
  BOOST_TEST(split(gpt2, "Hello, world's 12345   ok\n") == want, boost::test_tools::per_element());
  tokenizer::RegexSplitter llama3(tokenizer::kLlama3Pattern, false);
  std::vector<std::string> want3{"Hello", ",", " world", "'S", " ", "123", "45", "\n\n", "x"};
  BOOST_TEST(split(llama3, "Hello, world'S 12345\n\nx") == want3, boost::test_tools::per_element());
  BOOST_CHECK_THROW(tokenizer::RegexSplitter("(unclosed"), UsageError);
  // \s is Unicode's White_Space, as in OpenAI's encoder.py, tiktoken and Hugging Face (Oniguruma): NEL is white
  // space, U+FEFF (JavaScript's \s) and U+180E (PCRE2's) are not, so a space before them joins them.
  using V = std::vector<std::string>;
  BOOST_TEST(split(gpt2, "a \xc2\x85"
                         "b") == V({"a", " ", "\xc2\x85", "b"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(gpt2, "a \xef\xbb\xbf"
                         "b") == V({"a", " \xef\xbb\xbf", "b"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(gpt2, "a \xe1\xa0\x8e"
                         "b") == V({"a", " \xe1\xa0\x8e", "b"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(llama3, "a \xe1\xa0\x8e"
                           "b") == V({"a", " \xe1\xa0\x8e", "b"}),
             boost::test_tools::per_element());
}

// The regexes of the real Llama 3 and GPT-2 tokenizer.json files translate to the patterns the hand-written
// splitters stand for (else those files would silently lose the fast path); \S inside a class is White_Space's
// complement, as outside one.
BOOST_AUTO_TEST_CASE(oniguruma_regexes_translate_to_the_fast_splitters_patterns) {
  const std::string llama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const std::string gpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
  BOOST_TEST(tokenizer::pcre2_pattern_from_oniguruma(llama3) == std::string(tokenizer::kLlama3Pattern));
  BOOST_TEST(tokenizer::pcre2_pattern_from_oniguruma(gpt2) == std::string(tokenizer::kGpt2Pattern));
  tokenizer::RegexSplitter in_class(tokenizer::pcre2_pattern_from_oniguruma("[\\S]+")),
      outside(tokenizer::pcre2_pattern_from_oniguruma("\\S+"));
  for (const char* c : {"\xe1\xa0\x8e", "\xef\xbb\xbf", "x", "\xf0\x9f\x98\x80", "\xe2\x80\x8b"}) {
    BOOST_TEST(in_class.full_match(c), c);
    BOOST_TEST(outside.full_match(c), c);
  }
  for (const char* c : {" ", "\t", "\xc2\x85", "\xc2\xa0", "\xe3\x80\x80", "\xe2\x80\xa8"}) {
    BOOST_TEST(!in_class.full_match(c), c);
    BOOST_TEST(!outside.full_match(c), c);
  }
}

BOOST_AUTO_TEST_CASE(fast_gpt2_splitter_equals_the_regex_on_random_unicode) {
  // Letters, digits, punctuation, apostrophes and contractions, every kind of whitespace the two
  // definitions of \s disagree on (NEL, BOM, NBSP, em space, ideographic space), CJK, Arabic-Indic
  // digits, combining marks, emoji (outside the BMP) and Roman numerals (Nl).
  const std::vector<std::string> atoms{"a",
                                       "Z",
                                       "é",
                                       "ß",
                                       "ж",
                                       "中",
                                       "7",
                                       "٣",
                                       "Ⅻ",
                                       "'",
                                       "'s",
                                       "'ll",
                                       "'re",
                                       "'t",
                                       "'x",
                                       " ",
                                       "  ",
                                       "\t",
                                       "\n",
                                       "\r\n",
                                       "\xc2\x85",
                                       "\xef\xbb\xbf",
                                       "\xe1\xa0\x8e",
                                       "\xc2\xa0",
                                       "\xe2\x80\x83",
                                       "\xe3\x80\x80",
                                       ",",
                                       "--",
                                       "!?",
                                       "\xcc\x81",
                                       "\xf0\x9f\x98\x80",
                                       "$",
                                       "_"};
  tokenizer::RegexSplitter gpt2(tokenizer::kGpt2Pattern);
  uint64_t state = 12345;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    int len = 1 + static_cast<int>((state >> 33) % 24);
    for (int k = 0; k < len; ++k) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      text += atoms[(state >> 33) % atoms.size()];
    }
    std::vector<std::string> fast;
    tokenizer::split_gpt2_fast(text, [&](size_t b, size_t n) { fast.push_back(text.substr(b, n)); });
    std::vector<std::string> slow = split(gpt2, text);
    BOOST_TEST_REQUIRE(fast == slow, "text \"" << text << "\"");
  }
}

BOOST_AUTO_TEST_CASE(shard_writer_and_reader_round_trip_both_widths) {
  TempDir t;
  for (uint32_t vocab : {257u, 100000u}) {
    std::string path = (t.path / ("s" + std::to_string(vocab) + ".h5")).string();
    shards::ShardMeta meta;
    meta.vocab_size = vocab;
    meta.eot_id = vocab - 1;
    meta.tokenizer_id = "test";
    meta.plan_hash = "p1";
    std::vector<uint32_t> toks(3000);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint32_t>((i * 7919) % vocab);
    shards::ShardWriter w(path, meta, toks.size(), 3);
    w.append_tokens(toks.data(), 1000);
    w.append_tokens(toks.data() + 1000, 2000);
    w.append_document(10, 11);
    w.append_document(2000, 5);
    w.append_document(990, 7);
    shards::ShardInfo info = w.finish();
    BOOST_TEST(info.xxh64 == shards::hash_tokens(toks.data(), toks.size(), vocab <= 65536));
    auto sh = shards::open_shard(path);
    BOOST_TEST(sh->token_width() == (vocab <= 65536 ? 2 : 4));
    BOOST_TEST(sh->num_tokens() == 3000u);
    BOOST_TEST(sh->num_documents() == 3u);
    BOOST_TEST(sh->doc_begin(1) == 10u);
    BOOST_TEST(sh->doc_end(1) == 2010u);
    BOOST_TEST(sh->doc_bytes(2) == 7u);
    BOOST_TEST(sh->tokens(5, 100) == std::vector<uint32_t>(toks.begin() + 5, toks.begin() + 105),
               boost::test_tools::per_element());
    BOOST_TEST(sh->document(2) == std::vector<uint32_t>(toks.begin() + 2010, toks.end()),
               boost::test_tools::per_element());
    BOOST_CHECK_THROW(sh->tokens(2990, 20), RuntimeError);
    shards::ShardInfo again;
    BOOST_TEST(shards::existing_shard_matches(path, "p1", again));
    BOOST_TEST(!shards::existing_shard_matches(path, "other plan", again));
  }
  // A token outside the vocabulary is refused, naming the file.
  shards::ShardMeta meta;
  meta.vocab_size = 10;
  shards::ShardWriter w((t.path / "bad.h5").string(), meta, 2, 1);
  uint32_t bad[2] = {3, 12};
  BOOST_CHECK_THROW(w.append_tokens(bad, 2), UsageError);
}

// This process's resident file-backed memory (RssFile in /proc/self/status), in bytes.
static uint64_t rss_file_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  uint64_t kb = 0;
  while (in >> key)
    if (key == "RssFile:" && in >> kb) return kb * 1024;
  return 0;
}

// A pass over a mapped shard drops its pages as it goes (verify, convert --to): a 4.8 GB shard showed as 4.7 GB of
// resident memory, which Slurm's accounting counts against the job.
BOOST_AUTO_TEST_CASE(released_shard_pages_leave_the_resident_set) {
  TempDir t;
  const std::string path = (t.path / "big.h5").string();
  shards::ShardMeta meta;
  meta.vocab_size = 257;
  meta.eot_id = 256;
  meta.tokenizer_id = "bytes";
  const size_t n = size_t{32} << 20, chunk = size_t{1} << 20;  // 64 MB of uint16 tokens
  std::vector<uint32_t> toks(chunk);
  for (size_t i = 0; i < chunk; ++i) toks[i] = static_cast<uint32_t>(i % 256);
  shards::ShardWriter w(path, meta, n, 1);
  for (size_t at = 0; at < n; at += chunk) w.append_tokens(toks.data(), chunk);
  w.append_document(n, n);
  w.finish();
  auto sh = shards::open_shard(path);
  BOOST_REQUIRE(sh->mapped_tokens() != nullptr);
  const uint64_t before = rss_file_bytes();
  std::vector<uint32_t> buf(chunk);
  uint64_t sum = 0;
  for (size_t at = 0; at < n; at += chunk) {
    sh->read_tokens(at, chunk, buf.data());
    sum += buf[chunk - 1];
    sh->release_tokens(at, chunk);
  }
  BOOST_TEST(sum == (n / chunk) * 255u);
  BOOST_TEST(rss_file_bytes() < before + (8u << 20), "resident file pages grew by " << (rss_file_bytes() - before));
}

BOOST_AUTO_TEST_CASE(planner_balances_and_shuffle_is_a_fixed_permutation) {
  std::vector<uint64_t> lens{5, 100, 3, 40, 40, 7, 60, 20, 1, 90, 33, 8};
  std::vector<uint64_t> prefix{0};
  for (auto l : lens) prefix.push_back(prefix.back() + l);
  auto b = reshard::plan_bounds(prefix, 3, false);
  BOOST_TEST(b.front() == 0u);
  BOOST_TEST(b.back() == prefix.back());
  for (auto x : b) BOOST_TEST((std::find(prefix.begin(), prefix.end(), x) != prefix.end()));  // document boundaries
  auto s = reshard::plan_bounds(prefix, 5, true);
  for (size_t k = 0; k + 1 < s.size(); ++k)
    BOOST_TEST((s[k + 1] - s[k] == prefix.back() / 5 || s[k + 1] - s[k] == prefix.back() / 5 + 1));
  auto empty = reshard::plan_bounds(prefix, 40, false);  // more shards than documents: some are empty
  BOOST_TEST(empty.back() == prefix.back());
  auto p1 = reshard::shuffled_order(1000, 42), p2 = reshard::shuffled_order(1000, 42),
       p3 = reshard::shuffled_order(1000, 43);
  BOOST_TEST(p1 == p2);
  BOOST_TEST(p1 != p3);
  std::set<uint64_t> all(p1.begin(), p1.end());
  BOOST_TEST(all.size() == 1000u);
  // Pinned values (computed independently in Python): the order must never change between versions
  // or platforms, or a rerun with the same --seed would produce a different dataset.
  std::vector<uint64_t> pinned5{2, 1, 4, 3, 0}, pinned10{0, 9, 5, 8, 6, 4, 7, 2, 1, 3};
  BOOST_TEST(reshard::shuffled_order(5, 1) == pinned5, boost::test_tools::per_element());
  BOOST_TEST(reshard::shuffled_order(10, 42) == pinned10, boost::test_tools::per_element());
}

namespace {
// The documents a text input holds, split the simple way (the whole text in memory): the reference
// the streaming reader must equal, batch size and read-buffer boundaries notwithstanding.
std::vector<std::string> reference_docs(const std::string& all, const std::string& delim) {
  std::vector<std::string> docs;
  size_t pos = 0, begin = 0;
  while (pos < all.size()) {
    size_t nl = all.find('\n', pos);
    size_t end = nl == std::string::npos ? all.size() : nl;
    std::string l = all.substr(pos, end - pos);
    if (!l.empty() && l.back() == '\r') l.pop_back();
    size_t next = nl == std::string::npos ? all.size() : nl + 1;
    if (l == delim) {
      if (pos > begin) docs.push_back(all.substr(begin, pos - begin));
      begin = next;
    }
    pos = next;
  }
  if (begin < all.size()) docs.push_back(all.substr(begin));
  return docs;
}
}  // namespace

BOOST_AUTO_TEST_CASE(record_reader_streams_the_same_documents_at_any_batch_size) {
  TempDir tmp;
  // ~9 MB with long documents, CRLF lines and empty documents, so records span the 4 MB reads.
  std::string all;
  uint64_t state = 7;
  auto rnd = [&]() { return state = state * 6364136223846793005ULL + 1442695040888963407ULL, state >> 33; };
  while (all.size() < (9u << 20)) {
    size_t lines = rnd() % 40;
    if (rnd() % 50 == 0) lines = 20000;  // a document of ~1 MB
    for (size_t l = 0; l < lines; ++l) {
      all += std::string(rnd() % 90, static_cast<char>('a' + rnd() % 26));
      all += rnd() % 5 == 0 ? "\r\n" : "\n";
    }
    all += rnd() % 3 == 0 ? "%\r\n" : "%\n";
  }
  all += std::string(6u << 20, 'L') + "\n%\n";  // one line longer than a read
  all += "tail without newline";
  const std::string path = (tmp.path / "in.txt").string();
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(all.data(), 1, all.size(), f);
    std::fclose(f);
  }
  const std::vector<std::string> want = reference_docs(all, "%");
  reshard::TextSettings ts;
  ts.delimiter = "%";
  for (size_t batch : {size_t{1}, size_t{4096}, size_t{3} << 20}) {
    reshard::RecordReader r(path, ts);
    reshard::RecordBatch b;
    std::vector<std::string> got;
    while (r.next(b, batch))
      for (auto& rec : b.records) got.push_back(b.raw.substr(rec.begin, rec.end - rec.begin));
    BOOST_TEST(r.stream_error().empty());
    BOOST_REQUIRE_EQUAL(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) BOOST_REQUIRE(got[i] == want[i]);
  }
}

BOOST_AUTO_TEST_CASE(decode_record_reports_line_and_offset) {
  reshard::RecordBatch b;
  b.kind = reshard::InputKind::Jsonl;
  auto add = [&](const std::string& s, uint64_t line, uint64_t off) {
    reshard::RecordBatch::Record r;
    r.begin = b.raw.size();
    b.raw += s;
    r.end = b.raw.size();
    r.line = line;
    r.offset = off;
    b.records.push_back(r);
  };
  add(R"({"text": "caf\u00e9"})", 1, 0);
  add("{\"text\": \"bad \xff\"}", 2, 100);
  add(R"({"body": "x"})", 3, 200);
  add(R"({"text": "unterminated)", 4, 300);
  reshard::TextSettings ts;
  std::string storage;
  std::string_view text;
  reshard::RecordProblem p;
  BOOST_TEST(reshard::decode_record(b, 0, ts, storage, text, p));
  BOOST_TEST(text == "caf\xc3\xa9");
  BOOST_TEST(!reshard::decode_record(b, 1, ts, storage, text, p));
  BOOST_TEST(p.line == 2u);
  BOOST_TEST(p.offset == 114u);
  BOOST_TEST(p.why == "invalid UTF-8");
  BOOST_TEST(!reshard::decode_record(b, 2, ts, storage, text, p));
  BOOST_TEST(p.why == "no string field \"text\"");
  BOOST_TEST(!reshard::decode_record(b, 3, ts, storage, text, p));
  BOOST_TEST(p.why.rfind("broken JSON line", 0) == 0);
  BOOST_TEST(reshard::describe_problem("x.jsonl.zst", true, p)
                 .find("bad input \"x.jsonl.zst\": line 4 (byte offset 300 of the decompressed stream): broken JSON") ==
             0);
}

// Greedy blending on sources of very different document lengths: every prefix within the longest
// document of its share, exact counts, epochs that repeat as permutations, a fixed order per seed.
BOOST_AUTO_TEST_CASE(mixture_plan_holds_weights_at_every_prefix) {
  reshard::MemorySource a, b, c;
  std::vector<uint32_t> doc(1000, 7);
  for (int i = 0; i < 300; ++i) a.add_document(doc.data(), 50 + (i * 37) % 400, 1);  // long documents
  for (int i = 0; i < 500; ++i) b.add_document(doc.data(), 5 + (i * 13) % 60, 1);    // short ones
  for (int i = 0; i < 7; ++i) c.add_document(doc.data(), 10 + i, 1);                 // tiny: repeats
  const std::vector<const reshard::DocSource*> src = {&a, &b, &c};
  const std::vector<double> w = {0.5, 0.3, 0.2};
  const uint64_t target = 100000;
  reshard::MixPlan p = reshard::plan_mixture(src, w, target, 11);
  uint64_t max_len = 0;
  std::vector<uint64_t> have(3, 0), seen_c;
  for (size_t d = 0; d < p.source.size(); ++d) {
    const reshard::DocSource& s = *src[p.source[d]];
    const uint64_t len = s.doc_start(p.doc[d] + 1) - s.doc_start(p.doc[d]);
    BOOST_TEST(p.prefix[d + 1] - p.prefix[d] == len);
    max_len = std::max(max_len, len);
    have[p.source[d]] += len;
    for (size_t i = 0; i < 3; ++i) {
      const double lag = static_cast<double>(have[i]) - w[i] * static_cast<double>(p.prefix[d + 1]);
      BOOST_TEST(lag >= -static_cast<double>(max_len));
      BOOST_TEST(lag <= 2.0 * max_len);
    }
    if (p.source[d] == 2) seen_c.push_back(p.doc[d]);
  }
  BOOST_TEST(p.prefix.back() >= target);
  BOOST_TEST(p.prefix.back() - target < max_len);
  for (size_t i = 0; i < 3; ++i) BOOST_TEST(have[i] == p.tokens[i]);
  // The tiny source: every full pass of 7 is a permutation; passes differ in order.
  BOOST_TEST(seen_c.size() > 100u);
  std::set<std::vector<uint64_t>> orders;
  for (size_t k = 0; k + 7 <= seen_c.size(); k += 7) {
    std::vector<uint64_t> pass(seen_c.begin() + k, seen_c.begin() + k + 7), sorted = pass;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < 7; ++i) BOOST_TEST(sorted[i] == i);
    orders.insert(pass);
  }
  BOOST_TEST(orders.size() > 10u);
  // Same seed: same plan; another seed: another order; no seed: stored order.
  BOOST_TEST(reshard::plan_mixture(src, w, target, 11).doc == p.doc);
  BOOST_TEST(reshard::plan_mixture(src, w, target, 12).doc != p.doc);
  reshard::MixPlan stored = reshard::plan_mixture(src, w, target, -1);
  for (size_t d = 0, next_a = 0; d < stored.source.size(); ++d)
    if (stored.source[d] == 0) BOOST_TEST(stored.doc[d] == (next_a++) % 300);
  // Windows over one shard: shares within [0, 1], the worst deviation at least the mean.
  std::vector<uint64_t> bounds = {0, p.prefix.back()};
  reshard::json ws = reshard::mix_window_stats(p, w, bounds, 64, 16);
  BOOST_TEST(ws["windows"].get<uint64_t>() == (p.prefix.back() - 1) / 64 / 16);
  BOOST_TEST(ws["worst_deviation"].get<double>() >= ws["mean_deviation"].get<double>());
  BOOST_TEST(ws["worst_deviation"].get<double>() <= 1.0);
}
