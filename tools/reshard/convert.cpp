// `convert`: Megatron-LM indexed datasets (.bin/.idx, MMIDIDX v1) and llm.c token shards, both ways.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "cairn/cli.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/json_text.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "cairn/stale_temps.h"
#include "cairn/tokenizer.h"
#include "reshard.h"

namespace cairn::reshard {

namespace fs = std::filesystem;

namespace {

constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr size_t kLlmcHeaderInts = 256;

// llm.c's two token-file variants (dev/data/data_common.py HEADERS_INFO): 256 x int32 header
// (magic, version, token count, zeros) then the tokens.
struct LlmcVariant {
  const char* name;  // llm.c's model descriptor
  int32_t magic, version;
  size_t item;  // bytes per token
};
constexpr LlmcVariant kLlmcGpt2{"gpt-2", 20240520, 1, 2};
constexpr LlmcVariant kLlmcLlama3{"llama-3", 20240801, 7, 4};

// Megatron's dtype codes (megatron/core/datasets/indexed_dataset.py DType).
size_t megatron_item_size(uint8_t code) {
  switch (code) {
    case 1:
    case 2: return 1;  // uint8, int8
    case 3:
    case 8: return 2;  // int16, uint16
    case 4:
    case 7: return 4;  // int32, float32
    case 5:
    case 6: return 8;  // int64, float64
    default: return 0;
  }
}

// Read-only view of a whole file (mmap), errors naming the path.
struct MappedFile {
  std::string path;
  const unsigned char* data = nullptr;
  size_t size = 0;
  explicit MappedFile(const std::string& p) : path(p) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw UsageError(errno_message("cannot open", p));
    struct stat st {};
    ::fstat(fd, &st);
    size = static_cast<size_t>(st.st_size);
    if (size > 0) {
      void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (m == MAP_FAILED) {
        ::close(fd);
        throw RuntimeError(errno_message("cannot map", p));
      }
      data = static_cast<const unsigned char*>(m);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data) ::munmap(const_cast<unsigned char*>(data), size);
  }
  template <typename T>
  T at(size_t off) const {
    T v;
    std::memcpy(&v, data + off, sizeof v);
    return v;
  }
};

[[noreturn]] void corrupt(const std::string& path, size_t offset, const std::string& why) {
  throw UsageError(file_message("corrupt input", path, strprintf("at byte offset %zu: %s", offset, why.c_str())));
}

// Appends a document, adding the end-of-text when the source lacks it (cairn documents end with it).
// Imported documents, streamed into part files of about kImportPartTokens tokens under <out>/.import-parts, which
// are then planned and written like a reshard (as build's parts are): memory holds one part and the document
// table, not the dataset (whole imports took 6.6 bytes per token: 7.8 GB for 1.2 G tokens).
class ImportParts {
 public:
  static constexpr uint64_t kImportPartTokens = uint64_t{1} << 25;
  ImportParts(std::string dir, const tokenizer::Tokenizer& tok) : dir_(std::move(dir)), tok_(tok) {
    XXH64_reset(hash_.get(), 0);
    ensure_dir(dir_);
  }
  void add_document(const uint32_t* t, size_t n, uint32_t source_bytes) {
    part_.add_document(t, n, source_bytes);
    XXH64_update(hash_.get(), t, n * 4);
    starts_.push_back(starts_.back() + n);
    if (part_.tokens.size() >= kImportPartTokens) flush();
  }
  uint64_t num_docs() const { return starts_.size() - 1; }
  // Writes the last part and the parts' index.json; the import's identity (for resume): its tokens, then its
  // document starts, as the whole-memory import hashed them.
  std::string finish() {
    flush();
    XXH64_update(hash_.get(), starts_.data(), starts_.size() * 8);
    write_parts_index(dir_, list_, tok_);
    return "import:" + shards::hex64(XXH64_digest(hash_.get()));
  }

