// GPT-2 forward/backward over a kernel backend: parameter layout, init, activation buffers (and their
// recomputation), gradient buckets.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
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
  need(c.hidden % c.heads == 0,
       "hidden (" + std::to_string(c.hidden) + ") must be divisible by heads (" + std::to_string(c.heads) + ")");
  need(c.seq_len > 0, "seq_len must be > 0 (got " + std::to_string(c.seq_len) + ")");
  need(c.vocab > 0, "vocab must be > 0 (got " + std::to_string(c.vocab) + ")");
  need(c.vocab_real > 0 && c.vocab_real <= c.vocab,
       "vocab_real (" + std::to_string(c.vocab_real) + ") must be in 1..vocab (" + std::to_string(c.vocab) + ")");
}

namespace {

// Indices into the tensor list for one transformer layer.
struct LayerTensors {
  int ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  size_t first, count;  // the layer's contiguous range
};

int spec_layers(const GptConfig& c, const ShardSpec& sp) {
  return sp.num_layers < 0 ? c.layers - sp.first_layer : sp.num_layers;
}

void validate_spec(const GptConfig& c, const ShardSpec& sp) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError("model piece: " + what);
  };
  need(sp.tp >= 1 && sp.tp_rank >= 0 && sp.tp_rank < sp.tp,
       "tensor-parallel rank " + std::to_string(sp.tp_rank) + " of " + std::to_string(sp.tp));
  need(c.heads % sp.tp == 0,
       "heads (" + std::to_string(c.heads) + ") must be divisible by tp (" + std::to_string(sp.tp) + ")");
  need(c.vocab % sp.tp == 0, "vocab (" + std::to_string(c.vocab) + ") must be divisible by tp (" +
                                 std::to_string(sp.tp) + "): pad it to a multiple of 128*tp, as Megatron does");
  // every rank's vocabulary block must hold a real token, or its softmax has no column at all
  need(c.vocab_real > (sp.tp - 1) * (c.vocab / sp.tp),
       "vocab_real (" + std::to_string(c.vocab_real) + ") leaves the last of " + std::to_string(sp.tp) +
           " vocabulary blocks of " + std::to_string(c.vocab / sp.tp) + " rows without a real token");
  need(sp.cp >= 1 && sp.cp_rank >= 0 && sp.cp_rank < sp.cp,
       "context-parallel rank " + std::to_string(sp.cp_rank) + " of " + std::to_string(sp.cp));
  const int n = spec_layers(c, sp);
  need(sp.first_layer >= 0 && n >= 0 && sp.first_layer + n <= c.layers,
       "layers [" + std::to_string(sp.first_layer) + ", " + std::to_string(sp.first_layer + n) +
           ") outside the model's " + std::to_string(c.layers));
  need(n > 0 || sp.has_embedding || sp.has_head, "a piece without layers, embedding or head");
}

}  // namespace

std::vector<TensorInfo> piece_tensors(const GptConfig& c, const ShardSpec& sp) {
  validate_spec(c, sp);
  std::vector<TensorInfo> t;
  size_t offset = 0;
  const int tp = sp.tp;
  auto add = [&](std::string name, std::vector<int> full, bool decay, int layer, Split split) {
    std::vector<int> shape = full;
    if (tp > 1 && split == Split::Rows) shape.front() /= tp;
    if (tp > 1 && (split == Split::Cols || split == Split::QkvCols)) shape.back() /= tp;
    if (tp == 1) split = Split::None;
    size_t size = 1;
    for (int d : shape) size *= (size_t)d;
    t.push_back(TensorInfo{std::move(name), offset, size, std::move(shape), decay, layer, split, std::move(full)});
    offset += size;
  };
  const int C = c.hidden;
  if (sp.has_embedding || sp.has_head) add("wte", {c.vocab, C}, true, -1, Split::Rows);
  if (sp.has_embedding) add("wpe", {c.seq_len, C}, true, -1, Split::None);
  const int n = spec_layers(c, sp);
  for (int l = sp.first_layer; l < sp.first_layer + n; l++) {
    const std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {C}, false, l, Split::None);
    add(p + "ln_1.bias", {C}, false, l, Split::None);
    add(p + "attn.c_attn.weight", {C, 3 * C}, true, l, Split::QkvCols);
    add(p + "attn.c_attn.bias", {3 * C}, false, l, Split::QkvCols);
    add(p + "attn.c_proj.weight", {C, C}, true, l, Split::Rows);
    add(p + "attn.c_proj.bias", {C}, false, l, Split::None);
    add(p + "ln_2.weight", {C}, false, l, Split::None);
    add(p + "ln_2.bias", {C}, false, l, Split::None);
    add(p + "mlp.c_fc.weight", {C, 4 * C}, true, l, Split::Cols);
    add(p + "mlp.c_fc.bias", {4 * C}, false, l, Split::Cols);
    add(p + "mlp.c_proj.weight", {4 * C, C}, true, l, Split::Rows);
    add(p + "mlp.c_proj.bias", {C}, false, l, Split::None);
  }
  if (sp.has_head) {
    add("ln_f.weight", {C}, false, -1, Split::None);
    add("ln_f.bias", {C}, false, -1, Split::None);
  }
  return t;
}

namespace {

std::vector<TensorInfo> make_tensors(const GptConfig& c) { return piece_tensors(c, ShardSpec{}); }

// Runs of one tensor piece inside its whole tensor (offsets relative to each tensor's start).
void tensor_runs(const TensorInfo& t, int tp, int tp_rank, std::vector<FlatRun>& out) {
  const size_t local_cols = (size_t)t.shape.back();
  const size_t rows = t.size / local_cols;
  switch (t.split) {
    case Split::None: out.push_back({0, 0, t.size}); return;
    case Split::Rows: out.push_back({0, (size_t)tp_rank * t.size, t.size}); return;
    case Split::Cols:
      for (size_t r = 0; r < rows; r++)
        out.push_back({r * local_cols, r * local_cols * tp + tp_rank * local_cols, local_cols});
      return;
    case Split::QkvCols: {
      const size_t part = local_cols / 3, full_cols = local_cols * tp;
      for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < 3; j++)
          out.push_back({r * local_cols + j * part, r * full_cols + j * (full_cols / 3) + tp_rank * part, part});
      return;
    }
  }
}

}  // namespace

std::vector<FlatRun> full_model_runs(const GptConfig& c, const ShardSpec& sp) {
  const std::vector<TensorInfo> full = make_tensors(c), mine = piece_tensors(c, sp);
  std::vector<FlatRun> out;
  for (const TensorInfo& t : mine) {
    const TensorInfo* whole = nullptr;
    for (const TensorInfo& f : full)
      if (f.name == t.name) whole = &f;
    std::vector<FlatRun> runs;
    tensor_runs(t, sp.tp, sp.tp_rank, runs);
    for (FlatRun r : runs) out.push_back({t.offset + r.local, whole->offset + r.full, r.count});
  }
  return out;
}

