// [data]: the token dataset (cairn-reshard writes it; cairn-train and cairn-eval read `path`).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cairn/config_section.h"

namespace cairn {

struct DataSection {
  static constexpr const char* kSection = "data";
  std::string path;
  std::vector<std::string> inputs;
  int64_t shards = 8;
  int64_t seed = -1;
  std::string tokenizer = "bytes";
  std::string vocab;
  std::string merges;
  std::string tokenizer_json;
  std::string format = "auto";
  std::string delimiter;
  std::string jsonl_field = "text";
  bool split_docs = false;
  bool skip_bad = false;
  int threads = 0;
  double batch_mb = 4.0;
  double val_fraction = 0.02;
  template <class K>
  static void keys(K& k) {
    using S = DataSection;
    k(&S::path, "path",
      "dataset directory (index.json + shard_*.h5) read by train/eval and written by reshard (\"\" = <run.dir>/data)");
    k(&S::inputs, "inputs",
      "cairn-reshard inputs: text/JSONL files (.gz ok), directories, \"-\" for stdin; or datasets for reshard");
    k(&S::shards, "shards", Range{1, 1e7}, Flag{"--shards"}, "number of output shards (balanced by tokens)");
    k(&S::seed, "seed", Range{-1, 9.2e18}, Flag{"--seed"},
      "shuffle documents deterministically with this seed (-1 = keep input order)");
    k(&S::tokenizer, "tokenizer", Choices{"bytes", "gpt2", "hf"}, Flag{"--tokenizer"},
      "bytes: 256 byte ids + end-of-text; gpt2: encoder.json + vocab.bpe; hf: tokenizer.json (BPE)");
    k(&S::vocab, "vocab", Flag{"--vocab"}, "GPT-2 encoder.json (tokenizer = gpt2)");
    k(&S::merges, "merges", Flag{"--merges"}, "GPT-2 vocab.bpe (tokenizer = gpt2)");
    k(&S::tokenizer_json, "tokenizer_json", Flag{"--tokenizer-json"},
      "Hugging Face tokenizer.json with a BPE model (tokenizer = hf)");
    k(&S::format, "format", Choices{"auto", "text", "jsonl"}, Flag{"--format"},
      "input format; auto: .jsonl/.jsonl.gz/.ndjson are JSONL, everything else text");
    k(&S::delimiter, "delimiter", Flag{"--delimiter"},
      "text inputs: a line equal to this separates documents (e.g. \"%\" for fortunes); \"\" = one document per file");
    k(&S::jsonl_field, "jsonl_field", Flag{"--jsonl-field"},
      "JSONL inputs: the string field holding a document's text");
    k(&S::split_docs, "split_docs", Flag{"--split-docs"},
      "reshard: split documents at shard boundaries for exact token balance (default keeps documents whole)");
    k(&S::skip_bad, "skip_bad", Flag{"--skip-bad"},
      "skip malformed records (bad UTF-8, broken JSON lines, missing fields) and count them instead of failing");
    k(&S::threads, "threads", Range{0, 4096}, Flag{"--threads"}, "worker threads per rank (0 = all hardware threads)");
    k(&S::batch_mb, "batch_mb", Range{0.01, 4096}, "build: MiB of text per tokenization work item");
    k(&S::val_fraction, "val_fraction", Range{0, 0.5},
      "held-out validation split: this fraction of the dataset's T+1-token windows, taken from the end (shard "
      "order), never trained on; cairn-eval's default perplexity split");
  }
};

}  // namespace cairn
