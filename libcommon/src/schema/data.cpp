// [data]: the token dataset (cairn-reshard writes it; cairn-train and cairn-eval read `path`).
#include "sections.h"

namespace cairn::schema {
void declare_data(Schema& s) {
  s.add("data", "path", KeyType::String, "",
        "dataset directory (index.json + shard_*.h5) read by train/eval and written by reshard (\"\" = <run.dir>/data)");
  s.add("data", "inputs", KeyType::StringList, json::array(),
        "cairn-reshard inputs: text/JSONL files (.gz ok), directories, \"-\" for stdin; or datasets for reshard");
  s.add_range("data", "shards", KeyType::Int, 8, 1, 1e7, "number of output shards (balanced by tokens)");
  s.add_range("data", "seed", KeyType::Int, -1, -1, 9.2e18,
              "shuffle documents deterministically with this seed (-1 = keep input order)");
  s.add_choice("data", "tokenizer", KeyType::String, "bytes", {"bytes", "gpt2", "hf"},
               "bytes: 256 byte ids + end-of-text; gpt2: encoder.json + vocab.bpe; hf: tokenizer.json (BPE)");
  s.add("data", "vocab", KeyType::String, "", "GPT-2 encoder.json (tokenizer = gpt2)");
  s.add("data", "merges", KeyType::String, "", "GPT-2 vocab.bpe (tokenizer = gpt2)");
  s.add("data", "tokenizer_json", KeyType::String, "", "Hugging Face tokenizer.json with a BPE model (tokenizer = hf)");
  s.add_choice("data", "format", KeyType::String, "auto", {"auto", "text", "jsonl"},
               "input format; auto: .jsonl/.jsonl.gz/.ndjson are JSONL, everything else text");
  s.add("data", "delimiter", KeyType::String, "",
        "text inputs: a line equal to this separates documents (e.g. \"%\" for fortunes); \"\" = one document per file");
  s.add("data", "jsonl_field", KeyType::String, "text", "JSONL inputs: the string field holding a document's text");
  s.add("data", "split_docs", KeyType::Bool, false,
        "reshard: split documents at shard boundaries for exact token balance (default keeps documents whole)");
  s.add("data", "skip_bad", KeyType::Bool, false,
        "skip malformed records (bad UTF-8, broken JSON lines, missing fields) and count them instead of failing");
  s.add_range("data", "threads", KeyType::Int, 0, 0, 4096, "worker threads per rank (0 = all hardware threads)");
  s.add_range("data", "batch_mb", KeyType::Float, 4.0, 0.01, 4096, "build: MiB of text per tokenization work item");
  // ---- keys added by cairn-train's work (reading the dataset) go below this line ----
  s.add_range("data", "val_fraction", KeyType::Float, 0.02, 0, 0.5,
              "held-out validation split: this fraction of the dataset's T+1-token windows, taken from the end "
              "(shard order), never trained on; cairn-eval's default perplexity split");
}
}  // namespace cairn::schema
