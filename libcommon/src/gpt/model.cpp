// GPT-2 forward/backward over a kernel backend: parameter layout, init, activation buffers (and their
// recomputation), gradient buckets.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cairn/error.h"
#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"

namespace cairn::gpt {

using kernels::Backend;
using kernels::WeightLayout;

void validate(const GptConfig& c) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError("model: " + what);
  };
  need(c.layers > 0, "layers must be > 0 (got " + std::to_string(c.layers) + ")");
  need(c.hidden > 0, "hidden must be > 0 (got " + std::to_string(c.hidden) + ")");
  need(c.heads > 0, "heads must be > 0 (got " + std::to_string(c.heads) + ")");
  need(c.hidden % c.heads == 0, "hidden (" + std::to_string(c.hidden) + ") must be divisible by heads (" +
                                    std::to_string(c.heads) + ")");
  need(c.seq_len > 0, "seq_len must be > 0 (got " + std::to_string(c.seq_len) + ")");
  need(c.vocab > 0, "vocab must be > 0 (got " + std::to_string(c.vocab) + ")");
  need(c.vocab_real > 0 && c.vocab_real <= c.vocab, "vocab_real (" + std::to_string(c.vocab_real) +
                                                        ") must be in 1..vocab (" + std::to_string(c.vocab) + ")");
}

namespace {

// Indices into the tensor list for one transformer layer.
struct LayerTensors {
  int ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  size_t first, count;  // the layer's contiguous range
};

std::vector<TensorInfo> make_tensors(const GptConfig& c) {
  std::vector<TensorInfo> t;
  size_t offset = 0;
  auto add = [&](std::string name, std::vector<int> shape, bool decay, int layer) {
    size_t size = 1;
    for (int d : shape) size *= (size_t)d;
    t.push_back(TensorInfo{std::move(name), offset, size, std::move(shape), decay, layer});
    offset += size;
  };
  const int C = c.hidden;
  add("wte", {c.vocab, C}, true, -1);
  add("wpe", {c.seq_len, C}, true, -1);
  for (int l = 0; l < c.layers; l++) {
    const std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {C}, false, l);
    add(p + "ln_1.bias", {C}, false, l);
    add(p + "attn.c_attn.weight", {C, 3 * C}, true, l);
    add(p + "attn.c_attn.bias", {3 * C}, false, l);
    add(p + "attn.c_proj.weight", {C, C}, true, l);
    add(p + "attn.c_proj.bias", {C}, false, l);
    add(p + "ln_2.weight", {C}, false, l);
    add(p + "ln_2.bias", {C}, false, l);
    add(p + "mlp.c_fc.weight", {C, 4 * C}, true, l);
    add(p + "mlp.c_fc.bias", {4 * C}, false, l);
    add(p + "mlp.c_proj.weight", {4 * C, C}, true, l);
    add(p + "mlp.c_proj.bias", {C}, false, l);
  }
  add("ln_f.weight", {C}, false, -1);
  add("ln_f.bias", {C}, false, -1);
  return t;
}

constexpr int kTensorsPerLayer = 12;
constexpr int kFirstLayerTensor = 2;  // after wte, wpe

