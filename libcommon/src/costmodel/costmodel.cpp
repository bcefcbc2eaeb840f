// Analytical cost model: parameters, FLOPs, memory and step time of a parallel plan (docs/cost-model.md).
#include "cairn/costmodel.h"

#include <algorithm>
#include <cmath>

#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/log.h"

namespace cairn::costmodel {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

// ------------------------------------------------------------------ model

int64_t default_ffn_hidden(Arch arch, int64_t hidden) {
  if (arch == Arch::Gpt) return 4 * hidden;
  // Llama: int(2/3 * 4h) rounded up to a multiple of 256 (multiple_of in Meta's reference code).
  int64_t f = (8 * hidden) / 3;
  return ceil_div(f, 256) * 256;
}

void validate_model(const ModelSpec& m) {
  if (m.hidden % m.heads != 0)
    throw UsageError(strprintf("[model] hidden = %lld is not divisible by heads = %lld", (long long)m.hidden,
                               (long long)m.heads));
  if (m.kv_heads <= 0 || m.heads % m.kv_heads != 0)
    throw UsageError(strprintf("[model] heads = %lld is not divisible by kv_heads = %lld", (long long)m.heads,
                               (long long)m.kv_heads));
  if (m.vocab <= 0)
    throw UsageError("[model] vocab is 0: the cost model needs the vocabulary size (set model.vocab)");
  if (m.layers <= 0 || m.seq_len <= 0 || m.ffn_hidden <= 0)
    throw UsageError("[model] layers, seq_len and ffn_hidden must be positive");
}

ParamCounts parameter_counts(const ModelSpec& m) {
  ParamCounts p;
  const int64_t h = m.hidden, f = m.ffn_hidden, V = m.vocab, kv = m.kv_heads * m.head_dim();
  if (m.arch == Arch::Gpt) {
    p.embedding = V * h + m.seq_len * h;               // token + learned positions
    p.per_layer_norms = 4 * h;                          // two LayerNorms, weight + bias
    p.per_layer = h * (h + 2 * kv) + (h + 2 * kv)       // QKV with bias
                  + h * h + h                           // attention output projection
                  + h * f + f + f * h + h               // MLP with biases
                  + p.per_layer_norms;
    p.final_norm = 2 * h;
  } else {
    p.embedding = V * h;                                // RoPE: no position parameters
    p.per_layer_norms = 2 * h;                          // two RMSNorm weights
    p.per_layer = h * (h + 2 * kv) + h * h + 3 * h * f + p.per_layer_norms;  // no biases, SwiGLU
    p.final_norm = h;
  }
  p.head = m.tied_embeddings ? 0 : V * h;
  p.total = p.embedding + m.layers * p.per_layer + p.final_norm + p.head;
  return p;
}

FlopsPerToken flops_per_token(const ModelSpec& m) {
  const double h = double(m.hidden), f = double(m.ffn_hidden), s = double(m.seq_len), V = double(m.vocab);
  const double kv = double(m.kv_heads * m.head_dim());
  FlopsPerToken r;
  const double qkv = 2 * h * (h + 2 * kv);
  r.attention_core = 2 * s * h + 2 * s * h;  // QK^T over all s keys, then scores x V
  const double proj = 2 * h * h;
  const double mlp = (m.arch == Arch::Gpt ? 2.0 : 3.0) * 2 * h * f;
  r.layer_forward = qkv + r.attention_core + proj + mlp;
  r.head_forward = 2 * h * V;
  r.forward = double(m.layers) * r.layer_forward + r.head_forward;
  r.model_train = 3 * r.forward;
  return r;
}

double narayanan_flops_per_token(const ModelSpec& m) {
  const double l = double(m.layers), h = double(m.hidden), s = double(m.seq_len), V = double(m.vocab);
  return 72 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

// ------------------------------------------------------------------ cluster primitives

double busbw_factor(Collective c, int n) {
  if (n <= 1) return 0;
  switch (c) {
    case Collective::AllReduce: return 2.0 * (n - 1) / n;
    case Collective::AllGather:
    case Collective::ReduceScatter: return double(n - 1) / n;
    default: return 1.0;
  }
}

double gemm_efficiency(const Cluster& c, double flops) {
  const auto& xs = c.gemm_flops;
  const auto& ys = c.gemm_efficiency;
  if (xs.empty()) {
    // Default curve: max efficiency with a fixed per-kernel overhead t0:
    // time = flops / (peak * e_max) + t0  ->  efficiency = e_max * t / (t + t0).
    const double t = flops / (c.peak_tflops * 1e12 * c.gemm_max_efficiency);
    const double t0 = c.kernel_overhead_us * 1e-6;
    return c.gemm_max_efficiency * t / (t + t0);
  }
  if (flops <= xs.front()) return std::max(1e-4, ys.front() * flops / xs.front());  // overhead-bound below the table
  if (flops >= xs.back()) return ys.back();
  auto it = std::upper_bound(xs.begin(), xs.end(), flops);
  const size_t i = size_t(it - xs.begin());
  const double x0 = std::log(xs[i - 1]), x1 = std::log(xs[i]);
  const double w = (std::log(flops) - x0) / (x1 - x0);
  return ys[i - 1] + w * (ys[i] - ys[i - 1]);
}

double gemm_time(const Cluster& c, double m, double n, double k, double count, double elem_bytes) {
  if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return 0;
  const double flops = 2 * m * n * k * count;
  const double compute = flops / (c.peak_tflops * 1e12 * gemm_efficiency(c, flops));
  const double bytes = (m * k + k * n + m * n) * count * elem_bytes;
  const double memory = bytes / (c.hbm_gbps * 1e9 * c.hbm_efficiency);
  return std::max(compute, memory);
}

double collective_time(const Cluster& c, Collective coll, double bytes, int n, int per_node) {
  if (n <= 1 || bytes <= 0) return 0;
  per_node = std::max(1, std::min(per_node, n));
  const bool spans = n > per_node;
  const Tier& tier = spans ? c.inter : c.intra;
  const Tier::Fit* fit = &tier.fitted[static_cast<int>(coll)];
  if (!fit->valid) {
    // Bus bandwidth is collective-independent to first order: borrow another fitted collective.
    for (const auto& f : tier.fitted)
      if (f.valid) { fit = &f; break; }
  }
  const double intra_busbw = c.intra.fitted[0].valid ? c.intra.fitted[0].busbw_gbps
                                                     : c.intra.bandwidth_gbps * c.intra.efficiency;
  double busbw, alpha;
  if (fit->valid) {
    busbw = fit->busbw_gbps;
    if (spans) {
      // The fit was measured with fitted_ranks_per_node members per node; a group with per_node
      // members drives that many NICs, but never faster than the intra-node links feeding them.
      const int rpn = std::max(1, tier.fitted_ranks_per_node);
      busbw = std::min(busbw * double(per_node) / rpn, std::max(busbw, intra_busbw));
    }
    // NCCL's latency grows with the log of the ranks (trees, multi-ring); scale from the fitted size.
    const double lr = std::log2(double(std::max(2, fit->ranks)));
    alpha = fit->alpha_us * 1e-6 * std::max(1.0, std::log2(double(n)) / lr);
  } else {
    busbw = tier.bandwidth_gbps * tier.efficiency;
    if (spans) busbw = std::min(busbw * per_node, intra_busbw);
    double steps;
    if (coll == Collective::AllReduce)
      steps = std::min(2.0 * (n - 1), 2.0 * std::ceil(std::log2(double(n))));  // ring vs tree latency
    else if (coll == Collective::SendRecv)
      steps = 1;
    else
      steps = n - 1;
    alpha = tier.latency_us * 1e-6 * steps;
  }
  return alpha + bytes * busbw_factor(coll, n) / (busbw * 1e9);
}

// ------------------------------------------------------------------ plan helpers

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::None;
  if (s == "selective" || s == "gelu") return Recompute::Selective;
  if (s == "full") return Recompute::Full;
  throw UsageError("recompute must be none, selective or full, not \"" + s + "\"");
}

std::string plan_string(const Plan& p) {
  return strprintf("dp=%d,tp=%d,pp=%d,v=%d,mb=%d,zero=%d,recompute=%s,sp=%s", p.dp, p.tp, p.pp, p.v, p.mb, p.zero,
                   recompute_name(p.recompute), p.sp ? "on" : "off");
}

const char* reject_name(Reject r) {
  switch (r) {
    case Reject::kOk: return "ok";
    case Reject::kWorld: return "world";
    case Reject::kHeads: return "heads";
    case Reject::kKvHeads: return "kv_heads";
    case Reject::kLayers: return "layers";
    case Reject::kBatch: return "batch";
    case Reject::kMicroBatch: return "micro_batch";
    case Reject::kInterleave: return "interleave";
    case Reject::kSp: return "sp";
    case Reject::kZeroPp: return "zero_pp";
    case Reject::kMemory: return "memory";
  }
  return "?";
}

double state_bytes_per_param(const Assumptions& a, int zero, int dp) {
  const double d = double(std::max(1, dp));
  const double w = a.weight_bytes / (zero >= 3 ? d : 1.0);
  const double g = a.grad_bytes / (zero >= 2 ? d : 1.0);
  const double o = a.optimizer_bytes / (zero >= 1 ? d : 1.0);
  return w + g + o;
}

// Stored activation bytes of one layer for one micro-batch, per TP rank. Korthikanti et al. 2022
// section 4, term by term so that GQA (smaller K, V) and SwiGLU (three f-wide tensors) come out right.
double activation_bytes_per_layer(const ModelSpec& m, const Assumptions& a, int64_t b, int tp, bool sp,
                                  Recompute r) {
  const double s = double(m.seq_len), h = double(m.hidden), f = double(m.ffn_hidden);
  const double heads = double(m.heads), kvr = std::max<double>(double(m.kv_heads), tp) / double(m.heads);
  const double e = a.activation_bytes, t = double(tp);
  const bool dropout = a.dropout && m.arch == Arch::Gpt;
  const double sbh = s * double(b) * h;
  if (r == Recompute::Full) return e * sbh / (sp ? t : 1.0);  // only the layer input (2sbh in bf16)
  // Parts that TP does not split (replicated on every TP rank unless SP shards them along s):
  // LayerNorm inputs (2 x e sbh), QKV input (e sbh), MLP input (e sbh), dropout masks (1 byte each).
  double replicated = 2 * e * sbh + e * sbh + e * sbh + (dropout ? 2 * sbh : 0.0);
  // Parts split by TP: Q, K, V (K, V shrink with GQA), attention-projection input, MLP inner tensors.
  double split = e * sbh * (1 + 2 * kvr)  // Q, K, V
                 + e * sbh;               // softmax x V output = projection input
  if (m.arch == Arch::Gpt)
    split += 2 * e * s * double(b) * f;  // GeLU input and output (fc2 input)
  else
    split += 3 * e * s * double(b) * f;  // gate, up, and silu(gate)*up (down-projection input)
  // Attention scores: softmax output (e), dropout mask (1) and dropout output (e) per score.
  double scores = 0;
  if (!a.flash_attention && r != Recompute::Selective)
    scores = heads * s * s * double(b) * (dropout ? (2 * e + 1) : e);
  return replicated / (sp ? t : 1.0) + (split + scores) / t;
}

Plan plan_from_parallel(const Config& cfg, int world) {
  Plan p;
  p.tp = int(cfg.get_int("parallel.tp"));
  p.pp = int(cfg.get_int("parallel.pp"));
  p.v = int(cfg.get_int("parallel.v"));
  p.mb = int(cfg.get_int("parallel.mb"));
  if (p.mb <= 0) p.mb = 1;
  p.zero = int(cfg.get_int("parallel.zero"));
  p.recompute = parse_recompute(cfg.get_string("parallel.recompute"));
  p.sp = cfg.get_string("parallel.sp") == "on";
  p.dp = int(cfg.get_int("parallel.dp"));
  if (p.dp <= 0) p.dp = std::max(1, world / std::max(1, p.tp * p.pp));
  return p;
}

Assumptions assumptions_from_config(const Config& cfg) {
  Assumptions a;
  a.weight_bytes = cfg.get_float("plan.weight_bytes");
  a.grad_bytes = cfg.get_float("plan.grad_bytes");
  a.optimizer_bytes = cfg.get_float("plan.optimizer_bytes");
  a.activation_bytes = cfg.get_float("plan.activation_bytes");
  a.flash_attention = cfg.get_bool("plan.flash_attention");
  a.dp_overlap = cfg.get_bool("plan.dp_overlap");
  a.pp_scatter_gather = cfg.get_bool("plan.pp_scatter_gather");
  a.memory_headroom = cfg.get_float("plan.memory_headroom");
  return a;
}

// ------------------------------------------------------------------ evaluation

namespace {

// Per-micro-batch times of one transformer layer on one TP rank.
struct LayerTimes {
  double f_gemm = 0, f_mem = 0, f_tp = 0;  // forward
  double b_gemm = 0, b_mem = 0, b_tp = 0;  // backward (without recompute)
  double r_gemm = 0, r_mem = 0, r_tp = 0;  // recompute added to backward
};

// Bytes per token of the memory-bound (elementwise) kernels of one layer's forward, split into the
// part replicated across TP ranks (on h-wide tensors; SP shards it) and the part split by TP.
struct ElementwiseBytes {
  double replicated = 0, split = 0, scores = 0;
  int kernels = 0;
};

ElementwiseBytes layer_elementwise(const ModelSpec& m, const Assumptions& a) {
  const double h = double(m.hidden), f = double(m.ffn_hidden), e = a.activation_bytes;
  const double kv = double(m.kv_heads * m.head_dim());
  const bool dropout = a.dropout && m.arch == Arch::Gpt;
  ElementwiseBytes r;
  // Two norms (read h, write h) and two residual adds (read 2h, write h; with dropout + 1-byte mask).
  r.replicated = 2 * (2 * h * e) + 2 * (3 * h * e + (dropout ? h : 0.0));
  r.kernels = 4;
  if (m.arch == Arch::Gpt) {
    r.split = 2 * f * e + (h + 2 * kv) * e * 2;  // bias+GeLU (read f, write f); QKV bias / split heads
    r.kernels += 2;
  } else {
    r.split = 3 * f * e + 2 * (h + kv) * e;  // SwiGLU (read 2f, write f); RoPE on Q and K
    r.kernels += 2;
  }
  // Softmax over s keys per head (read + write), with attention dropout (read, write, 1-byte mask).
  if (!a.flash_attention) {
    r.scores = double(m.heads) * double(m.seq_len) * (2 * e + (dropout ? 2 * e + 1 : 0.0));
    r.kernels += dropout ? 2 : 1;
  }
  return r;
}

LayerTimes layer_times(const ModelSpec& m, const Cluster& c, const Assumptions& a, int64_t b, int tp, bool sp,
                       Recompute rc) {
  LayerTimes L;
  const double T = double(b) * double(m.seq_len), h = double(m.hidden), f = double(m.ffn_hidden);
  const double s = double(m.seq_len), d = double(m.head_dim());
  // With tp > kv_heads Megatron replicates KV heads: each rank keeps at least one.
  const double t = double(tp), kv = std::max(double(m.kv_heads), t) * d, e = a.activation_bytes;
  const double heads_local = double(m.heads) / t;
  const double up = (m.arch == Arch::Gpt ? 1.0 : 2.0) * f / t;  // SwiGLU gate+up fused into one GEMM
  // Weight GEMMs (M x N x K): forward, then backward dgrad (M x K x N) and wgrad (K x N x M).
  const double w[4][3] = {{T, (h + 2 * kv) / t, h}, {T, h, h / t}, {T, up, h}, {T, h, f / t}};
  double fw = 0, bw = 0;
  for (const auto& g : w) {
    fw += gemm_time(c, g[0], g[1], g[2], 1, e);
    bw += gemm_time(c, g[0], g[2], g[1], 1, e) + gemm_time(c, g[2], g[1], g[0], 1, e);
  }
  // Attention core: batched over b x local heads, QK^T (s x s x d) and scores x V (s x d x s).
  double core_f, core_b;
  if (a.flash_attention) {
    // Fused kernel: FLOPs of both products, traffic of Q, K, V, O only.
    const double flops = 4 * s * s * d * double(b) * heads_local;
    const double eff = gemm_efficiency(c, flops);
    const double bytes = T * (2 * h + 2 * kv) / t * e;
    core_f = std::max(flops / (c.peak_tflops * 1e12 * eff), bytes / (c.hbm_gbps * 1e9 * c.hbm_efficiency));
    core_b = 2.5 * core_f;  // backward recomputes the scores: 5 products instead of 2
  } else {
    const double cnt = double(b) * heads_local;
    core_f = gemm_time(c, s, s, d, cnt, e) + gemm_time(c, s, d, s, cnt, e);
    core_b = 2 * core_f;
  }
  L.f_gemm = fw + core_f;
  L.b_gemm = bw + core_b;
  // Elementwise work: replicated bytes are split by TP only with SP; backward moves about twice the bytes.
  const ElementwiseBytes eb = layer_elementwise(m, a);
  const double hbm = c.hbm_gbps * 1e9 * c.hbm_efficiency, k0 = c.kernel_overhead_us * 1e-6;
  const double rep = eb.replicated * T / (sp ? t : 1.0), split = eb.split * T / t, scores = eb.scores * T / t;
  L.f_mem = (rep + split + scores) / hbm + eb.kernels * k0;
  L.b_mem = 2 * (rep + split + scores) / hbm + 2 * eb.kernels * k0;
  // Tensor parallel: 2 all-reduces forward, 2 backward of T x h activations (SP: all-gather +
  // reduce-scatter pairs, the same bus bytes). Placed on the tier the TP group spans.
  if (tp > 1) {
    const double bytes = T * h * e;
    const int per_node = (tp <= c.gpus_per_node && c.gpus_per_node % tp == 0) ? tp : std::min(tp, c.gpus_per_node);
    double one;
    if (sp)
      one = collective_time(c, Collective::AllGather, bytes, tp, per_node) +
            collective_time(c, Collective::ReduceScatter, bytes, tp, per_node);
    else
      one = collective_time(c, Collective::AllReduce, bytes, tp, per_node);
    L.f_tp = 2 * one;
    L.b_tp = 2 * one;
  }
  if (rc == Recompute::Full) {
    L.r_gemm = L.f_gemm;
    L.r_mem = L.f_mem;
    L.r_tp = L.f_tp;
  } else if (rc == Recompute::Selective) {
    L.r_gemm = core_f;
    L.r_mem = scores / hbm + k0;
  }
  return L;
}

// Stage layout: how many layers the first, last and largest stage hold. Extra layers of an uneven
// split go to middle stages first (the first holds the embedding, the last the head and loss).
struct Stages {
  int first = 0, last = 0, max = 0, middle_max = 0;
};

Stages stage_layers(int64_t layers, int pp) {
  Stages s;
  if (pp == 1) {
    s.first = s.last = s.max = int(layers);
    return s;
  }
  const int base = int(layers / pp), rem = int(layers % pp);
  s.middle_max = pp > 2 ? base + (rem > 0 ? 1 : 0) : 0;
  s.first = base + (rem > pp - 2 ? 1 : 0);
  s.last = base;
  s.max = std::max({s.first, s.last, s.middle_max});
  return s;
}

}  // namespace

Evaluation evaluate(const ModelSpec& m, const Cluster& c, const Plan& p, int64_t global_batch, const Assumptions& a,
                    bool fill_reason) {
  Evaluation ev;
  ev.plan = p;
  auto reject = [&](Reject r, const std::string& why) {
    ev.reject = r;
    if (fill_reason) ev.reason = why;
    return ev;
  };
  const int world = c.world();
  const int64_t gpus = int64_t(p.dp) * p.tp * p.pp;
  if (p.dp < 1 || p.tp < 1 || p.pp < 1 || p.v < 1 || p.mb < 1 || p.zero < 0 || p.zero > 3)
    return reject(Reject::kWorld, fill_reason ? "every degree must be >= 1 and zero in 0..3: " + plan_string(p) : "");
  if (m.heads % p.tp != 0)
    return reject(Reject::kHeads, fill_reason ? strprintf("heads = %lld is not divisible by tp = %d",
                                                         (long long)m.heads, p.tp) : "");
  if (m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0)
    return reject(Reject::kKvHeads, fill_reason ? strprintf("kv_heads = %lld cannot be split over tp = %d",
                                                           (long long)m.kv_heads, p.tp) : "");
  if (gpus != world || p.dp < 1 || p.tp < 1 || p.pp < 1 || p.v < 1 || p.mb < 1)
    return reject(Reject::kWorld, fill_reason ? strprintf("dp*tp*pp = %lld but the cluster has %d devices",
                                                         (long long)gpus, world) : "");
  if (p.pp > m.layers || (p.v > 1 && m.layers % (int64_t(p.pp) * p.v) != 0))
    return reject(p.v > 1 ? Reject::kInterleave : Reject::kLayers,
                  fill_reason ? strprintf("%lld layers cannot be split into pp*v = %d*%d stages", (long long)m.layers,
                                          p.pp, p.v) : "");
  if (p.v > 1 && p.pp == 1)
    return reject(Reject::kInterleave, "interleaving (v > 1) needs pipeline parallelism (pp > 1)");
  if (global_batch % (int64_t(p.dp) * p.mb) != 0)
    return reject(Reject::kBatch,
                  fill_reason ? strprintf("global batch %lld is not a multiple of dp*mb = %d*%d",
                                          (long long)global_batch, p.dp, p.mb) : "");
  const int64_t micro = global_batch / (int64_t(p.dp) * p.mb);
  if (p.v > 1 && micro % p.pp != 0)
    return reject(Reject::kInterleave,
                  fill_reason ? strprintf("interleaved schedule needs micro-batches (%lld) divisible by pp = %d",
                                          (long long)micro, p.pp) : "");
  if (p.sp && p.tp == 1) return reject(Reject::kSp, "sequence parallelism needs tp > 1");
  if (p.sp && m.seq_len % p.tp != 0)
    return reject(Reject::kSp, fill_reason ? strprintf("seq_len = %lld is not divisible by tp = %d",
                                                      (long long)m.seq_len, p.tp) : "");
  if (p.zero >= 2 && p.pp > 1)
    return reject(Reject::kZeroPp, "ZeRO-2/3 shard gradients every micro-batch and are not combined with "
                                   "pipeline parallelism (DeepSpeed, Megatron)");

  Breakdown& B = ev.b;
  B.microbatches = int(micro);
  const ParamCounts pc = parameter_counts(m);
  const FlopsPerToken fl = flops_per_token(m);
  const double t = double(p.tp), e = a.activation_bytes;
  const double T = double(p.mb) * double(m.seq_len);  // tokens per micro-batch
  const double hbm = c.hbm_gbps * 1e9 * c.hbm_efficiency, k0 = c.kernel_overhead_us * 1e-6;
  const int gpn = c.gpus_per_node;

  // Tiers: ranks ordered tp (fastest), dp, pp as in Megatron.
  const bool tp_spans = p.tp > gpn || gpn % p.tp != 0;
  const int dp_per_node = p.tp >= gpn ? 1 : std::max(1, std::min(p.dp, gpn / p.tp));
  const bool dp_spans = int64_t(p.tp) * p.dp > gpn;
  const bool pp_spans = int64_t(p.tp) * p.dp * p.pp > gpn;
  B.tp_tier = p.tp == 1 ? "-" : (tp_spans ? "inter" : "intra");
  B.dp_tier = p.dp == 1 ? "-" : (dp_spans ? "inter" : "intra");
  B.pp_tier = p.pp == 1 ? "-" : (pp_spans ? "inter" : "intra");

  // ---- per-micro-batch stage times
  const LayerTimes L = layer_times(m, c, a, p.mb, p.tp, p.sp, p.recompute);
  const double layer_f = L.f_gemm + L.f_mem + L.f_tp;
  const double layer_b = L.b_gemm + L.b_mem + L.b_tp + L.r_gemm + L.r_mem + L.r_tp;
  const Stages st = stage_layers(m.layers, p.pp);
  B.layers_max_stage = st.max;
  // Embedding lookup (first stage) and head + cross-entropy (last stage).
  const double V = double(m.vocab), h = double(m.hidden);
  const double embed_f = T * h * e * 2 / hbm + k0, embed_b = 2 * embed_f;
  const double head_f_gemm = gemm_time(c, T, V / t, h, 1, e);
  const double head_b_gemm = gemm_time(c, T, h, V / t, 1, e) + gemm_time(c, h, V / t, T, 1, e);
  // Cross-entropy in fp32 over T x V/t logits: read logits, write/read fp32 softmax, write grads.
  const double ce_bytes = T * V / t * (e + 4 + 4 + e);
  const double head_f = head_f_gemm + ce_bytes / 2 / hbm + 2 * k0 +
                        (p.tp > 1 ? 2 * collective_time(c, Collective::AllReduce, T * 4, p.tp, std::min(p.tp, gpn)) : 0);
  const double head_b = head_b_gemm + ce_bytes / 2 / hbm + 2 * k0;
  // Pipeline p2p: Megatron sends T x h / tp per boundary (scatter-gather or SP shards) each way.
  double p2p = 0;
  if (p.pp > 1) {
    const double bytes = T * h * e / (a.pp_scatter_gather || p.sp ? t : 1.0);
    p2p = collective_time(c, Collective::SendRecv, bytes, 2, pp_spans ? 1 : 2);
  }
  // Stage time per micro-batch (forward + backward), each stage sends/receives once each way per chunk.
  const double p2p_stage = p.pp > 1 ? 2.0 * p.v * p2p : 0.0;
  auto stage_time = [&](int layers, bool first, bool last) {
    return layers * (layer_f + layer_b) + (first ? embed_f + embed_b : 0) + (last ? head_f + head_b : 0) + p2p_stage;
  };
  const double t_first = stage_time(st.first, true, p.pp == 1);
  const double t_last = p.pp == 1 ? t_first : stage_time(st.last, false, true);
  const double t_mid = p.pp > 2 ? stage_time(st.middle_max, false, false) : 0.0;
  const double t_max = std::max({t_first, t_last, t_mid});
  const double t_sum = p.pp == 1 ? t_first : t_first + t_last + (p.pp - 2) * t_mid;
  const double mb_count = double(micro);
  double t_pipe;
  if (p.v == 1)
    t_pipe = (mb_count - 1) * t_max + t_sum;  // first micro-batch crosses every stage, the rest follow the slowest
  else
    t_pipe = mb_count * t_max + (p.pp - 1) * t_max / p.v;  // Narayanan 2021: bubble (p-1)/(v m)
  // Breakdown of the slowest stage's busy time.
  const int lay = st.max;
  const bool max_is_last = t_last >= t_first && t_last >= t_mid;
  const bool max_is_first = !max_is_last && t_first >= t_mid;
  const int lay_crit = max_is_last ? st.last : (max_is_first ? st.first : st.middle_max);
  (void)lay;
  B.gemm = mb_count * (lay_crit * (L.f_gemm + L.b_gemm + L.r_gemm) + (max_is_last ? head_f_gemm + head_b_gemm : 0));
  B.memory_bound = mb_count * (lay_crit * (L.f_mem + L.b_mem + L.r_mem) + (max_is_last ? ce_bytes / hbm : 0) +
                               (max_is_first ? embed_f + embed_b : 0));
  B.recompute = mb_count * lay_crit * (L.r_gemm + L.r_mem + L.r_tp);
  B.tp_comm = mb_count * lay_crit * (L.f_tp + L.b_tp + L.r_tp);
  B.pp_p2p = mb_count * p2p_stage;
  B.bubble = t_pipe - mb_count * t_max;
  B.stage_forward = lay_crit * layer_f;
  B.stage_backward = lay_crit * layer_b;

  // ---- parameters per GPU (largest stage, per TP rank)
  const double layer_params_tp = double(pc.per_layer - pc.per_layer_norms) / t + double(pc.per_layer_norms);
  const double embed_tp = double(m.vocab * m.hidden) / t + double(pc.embedding - m.vocab * m.hidden);
  const double head_tp = (m.tied_embeddings ? (p.pp > 1 ? double(m.vocab * m.hidden) / t : 0.0)
                                            : double(pc.head) / t) + double(pc.final_norm);
  const double params_first = st.first * layer_params_tp + embed_tp + (p.pp == 1 ? head_tp : 0.0);
  const double params_last = p.pp == 1 ? params_first : st.last * layer_params_tp + head_tp;
  const double params_mid = p.pp > 2 ? st.middle_max * layer_params_tp : 0.0;
  const double params_max = std::max({params_first, params_last, params_mid});
  B.stage_params = int64_t(params_max);

  // ---- data parallel / ZeRO communication
  double dp_total = 0, dp_exposed = 0;
  if (p.dp > 1) {
    const double P = params_max;
    auto coll = [&](Collective k, double bytes) { return collective_time(c, k, bytes, p.dp, dp_per_node); };
    const double grad_b = P * a.grad_bytes, w_b = P * a.weight_bytes;
    // Only the last bucket (about one layer) cannot overlap with the backward that produced it.
    const double layers_here = std::max(1, lay_crit);
    auto exposed = [&](double comm, double window) {
      if (!a.dp_overlap) return comm;
      return std::max(comm - window * (layers_here - 1) / layers_here, comm / layers_here);
    };
    const double bwd_mb = lay_crit * layer_b, fwd_mb = lay_crit * layer_f;
    if (p.zero == 0) {
      dp_total = coll(Collective::AllReduce, grad_b);
      dp_exposed = exposed(dp_total, bwd_mb);
    } else if (p.zero == 1) {
      const double rs = coll(Collective::ReduceScatter, grad_b), ag = coll(Collective::AllGather, w_b);
      dp_total = rs + ag;
      dp_exposed = exposed(rs, bwd_mb) + exposed(ag, fwd_mb);  // param all-gather overlaps the next forward
    } else if (p.zero == 2) {
      const double rs = coll(Collective::ReduceScatter, grad_b), ag = coll(Collective::AllGather, w_b);
      dp_total = mb_count * rs + ag;
      dp_exposed = mb_count * exposed(rs, bwd_mb) + exposed(ag, fwd_mb);
    } else {
      const double rs = coll(Collective::ReduceScatter, grad_b), ag = coll(Collective::AllGather, w_b);
      dp_total = mb_count * (rs + 2 * ag);
      dp_exposed = mb_count * (exposed(ag, fwd_mb) + exposed(ag + rs, bwd_mb));
    }
  }
  B.dp_comm = dp_total;
  B.dp_exposed = dp_exposed;
  // Optimizer: streams grads, optimizer states (read + write) and the new 16-bit weights.
  const double local_params = params_max / (p.zero >= 1 ? double(p.dp) : 1.0);
  B.optimizer = local_params * (2 * a.grad_bytes + 2 * a.optimizer_bytes + a.weight_bytes) / hbm + 4 * k0;

  ev.step_time_s = t_pipe + dp_exposed + B.optimizer;

  // ---- memory per GPU
  const double d = double(p.dp);
  auto states = [&](double P) {
    return std::array<double, 3>{P * a.weight_bytes / (p.zero >= 3 ? d : 1.0),
                                 P * a.grad_bytes / (p.zero >= 2 ? d : 1.0),
                                 P * a.optimizer_bytes / (p.zero >= 1 ? d : 1.0)};
  };
  const double act_layer = activation_bytes_per_layer(m, a, p.mb, p.tp, p.sp, p.recompute);
  B.act_per_layer = act_layer;
  // Micro-batches in flight on the first stage: min(m, p) for 1F1B; interleaved keeps
  // (p-1)*2 + (v-1)*p + 1 model chunks of l/(p v) layers (Megatron's warm-up count).
  double inflight_layers;
  if (p.v == 1) {
    B.inflight = double(std::min<int64_t>(micro, p.pp));
    inflight_layers = st.first * B.inflight;
  } else {
    const double chunks = std::min<double>(mb_count * p.v, 2.0 * (p.pp - 1) + double(p.v - 1) * p.pp + 1);
    inflight_layers = chunks * double(m.layers) / (double(p.pp) * p.v);
    B.inflight = inflight_layers / std::max(1, st.first);
  }
  const bool dropout = a.dropout && m.arch == Arch::Gpt;
  const double embed_act = dropout ? T * h / (p.sp ? t : 1.0) : 0.0;  // embedding dropout mask
  const double acts_first = inflight_layers * act_layer + embed_act * B.inflight;
  // Recompute working set: one layer's full activations rebuilt during backward.
  double work = 0;
  if (p.recompute != Recompute::None)
    work = activation_bytes_per_layer(m, a, p.mb, p.tp, p.sp, Recompute::None);
  // Logits (16-bit) and the fp32 cross-entropy buffer on the last stage (Korthikanti: 4sbv/t).
  const double logits = T * V / t * (e + 4);
  // ZeRO-3 keeps two gathered layers (current + prefetch) at full size.
  const double zero3 = p.zero >= 3 ? 2 * layer_params_tp * a.weight_bytes : 0.0;
  const double reserved = c.reserved_gib * kGiB;
  auto total = [&](double P, double acts, bool has_logits) {
    auto s3 = states(P);
    return s3[0] + s3[1] + s3[2] + acts + (has_logits ? logits : 0.0) + work + zero3 + reserved;
  };
  const double mem_first = total(params_first, acts_first, p.pp == 1);
  double mem_last = mem_first;
  if (p.pp > 1) {
    // The last stage holds one micro-batch in flight (1F1B) or v chunks when interleaved.
    const double last_layers = p.v == 1 ? st.last : double(m.layers) / p.pp;
    mem_last = total(params_last, last_layers * act_layer, true);
  }
  const bool first_is_max = mem_first >= mem_last;
  const double P_mem = first_is_max ? params_first : params_last;
  const auto s3 = states(P_mem);
  B.mem_weights = s3[0];
  B.mem_grads = s3[1];
  B.mem_optimizer = s3[2];
  B.mem_activations = first_is_max ? acts_first : (p.v == 1 ? st.last : double(m.layers) / p.pp) * act_layer;
  B.mem_logits = (p.pp == 1 || !first_is_max) ? logits : 0.0;
  B.mem_buffers = work + zero3 + reserved;
  B.mem_total = std::max(mem_first, mem_last);
  ev.memory_gib = B.mem_total / kGiB;

  // ---- rates
  const double tokens = double(global_batch) * double(m.seq_len);
  ev.tokens_per_s = tokens / ev.step_time_s;
  const double model_flops = fl.model_train * tokens;
  double hw_per_token = fl.model_train;
  if (p.recompute == Recompute::Full) hw_per_token += double(m.layers) * fl.layer_forward;
  if (p.recompute == Recompute::Selective) hw_per_token += double(m.layers) * fl.attention_core;
  const double denom = ev.step_time_s * double(world);
  ev.tflops_per_gpu = model_flops / denom / 1e12;
  ev.hw_tflops_per_gpu = hw_per_token * tokens / denom / 1e12;
  ev.mfu = ev.tflops_per_gpu / c.peak_tflops;
  ev.hfu = ev.hw_tflops_per_gpu / c.peak_tflops;

  const double capacity = c.hbm_gib * (1 - a.memory_headroom);
  if (ev.memory_gib > capacity) {
    ev.reject = Reject::kMemory;
    if (fill_reason)
      ev.reason = strprintf("needs %.1f GiB per device, %.1f GiB over the %.1f GiB available (%.0f GiB HBM%s)",
                            ev.memory_gib, ev.memory_gib - capacity, capacity, c.hbm_gib,
                            a.memory_headroom > 0 ? strprintf(", %.0f%% headroom", a.memory_headroom * 100).c_str()
                                                  : "");
  }
  return ev;
}

}  // namespace cairn::costmodel
