// GPT-2 model (llm.c layout): flat parameter/gradient buffers, forward, backward, on a kernel backend.
// CONTRACT used by cairn-train and cairn-eval; implemented by the kernels/model work (libcommon/src/gpt.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cairn::kernels {
struct Backend;
}

namespace cairn::gpt {

struct GptConfig {
  int layers = 12;
  int hidden = 768;
  int heads = 12;
  int seq_len = 1024;   // maximum context (wpe rows)
  int vocab = 50304;    // padded vocabulary (rows of wte)
  int vocab_real = 50257;  // ids >= vocab_real never appear; their logits are masked out of the loss
};

// One named parameter tensor inside the flat buffer (HF GPT-2 names: "wte", "wpe",
// "h.0.ln_1.weight", ..., "ln_f.bias").
struct TensorInfo {
  std::string name;
  size_t offset = 0;  // in floats, into params/grads
  size_t size = 0;
  std::vector<int> shape;
  bool weight_decay = false;  // true for matmul weights and embeddings; false for norms and biases
  int layer = -1;             // transformer layer, -1 for embeddings / final norm
};

class Model {
 public:
  Model(const GptConfig& cfg, const kernels::Backend& backend);
  ~Model();
  const GptConfig& config() const;
  const std::vector<TensorInfo>& tensors() const;
  size_t num_params() const;
  float* params();
  float* grads();

  // GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2*layers), zeros for biases,
  // ones for norm weights; deterministic in seed.
  void init(uint64_t seed);

  // Forward over B x T tokens (T <= seq_len). With targets, returns the mean cross-entropy over the
  // B*T positions (targets < 0 are ignored) and keeps per-position losses; without, returns 0.
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T);
  const float* logits() const;          // B*T*vocab of the last forward
  const float* position_losses() const; // B*T of the last forward with targets
  // Backward of the last forward (with targets): accumulates into grads(). `on_layer_done(first,
  // count)` is called as each parameter range's gradient is final (last layer first), so data-parallel
  // training can start all-reducing that bucket while backward continues.
  void backward(const std::function<void(size_t first, size_t count)>& on_grads_ready = {});
  void zero_grad();

 private:
  struct Impl;
  Impl* impl_;
};

// FLOPs of one training step (forward + backward) per token, 6N + attention (for MFU).
double train_flops_per_token(const GptConfig& cfg);

}  // namespace cairn::gpt