// splitmix64: a tiny, well-mixed generator; per-tensor streams make init independent of tensor order
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// N(0, std) by Box-Muller in double, from a stream seeded by (seed, name).
void fill_normal(float* out, size_t n, float stddev, uint64_t seed, const std::string& name) {
  uint64_t state = seed ^ hash_name(name);
  const double two_pi = 6.283185307179586;
  for (size_t i = 0; i < n; i += 2) {
    double u1 = ((splitmix64(state) >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
    double u2 = (splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
    double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = (float)(stddev * r * std::cos(two_pi * u2));
    if (i + 1 < n) out[i + 1] = (float)(stddev * r * std::sin(two_pi * u2));
  }
}

}  // namespace

size_t count_params(const GptConfig& cfg) {
  const size_t C = cfg.hidden;
  return (size_t)cfg.vocab * C + (size_t)cfg.seq_len * C + (size_t)cfg.layers * (12 * C * C + 13 * C) + 2 * C;
}

std::vector<DecayRange> decay_ranges(const std::vector<TensorInfo>& tensors, size_t first, size_t count) {
  std::vector<DecayRange> out;
  const size_t last = first + count;
  for (const auto& t : tensors) {
    const size_t a = std::max(first, t.offset), b = std::min(last, t.offset + t.size);
    if (a >= b) continue;
    if (!out.empty() && out.back().weight_decay == t.weight_decay && out.back().first + out.back().count == a)
      out.back().count += b - a;
    else
      out.push_back(DecayRange{a, b - a, t.weight_decay});
  }
  return out;
}

void adamw_update_ranges(const kernels::Backend& be, const std::vector<DecayRange>& ranges, size_t first,
                         float* params, const float* grads, float* m, float* v, kernels::AdamWParams hp,
                         float weight_decay) {
  for (const DecayRange& r : ranges) {
    hp.weight_decay = r.weight_decay ? weight_decay : 0.0f;
    const size_t rel = r.first - first;
    be.adamw_update(params + r.first, grads + rel, m + rel, v + rel, r.count, hp);
  }
}

double train_flops_per_token(const GptConfig& c) {
  // matmul parameters (attention qkv+proj, MLP, tied lm_head): 2 FLOPs each forward, 6 forward+backward;
  // attention scores and weighted values: 2 * 2 * T * C per layer forward (full square, as PaLM counts).
  const double C = c.hidden, L = c.layers, T = c.seq_len;
  const double matmul_params = L * 12.0 * C * C + C * c.vocab;
  return 6.0 * matmul_params + 12.0 * L * T * C;
}

const char* recompute_name(Recompute mode) {
  switch (mode) {
    case Recompute::None: return "none";
    case Recompute::Gelu: return "gelu";
    case Recompute::Full: return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  for (Recompute m : {Recompute::None, Recompute::Gelu, Recompute::Full})
    if (name == recompute_name(m)) return m;
  throw UsageError("recompute must be \"none\", \"gelu\" or \"full\", not \"" + name + "\"");
}

double recompute_flops_per_token(const GptConfig& c, Recompute mode) {
  if (mode != Recompute::Full || c.layers < 2) return 0.0;
  // per rerun layer: qkv (3C^2), attention projection (C^2) and MLP input (4C^2) matmuls at 2 FLOPs per
  // multiply-add, plus the attention square 2 * 2 * T * C; the MLP output projection is not rerun.
  const double C = c.hidden, T = c.seq_len;
  return double(c.layers - 1) * (16.0 * C * C + 4.0 * T * C);
}

namespace {

// One transformer layer's activations for `tokens` rows. With recomputation some pointers of different
// layers alias one shared buffer.
struct LayerActs {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att_lse, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3;
};

struct Activations {
  int32_t* d_inputs = nullptr;
  int32_t* d_targets = nullptr;
  float* encoded = nullptr;
  std::vector<LayerActs> layers;  // `layers` entries when training, one reused entry when not
  float *proj = nullptr, *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr, *logits = nullptr,
        *losses = nullptr, *xent_lse = nullptr;
  float *dres = nullptr, *dtmp = nullptr, *dbig = nullptr;  // backward scratch
};

// Lays out the activations of `tokens` rows for a mode, taking each buffer from take(bytes), which
// allocates (a model) or only counts and returns nullptr (planned_activation_bytes).
//   training, None: every buffer per layer.
//   training, Gelu: fch_gelu shared by all layers.
//   training, Full: res3 (the layer output = next layer's input) per layer, everything else shared.
//   forward-only: one set reused by every layer (a layer's output may overwrite its input in place).
void layout_activations(const GptConfig& cfg, bool training, Recompute mode, size_t tokens,
                        const std::function<void*(size_t)>& take, Activations& a) {
  const size_t N = tokens, C = cfg.hidden, NH = cfg.heads, Vp = cfg.vocab;
  auto f = [&](size_t count) { return static_cast<float*>(take(count * sizeof(float))); };
  a = Activations{};
  a.d_inputs = static_cast<int32_t*>(take(N * sizeof(int32_t)));
  a.d_targets = static_cast<int32_t*>(take(N * sizeof(int32_t)));
  a.encoded = f(N * C);
  if (!training) mode = Recompute::Full;  // one shared set; the per-layer outputs below collapse to one too
  const bool share_gelu = mode != Recompute::None, share_all = mode == Recompute::Full;
  float* shared_gelu = share_gelu ? f(N * 4 * C) : nullptr;
  auto layer_set = [&](LayerActs& s) {  // all but fch_gelu and res3
    s.ln1 = f(N * C);
    s.ln1_mean = f(N);
    s.ln1_rstd = f(N);
    s.qkv = f(N * 3 * C);
    s.atty = f(N * C);
    s.att_lse = f(N * NH);
    s.res2 = f(N * C);
    s.ln2 = f(N * C);
    s.ln2_mean = f(N);
    s.ln2_rstd = f(N);
    s.fch = f(N * 4 * C);
  };
  LayerActs shared{};
  if (share_all) layer_set(shared);
  const int slots = training ? cfg.layers : 1;
  for (int l = 0; l < slots; l++) {
    LayerActs s = shared;
    if (!share_all) layer_set(s);
    s.fch_gelu = share_gelu ? shared_gelu : f(N * 4 * C);
    s.res3 = f(N * C);
    a.layers.push_back(s);
  }
  a.proj = f(N * C);
  a.lnf = f(N * C);
  a.lnf_mean = f(N);
  a.lnf_rstd = f(N);
  a.logits = f(N * Vp);
  a.losses = f(N);
  a.xent_lse = f(N);
  if (training) {
    a.dres = f(N * C);
    a.dtmp = f(N * C);
    a.dbig = f(N * 4 * C);
  }
}

}  // namespace

size_t planned_activation_bytes(const GptConfig& cfg, size_t tokens, Recompute mode, bool training) {
  validate(cfg);
  size_t bytes = 0;
  Activations a;
  layout_activations(cfg, training, mode, tokens, [&](size_t n) -> void* { bytes += n; return nullptr; }, a);
  return bytes;
}

struct Model::Impl {
  std::function<void(int)> forward_layer_hook;  // per-layer forward timing (set_forward_layer_hook)
  GptConfig cfg;
  const Backend& be;
  bool training;
  std::vector<TensorInfo> tensors;
  std::vector<LayerTensors> layers;
  size_t n_params = 0;
  float* params = nullptr;
  float* grads = nullptr;

  // activations, sized for `capacity` = B*T tokens
  size_t capacity = 0;
  int B = 0, T = 0;
  bool have_targets = false, logits_valid = false;
  int n_valid = 0;
  std::vector<void*> owned;  // every activation allocation, freed together
  size_t owned_bytes = 0;
  Recompute recompute = Recompute::None;
  // With recomputation: the layer whose activations the shared buffers hold (-1: none), so backward
  // reruns only what forward (or an earlier recompute) has not left in place.
  int shared_layer = -1;
  Activations acts;
  std::vector<float> host_losses;

  Impl(const GptConfig& c, const Backend& b, bool train) : cfg(c), be(b), training(train) {
    validate(cfg);
    tensors = make_tensors(cfg);
    n_params = tensors.back().offset + tensors.back().size;
    for (int l = 0; l < cfg.layers; l++) {
      const int t0 = kFirstLayerTensor + l * kTensorsPerLayer;
      LayerTensors lt{t0, t0 + 1, t0 + 2, t0 + 3, t0 + 4, t0 + 5, t0 + 6, t0 + 7, t0 + 8, t0 + 9, t0 + 10, t0 + 11, 0, 0};
      lt.first = tensors[t0].offset;
      lt.count = tensors[t0 + 11].offset + tensors[t0 + 11].size - lt.first;
      layers.push_back(lt);
    }
    params = static_cast<float*>(be.alloc(n_params * sizeof(float)));
    if (training) grads = static_cast<float*>(be.alloc(n_params * sizeof(float)));
  }

  ~Impl() {
    free_activations();
    be.free(params);
    if (grads) be.free(grads);
  }

  float* P(int tensor) { return params + tensors[tensor].offset; }
  float* G(int tensor) { return grads + tensors[tensor].offset; }

  void free_activations() {
    for (void* p : owned) be.free(p);
    owned.clear();
    owned_bytes = 0;
    acts = Activations{};
    capacity = 0;
    shared_layer = -1;
  }

  void ensure_activations(size_t tokens) {
    if (tokens <= capacity) return;
    free_activations();
    layout_activations(cfg, training, recompute, tokens,
                       [&](size_t bytes) {
                         void* p = be.alloc(bytes);
                         owned.push_back(p);
                         owned_bytes += bytes;
                         return p;
                       },
                       acts);
    capacity = tokens;
  }

  LayerActs& act(int l) { return acts.layers[training ? l : 0]; }
  // The residual stream entering layer l.
  float* layer_input(int l) { return l == 0 ? acts.encoded : act(l - 1).res3; }

  void check_tokens(const int32_t* ids, int N, int T, const char* what, bool allow_negative) {
    for (int i = 0; i < N; i++) {
      const int32_t id = ids[i];
      if ((id < 0 && !allow_negative) || id >= cfg.vocab_real)
        throw RuntimeError(std::string("gpt forward: ") + what + " token " + std::to_string(id) + " at batch row " +
                           std::to_string(i / T) + ", position " + std::to_string(i % T) + " is outside [0, " +
                           std::to_string(cfg.vocab_real) + ")");
    }
  }

  // Layer l's forward from its input residual stream into act(l). With through_output = false (a
  // recompute in backward) it stops before the MLP output projection: backward needs neither that
  // product nor res3, which is kept. The kernels and their inputs are those of the first pass, so the
  // recomputed activations are bitwise the same.
  void layer_forward(int l, bool through_output) {
    const int N = B * T, C = cfg.hidden, NH = cfg.heads;
    const LayerTensors& w = layers[l];
    LayerActs& a = act(l);
    float* res = layer_input(l);
    be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, res, P(w.ln1w), P(w.ln1b), N, C);
    be.matmul_forward(a.qkv, a.ln1, P(w.qkvw), P(w.qkvb), N, C, 3 * C, WeightLayout::InOut);
    be.attention_forward(a.atty, a.att_lse, a.qkv, B, T, C, NH);
    be.matmul_forward(acts.proj, a.atty, P(w.attprojw), P(w.attprojb), N, C, C, WeightLayout::InOut);
    be.residual_forward(a.res2, res, acts.proj, (size_t)N * C);
    be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, P(w.ln2w), P(w.ln2b), N, C);
    be.matmul_forward(a.fch, a.ln2, P(w.fcw), P(w.fcb), N, C, 4 * C, WeightLayout::InOut);
    be.gelu_forward(a.fch_gelu, a.fch, (size_t)N * 4 * C);
    if (!through_output) return;
    be.matmul_forward(acts.proj, a.fch_gelu, P(w.fcprojw), P(w.fcprojb), N, 4 * C, C, WeightLayout::InOut);
    be.residual_forward(a.res3, a.res2, acts.proj, (size_t)N * C);
  }

  float forward(const int32_t* inputs, const int32_t* targets, int b, int t) {
    if (b <= 0 || t <= 0) throw RuntimeError("gpt forward: batch and sequence length must be > 0");
    if (t > cfg.seq_len)
      throw RuntimeError("gpt forward: sequence length " + std::to_string(t) + " exceeds the model's seq_len " +
                         std::to_string(cfg.seq_len));
    const int N = b * t, C = cfg.hidden, Vp = cfg.vocab;
    check_tokens(inputs, N, t, "input", false);
    if (targets) check_tokens(targets, N, t, "target", true);
    ensure_activations((size_t)N);
    B = b;
    T = t;
    shared_layer = -1;
    be.copy_to_device(acts.d_inputs, inputs, sizeof(int32_t) * N);
    be.embedding_forward(acts.encoded, acts.d_inputs, P(0), P(1), B, T, C);
    if (forward_layer_hook) forward_layer_hook(-1);
    for (int l = 0; l < cfg.layers; l++) {
      layer_forward(l, true);
      if (forward_layer_hook) forward_layer_hook(l);
    }
    shared_layer = cfg.layers - 1;
    const int lnfw = (int)tensors.size() - 2, lnfb = (int)tensors.size() - 1;
    be.layernorm_forward(acts.lnf, acts.lnf_mean, acts.lnf_rstd, act(cfg.layers - 1).res3, P(lnfw), P(lnfb), N, C);
    be.matmul_forward(acts.logits, acts.lnf, P(0), nullptr, N, C, Vp, WeightLayout::OutIn);
    logits_valid = true;
    have_targets = targets != nullptr;
    n_valid = 0;
    if (!targets) return 0.0f;
    be.copy_to_device(acts.d_targets, targets, sizeof(int32_t) * N);
    be.crossentropy_forward(acts.losses, acts.xent_lse, acts.logits, acts.d_targets, N, cfg.vocab_real, Vp);
    host_losses.resize(N);
    be.copy_to_host(host_losses.data(), acts.losses, sizeof(float) * N);
    double sum = 0.0;
    for (int i = 0; i < N; i++)
      if (targets[i] >= 0) {
        sum += host_losses[i];
        n_valid++;
      }
    return n_valid ? (float)(sum / n_valid) : 0.0f;
  }

  // Before layer l's backward: rebuild what the recompute mode did not keep for it.
  void restore_layer(int l) {
    if (recompute == Recompute::None || shared_layer == l) return;
    const int N = B * T, C = cfg.hidden;
    if (recompute == Recompute::Full)
      layer_forward(l, false);
    else  // Gelu: every other activation of the layer is its own
      be.gelu_forward(act(l).fch_gelu, act(l).fch, (size_t)N * 4 * C);
    shared_layer = l;
  }

  void backward(const std::function<void(size_t, size_t)>& ready, float grad_scale) {
    if (!training) throw RuntimeError("gpt backward: the model was built forward-only (training=false)");
    if (!have_targets || !logits_valid)
      throw RuntimeError("gpt backward: needs a preceding forward with targets (and only one backward per forward)");
    const int N = B * T, C = cfg.hidden, NH = cfg.heads, Vp = cfg.vocab;
    float *dres = acts.dres, *dtmp = acts.dtmp, *dbig = acts.dbig;
    auto notify = [&](size_t first, size_t count) {
      if (!ready) return;
      be.synchronize();
      ready(first, count);
    };
    // the logits buffer becomes dlogits in place
    const float dloss = n_valid ? grad_scale / (float)n_valid : 0.0f;
    be.crossentropy_backward(acts.logits, acts.logits, acts.xent_lse, acts.d_targets, dloss, N, cfg.vocab_real, Vp);
    logits_valid = false;
    be.matmul_backward(dtmp, G(0), nullptr, acts.logits, acts.lnf, P(0), N, C, Vp, WeightLayout::OutIn);
    const int lnfw = (int)tensors.size() - 2, lnfb = (int)tensors.size() - 1;
    be.fill_zero(dres, sizeof(float) * N * C);
    be.layernorm_backward(dres, G(lnfw), G(lnfb), dtmp, act(cfg.layers - 1).res3, P(lnfw), acts.lnf_mean,
                          acts.lnf_rstd, N, C);
    notify(tensors[lnfw].offset, tensors[lnfw].size + tensors[lnfb].size);
    for (int l = cfg.layers - 1; l >= 0; l--) {
      const LayerTensors& w = layers[l];
      restore_layer(l);
      LayerActs& a = act(l);
      // MLP: dres holds d(res3), which is also d(res2)'s pass-through part
      be.matmul_backward(dbig, G(w.fcprojw), G(w.fcprojb), dres, a.fch_gelu, P(w.fcprojw), N, 4 * C, C,
                         WeightLayout::InOut);
      be.gelu_backward(dbig, a.fch, dbig, (size_t)N * 4 * C);
      be.matmul_backward(dtmp, G(w.fcw), G(w.fcb), dbig, a.ln2, P(w.fcw), N, C, 4 * C, WeightLayout::InOut);
      be.layernorm_backward(dres, G(w.ln2w), G(w.ln2b), dtmp, a.res2, P(w.ln2w), a.ln2_mean, a.ln2_rstd, N, C);
      // attention: dres now holds d(res2)
      be.matmul_backward(dtmp, G(w.attprojw), G(w.attprojb), dres, a.atty, P(w.attprojw), N, C, C,
                         WeightLayout::InOut);
      be.attention_backward(dbig, dtmp, a.qkv, a.atty, a.att_lse, B, T, C, NH);
      be.matmul_backward(dtmp, G(w.qkvw), G(w.qkvb), dbig, a.ln1, P(w.qkvw), N, C, 3 * C, WeightLayout::InOut);
      be.layernorm_backward(dres, G(w.ln1w), G(w.ln1b), dtmp, layer_input(l), P(w.ln1w), a.ln1_mean, a.ln1_rstd, N,
                            C);
      notify(w.first, w.count);
    }
    be.embedding_backward(G(0), G(1), dres, acts.d_inputs, B, T, C);
    notify(0, tensors[0].size + tensors[1].size);
  }
};

Model::Model(const GptConfig& cfg, const kernels::Backend& backend, bool training)
    : impl_(new Impl(cfg, backend, training)) {}
Model::~Model() { delete impl_; }
const GptConfig& Model::config() const { return impl_->cfg; }
const kernels::Backend& Model::backend() const { return impl_->be; }
bool Model::training() const { return impl_->training; }
const std::vector<TensorInfo>& Model::tensors() const { return impl_->tensors; }
const TensorInfo* Model::find_tensor(const std::string& name) const {
  for (const auto& t : impl_->tensors)
    if (t.name == name) return &t;
  return nullptr;
}
size_t Model::num_params() const { return impl_->n_params; }
float* Model::params() { return impl_->params; }
float* Model::grads() { return impl_->grads; }
const float* Model::params() const { return impl_->params; }
const float* Model::grads() const { return impl_->grads; }
const float* Model::logits() const { return impl_->acts.logits; }
const float* Model::position_losses() const { return impl_->host_losses.data(); }
int Model::valid_targets() const { return impl_->n_valid; }

void Model::copy_params_from_host(const float* host) {
  impl_->be.copy_to_device(impl_->params, host, sizeof(float) * impl_->n_params);
}
void Model::copy_params_to_host(float* host) const {
  impl_->be.synchronize();
  impl_->be.copy_to_host(host, impl_->params, sizeof(float) * impl_->n_params);
}
void Model::copy_grads_to_host(float* host) const {
  if (!impl_->grads) throw RuntimeError("gpt: the model was built forward-only (training=false) and has no gradients");
  impl_->be.synchronize();
  impl_->be.copy_to_host(host, impl_->grads, sizeof(float) * impl_->n_params);
}
void Model::copy_logits_to_host(float* host) const {
  if (!impl_->logits_valid) throw RuntimeError("gpt: no logits (no forward yet, or backward() overwrote them)");
  impl_->be.synchronize();
  impl_->be.copy_to_host(host, impl_->acts.logits, sizeof(float) * (size_t)impl_->B * impl_->T * impl_->cfg.vocab);
}

void Model::init(uint64_t seed) {
  Impl& m = *impl_;
  std::vector<float> host(m.n_params, 0.0f);
  const float stddev = 0.02f;
  const float residual_std = stddev / std::sqrt(2.0f * m.cfg.layers);
  for (const auto& t : m.tensors) {
    float* p = host.data() + t.offset;
    const bool is_bias = t.name.ends_with(".bias");
    const bool is_norm = t.name.find("ln_") != std::string::npos;
    if (is_norm && !is_bias) {
      std::fill(p, p + t.size, 1.0f);
    } else if (is_bias) {
      // zeros
    } else if (t.name == "wte") {
      // padding rows stay zero: they are never looked up and their logits are masked
      fill_normal(p, (size_t)m.cfg.vocab_real * m.cfg.hidden, stddev, seed, t.name);
    } else {
      const bool residual_proj = t.name.ends_with("c_proj.weight");
      fill_normal(p, t.size, residual_proj ? residual_std : stddev, seed, t.name);
    }
  }
  m.be.copy_to_device(m.params, host.data(), sizeof(float) * m.n_params);
}

float Model::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  float loss = impl_->forward(inputs, targets, B, T);
  if (impl_->forward_layer_hook) impl_->forward_layer_hook(impl_->cfg.layers);
  return loss;
}

