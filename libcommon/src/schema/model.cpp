// [model]: the architecture, shared by cairn-plan (cost model), cairn-train and cairn-eval.
#include "sections.h"

namespace cairn::schema {
void declare_model(Schema& s) {
  s.add_choice("model", "architecture", KeyType::String, "gpt", {"gpt", "llama"},
               "gpt: LayerNorm + GELU MLP, learned positions; llama: RMSNorm + SwiGLU + GQA");
  s.add_range("model", "layers", KeyType::Int, 12, 1, 100000, "transformer layers");
  s.add_range("model", "hidden", KeyType::Int, 768, 1, 1e7, "hidden size h");
  s.add_range("model", "heads", KeyType::Int, 12, 1, 100000, "attention heads a");
  s.add_range("model", "kv_heads", KeyType::Int, 0, 0, 100000, "key/value heads for GQA (0 = heads)");
  s.add_range("model", "ffn_hidden", KeyType::Int, 0, 0, 1e8, "MLP inner size (0 = 4h for gpt, Llama's rule for llama)");
  s.add_range("model", "seq_len", KeyType::Int, 1024, 1, 1e7, "sequence length s");
  s.add_range("model", "vocab", KeyType::Int, 0, 0, 1e8, "vocabulary size V (0 = from the dataset, padded to a multiple of 64)");
  s.add("model", "tied_embeddings", KeyType::Bool, true, "share the input embedding with the output head");
}
}  // namespace cairn::schema