 private:
  void flush() {
    if (part_.num_docs() == 0) return;
    shards::ShardMeta meta;
    meta.shard_index = list_.size();
    meta.shard_count = 0;  // not known until the end; the parts are read through their index.json
    meta.tokenizer_id = tok_.id();
    meta.vocab_size = tok_.vocab_size();
    meta.eot_id = tok_.eot_id();
    meta.plan_hash = "import-part";
    const std::string file = strprintf("part_%06zu.h5", list_.size());
    const std::string path = join_path(dir_, file);
    {
      shards::ShardWriter w(path, meta, part_.tokens.size(), part_.num_docs());
      w.append_tokens(part_.tokens.data(), part_.tokens.size());
      for (uint64_t d = 0; d < part_.num_docs(); ++d)
        w.append_document(part_.starts[d + 1] - part_.starts[d], part_.bytes[d]);
      w.finish();
    }
    list_.push_back(part_index_entry(dir_, file));
    part_ = MemorySource{};
  }
  std::string dir_;
  const tokenizer::Tokenizer& tok_;
  MemorySource part_;
  std::vector<uint64_t> starts_{0};
  json list_ = json::array();
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> hash_{XXH64_createState(), XXH64_freeState};
};

// Documents that lacked the tokenizer's end-of-text, and the tokens they ended with instead.
struct AddedEot {
  uint64_t count = 0;
  std::map<uint32_t, uint64_t> last_tokens;  // of the first 10^6 of them
};

void add_doc(ImportParts& src, const tokenizer::Tokenizer& tok, std::vector<uint32_t>& doc, AddedEot& added) {
  if (doc.empty()) return;
  if (doc.back() != tok.eot_id()) {
    if (added.count++ < 1000000) ++added.last_tokens[doc.back()];
    doc.push_back(tok.eot_id());
  }
  std::string text = tok.decode(doc.data(), doc.size() - 1);
  src.add_document(doc.data(), doc.size(), static_cast<uint32_t>(std::min<size_t>(text.size(), UINT32_MAX)));
  doc.clear();
}

// Documents that nearly all end in one special token other than end-of-text (Megatron's --append-eod with a
// tokenizer whose eos is Llama 3 Instruct's <|eot_id|>, not <|end_of_text|>) got end-of-text after it: said, with the
// --eot-token that takes that token as the documents' end instead.
void warn_if_documents_end_in_another_special(const AddedEot& added, const tokenizer::Tokenizer& tok) {
  uint64_t seen = 0, best_n = 0;
  uint32_t best = 0;
  for (const auto& [id, n] : added.last_tokens) {
    seen += n;
    if (n > best_n) best = id, best_n = n;
  }
  if (seen < 2 || best_n * 100 < seen * 99) return;
  const std::string text = tok.decode(&best, 1);
  const bool special = text.size() >= 3 && text.front() == '<' && text.back() == '>';
  if (!special) return;
  const uint32_t eot = tok.eot_id();
  CAIRN_LOG_WARN("%llu documents lacked end-of-text %s (%u); %llu of the %llu looked at end in %s (%u), as Megatron's "
                 "--append-eod writes with a tokenizer whose eos is that token: end-of-text was appended after it. "
                 "To end documents there instead, import with --eot-token '%s'",
                 static_cast<unsigned long long>(added.count), tok.decode(&eot, 1).c_str(), eot,
                 static_cast<unsigned long long>(best_n), static_cast<unsigned long long>(seen), text.c_str(), best,
                 text.c_str());
}

// Checked at the file's own width: an int64 id of 2^32 + 5 must not pass as 5, nor a negative one as a large one.
void check_ids(const std::string& path, size_t offset, int64_t id, uint32_t vocab) {
  if (id < 0 || id >= int64_t{vocab})
    corrupt(path, offset,
            strprintf("token id %lld is not below the tokenizer's vocabulary size %u (set --tokenizer)",
                      static_cast<long long>(id), vocab));
}

void import_megatron(const std::string& input, const tokenizer::Tokenizer& tok, ImportParts& src, AddedEot& added) {
  std::string prefix = input;
  for (const char* ext : {".idx", ".bin"})
    if (prefix.size() > 4 && prefix.compare(prefix.size() - 4, 4, ext) == 0) prefix.resize(prefix.size() - 4);
  MappedFile idx(prefix + ".idx"), bin(prefix + ".bin");
  const std::string& ip = idx.path;
  if (idx.size < 34) corrupt(ip, idx.size, "file is too short for the MMIDIDX header (34 bytes)");
  if (std::memcmp(idx.data, kMegatronMagic, 9) != 0) corrupt(ip, 0, "wrong magic (not a Megatron MMIDIDX index)");
  uint64_t version = idx.at<uint64_t>(9);
  if (version != 1)
    corrupt(ip, 9, strprintf("unsupported version %llu (want 1)", static_cast<unsigned long long>(version)));
  uint8_t code = idx.data[17];
  size_t item = megatron_item_size(code);
  if (item == 0 || code == 6 || code == 7)
    corrupt(ip, 17, strprintf("dtype code %u is not an integer token type", code));
  uint64_t nseq = idx.at<uint64_t>(18), ndoc = idx.at<uint64_t>(26);
  // Counts no index could hold are refused before they are multiplied: a corrupt header's 2^63 would wrap the sum.
  constexpr uint64_t kMaxCount = uint64_t{1} << 58;
  if (nseq > kMaxCount || ndoc > kMaxCount)
    corrupt(ip, 18,
            strprintf("header declares %llu sequences and %llu document indices, more than any index holds",
                      static_cast<unsigned long long>(nseq), static_cast<unsigned long long>(ndoc)));
  const size_t need = 34 + nseq * 4 + nseq * 8 + ndoc * 8;
  if (idx.size < need)
    corrupt(ip, idx.size,
            strprintf("truncated: %llu sequences and %llu document indices need %zu bytes, file has %zu",
                      static_cast<unsigned long long>(nseq), static_cast<unsigned long long>(ndoc), need, idx.size));
  // Megatron's multimodal index appends a mode per sequence; anything after the document index is not text.
  if (idx.size > need)
    corrupt(ip, need,
            strprintf("%zu bytes after the document index (a multimodal index's sequence modes?): cairn reads "
                      "text-only indexes, whose %llu sequences and %llu document indices take %zu bytes",
                      idx.size - need, static_cast<unsigned long long>(nseq), static_cast<unsigned long long>(ndoc),
                      need));
  const size_t sizes_off = 34, ptr_off = sizes_off + nseq * 4, doc_off = ptr_off + nseq * 8;
  uint64_t expect_ptr = 0;
  for (uint64_t s = 0; s < nseq; ++s) {
    int32_t len = idx.at<int32_t>(sizes_off + s * 4);
    int64_t ptr = idx.at<int64_t>(ptr_off + s * 8);
    if (len < 0)
      corrupt(ip, sizes_off + s * 4,
              strprintf("sequence %llu has negative length", static_cast<unsigned long long>(s)));
    if (static_cast<uint64_t>(ptr) != expect_ptr)
      corrupt(ip, ptr_off + s * 8,
              strprintf("sequence %llu pointer %lld, expected %llu", static_cast<unsigned long long>(s),
                        static_cast<long long>(ptr), static_cast<unsigned long long>(expect_ptr)));
    expect_ptr += static_cast<uint64_t>(len) * item;
  }
  if (bin.size != expect_ptr)
    corrupt(bin.path, std::min<size_t>(bin.size, expect_ptr),
            strprintf("has %zu bytes but the index describes %llu", bin.size,
                      static_cast<unsigned long long>(expect_ptr)));
  if (ndoc == 0 || idx.at<int64_t>(doc_off) != 0) corrupt(ip, doc_off, "document index must start at 0");
  int64_t prev = 0;
  for (uint64_t d = 1; d < ndoc; ++d) {
    int64_t v = idx.at<int64_t>(doc_off + d * 8);
    if (v < prev || static_cast<uint64_t>(v) > nseq)
      corrupt(ip, doc_off + d * 8,
              strprintf("document index %lld is not monotone within [0, %llu]", static_cast<long long>(v),
                        static_cast<unsigned long long>(nseq)));
    prev = v;
  }
  if (static_cast<uint64_t>(prev) != nseq)
    corrupt(ip, doc_off + (ndoc - 1) * 8, "document index does not end at the sequence count");
  auto token = [&](uint64_t i) -> int64_t {
    switch (code) {
      case 1: return bin.data[i];
      case 2: return static_cast<int8_t>(bin.data[i]);
      case 3: return bin.at<int16_t>(i * 2);
      case 8: return bin.at<uint16_t>(i * 2);
      case 4: return bin.at<int32_t>(i * 4);
      default: return bin.at<int64_t>(i * 8);
    }
  };
  std::vector<uint32_t> doc;
  uint64_t tok_index = 0;
  uint64_t seq = 0;
  // Reading is most of an import (a minute per billion tokens here): shown, and the .bin's pages read are dropped
  // from this process as it goes (its resident memory grew to the file's size).
  Progress progress("reading " + bin.path, expect_ptr / item, "tokens");
  uint64_t released = 0;
  for (uint64_t d = 0; d + 1 < ndoc; ++d) {
    uint64_t end = static_cast<uint64_t>(idx.at<int64_t>(doc_off + (d + 1) * 8));
    for (; seq < end; ++seq) {
      int32_t len = idx.at<int32_t>(sizes_off + seq * 4);
      for (int32_t k = 0; k < len; ++k, ++tok_index) {
        const int64_t t = token(tok_index);
        check_ids(bin.path, tok_index * item, t, tok.vocab_size());
        doc.push_back(static_cast<uint32_t>(t));
      }
    }
    add_doc(src, tok, doc, added);
    if ((tok_index - released) * item >= (size_t{64} << 20)) {
      release_mapped_range(bin.data + released * item, (tok_index - released) * item);
      released = tok_index;
      progress.update(tok_index);
    }
  }
  progress.finish();
}

// The shard index llm.c's scripts put at the end of a file name (fineweb_train_000001.bin -> 1), or -1.
long long llmc_shard_number(const std::string& path) {
  std::string stem = fs::path(path).stem().string();
  size_t e = stem.size(), b = e;
  while (b > 0 && std::isdigit(static_cast<unsigned char>(stem[b - 1]))) --b;
  if (b == e || e - b > 18 || b == 0 || (stem[b - 1] != '_' && stem[b - 1] != '-')) return -1;
  return std::stoll(stem.substr(b, e - b));
}

// A directory's .bin files in the order llm.c's scripts wrote the token stream: by the shard number
// ending the name (fineweb.py: <name>_val_000000.bin, <name>_train_000001.bin, ...; a document may
// continue from one file into the next), which for zero-padded names is also the loader's glob order.
// Names without a number sort after numbered ones, by bytes (glob's order in the C locale).
std::vector<std::string> llmc_directory_files(const std::string& dir) {
  std::vector<std::pair<long long, std::string>> files;
  for (auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (!name.empty() && name[0] != '.' && e.is_regular_file() && e.path().extension() == ".bin")
      files.emplace_back(0, e.path().string());
  }
  for (auto& f : files) {
    long long n = llmc_shard_number(f.second);
    f.first = n < 0 ? LLONG_MAX : n;
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  out.reserve(files.size());
  for (auto& f : files) out.push_back(f.second);
  return out;
}

// llm.c's scripts write a dataset's validation and training splits into one directory (<name>_val_000000.bin,
// <name>_train_000001.bin, tiny_shakespeare_val.bin): imported together, the validation documents are trained on.
// Said, not refused (a round trip of a whole dataset is legitimate), with how to keep them apart.
void warn_if_splits_mixed(const std::string& dir, const std::vector<std::string>& files) {
  auto has_split = [](const std::string& path, const std::string& split) {
    const std::string stem = fs::path(path).stem().string();
    const std::string tag = "_" + split;
    for (size_t at = stem.find(tag); at != std::string::npos; at = stem.find(tag, at + 1)) {
      const size_t end = at + tag.size();
      if (end == stem.size() || stem[end] == '_') return true;
    }
    return false;
  };
  size_t val = 0, train = 0;
  std::string first_val;
  for (const auto& f : files) {
    if (has_split(f, "val")) {
      if (!val++) first_val = fs::path(f).filename().string();
    } else if (has_split(f, "train")) {
      ++train;
    }
  }
  if (val > 0 && train > 0)
    CAIRN_LOG_WARN("input directory \"%s\" holds llm.c's validation split (%zu file(s), %s ...) and its training split "
                   "(%zu file(s)): they become one dataset and the validation documents are trained on; give the "
                   "*_train* files alone, and import the *_val* ones into a dataset of their own",
                   dir.c_str(), val, first_val.c_str(), train);
}

std::vector<std::string> expand_bin_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  for (auto& in : inputs) {
    if (fs::is_directory(in)) {
      std::vector<std::string> files = llmc_directory_files(in);
      if (files.empty()) throw UsageError(file_message("input directory", in, "has no llm.c .bin files"));
      warn_if_splits_mixed(in, files);
      out.insert(out.end(), files.begin(), files.end());
    } else {
      out.push_back(in);
    }
  }
  return out;
}

// llm.c's token files as one stream of documents, across files.
struct LlmcStream {
  std::vector<uint32_t> doc;      // the document in progress: one that spans files stays whole
  bool delimiter_chosen = false;  // by the first token of the stream
  // llm.c's Llama-3 scripts (dev/data/fineweb.py, tinystories.py, ...) put the tokenizer's <|begin_of_text|>
  // (128000) before each document where its GPT-2 scripts put end-of-text; a stream whose first token is that one
  // is split there, the token is dropped and each document gets the end-of-text cairn ends documents with.
  std::optional<uint32_t> begin_token;
  uint64_t begins = 0;  // of those seen
};

constexpr std::string_view kLlama3BeginOfText = "<|begin_of_text|>";

// The id of <|begin_of_text|> where the tokenizer is Llama 3's (128000), as llm.c's Llama-3 scripts write it.
std::optional<uint32_t> llama3_begin_id(const tokenizer::Tokenizer& tok) {
  const uint32_t id = 128000;
  if (id < tok.vocab_size() && id != tok.eot_id() && tok.decode(&id, 1) == kLlama3BeginOfText) return id;
  return std::nullopt;
}

// Reads one llm.c token file (either variant) into the document stream.
void import_llmc(const std::string& path, const tokenizer::Tokenizer& tok, ImportParts& src, AddedEot& added,
                 LlmcStream& stream) {
  std::vector<uint32_t>& doc = stream.doc;
  MappedFile f(path);
  const size_t hdr = kLlmcHeaderInts * 4;
  if (f.size < hdr) corrupt(path, f.size, "file is too short for the llm.c header (1024 bytes)");
  const int32_t magic = f.at<int32_t>(0), version = f.at<int32_t>(4);
  const LlmcVariant* v = nullptr;
  for (const LlmcVariant* c : {&kLlmcGpt2, &kLlmcLlama3})
    if (magic == c->magic) v = c;
  if (!v)
    corrupt(path, 0,
            strprintf("wrong magic %d (llm.c token files have %d, gpt-2 uint16, or %d, llama-3 uint32)", magic,
                      kLlmcGpt2.magic, kLlmcLlama3.magic));
  if (version != v->version)
    corrupt(path, 4,
            strprintf("unsupported version %d for magic %d (want %d: %s, uint%zu tokens)", version, magic, v->version,
                      v->name, v->item * 8));
  const int32_t ntok = f.at<int32_t>(8);
  const size_t want = hdr + static_cast<size_t>(std::max(ntok, 0)) * v->item;
  if (ntok < 0 || f.size != want)
    corrupt(path, std::min(f.size, want),
            strprintf("header says %d tokens (%zu bytes) but the file has %zu bytes", ntok, want, f.size));
  const uint32_t eot = tok.eot_id();
  auto token_at = [&](int32_t i) {
    const size_t off = hdr + static_cast<size_t>(i) * v->item;
    const uint32_t t = v->item == 2 ? f.at<uint16_t>(off) : f.at<uint32_t>(off);
    check_ids(path, off, t, tok.vocab_size());
    return t;
  };
  if (!stream.delimiter_chosen && ntok > 0) {
    stream.delimiter_chosen = true;
    // A Llama-3 (uint32) file is split at the Llama 3 tokenizer's <|begin_of_text|> wherever the stream starts:
    // fineweb.py's train shards begin inside the document the shard before them cut, so their first token is
    // not it (importing the train shards alone once made one document of the whole stream).
    const uint32_t t = token_at(0);
    if (t != eot && tok.decode(&t, 1) == kLlama3BeginOfText) stream.begin_token = t;
    else if (v == &kLlmcLlama3) stream.begin_token = llama3_begin_id(tok);
    // llm.c writes a delimiter before each document, so a stream that starts without one starts inside a document:
    // a train file imported without the file before it (fineweb.py's first train shard continues the val shard).
    // cairn's older exports put end-of-text after each document instead: their files end with it, llm.c's rarely.
    const bool starts_inside = stream.begin_token ? t != *stream.begin_token : t != eot && token_at(ntok - 1) != eot;
    if (starts_inside)
      CAIRN_LOG_WARN("\"%s\" starts inside a document (its first token is not the %s that llm.c writes before each "
                     "document): the tokens before the first document start are imported as a document of their "
                     "own; import the file before it too to keep that document whole",
                     path.c_str(), stream.begin_token ? "<|begin_of_text|>" : "end-of-text");
  }
  for (int32_t i = 0; i < ntok; ++i) {
    const uint32_t t = token_at(i);
    if (stream.begin_token && t == *stream.begin_token) {
      add_doc(src, tok, doc, added);  // closes the document in progress (none before the first)
      ++stream.begins;
      continue;
    }
    if (t == eot) {
      // llm.c's scripts put end-of-text before each document (cairn's own older exports after it);
      // either way it closes the document in progress, and an empty document is dropped.
      if (!doc.empty()) {
        doc.push_back(t);
        add_doc(src, tok, doc, added);
      }
      continue;
    }
    doc.push_back(t);
  }
}

void write_bytes(FILE* f, const void* p, size_t n, const std::string& path) {
  if (n && std::fwrite(p, 1, n, f) != n) throw RuntimeError(errno_message("cannot write", path));
}

void close_file(FILE* f, const std::string& path) {
  if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) {
    std::fclose(f);
    throw RuntimeError(errno_message("cannot write", path));
  }
  if (std::fclose(f) != 0) throw RuntimeError(errno_message("cannot write", path));
}

