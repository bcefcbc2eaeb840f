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
  std::string eot_token;
  std::string format = "auto";
  std::string delimiter;
  std::string jsonl_field = "text";
  bool split_docs = false;
  bool skip_bad = false;
  int threads = 0;
  double batch_mb = 4.0;
  double part_mb = 32.0;
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
    k(&S::eot_token, "eot_token", Flag{"--eot-token"},
      "tokenizer = hf: the token appended after each document (\"\" = the first of <|endoftext|>, <|end_of_text|>, "
      "</s>, <eos>, <|eot_id|>, <｜end▁of▁sentence｜>, <EOT> in the file)");
    k(&S::format, "format", Choices{"auto", "text", "jsonl"}, Flag{"--format"},
      "input format; auto: .jsonl/.ndjson are JSONL and .tfrecord/.tfrecords/.tfrec TFRecord (each also .gz/.zst/"
      ".zstd), an LMDB environment its records, everything else text");
    k(&S::delimiter, "delimiter", Flag{"--delimiter"},
      "text inputs: a line equal to this separates documents (e.g. \"%\" for fortunes); \"\" = one document per file");
    k(&S::jsonl_field, "jsonl_field", Flag{"--jsonl-field"},
      "JSONL inputs: the string field holding a document's text");
    k(&S::split_docs, "split_docs", Flag{"--split-docs"},
      "reshard: split documents at shard boundaries for exact token balance (default keeps documents whole)");
    k(&S::skip_bad, "skip_bad", Flag{"--skip-bad"},
      "skip malformed records (bad UTF-8, broken JSON lines, missing fields) and count them instead of failing");
    k(&S::threads, "threads", Range{0, 4096}, Flag{"--threads"},
      "worker threads per rank (0 = the rank's share of its CPUs, as cairn-train)");
    k(&S::batch_mb, "batch_mb", Range{0.01, 4096}, "build: MiB of text per tokenization work item");
    k(&S::part_mb, "part_mb", Range{0.000001, 65536},
      "build: MiB of input text per part file, the unit an interrupted build reuses (small consecutive inputs "
      "share one); memory holds about one part's text and tokens per rank");
    k(&S::val_fraction, "val_fraction", Range{0, 0.5},
      "held-out validation split: this fraction of the dataset's T+1-token windows, taken from the end (shard "
      "order), never trained on; cairn-eval's default perplexity split");
  }
};

// [data.mix]: a weighted mixture of existing datasets (cairn-reshard mix; docs/reshard-mix.md).
struct DataMixSection {
  static constexpr const char* kSection = "data.mix";
  std::vector<std::string> sources;
  std::vector<double> weights;
  int64_t tokens = 0;
  double epochs = 0;
  double max_epochs = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> window_sequences{1, 1024};
  template <class K>
  static void keys(K& k) {
    using S = DataMixSection;
    k(&S::sources, "sources",
      "cairn-reshard mix: the datasets to blend (built by cairn-reshard; one tokenizer); positional arguments win");
    k(&S::weights, "weights", Flag{"--weights"},
      "share of the mixture's tokens per source, one positive value per source, normalised to sum 1 (e.g. "
      "[0.7, 0.2, 0.1])");
    k(&S::tokens, "tokens", Range{0, 9.2e18}, Flag{"--tokens"},
      "tokens of the mixture (0 = from epochs); documents stay whole, so it ends at the first document end at or "
      "past this");
    k(&S::epochs, "epochs", Range{0, 1e9}, Flag{"--epochs"},
      "size as epochs of the largest source: tokens = epochs x its tokens / its weight (tokens = epochs = 0: 1 "
      "epoch)");
    k(&S::max_epochs, "max_epochs", Range{0, 1e12}, Flag{"--max-epochs"},
      "refuse (exit 2) a mixture that repeats any source more than this many epochs (0 = no limit)");
    k(&S::seq_len, "seq_len", Range{0, 1e7}, Flag{"--seq-len"},
      "training sequence length over whose windows the realised mix is measured (0 = [model] seq_len)");
    k(&S::window_sequences, "window_sequences", Range{1, 1e12},
      "window sizes, in training sequences, over which stats.json reports the realised mix's worst deviation");
  }
};

}  // namespace cairn