namespace {

constexpr int kTensorsPerLayer = 12;

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

// N(0, std) by Box-Muller in double, from a stream seeded by (seed, name). splitmix64 is a counter (its state
// steps by a constant), so pair j (values 2j and 2j+1) starts from state0 + 2j steps: any range of the stream is
// drawn without the values before it, on all cores, each value the same as the sequential stream's (one thread
// took ~95 ns a parameter: 11 minutes for a 7 B piece). Values at `limit` and past it are zero (wte's padding).
// Writes stream values [first, first + count) to out[0, count).
void fill_normal_range(float* out, size_t first, size_t count, size_t limit, float stddev, uint64_t seed,
                       const std::string& name) {
  const uint64_t state0 = seed ^ hash_name(name);
  const double two_pi = 6.283185307179586;
  const size_t end = std::min(first + count, std::max(limit, first));
  std::fill(out + (end - first), out + count, 0.0f);
  if (end <= first) return;
  const int64_t j0 = static_cast<int64_t>(first / 2), j1 = static_cast<int64_t>((end + 1) / 2);
#pragma omp parallel for schedule(static) if (j1 - j0 > 65536 && !omp_in_parallel())
  for (int64_t j = j0; j < j1; ++j) {
    uint64_t state = state0 + static_cast<uint64_t>(2 * j) * 0x9E3779B97F4A7C15ull;
    const size_t i = static_cast<size_t>(2 * j);
    double u1 = ((splitmix64(state) >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
    double u2 = (splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
    double r = std::sqrt(-2.0 * std::log(u1));
    if (i >= first) out[i - first] = (float)(stddev * r * std::cos(two_pi * u2));
    if (i + 1 >= first && i + 1 < end) out[i + 1 - first] = (float)(stddev * r * std::sin(two_pi * u2));
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
    else out.push_back(DecayRange{a, b - a, t.weight_decay});
  }
  return out;
}

void adamw_update_ranges(const kernels::Backend& be, const std::vector<DecayRange>& ranges, size_t first, float* params,
                         const float* grads, float* m, float* v, kernels::AdamWParams hp, float weight_decay) {
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

// Sizes of a model piece for one forward of `tokens` = B*T rows.
struct Dims {
  size_t N = 0;             // token rows: attention, MLP and the head work on all of them
  size_t R = 0;             // residual-stream rows this rank holds: N, or N/tp with sequence parallelism
  size_t C = 0;             // hidden
  size_t Cl = 0;            // attention width of this rank's heads (C/tp)
  size_t NHl = 0;           // heads on this rank
  size_t Fl = 0;            // MLP width on this rank (4C/tp)
  size_t Vl = 0;            // vocabulary rows on this rank (padded)
  int layers = 0;           // transformer layers in this piece
  bool split_rows = false;  // sequence parallelism with tp > 1
};

Dims dims_of(const GptConfig& c, const ShardSpec& sp, size_t tokens) {
  Dims d;
  d.N = tokens;
  d.split_rows = sp.sequence_parallel && sp.tp > 1;
  d.R = d.split_rows ? tokens / sp.tp : tokens;
  d.C = c.hidden;
  d.Cl = d.C / sp.tp;
  d.NHl = c.heads / sp.tp;
  d.Fl = 4 * d.C / sp.tp;
  d.Vl = c.vocab / sp.tp;
  d.layers = spec_layers(c, sp);
  return d;
}

// One transformer layer's activations. With recomputation some pointers of different layers alias one
// shared buffer. [R, .] buffers hold this rank's residual-stream rows, [N, .] ones all token rows.
struct LayerActs {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att_lse, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3;
};

struct Activations {
  int32_t* d_inputs = nullptr;    // ids; with tp > 1 block-local, -1 where another rank holds the row
  int32_t* d_targets = nullptr;   // targets; with tp > 1 block-local, >= the block's vocabulary elsewhere
  float* encoded = nullptr;       // [R, C]: the piece's input stream (embedding output or the previous stage's)
  std::vector<LayerActs> layers;  // one entry per layer when training, one reused entry when not
  float* proj = nullptr;          // [N, C] output projection (partial sums under tensor parallelism)
  float* proj_rows = nullptr;     // [R, C] its reduce-scatter (sequence parallelism)
  float* gathered = nullptr;      // [N, C] all-gathered stream rows (sequence parallelism)
  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr, *logits = nullptr, *losses = nullptr,
        *xent_lse = nullptr;
  float *lse_all = nullptr, *losses_all = nullptr;          // [tp, N] every rank's lse and losses (vocab parallelism)
  float *dres = nullptr, *dtmp = nullptr, *dbig = nullptr;  // backward scratch
  float *dfull = nullptr, *drows = nullptr;                 // sequence parallelism: gathered d(stream), reduced dX
  // Context parallelism: every CP rank's k|v columns in rank order [cp, N, 2Cl] (the all-gather / reduce-scatter
  // side), the same rows as qkv rows in sequence order [cp*N, 3Cl] (what attention reads; their q third unused) and
  // their gradient [cp*N, 3Cl], and this rank's k|v [N, 2Cl] (gathered from, or reduced into).
  float *kv_ranks = nullptr, *kv_seq = nullptr, *dkv_seq = nullptr, *kv_part = nullptr;
  // Ring context parallelism (cp_ring): two messages [K/V | dK/dV accumulator], each half [N, 2Cl] packed (one is
  // sent while the other receives); the K/V a step holds as qkv rows [N, 3Cl] (q third unused); one block's partial
  // out [S, Cl] and lse [NHl, S], or step 0's lse [B, NHl, T] (at most N rows); backward's dK/dV of a step as qkv rows,
  // a block's dq as qkv rows [N, 3Cl] (k and v thirds zero) and a packed [N, 2Cl] staging buffer.
  float *ring_msg[2] = {nullptr, nullptr}, *ring_rows = nullptr, *ring_out = nullptr, *ring_lse = nullptr;
  float *ring_dkv_rows = nullptr, *ring_dq = nullptr, *ring_pack = nullptr;
  // Recomputation's shared buffers (scratch: one set for all slots): a layer's activations rebuilt in backward
  // (full) and the GELU output (gelu, full).
  LayerActs shared_set{};
  float* shared_gelu = nullptr;
};

// All of a layer's activations but fch_gelu and res3, from take().
template <typename F>
void layer_set(LayerActs& s, const Dims& d, F&& f) {
  const size_t N = d.N, R = d.R, C = d.C;
  s.ln1 = f(R * C);
  s.ln1_mean = f(R);
  s.ln1_rstd = f(R);
  s.qkv = f(N * 3 * d.Cl);
  s.atty = f(N * d.Cl);
  s.att_lse = f(N * d.NHl);
  s.res2 = f(R * C);
  s.ln2 = f(R * C);
  s.ln2_mean = f(R);
  s.ln2_rstd = f(R);
  s.fch = f(N * d.Fl);
}

// Lays out the activations of `tokens` rows for a mode, taking each buffer from take(bytes), which
// allocates (a model) or only counts and returns nullptr (planned_activation_bytes).
//   training, None: every buffer per layer.
//   training, Gelu: fch_gelu shared by all layers.
//   training, Full: res3 (the layer output = next layer's input) per layer, everything else shared.
//   forward-only: one set reused by every layer (a layer's output may overwrite its input in place).
// Scratch buffers (the projection's partial sums, all-gathered rows, backward's temporaries) serve one forward or
// backward at a time: a model keeps one set for all activation slots (slots = micro-batches in flight).
void layout_scratch(const GptConfig& cfg, const ShardSpec& sp, bool training, Recompute mode, size_t tokens,
                    const std::function<void*(size_t)>& take, Activations& a) {
  const Dims d = dims_of(cfg, sp, tokens);
  const size_t N = d.N, R = d.R, C = d.C;
  auto f = [&](size_t count) { return static_cast<float*>(take(count * sizeof(float))); };
  if (!training) mode = Recompute::Full;  // forward-only: one set reused by every layer
  if (mode != Recompute::None && d.layers > 0) a.shared_gelu = f(N * d.Fl);
  if (mode == Recompute::Full && d.layers > 0) layer_set(a.shared_set, d, f);
  if (d.layers > 0) a.proj = f(N * C);
  if (d.split_rows) {
    if (d.layers > 0) a.proj_rows = f(R * C);
    a.gathered = f(N * C);
  }
  if (sp.cp > 1 && sp.cp_ring && d.layers > 0) {
    const size_t kv = N * 2 * d.Cl, rows = N * 3 * d.Cl;
    a.ring_msg[0] = f(2 * kv);
    a.ring_msg[1] = f(2 * kv);
    a.ring_rows = f(rows);
    a.ring_out = f(N * d.Cl);
    a.ring_lse = f(N * d.NHl);
    if (training) {
      a.ring_dkv_rows = f(rows);
      a.ring_dq = f(rows);
      a.ring_pack = f(kv);
    }
  } else if (sp.cp > 1 && d.layers > 0) {
    const size_t kv = N * 2 * d.Cl, qkv_all = (size_t)sp.cp * N * 3 * d.Cl;
    a.kv_part = f(kv);
    a.kv_ranks = f((size_t)sp.cp * kv);
    a.kv_seq = f(qkv_all);
    if (training) a.dkv_seq = f(qkv_all);
  }
  if (training) {
    a.dres = f(R * C);
    a.dtmp = f(N * C);
    if (d.layers > 0) a.dbig = f(N * d.Fl);
    if (d.split_rows) {
      a.dfull = f(N * C);
      a.drows = f(R * C);
    }
  }
}

// The activations one slot keeps from its forward to its backward; recomputation's shared buffers come from
// `scratch` (layout_scratch), the other scratch pointers are left null.
void layout_activations(const GptConfig& cfg, const ShardSpec& sp, bool training, Recompute mode, size_t tokens,
                        const std::function<void*(size_t)>& take, const Activations& scratch, Activations& a) {
  const Dims d = dims_of(cfg, sp, tokens);
  const size_t N = d.N, R = d.R, C = d.C;
  auto f = [&](size_t count) { return static_cast<float*>(take(count * sizeof(float))); };
  auto ids = [&]() { return static_cast<int32_t*>(take(N * sizeof(int32_t))); };
  a = Activations{};
  if (sp.has_embedding) a.d_inputs = ids();
  if (sp.has_head) a.d_targets = ids();
  a.encoded = f(R * C);
  if (!training) mode = Recompute::Full;  // one shared set; the per-layer outputs below collapse to one too
  const bool share_gelu = mode != Recompute::None, share_all = mode == Recompute::Full;
  const int slots = training ? d.layers : std::min(d.layers, 1);
  for (int l = 0; l < slots; l++) {
    LayerActs s = scratch.shared_set;
    if (!share_all) layer_set(s, d, f);
    s.fch_gelu = share_gelu ? scratch.shared_gelu : f(N * d.Fl);
    s.res3 = f(R * C);
    a.layers.push_back(s);
  }
  if (sp.has_head) {
    a.lnf = f(R * C);
    a.lnf_mean = f(R);
    a.lnf_rstd = f(R);
    a.logits = f(N * d.Vl);
    a.losses = f(N);
    a.xent_lse = f(N);
    if (sp.tp > 1) {
      a.lse_all = f(sp.tp * N);
      a.losses_all = f(sp.tp * N);
    }
  }
}

}  // namespace

size_t planned_activation_bytes(const GptConfig& cfg, const ShardSpec& spec, size_t tokens, Recompute mode,
                                bool training) {
  validate(cfg);
  validate_spec(cfg, spec);
  size_t bytes = 0;
  Activations a;
  auto count = [&](size_t n) -> void* {
    bytes += n;
    return nullptr;
  };
  Activations scratch;
  layout_scratch(cfg, spec, training, mode, tokens, count, scratch);
  layout_activations(cfg, spec, training, mode, tokens, count, scratch, a);
  return bytes;
}

size_t planned_activation_bytes(const GptConfig& cfg, size_t tokens, Recompute mode, bool training) {
  return planned_activation_bytes(cfg, ShardSpec{}, tokens, mode, training);
}

struct Model::Impl {
  // One set of activations and the state of its last forward (pipeline schedules keep several in flight).
  struct Slot {
    std::vector<void*> owned;  // every activation allocation, freed together
    size_t owned_bytes = 0;
    ActivationPool::Block block;  // with a pool: the one block every buffer of the slot lies in
    size_t capacity = 0;          // B*T rows the buffers were laid out for
    Activations acts;
    int B = 0, T = 0;
    bool forwarded = false, have_targets = false, logits_valid = false;
    int n_valid = 0;
    int logit_rows = 0;  // rows of acts.logits from the last forward: B*T, or the targeted positions
    std::vector<float> host_losses;
  };

  std::function<void(int)> forward_layer_hook;  // per-layer forward timing (set_forward_layer_hook)
  bool head_targets_only = false;               // set_head_targets_only
  GptConfig cfg;
  ShardSpec spec;
  TpComm comm;
  TpComm cp_comm;  // context-parallel group (spec.cp > 1)
  const Backend& be;
  bool training;
  std::vector<TensorInfo> tensors;
  std::vector<LayerTensors> layers;              // this piece's layers, local index 0..
  int wte = -1, wpe = -1, lnfw = -1, lnfb = -1;  // tensor indices (-1: not in this piece)
  size_t vocab_first = 0, vocab_rows = 0;        // this rank's block of vocabulary rows
  int vocab_real_rows = 0;                       // rows of the block below vocab_real
  size_t n_params = 0;
  float* params = nullptr;
  float* grads = nullptr;
  Recompute recompute = Recompute::None;
  // Units (embedding, layers, final norm) and lent storage (UnitStorage).
  std::vector<std::pair<size_t, size_t>> units;
  std::vector<int> unit_of;  // per tensor
  int emb_unit = -1, head_unit = -1;
  UnitStorage storage;
  std::vector<const float*> unit_params;
  std::vector<float*> unit_grads;
  std::vector<int> unit_uses;
  std::vector<Slot> slots = std::vector<Slot>(1);
  int slot = 0;
  std::shared_ptr<ActivationPool> pool;  // set: slots lie in its blocks (set_activation_pool)
  Slot scratch;  // the scratch buffers every slot shares (only its owned/capacity/acts' scratch pointers are used)
  // With recomputation: the slot and layer whose activations the shared buffers hold (-1: none), so backward
  // reruns only what forward (or an earlier recompute) has not left in place.
  int shared_owner = -1, shared_layer = -1;

  Impl(const GptConfig& c, const Backend& b, bool train, const ShardSpec& sp, TpComm tc, TpComm cc)
      : cfg(c), spec(sp), comm(std::move(tc)), cp_comm(std::move(cc)), be(b), training(train) {
    validate(cfg);
    tensors = piece_tensors(cfg, spec);
    if (spec.tp > 1 && (!comm.all_reduce || !comm.all_gather || !comm.reduce_scatter))
      throw UsageError("model piece: tp > 1 needs the tensor-parallel collectives");
    if (spec.cp > 1 && !spec.cp_ring && (!cp_comm.all_gather || !cp_comm.reduce_scatter))
      throw UsageError("model piece: cp > 1 needs the context-parallel all-gather and reduce-scatter");
    if (spec.cp > 1 && spec.cp_ring && (!cp_comm.ring_start || !cp_comm.ring_wait))
      throw UsageError("model piece: ring context parallelism needs the context-parallel ring exchange");
    n_params = tensors.back().offset + tensors.back().size;
    int t = 0;
    if (spec.has_embedding || spec.has_head) wte = t++;
    if (spec.has_embedding) wpe = t++;
    for (int l = 0; l < spec_layers(cfg, spec); l++, t += kTensorsPerLayer) {
      LayerTensors lt{t, t + 1, t + 2, t + 3, t + 4, t + 5, t + 6, t + 7, t + 8, t + 9, t + 10, t + 11, 0, 0};
      lt.first = tensors[t].offset;
      lt.count = tensors[t + 11].offset + tensors[t + 11].size - lt.first;
      layers.push_back(lt);
    }
    if (spec.has_head) {
      lnfw = t;
      lnfb = t + 1;
    }
    unit_of.assign(tensors.size(), -1);
    auto add_unit = [&](int first_tensor, int last_tensor) {
      const size_t first = tensors[first_tensor].offset;
      units.emplace_back(first, tensors[last_tensor].offset + tensors[last_tensor].size - first);
      for (int i = first_tensor; i <= last_tensor; i++) unit_of[i] = (int)units.size() - 1;
      return (int)units.size() - 1;
    };
    if (wte >= 0) emb_unit = add_unit(wte, wpe >= 0 ? wpe : wte);
    for (const LayerTensors& lt : layers) add_unit(lt.ln1w, lt.fcprojb);
    if (lnfw >= 0) head_unit = add_unit(lnfw, lnfb);
    unit_params.assign(units.size(), nullptr);
    unit_grads.assign(units.size(), nullptr);
    unit_uses.assign(units.size(), 0);
    vocab_rows = (size_t)cfg.vocab / spec.tp;
    vocab_first = vocab_rows * spec.tp_rank;
    vocab_real_rows = (int)std::clamp<int64_t>((int64_t)cfg.vocab_real - (int64_t)vocab_first, 0, (int64_t)vocab_rows);
    if (!spec.lent_params) params = static_cast<float*>(be.alloc(n_params * sizeof(float)));
    if (training && !spec.lent_grads) grads = static_cast<float*>(be.alloc(n_params * sizeof(float)));
  }

  ~Impl() {
    for (size_t i = 0; i < slots.size(); i++) free_slot(slots[i]);
    free_slot(scratch);
    if (params) be.free(params);
    if (grads) be.free(grads);
  }

  int layer_unit(int l) const { return unit_of[layers[l].ln1w]; }

  // Parameter and gradient of a tensor: in the model's flat buffers, or in the unit memory lent for now.
  const float* P(int tensor) {
    if (!storage.acquire_params) {
      if (!params) throw RuntimeError("gpt: parameters used before the unit storage they are lent from");
      return params + tensors[tensor].offset;
    }
    const int u = unit_of[tensor];
    if (!unit_params[u])
      throw RuntimeError("gpt: parameters of unit " + std::to_string(u) + " used while not acquired");
    return unit_params[u] + (tensors[tensor].offset - units[u].first);
  }
  float* G(int tensor) {
    if (!storage.acquire_grads) {
      if (!grads) throw RuntimeError("gpt: gradients used before the unit storage they are lent from");
      return grads + tensors[tensor].offset;
    }
    const int u = unit_of[tensor];
    if (!unit_grads[u]) unit_grads[u] = storage.acquire_grads(u);
    return unit_grads[u] + (tensors[tensor].offset - units[u].first);
  }
  // Units in use (reference-counted: the embedding serves the head too on a single stage). `next`: the unit this
  // pass acquires after u (-1: none or not known), for the storage to fetch ahead.
  void use_params(int u, int next) {
    if (storage.acquire_params && unit_uses[u]++ == 0) unit_params[u] = storage.acquire_params(u, next);
  }
  void done_params(int u) {
    if (storage.acquire_params && --unit_uses[u] == 0) {
      storage.release_params(u, training && (u == emb_unit || u == head_unit));
      unit_params[u] = nullptr;
    }
  }
  // The unit a forward acquires after layer l's (the next layer's, else the head's; l = -1: after the embedding), and a
  // backward after layer l's (l = layers.size(): after the head).
  int unit_after_forward(int l) const {
    return l + 1 < (int)layers.size() ? layer_unit(l + 1) : (spec.has_head ? head_unit : -1);
  }
  int unit_after_backward(int l) const { return l > 0 ? layer_unit(l - 1) : -1; }
  // A unit's gradient of this backward is complete: handed back (lent storage) or announced.
  void grads_complete(int u, const std::function<void(size_t, size_t)>& notify) {
    if (storage.acquire_grads) {
      if (unit_grads[u]) storage.grads_done(u);
      unit_grads[u] = nullptr;
      return;
    }
    notify(units[u].first, units[u].second);
  }
  // A row-parallel layer's bias is added once, by TP rank 0, before the partial sums are reduced.
  const float* row_bias(int tensor) { return spec.tp_rank == 0 ? P(tensor) : nullptr; }
  Slot& cur() { return slots[slot]; }
  Activations& acts() { return slots[slot].acts; }
  Dims dims() { return dims_of(cfg, spec, (size_t)cur().B * cur().T); }

  void free_slot(Slot& s) {
    for (void* p : s.owned) be.free(p);
    if (s.block.ptr) pool->give(s.block);
    s = Slot{};
  }

  // Pool layouts put each buffer at a 256-byte boundary (cuBLAS and vector loads like aligned rows).
  static constexpr size_t kPoolAlign = 256;
  static size_t pool_round(size_t b) { return (b + kPoolAlign - 1) / kPoolAlign * kPoolAlign; }
  using Take = std::function<void*(size_t)>;
  // Runs a layout (layout_scratch or layout_activations bound to this piece) with `base` == nullptr to count its
  // bytes at the pool's alignment, or to carve its buffers one after another from `base`.
  static size_t pool_layout(char* base, const std::function<void(const Take&)>& layout) {
    size_t used = 0;
    layout([&](size_t bytes) -> void* {
      void* p = base ? base + used : nullptr;
      used += pool_round(bytes);
      return p;
    });
    return used;
  }
  size_t pooled_scratch_bytes(size_t tokens) const {
    Activations counted;
    return pool_layout(nullptr, [&](const Take& take) {
      layout_scratch(cfg, spec, training, recompute, tokens, take, counted);
    });
  }
  size_t pooled_bytes(size_t tokens) const {
    Activations counted;
    return pool_layout(nullptr, [&](const Take& take) {
      layout_activations(cfg, spec, training, recompute, tokens, take, scratch.acts, counted);
    });
  }
  // The scratch laid out in the pool's shared block (not owned: the pool counts and frees it).
  void lay_out_scratch_pooled(size_t tokens) {
    char* base = static_cast<char*>(pool->scratch(pooled_scratch_bytes(tokens)));
    pool_layout(base,
                [&](const Take& take) { layout_scratch(cfg, spec, training, recompute, tokens, take, scratch.acts); });
  }
  // Before a forward or backward uses the shared scratch: what recomputation left there is gone if another piece
  // used it since.
  void claim_scratch() {
    if (pool && pool->claim_scratch(this)) shared_owner = -1;
  }
  // Lays slot `s` out in one block of the pool. A block another piece used last is zeroed, as a fresh allocation
  // would be.
  void lay_out_pooled(Slot& s, size_t tokens) {
    ActivationPool::Block b = pool->take(pooled_bytes(tokens));
    if (b.last_user != this) be.fill_zero(b.ptr, b.bytes);
    b.last_user = this;
    pool_layout(static_cast<char*>(b.ptr), [&](const Take& take) {
      layout_activations(cfg, spec, training, recompute, tokens, take, scratch.acts, s.acts);
    });
    s.block = b;
  }

  void ensure_activations(size_t tokens) {
    Slot& s = cur();
    auto taker = [&](Slot& into) {
      return [&](size_t bytes) {
        void* p = be.alloc(bytes);
        into.owned.push_back(p);
        into.owned_bytes += bytes;
        return p;
      };
    };
    if (tokens > scratch.capacity) {
      // Every slot's activations point into the scratch (recomputation's shared set): all are laid out anew. The
      // micro-batches a schedule keeps in flight have one size, so none is lost.
      for (Slot& x : slots) free_slot(x);
      free_slot(scratch);
      if (pool) lay_out_scratch_pooled(tokens);
      else layout_scratch(cfg, spec, training, recompute, tokens, taker(scratch), scratch.acts);
      scratch.capacity = tokens;
      shared_owner = -1;
    }
    if (tokens > s.capacity) {
      free_slot(s);
      if (pool) lay_out_pooled(s, tokens);
      else layout_activations(cfg, spec, training, recompute, tokens, taker(s), scratch.acts, s.acts);
      s.capacity = tokens;
    }
    attach_scratch(s.acts);
  }
  // A slot's scratch pointers: the model's one set.
  void attach_scratch(Activations& a) {
    const Activations& x = scratch.acts;
    a.proj = x.proj;
    a.proj_rows = x.proj_rows;
    a.gathered = x.gathered;
    a.dres = x.dres;
    a.dtmp = x.dtmp;
    a.dbig = x.dbig;
    a.dfull = x.dfull;
    a.drows = x.drows;
    a.kv_ranks = x.kv_ranks;
    a.kv_seq = x.kv_seq;
    a.dkv_seq = x.dkv_seq;
    a.kv_part = x.kv_part;
    a.ring_msg[0] = x.ring_msg[0];
    a.ring_msg[1] = x.ring_msg[1];
    a.ring_rows = x.ring_rows;
    a.ring_out = x.ring_out;
    a.ring_lse = x.ring_lse;
    a.ring_dkv_rows = x.ring_dkv_rows;
    a.ring_dq = x.ring_dq;
    a.ring_pack = x.ring_pack;
  }

  LayerActs& act(int l) { return acts().layers[training ? l : 0]; }
  // The residual stream entering local layer l.
  float* layer_input(int l) { return l == 0 ? acts().encoded : act(l - 1).res3; }
  float* piece_output() { return layers.empty() ? acts().encoded : act((int)layers.size() - 1).res3; }

  // Tensor parallelism: the partial sums `full` [N, C] of a row-parallel product (or of dX of a column-parallel
  // one) summed over the group, as the rank's stream rows: in place (all-reduce), or reduce-scattered into
  // `rows` [R, C] with sequence parallelism.
  float* reduce_rows(float* full, float* rows, const Dims& d) {
    if (spec.tp == 1) return full;
    if (d.split_rows) {
      comm.reduce_scatter(rows, full, d.R * d.C);
      return rows;
    }
    comm.all_reduce(full, d.N * d.C);
    return full;
  }
  // The stream rows [R, C] as the [N, C] input of a column-parallel product (an all-gather with sequence
  // parallelism; the rows themselves otherwise).
  const float* gather_rows(const float* rows, float* full, const Dims& d) {
    if (!d.split_rows) return rows;
    comm.all_gather(full, rows, d.R * d.C);
    return full;
  }
  // Sequence parallelism leaves each rank with its rows' share of a LayerNorm's gradient: sum it over the group
  // once per step, over all micro-batches accumulated (weight and bias are adjacent: 2C floats); with lent gradient
  // storage each backward's gradient is handed over on its own, so then every time.
  void sum_norm_grads(int weight_tensor, const BackwardOptions& o, const Dims& d) {
    if (d.split_rows && (o.last_micro_batch || storage.acquire_grads)) comm.all_reduce(G(weight_tensor), 2 * d.C);
  }

  void check_tokens(const int32_t* ids, int N, int T, const char* what, bool allow_negative) {
    for (int i = 0; i < N; i++) {
      const int32_t id = ids[i];
      if ((id < 0 && !allow_negative) || id >= cfg.vocab_real)
        throw RuntimeError(std::string("gpt forward: ") + what + " token " + std::to_string(id) + " at batch row " +
                           std::to_string(i / T) + ", position " + std::to_string(i % T) + " is outside [0, " +
                           std::to_string(cfg.vocab_real) + ")");
    }
  }

  // Ids (or targets) relative to this rank's vocabulary block: rows held elsewhere become `elsewhere`.
  std::vector<int32_t> block_local(const int32_t* ids, size_t n, int32_t elsewhere) const {
    std::vector<int32_t> out(n);
    for (size_t i = 0; i < n; i++) {
      const int64_t id = ids[i];
      if (id < 0) out[i] = -1;
      else if ((size_t)id >= vocab_first && (size_t)id < vocab_first + vocab_rows)
        out[i] = (int32_t)(id - (int64_t)vocab_first);
      else out[i] = elsewhere;
    }
    return out;
  }

  // ---- context parallelism (spec.cp > 1) ----
  // A rank's rows of a sequence are S = T/2 rows of one chunk, then S rows of another; the sequence is T*cp tokens
  // long, chunk k at positions k*S .. (k+1)*S - 1.
  int chunk_of(int rank, int half) const { return cp_chunk(spec.cp, rank, half); }
  int chunk_of(int half) const { return chunk_of(spec.cp_rank, half); }
  // Moves k|v columns (2Cl wide) between the CP group's rank order (`ranks` [cp][B][T] rows of 2Cl, each rank's two
  // chunks in its own order) and the k|v thirds of qkv rows in sequence order (`seq` [B][T*cp] rows of 3Cl):
  // to_sequence = true from `ranks` into `seq`, false back.
  void cp_reorder(float* ranks, float* seq, int B, int T, size_t Cl, bool to_sequence) {
    const int S = T / 2, Tf = T * spec.cp;
    const size_t kv = 2 * Cl, qkv = 3 * Cl, row = sizeof(float) * kv;
    for (int r = 0; r < spec.cp; r++)
      for (int b = 0; b < B; b++)
        for (int half = 0; half < 2; half++) {
          float* at_rank = ranks + (((size_t)r * B + b) * T + (size_t)half * S) * kv;
          float* at_seq = seq + ((size_t)b * Tf + (size_t)chunk_of(r, half) * S) * qkv + Cl;
          if (to_sequence) be.copy_rows(at_seq, sizeof(float) * qkv, at_rank, row, row, S);
          else be.copy_rows(at_rank, row, at_seq, sizeof(float) * qkv, row, S);
        }
  }
  // f(row, chunk) for each of this rank's two chunks of each of the B sequences: `row` its first row among the B x T,
  // `chunk` where it lies in the sequence (positions chunk*S .. chunk*S + S - 1, S = T/2).
  template <typename F>
  void for_each_chunk(int B, int T, F&& f) const {
    for (int b = 0; b < B; b++)
      for (int half = 0; half < 2; half++) f((size_t)b * T + (size_t)half * (T / 2), chunk_of(half));
  }
  // kv_seq's k and v thirds = every CP rank's keys and values of this layer in sequence order: only they travel
  // (Megatron's all-gather CP moves K and V, not Q).
  // K/V packed [N, 2Cl] <-> the k and v thirds of qkv rows [N, 3Cl].
  void pack_kv(float* packed, const float* qkv_rows, const Dims& d) {
    const size_t row = sizeof(float) * 2 * d.Cl;
    be.copy_rows(packed, row, qkv_rows + d.Cl, sizeof(float) * 3 * d.Cl, row, d.N);
  }
  void unpack_kv(float* qkv_rows, const float* packed, const Dims& d) {
    const size_t row = sizeof(float) * 2 * d.Cl;
    be.copy_rows(qkv_rows + d.Cl, sizeof(float) * 3 * d.Cl, packed, row, row, d.N);
  }
  void gather_sequence_kv(const LayerActs& a, const Dims& d, int B, int T) {
    Activations& s = acts();
    pack_kv(s.kv_part, a.qkv, d);
    cp_comm.all_gather(s.kv_ranks, s.kv_part, d.N * 2 * d.Cl);
    cp_reorder(s.kv_ranks, s.kv_seq, B, T, d.Cl, true);
  }
  // ---- ring context parallelism (spec.cp_ring) ----
  // Step 0 of the ring holds this rank's own K/V. Its two chunks, the earlier one first, are one causal block of T
  // rows: a query of the later chunk sees the earlier chunk whole and its own causally, as a row of one T-token
  // sequence would. So step 0 is one call over all B sequences, as Transformer Engine's first step is, instead of three
  // blocks and a merge per sequence. That call's lse comes in attention_forward's layout [B, NHl, T]; the ring keeps
  // it per chunk, [B, 2, NHl, S] (one block of NHl x S at the chunk's row / S, as the later steps' blocks write it):
  // lse_layout moves it from the one to the other (to_chunks) or back.
  void lse_layout(float* chunks, float* whole, int B, int T, int NHl, bool to_chunks) {
    const int S = T / 2;
    const size_t bytes = sizeof(float) * S;
    for (int b = 0; b < B; b++)
      for (int half = 0; half < 2; half++) {
        float* c = chunks + ((size_t)b * 2 + half) * NHl * S;
        float* w = whole + (size_t)b * NHl * T + (size_t)half * S;
        if (to_chunks) be.copy_rows(c, bytes, w, sizeof(float) * T, bytes, NHl);
        else be.copy_rows(w, sizeof(float) * T, c, bytes, bytes, NHl);
      }
  }
  // Step t >= 1 holds the K/V of CP rank (cp_rank - t) mod cp, both its chunks. f(row_q, row_k, q_pos) for each block
  // of this step: this rank's query chunk at rows row_q .. row_q + S - 1 meets the held key chunk at rows row_k .. of
  // the holding rank's rows, with q_pos >= S the queries' offset from the keys' first position (an earlier chunk,
  // seen whole). Later key chunks are skipped.
  template <typename F>
  void for_each_ring_block(int t, int B, int T, F&& f) const {
    const int S = T / 2, cp = spec.cp, holder = ((spec.cp_rank - t) % cp + cp) % cp;
    for (int b = 0; b < B; b++)
      for (int qh = 0; qh < 2; qh++)
        for (int kh = 0; kh < 2; kh++) {
          const int qk = chunk_of(qh), kk = chunk_of(holder, kh);
          if (kk > qk) continue;
          f((size_t)b * T + (size_t)qh * S, (size_t)b * T + (size_t)kh * S, (qk - kk) * S);
        }
  }
  // Megatron's p2p CP: cp steps; each passes the K/V it holds to the next rank while its blocks run (the last step
  // has nothing left to pass), and attention_merge folds every block after step 0 into its chunk's (out, lse).
  void ring_attention_forward(LayerActs& a, const Dims& d, int B, int T) {
    Activations& s = acts();
    const int Cl = (int)d.Cl, NHl = (int)d.NHl, S = T / 2, cp = spec.cp;
    const size_t w = 3 * d.Cl, kv_n = d.N * 2 * d.Cl;
    pack_kv(s.ring_msg[0], a.qkv, d);
    for (int t = 0; t < cp; t++) {
      float* held = s.ring_msg[t % 2];
      if (t < cp - 1) cp_comm.ring_start(held, s.ring_msg[(t + 1) % 2], kv_n);
      if (t == 0) {
        be.attention_forward_block(a.atty, s.ring_lse, a.qkv, a.qkv, B, T, T, 0, Cl, NHl);
        lse_layout(a.att_lse, s.ring_lse, B, T, NHl, true);
      } else {
        unpack_kv(s.ring_rows, held, d);
        for_each_ring_block(t, B, T, [&](size_t row_q, size_t row_k, int q_pos) {
          float* out = a.atty + row_q * Cl;
          float* lse = a.att_lse + row_q * NHl;  // [NHl, S] per chunk, as the all-gather path
          be.attention_forward_block(s.ring_out, s.ring_lse, a.qkv + row_q * w, s.ring_rows + row_k * w, 1, S, S, q_pos,
                                     Cl, NHl);
          be.attention_merge(out, lse, s.ring_out, s.ring_lse, 1, S, Cl, NHl);
        });
      }
      if (t < cp - 1) cp_comm.ring_wait();
    }
  }
  // Backward of the ring: the K/V go round again, and with them an accumulator of their dK/dV. A message carries the
  // K/V for the receiver's next step and the accumulator of the K/V it held at this step: the sender finished its
  // share of that one a step earlier, so the transfer overlaps this step's blocks too. Every block runs with the
  // merged out and lse (the softmax over all keys); dQ sums over the blocks, step 0's one causal call writing it
  // first. After the last step the accumulator of the next rank's K/V is complete and goes one hop further, home.
  void ring_attention_backward(float* dqkv, const float* dout, const LayerActs& a, const Dims& d, int B, int T) {
    Activations& s = acts();
    const int Cl = (int)d.Cl, NHl = (int)d.NHl, S = T / 2, cp = spec.cp;
    const size_t w = 3 * d.Cl, kv_n = d.N * 2 * d.Cl;
    pack_kv(s.ring_msg[0], a.qkv, d);
    be.fill_zero(s.ring_dq, sizeof(float) * d.N * w);  // the blocks write only its q third
    for (int t = 0; t < cp; t++) {
      float *held = s.ring_msg[t % 2], *next = s.ring_msg[(t + 1) % 2];
      // [K/V | accumulator]: K/V while a later step needs them, the accumulator from step 1 on
      const size_t lo = t == cp - 1 ? kv_n : 0, hi = t == 0 ? kv_n : 2 * kv_n;
      cp_comm.ring_start(held + lo, next + lo, hi - lo);
      be.fill_zero(s.ring_dkv_rows, sizeof(float) * d.N * w);
      if (t == 0) {
        // dqkv's q third written here; its k and v thirds are overwritten by the accumulator that comes home
        lse_layout(a.att_lse, s.ring_lse, B, T, NHl, false);
        be.attention_backward_block(dqkv, s.ring_dkv_rows, dout, a.qkv, a.qkv, a.atty, s.ring_lse, B, T, T, 0, Cl, NHl);
      } else {
        unpack_kv(s.ring_rows, held, d);
        for_each_ring_block(t, B, T, [&](size_t row_q, size_t row_k, int q_pos) {
          be.attention_backward_block(s.ring_dq + row_q * w, s.ring_dkv_rows + row_k * w, dout + row_q * Cl,
                                      a.qkv + row_q * w, s.ring_rows + row_k * w, a.atty + row_q * Cl,
                                      a.att_lse + row_q * NHl, 1, S, S, q_pos, Cl, NHl);
          be.residual_forward(dqkv + row_q * w, dqkv + row_q * w, s.ring_dq + row_q * w, (size_t)S * w);
        });
      }
      cp_comm.ring_wait();
      float* acc = next + kv_n;  // the accumulator of this step's K/V: received (t >= 1) or started here
      if (t == 0) {
        pack_kv(acc, s.ring_dkv_rows, d);
      } else {
        pack_kv(s.ring_pack, s.ring_dkv_rows, d);
        be.residual_forward(acc, acc, s.ring_pack, kv_n);
      }
    }
    float* home = s.ring_msg[(cp + 1) % 2] + kv_n;
    cp_comm.ring_start(s.ring_msg[cp % 2] + kv_n, home, kv_n);
    cp_comm.ring_wait();
    unpack_kv(dqkv, home, d);
  }

  // Causal attention of this rank's rows. With context parallelism each of its two chunks attends the K/V prefix of
  // the whole sequence that ends with it, so the same keys meet each query as on one rank: around a ring
  // (ring_attention_forward), or here all-gathered (Megatron's all_gather CP: the same bytes, without the overlap).
  void attention_forward(LayerActs& a, const Dims& d, int B, int T) {
    const int Cl = (int)d.Cl, NHl = (int)d.NHl;
    if (spec.cp == 1) {
      be.attention_forward(a.atty, a.att_lse, a.qkv, B, T, Cl, NHl);
      return;
    }
    if (spec.cp_ring) {
      ring_attention_forward(a, d, B, T);
      return;
    }
    gather_sequence_kv(a, d, B, T);
    const int S = T / 2, Tf = T * spec.cp;
    const size_t w = 3 * d.Cl;
    // lse [B, 2, NHl, S]: one block of NHl x S per chunk, at the chunk's row / S (only backward reads it)
    for_each_chunk(B, T, [&](size_t row, int k) {
      be.attention_forward_block(a.atty + row * Cl, a.att_lse + row * NHl, a.qkv + row * w,
                                 acts().kv_seq + row / T * Tf * w, 1, S, (k + 1) * S, k * S, Cl, NHl);
    });
  }
  // dqkv [N, 3Cl] from d(atty) `dout`. With context parallelism the K/V gradients of the whole sequence (every
  // rank's queries add to every earlier key) are reduce-scattered back to the ranks that own the rows.
  void attention_backward(float* dqkv, const float* dout, const LayerActs& a, const Dims& d, int B, int T) {
    const int Cl = (int)d.Cl, NHl = (int)d.NHl;
    if (spec.cp == 1) {
      be.attention_backward(dqkv, dout, a.qkv, a.atty, a.att_lse, B, T, Cl, NHl);
      return;
    }
    if (spec.cp_ring) {
      ring_attention_backward(dqkv, dout, a, d, B, T);
      return;
    }
    Activations& s = acts();
    gather_sequence_kv(a, d, B, T);  // the forward's copy was overwritten by the next layers
    const int S = T / 2, Tf = T * spec.cp;
    const size_t cl = d.Cl, w = 3 * cl;
    be.fill_zero(s.dkv_seq, sizeof(float) * d.N * w * spec.cp);
    // the blocks write dqkv's q third; its k and v thirds are this rank's share of dkv_seq, reduced below
    for_each_chunk(B, T, [&](size_t row, int k) {
      const size_t seq = row / T * Tf * w;  // the sequence's first row in sequence order
      be.attention_backward_block(dqkv + row * w, s.dkv_seq + seq, dout + row * Cl, a.qkv + row * w, s.kv_seq + seq,
                                  a.atty + row * Cl, a.att_lse + row * NHl, 1, S, (k + 1) * S, k * S, Cl, NHl);
    });
    cp_reorder(s.kv_ranks, s.dkv_seq, B, T, cl, false);
    cp_comm.reduce_scatter(s.kv_part, s.kv_ranks, d.N * 2 * cl);
    unpack_kv(dqkv, s.kv_part, d);
  }
  // Token + position embedding of B x T rows; with context parallelism each chunk takes the position rows of where
  // it lies in the sequence. wpe_rows / dwpe_rows may be null (no positional term).
  void embedding_rows(float* out, const int32_t* ids, const float* wte_rows, const float* wpe_rows, int B, int T,
                      int C) {
    if (spec.cp == 1) {
      be.embedding_forward(out, ids, wte_rows, wpe_rows, B, T, C);
      return;
    }
    const int S = T / 2;
    for_each_chunk(B, T, [&](size_t row, int k) {
      be.embedding_forward(out + row * C, ids + row, wte_rows, wpe_rows ? wpe_rows + (size_t)k * S * C : nullptr, 1, S,
                           C);
    });
  }
  void embedding_rows_backward(float* dwte_rows, float* dwpe_rows, const float* dout, const int32_t* ids, int B, int T,
                               int C) {
    if (spec.cp == 1) {
      be.embedding_backward(dwte_rows, dwpe_rows, dout, ids, B, T, C);
      return;
    }
    const int S = T / 2;
    for_each_chunk(B, T, [&](size_t row, int k) {
      be.embedding_backward(dwte_rows, dwpe_rows ? dwpe_rows + (size_t)k * S * C : nullptr, dout + row * C, ids + row,
                            1, S, C);
    });
  }

  // Layer l's forward from its input residual stream into act(l). With through_output = false (a
  // recompute in backward) it stops before the MLP output projection: backward needs neither that
  // product nor res3, which is kept. The kernels and their inputs are those of the first pass, so the
  // recomputed activations are bitwise the same.
  void layer_forward(int l, bool through_output) {
    const Dims d = dims();
    const int B = cur().B, T = cur().T;
    const int N = (int)d.N, R = (int)d.R, C = (int)d.C, Cl = (int)d.Cl, Fl = (int)d.Fl;
    const LayerTensors& w = layers[l];
    LayerActs& a = act(l);
    Activations& s = acts();
    float* res = layer_input(l);
    use_params(layer_unit(l), unit_after_forward(l));
    be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, res, P(w.ln1w), P(w.ln1b), R, C);
    const float* x = gather_rows(a.ln1, s.gathered, d);
    be.matmul_forward(a.qkv, x, P(w.qkvw), P(w.qkvb), N, C, 3 * Cl, WeightLayout::InOut);
    attention_forward(a, d, B, T);
    be.matmul_forward(s.proj, a.atty, P(w.attprojw), row_bias(w.attprojb), N, Cl, C, WeightLayout::InOut);
    be.residual_forward(a.res2, res, reduce_rows(s.proj, s.proj_rows, d), (size_t)R * C);
    be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, P(w.ln2w), P(w.ln2b), R, C);
    x = gather_rows(a.ln2, s.gathered, d);
    be.matmul_forward(a.fch, x, P(w.fcw), P(w.fcb), N, C, Fl, WeightLayout::InOut);
    be.gelu_forward(a.fch_gelu, a.fch, (size_t)N * Fl);
    if (through_output) {
      be.matmul_forward(s.proj, a.fch_gelu, P(w.fcprojw), row_bias(w.fcprojb), N, Fl, C, WeightLayout::InOut);
      be.residual_forward(a.res3, a.res2, reduce_rows(s.proj, s.proj_rows, d), (size_t)R * C);
    }
    done_params(layer_unit(l));
  }

  void embed(const int32_t* inputs, const Dims& d) {
    use_params(emb_unit, unit_after_forward(-1));
    embed_tokens(inputs, d);
    done_params(emb_unit);
  }
  void embed_tokens(const int32_t* inputs, const Dims& d) {
    Activations& s = acts();
    const int B = cur().B, T = cur().T;
    if (spec.tp == 1) {
      be.copy_to_device(s.d_inputs, inputs, sizeof(int32_t) * d.N);
      embedding_rows(s.encoded, s.d_inputs, P(wte), P(wpe), B, T, (int)d.C);
      return;
    }
    // vocab-parallel: each rank looks up its block's rows (others add zero), rank 0 adds the positions, and the
    // sum over the group is the embedding (one non-zero term per row: exact)
    const std::vector<int32_t> local = block_local(inputs, d.N, -1);
    be.copy_to_device(s.d_inputs, local.data(), sizeof(int32_t) * d.N);
    float* out = d.split_rows ? s.gathered : s.encoded;
    embedding_rows(out, s.d_inputs, P(wte), spec.tp_rank == 0 ? P(wpe) : nullptr, B, T, (int)d.C);
    if (d.split_rows) comm.reduce_scatter(s.encoded, out, d.R * d.C);
    else comm.all_reduce(out, d.N * d.C);
  }

  // Vocab-parallel cross-entropy: each rank has the log-sum-exp of its block and, where it holds the target,
  // lse - target logit. The row's lse over all blocks is combined in double in rank order (the same on every
  // rank), and the loss is (lse - lse_holder) + loss_holder. The logits are never gathered.
  void combine_vocab_parallel_loss(const int32_t* targets, const Dims& d) {
    Activations& s = acts();
    const size_t N = d.N, tp = (size_t)spec.tp;
    comm.all_gather(s.lse_all, s.xent_lse, N);
    comm.all_gather(s.losses_all, s.losses, N);
    std::vector<float> lse(tp * N), loss(tp * N), lse_global(N);
    be.copy_to_host(lse.data(), s.lse_all, sizeof(float) * tp * N);
    be.copy_to_host(loss.data(), s.losses_all, sizeof(float) * tp * N);
    std::vector<float>& out = cur().host_losses;
    for (size_t n = 0; n < N; n++) {
      double m = -INFINITY;
      for (size_t r = 0; r < tp; r++) m = std::max(m, (double)lse[r * N + n]);
      double sum = 0.0;
      for (size_t r = 0; r < tp; r++) sum += std::exp((double)lse[r * N + n] - m);
      const double g = m + std::log(sum);
      lse_global[n] = (float)g;
      if (targets[n] < 0) {
        out[n] = 0.0f;
        continue;
      }
      const size_t h = (size_t)targets[n] / vocab_rows;
      out[n] = (float)((g - lse[h * N + n]) + loss[h * N + n]);
    }
    be.copy_to_device(s.xent_lse, lse_global.data(), sizeof(float) * N);  // backward's softmax over all blocks
  }

  // The head at the targeted positions only (set_head_targets_only): a multiple-choice task scores a few continuation
  // tokens per request, and the vocabulary projection and softmax of every other position (most of a small model's
  // forward with a 50k vocabulary) were thrown away. The final-norm rows are gathered with the embedding kernel
  // (a row lookup by index); a forward-only model no longer needs its ids buffer or the projection scratch here.
  float targeted_head_loss(const int32_t* targets, const Dims& d) {
    Activations& s = acts();
    Slot& sl = cur();
    const int N = (int)d.N, C = (int)d.C;
    std::vector<int32_t> rows, kept;
    for (int n = 0; n < N; n++)
      if (targets[n] >= 0) {
        rows.push_back(n);
        kept.push_back(targets[n]);
      }
    const int M = (int)rows.size();
    sl.logits_valid = sl.have_targets = true;
    sl.logit_rows = M;
    sl.n_valid = M;
    sl.host_losses.assign(N, 0.0f);
    if (M == 0) return 0.0f;
    be.copy_to_device(s.d_inputs, rows.data(), sizeof(int32_t) * M);
    be.embedding_forward(s.proj, s.d_inputs, s.lnf, nullptr, 1, M, C);
    be.matmul_forward(s.logits, s.proj, P(wte), nullptr, M, C, (int)d.Vl, WeightLayout::OutIn);
    be.copy_to_device(s.d_targets, kept.data(), sizeof(int32_t) * M);
    be.crossentropy_forward(s.losses, s.xent_lse, s.logits, s.d_targets, M, vocab_real_rows, (int)d.Vl);
    std::vector<float> losses(M);
    be.copy_to_host(losses.data(), s.losses, sizeof(float) * M);
    double sum = 0.0;
    for (int k = 0; k < M; k++) {
      sl.host_losses[rows[k]] = losses[k];
      sum += losses[k];
    }
    return (float)(sum / M);
  }

  float head_forward(const int32_t* targets, const Dims& d) {
    use_params(head_unit, emb_unit);
    use_params(emb_unit, -1);
    const float loss = head_loss(targets, d);
    done_params(emb_unit);
    done_params(head_unit);
    return loss;
  }
  float head_loss(const int32_t* targets, const Dims& d) {
    Activations& s = acts();
    Slot& sl = cur();
    const int N = (int)d.N, R = (int)d.R, C = (int)d.C;
    be.layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, piece_output(), P(lnfw), P(lnfb), R, C);
    if (targets && head_targets_only && !training && spec.tp == 1 && spec.cp == 1 && spec.has_embedding && s.proj)
      return targeted_head_loss(targets, d);
    const float* x = gather_rows(s.lnf, s.gathered, d);
    be.matmul_forward(s.logits, x, P(wte), nullptr, N, C, (int)d.Vl, WeightLayout::OutIn);
    sl.logit_rows = N;
    sl.logits_valid = true;
    sl.have_targets = targets != nullptr;
    sl.n_valid = 0;
    if (!targets) return 0.0f;
    if (spec.tp == 1) {
      be.copy_to_device(s.d_targets, targets, sizeof(int32_t) * N);
    } else {
      const std::vector<int32_t> local = block_local(targets, d.N, (int32_t)d.Vl);
      be.copy_to_device(s.d_targets, local.data(), sizeof(int32_t) * N);
    }
    be.crossentropy_forward(s.losses, s.xent_lse, s.logits, s.d_targets, N, vocab_real_rows, (int)d.Vl);
    sl.host_losses.resize(N);
    if (spec.tp == 1) be.copy_to_host(sl.host_losses.data(), s.losses, sizeof(float) * N);
    else combine_vocab_parallel_loss(targets, d);
    double sum = 0.0;
    for (int i = 0; i < N; i++)
      if (targets[i] >= 0) {
        sum += sl.host_losses[i];
        sl.n_valid++;
      }
    return sl.n_valid ? (float)(sum / sl.n_valid) : 0.0f;
  }

  float forward(const int32_t* inputs, const int32_t* targets, int b, int t) {
    if (b <= 0 || t <= 0) throw RuntimeError("gpt forward: batch and sequence length must be > 0");
    if (spec.cp > 1 && t % 2 != 0)
      throw RuntimeError("gpt forward: context parallelism needs an even number of rows per sequence (two chunks), "
                         "got " +
                         std::to_string(t));
    if ((int64_t)t * spec.cp > cfg.seq_len)
      throw RuntimeError("gpt forward: sequence length " + std::to_string((int64_t)t * spec.cp) +
                         " exceeds the model's seq_len " + std::to_string(cfg.seq_len));
    const int N = b * t;
    if (spec.sequence_parallel && spec.tp > 1 && N % spec.tp != 0)
      throw RuntimeError("gpt forward: sequence parallelism needs batch x sequence (" + std::to_string(N) +
                         ") divisible by tp (" + std::to_string(spec.tp) + ")");
    if (spec.has_embedding) {
      if (!inputs) throw RuntimeError("gpt forward: the first pipeline stage needs input ids");
      check_tokens(inputs, N, t, "input", false);
    }
    if (targets && spec.has_head) check_tokens(targets, N, t, "target", true);
    ensure_activations((size_t)N);
    claim_scratch();
    Slot& sl = cur();
    sl.B = b;
    sl.T = t;
    shared_owner = -1;
    sl.logits_valid = sl.have_targets = false;
    const Dims d = dims();
    if (spec.has_embedding) {
      embed(inputs, d);
      if (forward_layer_hook) forward_layer_hook(-1);
    }
    for (int l = 0; l < (int)layers.size(); l++) {
      layer_forward(l, true);
      if (forward_layer_hook) forward_layer_hook(spec.first_layer + l);
    }
    shared_owner = slot;
    shared_layer = (int)layers.size() - 1;
    sl.forwarded = true;
    return spec.has_head ? head_forward(targets, d) : 0.0f;
  }

  // Before layer l's backward: rebuild what the recompute mode did not keep for it.
  void restore_layer(int l) {
    if (recompute == Recompute::None || (shared_owner == slot && shared_layer == l)) return;
    const Dims d = dims();
    if (recompute == Recompute::Full) layer_forward(l, false);
    else  // Gelu: every other activation of the layer is its own
      be.gelu_forward(act(l).fch_gelu, act(l).fch, d.N * d.Fl);
    shared_owner = slot;
    shared_layer = l;
  }

  // The head's backward: d(loss) -> d(logits) in place -> lm_head -> final LayerNorm, into dres.
  void head_backward(const BackwardOptions& o, const Dims& d, const std::function<void(size_t, size_t)>& notify) {
    use_params(head_unit, emb_unit);
    use_params(emb_unit, unit_after_backward((int)layers.size()));
    head_grads(o, d, notify);
    done_params(emb_unit);
    done_params(head_unit);
  }
  void head_grads(const BackwardOptions& o, const Dims& d, const std::function<void(size_t, size_t)>& notify) {
    Activations& s = acts();
    Slot& sl = cur();
    const int N = (int)d.N, R = (int)d.R, C = (int)d.C;
    const float dloss = sl.n_valid ? o.grad_scale / (float)sl.n_valid : 0.0f;
    be.crossentropy_backward(s.logits, s.logits, s.xent_lse, s.d_targets, dloss, N, vocab_real_rows, (int)d.Vl);
    sl.logits_valid = false;
    const float* x = gather_rows(s.lnf, s.gathered, d);
    be.matmul_backward(s.dtmp, G(wte), nullptr, s.logits, x, P(wte), N, C, (int)d.Vl, WeightLayout::OutIn);
    // without the embedding here the lm_head is wte's only use: its gradient is final
    if (!spec.has_embedding) grads_complete(emb_unit, notify);
    float* dx = reduce_rows(s.dtmp, s.drows, d);
    be.fill_zero(s.dres, sizeof(float) * R * C);
    be.layernorm_backward(s.dres, G(lnfw), G(lnfb), dx, piece_output(), P(lnfw), s.lnf_mean, s.lnf_rstd, R, C);
    sum_norm_grads(lnfw, o, d);
    grads_complete(head_unit, notify);
  }

  void layer_backward(int l, const BackwardOptions& o, const Dims& d) {
    Activations& s = acts();
    const int B = cur().B, T = cur().T;
    const int N = (int)d.N, R = (int)d.R, C = (int)d.C, Cl = (int)d.Cl, Fl = (int)d.Fl;
    const LayerTensors& w = layers[l];
    use_params(layer_unit(l), unit_after_backward(l));
    restore_layer(l);
    LayerActs& a = act(l);
    float *dres = s.dres, *dtmp = s.dtmp, *dbig = s.dbig;
    // MLP: dres holds d(res3), which is also d(res2)'s pass-through part
    const float* dy = gather_rows(dres, s.dfull, d);
    be.matmul_backward(dbig, G(w.fcprojw), G(w.fcprojb), dy, a.fch_gelu, P(w.fcprojw), N, Fl, C, WeightLayout::InOut);
    be.gelu_backward(dbig, a.fch, dbig, (size_t)N * Fl);
    const float* x = gather_rows(a.ln2, s.gathered, d);
    be.matmul_backward(dtmp, G(w.fcw), G(w.fcb), dbig, x, P(w.fcw), N, C, Fl, WeightLayout::InOut);
    be.layernorm_backward(dres, G(w.ln2w), G(w.ln2b), reduce_rows(dtmp, s.drows, d), a.res2, P(w.ln2w), a.ln2_mean,
                          a.ln2_rstd, R, C);
    // attention: dres now holds d(res2)
    dy = gather_rows(dres, s.dfull, d);
    be.matmul_backward(dtmp, G(w.attprojw), G(w.attprojb), dy, a.atty, P(w.attprojw), N, Cl, C, WeightLayout::InOut);
    attention_backward(dbig, dtmp, a, d, B, T);
    x = gather_rows(a.ln1, s.gathered, d);
    be.matmul_backward(dtmp, G(w.qkvw), G(w.qkvb), dbig, x, P(w.qkvw), N, C, 3 * Cl, WeightLayout::InOut);
    be.layernorm_backward(dres, G(w.ln1w), G(w.ln1b), reduce_rows(dtmp, s.drows, d), layer_input(l), P(w.ln1w),
                          a.ln1_mean, a.ln1_rstd, R, C);
    sum_norm_grads(w.ln1w, o, d);
    sum_norm_grads(w.ln2w, o, d);
    done_params(layer_unit(l));
  }

  void backward(const BackwardOptions& o) {
    if (!training) throw RuntimeError("gpt backward: the model was built forward-only (training=false)");
    Slot& sl = cur();
    if (spec.has_head && (!sl.have_targets || !sl.logits_valid))
      throw RuntimeError("gpt backward: needs a preceding forward with targets (and only one backward per forward)");
    if (!spec.has_head && (!sl.forwarded || !o.output_grad))
      throw RuntimeError("gpt backward: a piece without the head needs a forward and the gradient of its output");
    const Dims d = dims();
    Activations& s = acts();
    attach_scratch(s);  // another slot may have grown the scratch since this slot's forward
    claim_scratch();
    auto notify = [&](size_t first, size_t count) {
      if (!o.on_grads_ready) return;
      if (o.sync_before_ready) be.synchronize();
      o.on_grads_ready(first, count);
    };
    if (spec.has_head) head_backward(o, d, notify);
    else be.copy_device(s.dres, o.output_grad, sizeof(float) * d.R * d.C);
    for (int l = (int)layers.size() - 1; l >= 0; l--) {
      layer_backward(l, o, d);
      grads_complete(layer_unit(l), notify);
    }
    if (spec.has_embedding) {
      const float* de = gather_rows(s.dres, s.dfull, d);
      embedding_rows_backward(G(wte), G(wpe), de, s.d_inputs, sl.B, sl.T, (int)d.C);
      grads_complete(emb_unit, notify);
    }
    sl.forwarded = false;
  }
};

Model::Model(const GptConfig& cfg, const kernels::Backend& backend, bool training)
    : impl_(new Impl(cfg, backend, training, ShardSpec{}, TpComm{}, TpComm{})) {}
Model::Model(const GptConfig& cfg, const kernels::Backend& backend, bool training, const ShardSpec& spec, TpComm comm,
             TpComm cp_comm)
    : impl_(new Impl(cfg, backend, training, spec, std::move(comm), std::move(cp_comm))) {}
Model::~Model() { delete impl_; }
const GptConfig& Model::config() const { return impl_->cfg; }
const ShardSpec& Model::shard() const { return impl_->spec; }
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
const float* Model::logits() const { return impl_->slots[impl_->slot].acts.logits; }
const float* Model::position_losses() const { return impl_->slots[impl_->slot].host_losses.data(); }
int Model::logit_rows() const { return impl_->slots[impl_->slot].logit_rows; }
void Model::set_head_targets_only(bool on) { impl_->head_targets_only = on; }
int Model::valid_targets() const { return impl_->slots[impl_->slot].n_valid; }

size_t Model::stream_rows(int B, int T) const { return dims_of(impl_->cfg, impl_->spec, (size_t)B * T).R; }
float* Model::stage_input(int B, int T) {
  impl_->ensure_activations((size_t)B * T);
  return impl_->acts().encoded;
}
const float* Model::stage_output() const { return impl_->piece_output(); }
const float* Model::stage_input_grad() const { return impl_->slots[impl_->slot].acts.dres; }
std::vector<std::pair<size_t, size_t>> Model::units() const { return impl_->units; }
int Model::first_unit(bool backward) const {
  const Impl& m = *impl_;
  if (backward) return m.spec.has_head ? m.head_unit : m.unit_after_backward((int)m.layers.size());
  return m.spec.has_embedding ? m.emb_unit : m.unit_after_forward(-1);
}

void Model::set_unit_storage(UnitStorage storage) {
  Impl& m = *impl_;
  if ((bool)storage.acquire_params != (bool)storage.release_params ||
      (bool)storage.acquire_grads != (bool)storage.grads_done)
    throw RuntimeError("gpt: unit storage needs acquire and release/done together");
  for (int uses : m.unit_uses)
    if (uses) throw RuntimeError("gpt: unit storage changed while a unit is in use");
  if ((m.spec.lent_params && !storage.acquire_params) || (m.training && m.spec.lent_grads && !storage.acquire_grads))
    throw RuntimeError("gpt: a piece built with lent parameters or gradients needs unit storage for them");
  if (storage.acquire_params && m.params) {
    m.be.free(m.params);
    m.params = nullptr;
  }
  if (storage.acquire_grads && m.grads) {
    m.be.free(m.grads);
    m.grads = nullptr;
  }
  m.storage = std::move(storage);
}

void Model::set_activation_slot(int slot) {
  if (slot < 0) throw RuntimeError("gpt: negative activation slot");
  if ((size_t)slot >= impl_->slots.size()) impl_->slots.resize((size_t)slot + 1);
  impl_->slot = slot;
}
int Model::activation_slot() const { return impl_->slot; }

void Model::set_activation_pool(std::shared_ptr<ActivationPool> pool) {
  Impl& m = *impl_;
  for (auto& s : m.slots) m.free_slot(s);
  m.shared_owner = -1;
  m.pool = std::move(pool);
}

void Model::release_activation_slot(int slot) {
  Impl& m = *impl_;
  if (!m.pool || slot < 0 || (size_t)slot >= m.slots.size()) return;
  if (m.shared_owner == slot) m.shared_owner = -1;
  m.free_slot(m.slots[(size_t)slot]);
}

size_t Model::pooled_slot_bytes(int B, int T) const { return impl_->pooled_bytes((size_t)B * T); }
void Model::add_pool_sizes(int B, int T) {
  if (!impl_->pool) throw RuntimeError("gpt: add_pool_sizes without an activation pool");
  impl_->pool->add_slot_size(impl_->pooled_bytes((size_t)B * T));
  impl_->pool->add_scratch_size(impl_->pooled_scratch_bytes((size_t)B * T));
}

ActivationPool::ActivationPool(const kernels::Backend& backend) : be_(backend) {}
void ActivationPool::add_slot_size(size_t bytes) { slot_sizes_.push_back(bytes); }
ActivationPool::~ActivationPool() {
  for (const Block& b : free_) be_.free(b.ptr);
  if (scratch_) be_.free(scratch_);
}
void ActivationPool::add_scratch_size(size_t bytes) { scratch_want_ = std::max(scratch_want_, bytes); }
void* ActivationPool::scratch(size_t bytes) {
  if (!scratch_) {
    scratch_bytes_ = std::max({scratch_want_, bytes, size_t(1)});
    scratch_ = be_.alloc(scratch_bytes_);
    allocated_ += scratch_bytes_;
  } else if (bytes > scratch_bytes_) {
    throw RuntimeError("gpt: a piece asked the activation pool for " + std::to_string(bytes) +
                       " bytes of scratch, more than the " + std::to_string(scratch_bytes_) + " registered");
  }
  return scratch_;
}
bool ActivationPool::claim_scratch(const void* user) {
  const bool other = scratch_user_ != user;
  scratch_user_ = user;
  return other;
}
ActivationPool::Block ActivationPool::take(size_t bytes) {
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->bytes >= bytes && (best == free_.end() || it->bytes < best->bytes)) best = it;
  if (best != free_.end()) {
    Block b = *best;
    free_.erase(best);
    return b;
  }
  size_t size = bytes;
  for (size_t c : slot_sizes_)
    if (c > size && c <= bytes + bytes / 4) size = c;
  Block b{be_.alloc(std::max<size_t>(size, 1)), size, nullptr};
  allocated_ += size;
  count_++;
  return b;
}
void ActivationPool::give(Block block) { free_.push_back(block); }
size_t ActivationPool::allocated_bytes() const { return allocated_; }
size_t ActivationPool::blocks() const { return count_; }

