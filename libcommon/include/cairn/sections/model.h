// [model]: the architecture, shared by cairn-plan (cost model), cairn-train and cairn-eval.
#pragma once
#include <cstdint>
#include <string>

#include "cairn/config_section.h"

namespace cairn {

struct ModelSection {
  static constexpr const char* kSection = "model";
  std::string architecture = "gpt";
  int layers = 12;
  int64_t hidden = 768;
  int heads = 12;
  int kv_heads = 0;
  int64_t ffn_hidden = 0;
  int64_t seq_len = 1024;
  int64_t vocab = 0;
  bool tied_embeddings = true;
  template <class K>
  static void keys(K& k) {
    using S = ModelSection;
    k(&S::architecture, "architecture", Choices{"gpt", "llama"},
      "gpt: LayerNorm + GELU MLP, learned positions; llama: RMSNorm + SwiGLU + GQA");
    k(&S::layers, "layers", Range{1, 100000}, "transformer layers");
    k(&S::hidden, "hidden", Range{1, 1e7}, "hidden size h");
    k(&S::heads, "heads", Range{1, 100000}, "attention heads a");
    k(&S::kv_heads, "kv_heads", Range{0, 100000}, "key/value heads for GQA (0 = heads)");
    k(&S::ffn_hidden, "ffn_hidden", Range{0, 1e8}, "MLP inner size (0 = 4h for gpt, Llama's rule for llama)");
    k(&S::seq_len, "seq_len", Range{1, 1e7}, "sequence length s");
    k(&S::vocab, "vocab", Range{0, 1e8},
      "vocabulary size V (0 = from the dataset, padded to a multiple of 64; cairn-plan counts the [data] "
      "tokenizer's ids when the dataset does not exist yet)");
    k(&S::tied_embeddings, "tied_embeddings", "share the input embedding with the output head");
  }
};

}  // namespace cairn