// Tokens (or index entries) an export holds at a time.
constexpr uint64_t kExportSlice = uint64_t{1} << 22;

json export_megatron(const shards::Dataset& ds, const std::string& prefix) {
  // Megatron's rule (best_fitting_dtype): uint16 below 65500 ids, else int32.
  const bool u16 = ds.vocab_size() < 65500;
  const uint8_t code = u16 ? 8 : 4;
  const size_t item = u16 ? 2 : 4;
  const std::string parent = fs::path(prefix).parent_path().string();
  if (!parent.empty()) ensure_dir(parent);
  const std::string stem = fs::path(prefix).filename().string();
  remove_stale_temps(parent, [&](const std::string& n) { return n == stem + ".bin" || n == stem + ".idx"; });
  AtomicFile bin_file(prefix + ".bin"), idx_file(prefix + ".idx");
  // Streamed in slices (memory does not grow with a shard: whole shards of 1.2 G tokens once took 9.4 GB), the index
  // written from the shards' document offsets in three passes (sizes, pointers, document index).
  // A dataset built with --split-docs may end a shard inside a document (its last one lacks the end-of-text) that the
  // next shard's first continues: Megatron gets it as one document, as it was written (as pieces, GPTDataset's shuffle
  // ran the first piece into another document with no end-of-text between them).
  const bool split = ds.index().value("split_docs", false);
  std::vector<bool> continues(ds.num_shards(), false);
  for (size_t i = 0; split && i + 1 < ds.num_shards(); ++i) {
    auto sh = ds.shard(i);
    if (sh->num_tokens() == 0) continue;
    uint32_t last = 0;
    sh->read_tokens(sh->num_tokens() - 1, 1, &last);
    continues[i] = last != ds.eot_id();
  }
  // Calls put(shard, document, length) once per whole document: pieces of a split one are summed (named by its
  // first piece).
  auto each_document = [&](auto&& put) {
    uint64_t pending = 0;
    size_t first_shard = 0;
    uint64_t first_doc = 0;
    for (size_t i = 0; i < ds.num_shards(); ++i) {
      auto sh = ds.shard(i);
      for (uint64_t d = 0; d < sh->num_documents(); ++d) {
        if (pending == 0) first_shard = i, first_doc = d;
        pending += sh->doc_end(d) - sh->doc_begin(d);
        if (d + 1 == sh->num_documents() && continues[i]) continue;
        put(first_shard, first_doc, pending);
        pending = 0;
      }
    }
    if (pending > 0) put(first_shard, first_doc, pending);
  };
  // Counted, and each length checked, before the .bin: a document past int32 (joined from --split-docs pieces)
  // was refused only after minutes of writing tokens. The count and the .idx (passes over the documents) show
  // progress every 65536 documents or index entries: 300 M documents took 72 s without a word.
  constexpr uint64_t kProgressEvery = 1 << 16;
  uint64_t nseq = 0;
  Progress counting("counting documents of " + ds.dir(), ds.total_documents(), "documents");
  each_document([&](size_t i, uint64_t d, uint64_t len) {
    if (len > INT32_MAX)
      throw UsageError(strprintf("document %llu of %s is too long for Megatron (int32 sizes)",
                                 static_cast<unsigned long long>(d), ds.info(i).file.c_str()));
    if (++nseq % kProgressEvery == 0) counting.update(nseq);
  });
  counting.finish();
  Progress progress("writing " + bin_file.path(), ds.total_tokens(), "tokens");
  FILE* bin = std::fopen(bin_file.temp_path().c_str(), "wb");
  if (!bin) throw RuntimeError(errno_message("cannot write", bin_file.path()));
  std::vector<uint32_t> buf;
  std::vector<uint16_t> b16;
  uint64_t written = 0;
  for (size_t i = 0; i < ds.num_shards(); ++i) {
    auto sh = ds.shard(i);
    for (uint64_t at = 0; at < sh->num_tokens(); at += kExportSlice) {
      const uint64_t m = std::min<uint64_t>(kExportSlice, sh->num_tokens() - at);
      buf.resize(m);
      sh->read_tokens(at, m, buf.data());
      sh->release_tokens(at, m);
      if (u16) {
        b16.assign(buf.begin(), buf.end());
        write_bytes(bin, b16.data(), b16.size() * 2, bin_file.path());
      } else {
        write_bytes(bin, buf.data(), buf.size() * 4, bin_file.path());
      }
      progress.update(written += m);
    }
  }
  close_file(bin, bin_file.path());
  progress.finish();
  FILE* idx = std::fopen(idx_file.temp_path().c_str(), "wb");
  if (!idx) throw RuntimeError(errno_message("cannot write", idx_file.path()));
  uint64_t version = 1, ndoc = nseq + 1;
  // Entries: a size and a pointer per document, then the document index.
  Progress writing_idx("writing " + idx_file.path(), 2 * nseq + ndoc, "entries");
  uint64_t entries = 0;
  auto entry_written = [&] {
    if (++entries % kProgressEvery == 0) writing_idx.update(entries);
  };
  write_bytes(idx, kMegatronMagic, 9, idx_file.path());
  write_bytes(idx, &version, 8, idx_file.path());
  write_bytes(idx, &code, 1, idx_file.path());
  write_bytes(idx, &nseq, 8, idx_file.path());
  write_bytes(idx, &ndoc, 8, idx_file.path());
  // Each pass appends its values a slice at a time.
  std::vector<int32_t> sizes;
  each_document([&](size_t, uint64_t, uint64_t len) {
    sizes.push_back(static_cast<int32_t>(len));
    if (sizes.size() == kExportSlice) write_bytes(idx, sizes.data(), sizes.size() * 4, idx_file.path()), sizes.clear();
    entry_written();
  });
  write_bytes(idx, sizes.data(), sizes.size() * 4, idx_file.path());
  std::vector<int64_t> values;
  int64_t ptr = 0;
  each_document([&](size_t, uint64_t, uint64_t len) {
    values.push_back(ptr);
    ptr += static_cast<int64_t>(len * item);
    if (values.size() == kExportSlice)
      write_bytes(idx, values.data(), values.size() * 8, idx_file.path()), values.clear();
    entry_written();
  });
  write_bytes(idx, values.data(), values.size() * 8, idx_file.path());
  values.clear();
  for (uint64_t d = 0; d < ndoc; ++d) {
    values.push_back(static_cast<int64_t>(d));
    if (values.size() == kExportSlice)
      write_bytes(idx, values.data(), values.size() * 8, idx_file.path()), values.clear();
    entry_written();
  }
  write_bytes(idx, values.data(), values.size() * 8, idx_file.path());
  close_file(idx, idx_file.path());
  writing_idx.finish();
  // Two renames cannot be one: the old index goes first, so a kill between them leaves a .bin without its .idx
  // (Megatron and import refuse it) rather than an old index over new tokens, which both would read as valid
  // with every document boundary wrong.
  std::error_code ec;
  fs::remove(prefix + ".idx", ec);
  bin_file.commit();
  idx_file.commit();
  CAIRN_LOG_INFO("wrote %s.bin/.idx: %llu documents, %lld bytes of %s tokens", prefix.c_str(),
                 static_cast<unsigned long long>(nseq), static_cast<long long>(ptr), u16 ? "uint16" : "int32");
  return {{"format", "megatron"},   {"bin", prefix + ".bin"},
          {"idx", prefix + ".idx"}, {"dtype", u16 ? "uint16" : "int32"},
          {"documents", nseq},      {"tokens", static_cast<uint64_t>(ptr) / item}};
}