void Model::copy_params_from_host(const float* host) {
  if (!impl_->params) throw RuntimeError("gpt: parameters are in lent unit storage");
  impl_->be.copy_to_device(impl_->params, host, sizeof(float) * impl_->n_params);
}
void Model::copy_params_to_host(float* host) const {
  if (!impl_->params) throw RuntimeError("gpt: parameters are in lent unit storage");
  impl_->be.synchronize();
  impl_->be.copy_to_host(host, impl_->params, sizeof(float) * impl_->n_params);
}
void Model::copy_grads_to_host(float* host) const {
  if (!impl_->grads)
    throw RuntimeError("gpt: no gradients here (a forward-only model, or gradients in lent unit storage)");
  impl_->be.synchronize();
  impl_->be.copy_to_host(host, impl_->grads, sizeof(float) * impl_->n_params);
}
void Model::copy_logits_to_host(float* host) const {
  const Impl::Slot& sl = impl_->slots[impl_->slot];
  if (!sl.logits_valid) throw RuntimeError("gpt: no logits (no forward yet, or backward() overwrote them)");
  impl_->be.synchronize();
  impl_->be.copy_to_host(host, sl.acts.logits, sizeof(float) * (size_t)sl.logit_rows * impl_->vocab_rows);
}

void Model::init(uint64_t seed) {
  Impl& m = *impl_;
  if (!m.params) throw RuntimeError("gpt: parameters are in lent unit storage");
  std::vector<float> host(m.n_params);
  init_values(seed, 0, m.n_params, host.data());
  m.be.copy_to_device(m.params, host.data(), sizeof(float) * m.n_params);
}