void Model::set_forward_layer_hook(std::function<void(int layer)> hook) { impl_->forward_layer_hook = std::move(hook); }

void Model::backward(const std::function<void(size_t, size_t)>& on_grads_ready, float grad_scale) {
  impl_->backward(on_grads_ready, grad_scale);
}

void Model::zero_grad() {
  if (impl_->grads) impl_->be.fill_zero(impl_->grads, sizeof(float) * impl_->n_params);
}

void Model::set_recompute(Recompute mode) {
  if (impl_->recompute == mode) return;
  impl_->free_activations();  // reallocated with the new layout at the next forward
  impl_->recompute = mode;
  impl_->logits_valid = impl_->have_targets = false;
}
Recompute Model::recompute() const { return impl_->recompute; }
void Model::set_recompute_gelu(bool on) { set_recompute(on ? Recompute::Gelu : Recompute::None); }
bool Model::recompute_gelu() const { return impl_->recompute != Recompute::None; }
size_t Model::activation_bytes() const { return impl_->owned_bytes; }

std::vector<std::pair<size_t, size_t>> Model::grad_ready_ranges() const {
  const Impl& m = *impl_;
  std::vector<std::pair<size_t, size_t>> r;
  const size_t lnf = m.tensors[m.tensors.size() - 2].offset;
  r.emplace_back(lnf, m.n_params - lnf);
  for (int l = m.cfg.layers - 1; l >= 0; l--) r.emplace_back(m.layers[l].first, m.layers[l].count);
  r.emplace_back(0, m.tensors[0].size + m.tensors[1].size);
  return r;
}

}  // namespace cairn::gpt