// Writes one llm.c file per shard in llm.c's convention: end-of-text before each document (as its
// scripts write them) instead of after it. That is the dataset's token stream shifted by one: each
// file starts with the token that ended the previous shard (end-of-text for the first), and the
// final end-of-text is dropped, so every file keeps its shard's token count and a document split
// across shards (--split-docs) continues into the next file without a delimiter.
json export_llmc(const shards::Dataset& ds, const std::string& in, const std::string& dir, const std::string& format) {
  const LlmcVariant* v = &kLlmcGpt2;
  if (format == "llama-3" || (format == "auto" && ds.vocab_size() > 65536)) v = &kLlmcLlama3;
  if (v->item == 2 && ds.vocab_size() > 65536)
    throw UsageError(strprintf("llm.c's gpt-2 format holds uint16 tokens but this dataset's vocabulary has %u ids "
                               "(largest %u); use --llmc-format llama-3 (uint32 tokens)",
                               ds.vocab_size(), ds.vocab_size() - 1));
  // llm.c's Llama-3 scripts start each document with <|begin_of_text|> (the id its tokenizer prepends), not
  // end-of-text: with the Llama 3 tokenizer that is what goes before each document (import splits there too).
  uint32_t start = ds.eot_id();
  if (v == &kLlmcLlama3) start = llama3_begin_id(*tokenizer::load_for_dataset(in)).value_or(ds.eot_id());
  // Refused before the directory is made (a refusal left an empty one behind).
  for (size_t i = 0; i < ds.num_shards(); ++i)
    if (ds.info(i).tokens > INT32_MAX)
      throw UsageError(file_message("shard", ds.info(i).file, "has more tokens than an llm.c file can hold (2^31-1)"));
  ensure_dir(dir);
  auto is_shard_file = [](const std::string& n) {
    return n.size() == 16 && n.rfind("shard_", 0) == 0 && n.compare(12, 4, ".bin") == 0 &&
           std::all_of(n.begin() + 6, n.begin() + 12,
                       [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  };
  remove_stale_temps(dir, is_shard_file);
  // Every file is written as a temp first and renamed once all are (a full disk or a kill before then leaves the
  // earlier export whole); then the earlier export's files past this one's count go: llm.c's loader reads every
  // shard_*.bin of the directory, and a mix of two exports trains on both.
  std::vector<std::unique_ptr<AtomicFile>> pending;
  std::vector<uint32_t> buf;
  std::vector<char> body;
  uint32_t carry = ds.eot_id();  // the token the previous shard's file left out
  Progress progress("writing llm.c files", ds.total_tokens(), "tokens");
  uint64_t written = 0;
  for (size_t i = 0; i < ds.num_shards(); ++i) {
    auto sh = ds.shard(i);
    const uint64_t n = sh->num_tokens();  // at most INT32_MAX: checked above
    std::vector<int32_t> header(kLlmcHeaderInts, 0);
    header[0] = v->magic;
    header[1] = v->version;
    header[2] = static_cast<int32_t>(n);
    pending.push_back(std::make_unique<AtomicFile>(join_path(dir, strprintf("shard_%06zu.bin", i))));
    const std::string& temp = pending.back()->temp_path();
    FILE* out = std::fopen(temp.c_str(), "wb");
    if (!out) throw RuntimeError(errno_message("cannot write", pending.back()->path()));
    write_bytes(out, header.data(), kLlmcHeaderInts * 4, pending.back()->path());
    // A slice at a time: the file holds the carried token and the shard's tokens but its last, which is carried on.
    for (uint64_t at = 0; at < n; at += kExportSlice) {
      const uint64_t m = std::min<uint64_t>(kExportSlice, n - at);
      buf.resize(m + 1);
      buf[0] = carry;
      sh->read_tokens(at, m, buf.data() + 1);
      sh->release_tokens(at, m);
      carry = buf[m];
      // Shifted by one, each end-of-text now stands before the document it ended: the start token there.
      if (start != ds.eot_id())
        for (uint64_t k = 0; k < m; ++k)
          if (buf[k] == ds.eot_id()) buf[k] = start;
      if (v->item == 2) {
        body.resize(m * 2);
        for (uint64_t k = 0; k < m; ++k) {
          const uint16_t t = static_cast<uint16_t>(buf[k]);
          std::memcpy(body.data() + k * 2, &t, 2);
        }
        write_bytes(out, body.data(), body.size(), pending.back()->path());
      } else {
        write_bytes(out, buf.data(), m * 4, pending.back()->path());
      }
      progress.update(written += m);
    }
    close_file(out, pending.back()->path());
  }
  progress.finish();
  for (auto& f : pending) f->commit();
  size_t stale = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (is_shard_file(n) && std::stoul(n.substr(6, 6)) >= ds.num_shards()) {
      std::error_code rm;
      stale += fs::remove(it->path(), rm) ? 1 : 0;
    }
  }
  if (stale)
    CAIRN_LOG_WARN("removed %zu shard_*.bin files of an earlier export from %s (llm.c reads every file there)", stale,
                   dir.c_str());
  if (ds.total_tokens() > 0 && carry != ds.eot_id())
    CAIRN_LOG_WARN("the dataset's last token is %u, not end-of-text %u; it was not exported", carry, ds.eot_id());
  const std::string start_name = start == ds.eot_id() ? "end-of-text " + std::to_string(start)
                                                      : std::string(kLlama3BeginOfText) + " " + std::to_string(start);
  CAIRN_LOG_INFO("wrote %zu llm.c files (%s: magic %d, version %d, uint%zu tokens, %s before each document) to %s "
                 "(%llu tokens)",
                 ds.num_shards(), v->name, v->magic, v->version, v->item * 8, start_name.c_str(), dir.c_str(),
                 static_cast<unsigned long long>(ds.total_tokens()));
  return {{"format", "llmc"},         {"variant", v->name},          {"dir", dir},
          {"files", ds.num_shards()}, {"tokens", ds.total_tokens()}, {"document_start_token", start}};
}

}  // namespace