void Model::init_values(uint64_t seed, size_t first, size_t count, float* out) const {
  const Impl& m = *impl_;
  if (first > m.n_params || count > m.n_params - first)
    throw RuntimeError("gpt: init_values range past the piece's parameters");
  const size_t last = first + count;
  std::fill_n(out, count, 0.0f);  // biases, and wte's padding rows
  const float stddev = 0.02f;
  const float residual_std = stddev / std::sqrt(2.0f * m.cfg.layers);
  std::vector<FlatRun> runs, clipped;
  for (const auto& t : m.tensors) {
    if (t.offset >= last || t.offset + t.size <= first) continue;
    // This piece's values of the whole tensor as the whole model's init draws it (per-name streams, each value
    // computable alone), so any layout starts from the same model, and a TP rank (or a ZeRO-3 shard) draws only its
    // values.
    size_t n = 1;
    for (int dim : t.full_shape) n *= (size_t)dim;
    const bool is_bias = t.name.ends_with(".bias");
    const bool is_norm = t.name.find("ln_") != std::string::npos;
    if (is_bias) continue;  // zeros
    runs.clear();
    clipped.clear();
    tensor_runs(t, m.spec.tp, m.spec.tp_rank, runs);
    for (const FlatRun& r : runs) {  // each run cut to [first, last), `local` then indexing `out`
      const size_t a = std::max(first, t.offset + r.local), b = std::min(last, t.offset + r.local + r.count);
      if (a < b) clipped.push_back({a - first, r.full + (a - t.offset - r.local), b - a});
    }
    if (is_norm) {
      for (const FlatRun& r : clipped) std::fill_n(out + r.local, r.count, 1.0f);
      continue;
    }
    // wte's padding rows stay zero: they are never looked up and their logits are masked.
    const size_t limit = t.name == "wte" ? (size_t)m.cfg.vocab_real * m.cfg.hidden : n;
    const float std_t = t.name.ends_with("c_proj.weight") ? residual_std : stddev;
#pragma omp parallel for schedule(dynamic, 16) if (clipped.size() >= 64)
    for (size_t k = 0; k < clipped.size(); ++k) {
      const FlatRun& r = clipped[k];
      fill_normal_range(out + r.local, r.full, r.count, limit, std_t, seed, t.name);
    }
  }
}

