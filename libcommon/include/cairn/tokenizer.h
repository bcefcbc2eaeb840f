// Tokenizers for datasets and evaluation: raw bytes, GPT-2 byte-level BPE, Hugging Face tokenizer.json BPE.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace cairn {
struct DataSection;
}

namespace cairn::tokenizer {

// Where a tokenizer comes from: type "bytes" | "gpt2" (vocab = encoder.json, merges = vocab.bpe)
// | "hf" (tokenizer_json = tokenizer.json with a BPE model).
struct Spec {
  std::string type = "bytes";
  std::string vocab;           // gpt2: encoder.json
  std::string merges;          // gpt2: vocab.bpe
  std::string tokenizer_json;  // hf: tokenizer.json
  std::string eot_token;       // hf: the token that ends each document ("" = the first of the usual names)
};

// A loaded tokenizer. encode/decode are const and safe to call from many threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "bytes", "gpt2:<xxh64 of the files>", "hf:<xxh64 of tokenizer.json>": equal ids mean equal tokens.
  virtual std::string id() const = 0;
  virtual std::string type() const = 0;
  virtual uint32_t vocab_size() const = 0;  // max id + 1
  virtual uint32_t eot_id() const = 0;      // end-of-text id appended after each document
  // Appends the ids of `text` (no end-of-text added) to `out`. Text that is not valid UTF-8 is refused
  // with a UsageError naming the first bad byte (the bytes tokenizer takes any bytes).
  virtual void encode_into(std::string_view text, std::vector<uint32_t>& out) const = 0;
  // Bytes of the given ids (ids out of range throw UsageError).
  virtual std::string decode(const uint32_t* ids, size_t n) const = 0;
  // The tokenizer description stored in a dataset's index.json ("files" relative to the dataset).
  virtual nlohmann::json describe() const = 0;
  // The files this tokenizer was loaded from (copied next to a dataset so it is self-contained).
  virtual std::vector<std::string> source_files() const { return {}; }

  std::vector<uint32_t> encode(std::string_view text) const {
    std::vector<uint32_t> out;
    encode_into(text, out);
    return out;
  }
  std::string decode(const std::vector<uint32_t>& ids) const { return decode(ids.data(), ids.size()); }
};

// Loads from explicit files; errors name the file and what is wrong (UsageError).
std::unique_ptr<Tokenizer> load(const Spec& spec);
// The tokenizer [data] configures (tokenizer, vocab, merges, tokenizer_json, eot_token): what cairn-reshard builds
// with, and what cairn-plan counts the vocabulary of before the dataset exists.
std::unique_ptr<Tokenizer> load_configured(const DataSection& data);
// Loads the tokenizer a dataset was built with, from index.json's "tokenizer" object; relative file
// names are resolved against `dataset_dir` (build copies the files into <dataset>/tokenizer/).
std::unique_ptr<Tokenizer> load_from_description(const nlohmann::json& description, const std::string& dataset_dir);
// Convenience for cairn-eval: the tokenizer of the dataset at `dataset_dir` (reads its index.json).
std::unique_ptr<Tokenizer> load_for_dataset(const std::string& dataset_dir);

// Validates UTF-8; returns the byte offset of the first invalid sequence, or npos if valid.
size_t find_invalid_utf8(std::string_view text);

// GPT-2's pre-tokenizer regex (as in OpenAI's encoder) and Llama 3's, usable with PCRE2.
extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;

class RegexSplitter;
namespace detail {  // internal to the tokenizer sources: one match on text already validated
bool regex_find(const RegexSplitter& re, std::string_view text, size_t pos, size_t& begin, size_t& end);
}

// Splits text with a PCRE2 pattern the way Hugging Face's Split(behavior="Isolated") does: every
// match is a piece and so is every gap between matches. Thread-safe. Text that is not valid UTF-8 is
// refused (UsageError), never handed to PCRE2.
class RegexSplitter {
 public:
  explicit RegexSplitter(const std::string& pattern, bool case_insensitive = false);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;
  // Calls piece(begin, length) for each piece of `text`, in order.
  template <typename F>
  void split(std::string_view text, F&& piece) const {
    split_impl(
        text, [](void* ctx, size_t b, size_t n) { (*static_cast<std::remove_reference_t<F>*>(ctx))(b, n); }, &piece);
  }
  const std::string& pattern() const { return pattern_; }
  // True if the whole of `text` matches the pattern.
  bool full_match(std::string_view text) const;

 private:
  friend bool detail::regex_find(const RegexSplitter&, std::string_view, size_t, size_t&, size_t&);
  void split_impl(std::string_view text, void (*cb)(void*, size_t, size_t), void* ctx) const;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// GPT-2's pattern applied by hand-written code (what the gpt2 and hf ByteLevel tokenizers use; equal
// to RegexSplitter(kGpt2Pattern), \s being Unicode's White_Space as in tiktoken and Hugging Face).
// Set CAIRN_TOKENIZER_REGEX_ONLY=1 to make tokenizers use PCRE2 instead (debugging aid).
void split_gpt2_fast(std::string_view text, const std::function<void(size_t, size_t)>& piece);
// The hand-written splitter for `pattern` if there is one (kGpt2Pattern, kHfByteLevelPattern,
// kLlama3Pattern: equal to RegexSplitter(pattern) on all valid UTF-8): splits and returns true; else
// returns false without calling `piece`. Invalid UTF-8 is refused (UsageError).
bool split_fast(const std::string& pattern, std::string_view text, const std::function<void(size_t, size_t)>& piece);
extern const char* const kHfByteLevelPattern;
// A Hugging Face (Oniguruma) Split regex as the PCRE2 pattern cairn compiles: nested classes flattened, \w, \s and \S
// spelled out as Oniguruma reads them (Llama 3's regex gives kLlama3Pattern, GPT-2's kGpt2Pattern: the fast
// splitters); UsageError for what has no PCRE2 form.
std::string pcre2_pattern_from_oniguruma(const std::string& re);

}  // namespace cairn::tokenizer