int run_convert(const Config& cfg, const std::string& from, const std::string& to,
                const std::vector<std::string>& inputs, std::string out, const std::string& llmc_format,
                const std::string& json_out) {
  if (from.empty() == to.empty())
    throw UsageError("convert needs exactly one of --from megatron|llmc or --to megatron|llmc");
  const bool root = !mpi::initialized() || mpi::rank() == 0;
  const DataSection data = read_section<DataSection>(cfg);
  if (llmc_format != "auto" && to != "llmc")
    throw UsageError("--llmc-format applies to convert --to llmc (imports read the variant from each file's header)");
  if (!to.empty()) {
    if (out.empty())
      throw UsageError("convert --to needs --out (a .bin/.idx prefix for megatron, a directory for llmc)");
    if (inputs.size() > 1) throw UsageError("convert --to takes one dataset directory");
    std::string in = inputs.empty() ? dataset_dir(cfg, "") : inputs[0];
    std::error_code ec;
    if (to == "megatron" && (out.back() == '/' || fs::is_directory(out, ec))) {
      // A directory is no .bin/.idx prefix (it wrote DIR/.bin and DIR/.idx, hidden files): name the files after the
      // dataset as Megatron's preprocess_data.py names its outputs, <prefix>_text_document.bin/.idx.
      const std::string stem = dir_basename(in);  // "data/" and "data" give one prefix
      out =
          (fs::path(out) / ((stem.empty() || stem == "." ? std::string("dataset") : stem) + "_text_document")).string();
      if (root) CAIRN_LOG_INFO("--out is a directory: writing %s.bin and %s.idx", out.c_str(), out.c_str());
    }
    check_output_not_input(to == "llmc" ? out : fs::absolute(out).parent_path().string(), {in});
    shards::Dataset ds = shards::Dataset::open(in);
    std::string err;
    int code = 0;
    json summary;
    if (root) {
      try {
        // Corruption is caught, not copied: check every shard before the first byte is written.
        check_dataset(ds, resolve_threads(data));
        summary = to == "megatron" ? export_megatron(ds, out) : export_llmc(ds, in, out, llmc_format);
      } catch (const Error& e) {
        err = e.what();
        code = e.code();
      }
    }
    if (mpi::initialized()) mpi::agree_or_throw(err.empty(), err, code ? code : kExitRuntime);
    else if (!err.empty()) throw Error(code, err);
    if (root) {
      std::error_code ec;
      const fs::path absolute = fs::absolute(in, ec);
      summary["input"] = ec ? in : absolute.lexically_normal().string();
      // What the tokens are, which the formats do not say (a Megatron user picks --tokenizer-type and --vocab-file
      // from it), and which dataset they came from (content_fingerprint changes when the dataset is rebuilt). The
      // provenance's [data] tokenizer keys are the convert command's settings, unused by an export.
      summary["dataset"] = {{"tokenizer", ds.tokenizer_id()},
                            {"vocab_size", ds.vocab_size()},
                            {"eot_id", ds.eot_id()},
                            {"total_tokens", ds.total_tokens()},
                            {"total_documents", ds.total_documents()},
                            {"content_fingerprint", ds.content_fingerprint()}};
      summary["provenance"] = provenance().to_json();
      // The export's formats have no room for provenance: it goes beside them, <prefix>.provenance.json for
      // Megatron's .bin/.idx, provenance.json in llm.c's directory (neither loader reads a .json there).
      std::string bin = summary.value("bin", std::string());
      const std::string sidecar =
          to == "megatron" ? bin.substr(0, bin.size() - 4) + ".provenance.json" : join_path(out, "provenance.json");
      atomic_write(sidecar, json_text(summary, 2) + "\n");
      write_json_output(json_out, json_text(summary, 2));
    }
    return 0;
  }
  if (inputs.empty())
    throw UsageError("convert --from needs inputs (Megatron prefixes or llm.c .bin files/directories)");
  const std::string dir = dataset_dir(cfg, out);
  check_output_not_input(dir, inputs);
  auto tok = tokenizer::load_configured(data);
  // Ours alone from here; rank 0 imports into parts inside --out, which every rank then reads as the source. An
  // --out this command created is removed again when the inputs are refused (nothing is left for a failed import).
  bool created = !path_exists(dir);
  if (mpi::initialized()) created = mpi::broadcast_value<int>(created ? 1 : 0) != 0;
  DirLock lock;
  lock_dataset_dir(lock, dir);
  const std::string parts = join_path(dir, ".import-parts");
  std::vector<std::string> files;
  std::string identity, err;
  int code = 0;
  uint64_t docs = 0;
  if (root) {
    try {
      std::filesystem::remove_all(parts);  // a killed import's: nothing in them is reused
      ImportParts src(parts, *tok);
      AddedEot added;
      if (from == "megatron") {
        for (auto& in : inputs) import_megatron(in, *tok, src, added), files.push_back(in);
      } else {
        LlmcStream stream;
        files = expand_bin_inputs(inputs);
        for (auto& f : files) import_llmc(f, *tok, src, added, stream);
        AddedEot final_doc;  // llm.c's last document has no delimiter after it: not worth a message
        add_doc(src, *tok, stream.doc, final_doc);
        if (stream.begins > 0)
          CAIRN_LOG_INFO("%s: documents begin with %s (%u), as llm.c's Llama-3 scripts write them: split there, "
                         "each document ending with end-of-text %u instead",
                         files.front().c_str(), std::string(kLlama3BeginOfText).c_str(), *stream.begin_token,
                         tok->eot_id());
      }
      if (src.num_docs() == 0) {
        std::string names;
        for (auto& f : files) names += (names.empty() ? "\"" : ", \"") + f + "\"";
        throw UsageError("the inputs contain no documents: " + names);
      }
      identity = src.finish();
      docs = src.num_docs();
      if (added.count)
        CAIRN_LOG_INFO("added end-of-text to %llu documents that lacked it",
                       static_cast<unsigned long long>(added.count));
      warn_if_documents_end_in_another_special(added, *tok);
    } catch (const Error& e) {
      err = e.what(), code = e.code();
      std::error_code ec;
      std::filesystem::remove_all(parts, ec);
    }
  }
  bool failed = !err.empty();
  if (mpi::initialized()) failed = mpi::broadcast_value<int>(failed ? 1 : 0) != 0;
  if (failed && created) {
    if (mpi::initialized()) mpi::barrier();  // every rank is done with the parts before rank 0 removes the dir
    if (root) remove_created_dataset_dir(lock, dir);
  }
  if (mpi::initialized()) {
    mpi::agree_or_throw(err.empty(), err, code ? code : kExitRuntime);
    identity = mpi::broadcast_string(identity);
    docs = mpi::broadcast_value<uint64_t>(docs);
    const std::string joined = mpi::broadcast_string([&] {
      std::string j;
      for (auto& f : files) j += f + '\n';
      return j;
    }());
    files.clear();
    for (size_t at = 0, nl; (nl = joined.find('\n', at)) != std::string::npos; at = nl + 1)
      files.push_back(joined.substr(at, nl - at));
  } else if (!err.empty()) {
    throw Error(code, err);
  }
  shards::Dataset parts_ds = shards::Dataset::open(parts);
  DatasetSource src({parts_ds});
  src.set_identity(identity);
  OutputSpec spec;
  spec.dir = dir;
  spec.dir_locked = lock.held();
  spec.shards = static_cast<uint64_t>(data.shards);
  spec.seed = data.seed;
  spec.split_docs = data.split_docs;
  spec.threads = resolve_threads(data);
  spec.tokenizer = tok->describe();
  spec.tokenizer_files = tok->source_files();
  spec.vocab_size = tok->vocab_size();
  spec.eot_id = tok->eot_id();
  spec.sources = files;
  spec.ids_checked = true;  // the parts were written by ShardWriter, which checked every id
  WriteResult r = write_dataset(src, spec);
  if (root) {
    std::filesystem::remove_all(parts);
    CAIRN_LOG_INFO("imported %llu documents, %llu tokens from %s into %s (%llu shards)",
                   static_cast<unsigned long long>(docs), static_cast<unsigned long long>(r.tokens), from.c_str(),
                   dir.c_str(), static_cast<unsigned long long>(spec.shards));
    json j = r.to_json(dir);
    j["imported_from"] = from;
    j["inputs"] = files;
    j["documents"] = docs;
    write_json_output(json_out, json_text(j, 2));
  }
  return 0;
}

}  // namespace cairn::reshard