float Model::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  float loss = impl_->forward(inputs, targets, B, T);
  if (impl_->forward_layer_hook && impl_->spec.has_head) impl_->forward_layer_hook(impl_->cfg.layers);
  return loss;
}

void Model::set_forward_layer_hook(std::function<void(int layer)> hook) { impl_->forward_layer_hook = std::move(hook); }

void Model::backward(const std::function<void(size_t, size_t)>& on_grads_ready, float grad_scale) {
  BackwardOptions o;
  o.on_grads_ready = on_grads_ready;
  o.grad_scale = grad_scale;
  impl_->backward(o);
}
void Model::backward(const BackwardOptions& options) { impl_->backward(options); }

void Model::zero_grad() {
  if (impl_->grads) impl_->be.fill_zero(impl_->grads, sizeof(float) * impl_->n_params);
}

void Model::set_recompute(Recompute mode) {
  if (impl_->recompute == mode) return;
  for (auto& s : impl_->slots) impl_->free_slot(s);  // reallocated with the new layout at the next forward
  impl_->free_slot(impl_->scratch);
  impl_->shared_owner = -1;
  impl_->recompute = mode;
}
Recompute Model::recompute() const { return impl_->recompute; }
void Model::set_recompute_gelu(bool on) { set_recompute(on ? Recompute::Gelu : Recompute::None); }
bool Model::recompute_gelu() const { return impl_->recompute != Recompute::None; }
size_t Model::activation_bytes() const {
  size_t total = 0;
  for (const auto& s : impl_->slots) total += s.owned_bytes;
  total += impl_->scratch.owned_bytes;
  return total;
}

std::vector<std::pair<size_t, size_t>> Model::grad_ready_ranges() const {
  const Impl& m = *impl_;
  std::vector<std::pair<size_t, size_t>> r;
  if (m.spec.has_head) {
    if (!m.spec.has_embedding) r.emplace_back(m.tensors[m.wte].offset, m.tensors[m.wte].size);
    r.emplace_back(m.tensors[m.lnfw].offset, m.tensors[m.lnfw].size + m.tensors[m.lnfb].size);
  }
  for (int l = (int)m.layers.size() - 1; l >= 0; l--) r.emplace_back(m.layers[l].first, m.layers[l].count);
  if (m.spec.has_embedding) r.emplace_back(0, m.tensors[m.wte].size + m.tensors[m.wpe].size);
  return r;
}

}  // namespace cairn::gpt
