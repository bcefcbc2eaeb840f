// Analytical cost model: parameters, FLOPs, memory and step time of a parallel plan (docs/cost-model.md).
#include "cairn/costmodel.h"
#include "cairn/vocab_padding.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/log.h"
#include "cairn/sections/parallel.h"
#include "cairn/sections/plan.h"

namespace cairn::costmodel {

namespace {

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
    throw UsageError(
        strprintf("[model] hidden = %lld is not divisible by heads = %lld", (long long)m.hidden, (long long)m.heads));
  if (m.kv_heads <= 0 || m.heads % m.kv_heads != 0)
    throw UsageError(strprintf("[model] heads = %lld is not divisible by kv_heads = %lld", (long long)m.heads,
                               (long long)m.kv_heads));
  if (m.vocab <= 0) throw UsageError("[model] vocab is 0: the cost model needs the vocabulary size (set model.vocab)");
  if (m.layers <= 0 || m.seq_len <= 0 || m.ffn_hidden <= 0)
    throw UsageError("[model] layers, seq_len and ffn_hidden must be positive");
}

ParamCounts parameter_counts(const ModelSpec& m) {
  ParamCounts p;
  const int64_t h = m.hidden, f = m.ffn_hidden, V = m.vocab, kv = m.kv_heads * m.head_dim();
  if (m.arch == Arch::Gpt) {
    p.embedding = V * h + m.seq_len * h;           // token + learned positions
    p.per_layer_norms = 4 * h;                     // two LayerNorms, weight + bias
    p.per_layer = h * (h + 2 * kv) + (h + 2 * kv)  // QKV with bias
                  + h * h + h                      // attention output projection
                  + h * f + f + f * h + h          // MLP with biases
                  + p.per_layer_norms;
    p.final_norm = 2 * h;
  } else {
    p.embedding = V * h;                                                     // RoPE: no position parameters
    p.per_layer_norms = 2 * h;                                               // two RMSNorm weights
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

// A power-bound chip's dynamic power goes as f V^2 with V rising about linearly with f, so P ~ f^3: capped
// at P_cap it sustains (P_cap / TDP)^(1/3) of the clock the efficiencies were measured at (docs/cost-model.md).
double Cluster::clock_factor() const {
  if (tdp_w <= 0 || power_limit_w <= 0 || power_limit_w >= tdp_w) return 1.0;
  return std::cbrt(power_limit_w / tdp_w);
}

// The 2023 Triton FlashAttention (flash_attn_triton.py) against FlashAttention-2: 1.3-1.5x slower forward (1.4 here)
// and 2x backward (Dao 2023, section 4.1); with FlashAttention-2's own 73 % / 63 % of peak forward / backward and the
// backward's 2.5x FLOPs, (1/0.73 + 2.5/0.63) / (1.4/0.73 + 2 x 2.5/0.63) = 0.54 of its rate.
double attention_efficiency(const Cluster& c, AttentionKernel k) {
  const double flash2 = c.flash2_efficiency > 0 ? c.flash2_efficiency : c.attention_efficiency;
  switch (k) {
    case AttentionKernel::Flash2: return flash2;
    case AttentionKernel::Triton2023: return flash2 * (1 / 0.73 + 2.5 / 0.63) / (1.4 / 0.73 + 2 * 2.5 / 0.63);
    case AttentionKernel::Fused: break;
  }
  return c.attention_efficiency;
}

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

namespace {

// The tensor-core rate a GEMM runs at: peak, large-GEMM efficiency and the K of a tile's prologue/epilogue.
struct GemmRate {
  double peak_flops = 1, max_efficiency = 0.8, k_half = 64;
};

GemmRate bf16_rate(const Cluster& c) {
  return {c.peak_tflops * 1e12 * c.clock_factor(), c.gemm_max_efficiency, c.gemm_k_half};
}

// plan.precision = "fp8" on a device without FP8 tensor cores is a config error, not a silent bf16 price.
void require_fp8_cores(const Cluster& c) {
  if (c.peak_fp8_tflops <= 0)
    throw UsageError("plan.precision = \"fp8\" needs FP8 tensor cores: [cluster] \"" + c.name +
                     "\" has peak_fp8_tflops = 0 (A100 has none; H100/H200 SXM: 1979)");
}

// FP8 GEMMs (Hopper): twice the MMA rate over the same tiles, so a tile's fixed prologue/epilogue time is worth
// twice the K; without a measured FP8 efficiency the best shape reaches the same fraction of its peak as bf16
// (cuBLASLt E4M3 8192^3 on H100 SXM: ~1600 of 1979 TFLOP/s, 0.81, against bf16's 794.5 of 989, 0.80).
GemmRate fp8_rate(const Cluster& c) {
  const double eff = c.fp8_gemm_max_efficiency > 0 ? c.fp8_gemm_max_efficiency : c.gemm_max_efficiency;
  return {c.peak_fp8_tflops * 1e12 * c.clock_factor(), eff, 2 * c.gemm_k_half};
}

// Seconds of the compute part of one GEMM before the measured-shape correction. CPUs: the FLOP-size
// curve (its fixed overhead included). GPUs: output tiles of the usual cuBLAS shapes run in waves over the
// SMs; a partial last wave and padded tiles idle SMs (stream-K/split-K win back about half of a partial
// wave), a tile's prologue/epilogue costs like k_half extra K, and every kernel pays its launch/tail.
double modelled_gemm_seconds(const Cluster& c, const GemmRate& r, double m, double n, double k, double count) {
  const double flops = 2 * m * n * k * count;
  if (c.sm_count <= 0) return flops / (r.peak_flops * gemm_efficiency(c, flops));
  static constexpr double kTiles[3][3] = {{256, 128, 1.0}, {128, 256, 1.0}, {128, 128, 0.88}};
  double best = 0;
  for (const auto& t : kTiles) {
    const double tiles_m = std::ceil(m / t[0]), tiles_n = std::ceil(n / t[1]);
    const double padding = (m * n) / (tiles_m * t[0] * tiles_n * t[1]);
    const double tiles = tiles_m * tiles_n * count;
    const double waves = std::ceil(tiles / c.sm_count);
    const double wave_fill = tiles / (waves * c.sm_count);
    best = std::max(best, t[2] * padding * (wave_fill + 0.5 * (1 - wave_fill)));
  }
  const double k_factor = r.k_half > 0 ? k / (k + r.k_half) : 1.0;
  return flops / (r.peak_flops * r.max_efficiency * best * k_factor) + c.kernel_overhead_us * 1e-6;
}

// Measured/modelled efficiency at the measured shapes nearest to (m, n, k) in log space (inverse
// distance weights over the 3 nearest; a measured shape itself takes its own entry): the calibrate table corrects
// the shape model where it measured. FP8
// GEMMs use the FP8 measurements at those shapes where calibrate made them (cuBLASLt E4M3), else the bf16 ones:
// those carry what the shape model misses about this device's kernels at that shape (wave and tile choices),
// which FP8 kernels share.
double measured_shape_factor(const Cluster& c, double m, double n, double k, bool fp8) {
  const size_t count = c.gemm_table_m.size();
  if (count == 0) return 1.0;
  const bool fp8_table = fp8 && c.has_fp8_table();
  const std::vector<double>& measured = fp8_table ? c.gemm_table_fp8_efficiency : c.gemm_table_efficiency;
  const GemmRate r = fp8_table ? fp8_rate(c) : bf16_rate(c);
  struct Near {
    double d2, ratio;
  };
  Near near[3] = {{1e300, 1}, {1e300, 1}, {1e300, 1}};
  double own_sum = 0;  // a shape the table holds (more than once: their mean)
  int own = 0;
  const double lm = std::log(m), ln = std::log(n), lk = std::log(k);
  for (size_t i = 0; i < count; ++i) {
    const double dm = lm - std::log(c.gemm_table_m[i]), dn = ln - std::log(c.gemm_table_n[i]);
    const double dk = lk - std::log(c.gemm_table_k[i]);
    const double d2 = dm * dm + dn * dn + dk * dk;
    if (d2 >= near[2].d2 && d2 > 1e-18) continue;
    const double mm = c.gemm_table_m[i], nn = c.gemm_table_n[i], kk = c.gemm_table_k[i];
    const double modelled = 2 * mm * nn * kk / (r.peak_flops * modelled_gemm_seconds(c, r, mm, nn, kk, 1));
    // A shape the table measured is its own entry, not a blend with its neighbours.
    if (d2 <= 1e-18) {
      own_sum += measured[i] / modelled;
      ++own;
      continue;
    }
    Near x{d2, measured[i] / modelled};
    for (auto& slot : near)
      if (x.d2 < slot.d2) std::swap(x, slot);
  }
  if (own > 0) return own_sum / own;
  double wsum = 0, rsum = 0;
  for (const auto& x : near) {
    if (x.d2 >= 1e300) continue;
    const double w = 1.0 / (x.d2 + 0.01);
    wsum += w;
    rsum += w * x.ratio;
  }
  return wsum > 0 ? rsum / wsum : 1.0;
}

double gemm_compute_seconds(const Cluster& c, const GemmRate& r, double m, double n, double k, double count,
                            bool fp8 = false) {
  return modelled_gemm_seconds(c, r, m, n, k, count) / measured_shape_factor(c, m, n, k, fp8);
}

}  // namespace

double gemm_efficiency_shape(const Cluster& c, double m, double n, double k, double count) {
  if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return 0;
  return 2 * m * n * k * count / (c.peak_tflops * 1e12 * gemm_compute_seconds(c, bf16_rate(c), m, n, k, count));
}

double gemm_time(const Cluster& c, double m, double n, double k, double count, double elem_bytes) {
  if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return 0;
  const double compute = gemm_compute_seconds(c, bf16_rate(c), m, n, k, count);
  const double bytes = (m * k + k * n + m * n) * count * elem_bytes;
  const double memory = bytes / c.hbm_rate();
  return std::max(compute, memory);
}

double gemm_time_fp8(const Cluster& c, double m, double n, double k, double count) {
  if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return 0;
  require_fp8_cores(c);
  const double compute = gemm_compute_seconds(c, fp8_rate(c), m, n, k, count, /*fp8=*/true);
  const double bytes = (m * k + k * n) * count + m * n * count * 2;  // FP8 inputs, bf16 output
  const double memory = bytes / c.hbm_rate();
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
      if (f.valid) {
        fit = &f;
        break;
      }
  }
  const double intra_busbw =
      c.intra.fitted[0].valid ? c.intra.fitted[0].busbw_gbps : c.intra.bandwidth_gbps * c.intra.efficiency;
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
    // A sweep times each collective alone with the ranks in step; training's run beside compute, after ranks that
    // arrive apart: the site's fraction of the sweep's speed (1 unless calibrate --from-runs measured it).
    busbw *= tier.fabric_efficiency;
    alpha /= tier.fabric_efficiency;
  } else {
    busbw = tier.bandwidth_gbps * tier.efficiency;
    if (spans) busbw = std::min(busbw * per_node, intra_busbw);
    double steps;
    if (coll == Collective::AllReduce)
      steps = std::min(2.0 * (n - 1), 2.0 * std::ceil(std::log2(double(n))));  // ring vs tree latency
    else if (coll == Collective::SendRecv) steps = 1;
    else steps = n - 1;
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
  std::string s = strprintf("dp=%d,tp=%d,pp=%d,v=%d,mb=%d,zero=%d,recompute=%s,sp=%s", p.dp, p.tp, p.pp, p.v, p.mb,
                            p.zero, recompute_name(p.recompute), p.sp ? "on" : "off");
  if (p.cp > 1) s += strprintf(",cp=%d", p.cp);
  if (p.cp > 1 && p.cp_allgather) s += ",cp_comm=allgather";
  if (p.tp_overlap) s += ",tp_overlap=on";
  return s;
}

const char* zero3_impl_name(Zero3Impl z) {
  switch (z) {
    case Zero3Impl::Fsdp: return "fsdp";
    case Zero3Impl::Megatron: return "megatron";
    case Zero3Impl::DeepSpeed: return "deepspeed";
  }
  return "?";
}

const char* zero3_impl_stack(Zero3Impl z) {
  switch (z) {
    case Zero3Impl::Fsdp: return "PyTorch FSDP";
    case Zero3Impl::Megatron: return "Megatron-FSDP";
    case Zero3Impl::DeepSpeed: return "DeepSpeed stage 3";
  }
  return "?";
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
    case Reject::kCp: return "cp";
    case Reject::kTpOverlap: return "tp_overlap";
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
double activation_bytes_per_layer(const ModelSpec& m, const Assumptions& a, int64_t b, int tp, bool sp, Recompute r) {
  const double s = double(m.seq_len), h = double(m.hidden), f = double(m.ffn_hidden);
  const double heads = double(m.heads), kvr = std::max<double>(double(m.kv_heads), tp) / double(m.heads);
  const double e = a.activation_bytes, t = double(tp);
  const bool dropout = a.dropout && m.arch == Arch::Gpt;
  const double sbh = s * double(b) * h;
  if (r == Recompute::Full) return e * sbh / (sp ? t : 1.0);  // only the layer input (2sbh in bf16)
  if (r == Recompute::Selective && a.selective_alternate_mm) {
    // torchtitan's op policy: the layer input, the kept (odd) matmul outputs and the attention output.
    const double sb = s * double(b), kvd = kvr * h;
    const double rep = e * sbh * (m.arch == Arch::Gpt ? 1.0 : 2.0);  // input (+ llama's w2 output)
    const double split = m.arch == Arch::Gpt ? e * sb * (h + 2 * kvd) + e * sb * f + e * sbh   // qkv, fc1, attention
                                             : e * sbh + e * sb * kvd + e * sb * f + e * sbh;  // wq, wv, w1, attention
    return rep / (sp ? t : 1.0) + split / t;
  }
  // The four linear layers' inputs, kept for their weight gradients: FP8 linear layers (Transformer Engine) keep
  // the FP8 copy they cast for the forward GEMM (1 byte).
  const double li = a.fp8 ? 1.0 : e;
  // Parts that TP does not split (replicated on every TP rank unless SP shards them along s):
  // LayerNorm inputs (2 x e sbh), QKV input (sbh), MLP input (sbh), dropout masks (1 byte each). Under SP
  // Megatron keeps the QKV and MLP inputs sharded and gathers them again for the weight gradients; PyTorch's
  // autograd (plan.sp_layout = "bsh") keeps the gathered ones whole.
  const double linear_inputs = li * sbh + li * sbh;
  const double kept_whole = sp && a.sp_batch_first ? linear_inputs : 0.0;
  double replicated = 2 * e * sbh + (linear_inputs - kept_whole) + (dropout ? 2 * sbh : 0.0);
  // Parts split by TP: Q, K, V (K, V shrink with GQA), attention-projection input, MLP inner tensors.
  double split = e * sbh * (1 + 2 * kvr)                           // Q, K, V
                 + li * sbh;                                       // softmax x V output = projection input
  if (m.arch == Arch::Gpt) split += (e + li) * s * double(b) * f;  // GeLU input and output (fc2 input)
  else split += (2 * e + li) * s * double(b) * f;  // gate, up, and silu(gate)*up (down-projection input)
  // Attention scores: softmax output (e), dropout mask (1) and dropout output (e) per score.
  double scores = 0;
  if (!a.flash_attention && r != Recompute::Selective) scores = heads * s * s * double(b) * (dropout ? (2 * e + 1) : e);
  return replicated / (sp ? t : 1.0) + (split + scores) / t + kept_whole;
}

std::vector<int> stage_layers_of(const ParallelSection& s) {
  std::vector<int> out;
  for (int64_t n : s.stage_layers) out.push_back(int(n));
  return out;
}

Plan plan_from_section(const ParallelSection& s, int world) {
  Plan p;
  p.tp = s.tp;
  p.pp = s.pp;
  p.v = s.v;
  p.mb = int(s.mb);
  if (p.mb <= 0) p.mb = 1;
  p.zero = s.zero;
  p.recompute = parse_recompute(s.recompute);
  p.sp = s.sp == "on";
  p.cp = s.cp;
  p.cp_allgather = s.cp_comm == "allgather";
  p.tp_overlap = s.tp_overlap == "on";
  p.stage_layers = stage_layers_of(s);
  p.dp = s.dp;
  if (p.dp <= 0) p.dp = std::max(1, world / std::max(1, p.tp * p.pp * p.cp));
  return p;
}

Plan plan_from_parallel(const Config& cfg, int world) {
  return plan_from_section(read_section<ParallelSection>(cfg), world);
}

// Unfused (Megatron's vocab-parallel loss, PyTorch's F.cross_entropy on fp32 logits): forward casts to fp32 (e + 4),
// takes the max (4), subtracts it (8), exponentiates (8), sums (4) and divides (8), keeping the fp32 softmax;
// backward scales it (8) and casts the gradient back (4 + e). Native (Megatron-Core's jit fusion of those steps):
// cast with max (e + 4), subtract-exp-sum (8), divide (8); backward in one (4 + e). Fused: one pass over the 16-bit
// logits forward (online softmax), one reading them and writing the gradient backward.
CrossEntropyCost cross_entropy_cost(CrossEntropyImpl impl, double e) {
  switch (impl) {
    case CrossEntropyImpl::Fused: return {e, 2 * e, 1, 1};
    case CrossEntropyImpl::Native: return {e + 20, 4 + e, 3, 1};
    case CrossEntropyImpl::Unfused: break;
  }
  return {e + 36, 12 + e, 6, 2};
}

Assumptions assumptions_from_section(const PlanSection& s) {
  Assumptions a;
  a.weight_bytes = s.weight_bytes;
  a.grad_bytes = s.grad_bytes;
  a.optimizer_bytes = s.optimizer_bytes;
  a.activation_bytes = s.activation_bytes;
  a.flash_attention = s.flash_attention;
  a.attention_kernel = s.attention_kernel == "flash2"       ? AttentionKernel::Flash2
                       : s.attention_kernel == "triton2023" ? AttentionKernel::Triton2023
                                                            : AttentionKernel::Fused;
  if (a.attention_kernel != AttentionKernel::Fused && !a.flash_attention)
    throw UsageError("plan.attention_kernel = \"" + s.attention_kernel +
                     "\" names a fused attention kernel, but plan.flash_attention = false: set plan.flash_attention = "
                     "true, or leave attention_kernel at \"fused\"");
  a.causal = s.causal;
  a.dropout = s.dropout;
  a.optimizer_fused = s.optimizer_fused;
  a.selective_alternate_mm = s.selective_policy == "alternate_mm";
  a.memory_bound_factor = s.memory_bound_factor;
  a.cross_entropy = s.cross_entropy == "fused"    ? CrossEntropyImpl::Fused
                    : s.cross_entropy == "native" ? CrossEntropyImpl::Native
                                                  : CrossEntropyImpl::Unfused;
  a.dp_overlap = s.dp_overlap;
  a.tp_async_backward = s.tp_async_backward;
  a.tp_overlap_backward = s.tp_overlap_impl != "torch";
  a.sp_batch_first = s.sp_layout == "bsh";
  a.fused_projections = s.fused_projections;
  a.pp_scatter_gather = s.pp_scatter_gather;
  a.pp_overlap = s.pp_overlap;
  a.zero3 = s.zero3_impl == "deepspeed"  ? Zero3Impl::DeepSpeed
            : s.zero3_impl == "megatron" ? Zero3Impl::Megatron
                                         : Zero3Impl::Fsdp;
  a.zero3_prefetch_params = s.zero3_prefetch_bucket;
  // Only FSDP has the per-step schedule (PyTorch pipelining); DeepSpeed and Megatron-FSDP keep theirs.
  a.zero_sync_per_step = s.zero_sync == "step" && a.zero3 == Zero3Impl::Fsdp;
  a.zero3_root_per_step = s.zero3_root_gather == "step" && a.zero3 == Zero3Impl::Fsdp;
  a.memory_headroom = s.memory_headroom;
  a.fp8 = s.precision == "fp8";
  a.fp8_current_scaling = s.fp8_scaling == "current";
  a.fp8_param_gather = s.fp8_param_gather;
  if (a.fp8_param_gather && !a.fp8)
    throw UsageError("plan.fp8_param_gather = true keeps the weights in FP8, but plan.precision = \"" + s.precision +
                     "\": set plan.precision = \"fp8\"");
  if (a.fp8_param_gather && a.zero3 == Zero3Impl::DeepSpeed)
    throw UsageError("plan.fp8_param_gather = true is Megatron's (--fp8-param-gather) and FSDP's FP8 all-gather; "
                     "DeepSpeed stage 3 (plan.zero3_impl = \"deepspeed\") gathers 16-bit weights");
  return a;
}

bool fp8_params(const Assumptions& a, const Plan& p) { return a.fp8 && a.fp8_param_gather && p.zero >= 1; }

Assumptions assumptions_from_config(const Config& cfg) {
  return assumptions_from_section(read_section<PlanSection>(cfg));
}

// ------------------------------------------------------------------ evaluation

namespace {

// A collective running beside compute: the part the compute cannot hide, and the compute lost while both
// run (NCCL kernels take SMs and memory bandwidth from the GEMMs they overlap).
struct Overlap {
  double exposed = 0, slowdown = 0;
};
Overlap overlap(const Cluster& c, double comm, double compute) {
  if (!c.async_comm) return {comm, 0.0};
  return {std::max(0.0, comm - compute), c.overlap_slowdown * std::min(comm, compute)};
}

// Per-micro-batch times of one transformer layer on one rank: GEMMs, memory-bound kernels, exposed TP and
// CP communication, and compute slowed by overlapped collectives; forward, backward, and recompute.
struct LayerTimes {
  double f_gemm = 0, f_mem = 0, f_tp = 0, f_cp = 0, f_slow = 0;
  double b_gemm = 0, b_mem = 0, b_tp = 0, b_cp = 0, b_slow = 0;
  double r_gemm = 0, r_mem = 0, r_tp = 0, r_cp = 0, r_slow = 0;
  double f_cast = 0, b_cast = 0, r_cast = 0;  // of f_mem, b_mem, r_mem: FP8 cast/transpose kernels
  double f_attn = 0, b_attn = 0, r_attn = 0;  // of f_gemm, b_gemm, r_gemm: the attention core
  // Under SP, of f_tp / f_slow: the forward's two all-gathers; of b_tp / b_slow: the backward's re-gathers of the
  // column-parallel inputs for their weight gradients (what an op-level recompute does instead).
  double f_tp_gather = 0, f_slow_gather = 0, b_tp_regather = 0, b_slow_regather = 0;
  double fwd() const { return f_gemm + f_mem + f_tp + f_cp + f_slow; }
  double bwd() const { return b_gemm + b_mem + b_tp + b_cp + b_slow + r_gemm + r_mem + r_tp + r_cp + r_slow; }
  double recompute() const { return r_gemm + r_mem + r_tp + r_cp + r_slow; }
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

// Bytes per token of the FP8 cast kernels of one layer (Transformer Engine). Forward, each linear layer's input is
// cast to FP8 together with its transpose (kept for the weight-gradient GEMM): read 2 bytes, write 1 + 1. With
// delayed scaling the norms (QKV, MLP up) and the activation (MLP down) write their FP8 output themselves, leaving
// the transpose (read 1, write 1); the attention output (projection input) comes from the bf16 attention kernel
// and is cast on its own. Backward, each linear layer's output gradient is cast and transposed (read 2, write
// 1 + 1). Current scaling needs every tensor's amax before its cast: no fusion, and one more read (2 bytes).
// Under SP the inputs are cast on the rank's sequence shard and gathered in FP8.
struct Fp8CastBytes {
  double forward = 0, backward = 0;
};

// Bytes one FP8 cast (with its transpose) moves per element: on its own 4, fused into the kernel that produced
// the 16-bit tensor 2 (delayed scaling only), 6 with current scaling (the amax read first, no fusion).
double fp8_cast_bytes_per_element(const Assumptions& a, bool fused_into_producer) {
  if (a.fp8_current_scaling) return 6.0;
  return fused_into_producer ? 2.0 : 4.0;
}

Fp8CastBytes fp8_cast_bytes(const ModelSpec& m, const Assumptions& a, const Plan& p) {
  const double t = double(p.tp), h = double(m.hidden), f = double(m.ffn_hidden);
  const double kv = std::max(double(m.kv_heads), t) * double(m.head_dim());
  const double up = (m.arch == Arch::Gpt ? 1.0 : 2.0) * f;
  const double in_rep = h / (p.sp ? t : 1.0);  // QKV and MLP-up inputs: the normed residual stream
  const double fused = fp8_cast_bytes_per_element(a, true), unfused = fp8_cast_bytes_per_element(a, false);
  Fp8CastBytes r;
  r.forward = fused * (2 * in_rep + f / t) + unfused * h / t;
  r.backward = unfused * ((h + 2 * kv) / t + up / t + 2 * h / (p.sp ? t : 1.0));
  return r;
}

// Bytes per layer parameter as stored and gathered: FP8 (1) with FP8 parameters, else the 16-bit weight.
double layer_weight_bytes(const Assumptions& a, const Plan& p) { return fp8_params(a, p) ? 1.0 : a.weight_bytes; }

// Fraction of the s x s score blocks a fused causal kernel computes: the blocks below the diagonal and the
// diagonal ones whole (the mask is applied inside them), (1 + B/s)/2 for B x B blocks (B = [cluster]
// attention_tile: 128, the query/key tile of FlashAttention-2 and its Triton and cuDNN peers, Dao 2023, section
// 3.1; 32 for cairn's CPU kernel, whose tiles of 32 query rows score the keys up to their last row).
double causal_fraction(const Assumptions& a, const Cluster& c, double s) {
  if (!a.causal) return 1.0;
  const double n = std::max(1.0, std::ceil(s / std::max(1.0, c.attention_tile)));
  return 0.5 * (1 + 1 / n);
}

// Where each parallel group sits: Megatron's rank order is tp (fastest), cp, dp, pp.
struct Groups {
  int tp_per_node = 1, cp_per_node = 1, dp_per_node = 1;
  bool tp_spans = false, cp_spans = false, dp_spans = false, pp_spans = false;
};

Groups place_groups(const Cluster& c, const Plan& p) {
  Groups g;
  const int gpn = c.gpus_per_node;
  g.tp_spans = p.tp > gpn || gpn % p.tp != 0;
  g.tp_per_node = g.tp_spans ? std::min(p.tp, gpn) : p.tp;
  const int64_t tc = int64_t(p.tp) * p.cp;
  g.cp_spans = tc > gpn;
  g.cp_per_node = p.tp >= gpn ? 1 : std::max(1, std::min(p.cp, gpn / p.tp));
  // Gradients reduce over the data-parallel ranks of every context-parallel rank (dp x cp, stride tp).
  g.dp_spans = tc * p.dp > gpn;
  g.dp_per_node = p.tp >= gpn ? 1 : std::max(1, std::min(p.cp * p.dp, gpn / p.tp));
  g.pp_spans = tc * p.dp * p.pp > gpn;
  return g;
}

// Tensor-parallel collectives of one layer. Without SP: two all-reduces each way. With SP: all-gather
// before and reduce-scatter after each of the two blocks each way, plus the backward re-gather of the
// column-parallel inputs for their weight gradients, issued beside the data-gradient GEMMs (Korthikanti et
// al. 2022 4.2.2; Megatron's LinearWithGradAccumulationAndAsyncCommunication). With tp_overlap every
// collective is split into tp chunks pipelined with its neighbouring GEMM (Megatron-Core userbuffers):
// only the first chunk and what the GEMM cannot cover stay exposed. With FP8 the gathered tensors are the GEMM
// inputs, cast before the gather (1 byte); reduce-scatters and all-reduces carry the 16-bit GEMM outputs.
void add_tp_comm(const Cluster& c, const Assumptions& a, const Plan& p, const Groups& g, double elements,
                 const double gemm_f[4], const double dgrad[4], const double wgrad[4], LayerTimes& L) {
  const double bytes = elements * a.activation_bytes;
  if (p.tp <= 1) return;
  const double ar = collective_time(c, Collective::AllReduce, bytes, p.tp, g.tp_per_node);
  if (!p.sp) {
    L.f_tp = 2 * ar;
    if (!a.tp_async_backward) {
      L.b_tp = 2 * ar;
      return;
    }
    for (int col : {0, 2}) {  // the input gradient's all-reduce beside the weight-gradient GEMM
      const Overlap o = overlap(c, ar, wgrad[col]);
      L.b_tp += o.exposed;
      L.b_slow += o.slowdown;
    }
    return;
  }
  const double ag = collective_time(c, Collective::AllGather, a.fp8 ? elements : bytes, p.tp, g.tp_per_node);
  const double rs = collective_time(c, Collective::ReduceScatter, bytes, p.tp, g.tp_per_node);
  // Batch-first layouts (DTensor) copy the whole tensor around each collective (read and write): the gathered
  // one after an all-gather, the one to scatter before a reduce-scatter. The forward's pipelined collectives of
  // PyTorch's async TP (below) work on chunks and do without.
  const double hbm = c.hbm_rate();
  const double ag_copy = a.sp_batch_first ? 2 * (a.fp8 ? elements : bytes) / hbm : 0.0;
  const double rs_copy = a.sp_batch_first ? 2 * bytes / hbm : 0.0;
  const double ag_plain = ag + ag_copy, rs_plain = rs + rs_copy;
  // GEMM order: 0 QKV (column), 1 projection (row), 2 MLP up (column), 3 MLP down (row).
  auto beside = [&](double comm, double gemm, double& exposed, double& slow) {
    const Overlap o = overlap(c, comm * (p.tp - 1) / p.tp, gemm);
    exposed += comm / p.tp + o.exposed;
    slow += o.slowdown;
  };
  if (p.tp_overlap) {
    beside(ag, gemm_f[0], L.f_tp_gather, L.f_slow_gather);  // gather the sequence into the QKV GEMM
    beside(rs, gemm_f[1], L.f_tp, L.f_slow);                // scatter the projection's output
    beside(ag, gemm_f[2], L.f_tp_gather, L.f_slow_gather);
    beside(rs, gemm_f[3], L.f_tp, L.f_slow);
  } else {
    L.f_tp = 2 * rs_plain;
    L.f_tp_gather = 2 * ag_plain;
  }
  L.f_tp += L.f_tp_gather;
  L.f_slow += L.f_slow_gather;
  // PyTorch's async TP (tp_overlap_backward = false) pipelines the forward's collectives only: see Assumptions.
  if (p.tp_overlap && a.tp_overlap_backward) {
    for (int row : {1, 3}) beside(ag, dgrad[row], L.b_tp, L.b_slow);  // gather the output gradient
    for (int col : {0, 2}) {
      beside(ag, dgrad[col], L.b_tp_regather, L.b_slow_regather);  // re-gather the input for the weight gradient
      beside(rs, wgrad[col], L.b_tp, L.b_slow);                    // scatter the input gradient
    }
  } else {
    L.b_tp = 2 * (ag_plain + rs_plain);
    // Megatron keeps the column-parallel layers' local inputs and gathers them again for the weight gradients;
    // PyTorch's autograd keeps the gathered ones (or a recompute gathers them), so there is no re-gather.
    for (int col : {0, 2}) {
      if (a.sp_batch_first) break;
      const Overlap o = overlap(c, ag, dgrad[col]);
      L.b_tp_regather += o.exposed;
      L.b_slow_regather += o.slowdown;
    }
  }
  L.b_tp += L.b_tp_regather;
  L.b_slow += L.b_slow_regather;
}

LayerTimes layer_times(const ModelSpec& m, const Cluster& c, const Assumptions& a, const Plan& p, const Groups& g) {
  LayerTimes L;
  const double s = double(m.seq_len), s_local = s / p.cp, T = double(p.mb) * s_local;
  const double h = double(m.hidden), f = double(m.ffn_hidden), d = double(m.head_dim());
  // kv_heads is a multiple of tp (check_plan): each rank holds kv_heads / tp whole key/value heads.
  const double t = double(p.tp), kv = std::max(double(m.kv_heads), t) * d, e = a.activation_bytes;
  const double heads_local = double(m.heads) / t;
  const double up = (m.arch == Arch::Gpt ? 1.0 : 2.0) * f / t;  // SwiGLU gate+up fused into one GEMM
  // FP8 (Transformer Engine): forward, dgrad and wgrad of the weight GEMMs run on FP8 tensor cores.
  auto linear = [&](double mm, double nn, double kk) {
    return a.fp8 ? gemm_time_fp8(c, mm, nn, kk, 1) : gemm_time(c, mm, nn, kk, 1, e);
  };
  // Weight GEMMs (M x N x K): forward, then backward dgrad (M x K x N) and wgrad (K x N x M), in four groups:
  // 0 QKV (column), 1 projection (row), 2 MLP up (column), 3 MLP down (row). Megatron fuses Q, K and V into one
  // linear and SwiGLU's gate and up into another; torchtitan (Hugging Face Llama alike) runs them as separate
  // linears (plan.fused_projections = false): each reads the input again (its own roofline bytes) and the backward
  // sums their input gradients (below).
  double gemm_f[4] = {0, 0, 0, 0}, dgrad[4] = {0, 0, 0, 0}, wgrad[4] = {0, 0, 0, 0}, fw = 0, bw = 0;
  auto add_gemm = [&](int i, double nn, double kk) {
    gemm_f[i] += linear(T, nn, kk);
    dgrad[i] += linear(T, kk, nn);
    wgrad[i] += linear(kk, nn, T);
  };
  const bool separate = !a.fused_projections;
  if (separate) {
    for (double nn : {h / t, kv / t, kv / t}) add_gemm(0, nn, h);
  } else {
    add_gemm(0, (h + 2 * kv) / t, h);
  }
  add_gemm(1, h, h / t);
  const int up_parts = separate && m.arch != Arch::Gpt ? 2 : 1;
  for (int i = 0; i < up_parts; ++i) add_gemm(2, up / up_parts, h);
  add_gemm(3, h, f / t);
  for (int i = 0; i < 4; ++i) {
    fw += gemm_f[i];
    bw += dgrad[i] + wgrad[i];
  }
  const double hbm = c.hbm_rate(), k0 = c.kernel_overhead_us * 1e-6;
  // Attention core: the local s/cp queries against all s keys, batched over b x local heads.
  double core_f, core_b;
  if (a.flash_attention) {
    // Fused kernel: the FLOPs it really runs (a causal mask skips the masked blocks) at the kernel's own
    // efficiency; traffic of Q, K, V, O only. Backward recomputes the scores: 5 products instead of 2 (Dao et
    // al. 2022). Per sequence and head on this rank: the (query, key) pairs scored, and the query rows times the
    // calls that handle them (each pays attention_row_keys keys' worth of fixed work). Without CP one causal call:
    // s^2 at the causal tile fraction, s rows. Causal CP (Megatron's load-balanced chunks of Sc = s / 2cp, two per
    // rank): the rank's two chunks meet 2cp + 1 key chunks, their own two diagonally, so (2cp - 1 + 2 frac(Sc))
    // Sc^2 pairs (about s^2 / 2cp for long chunks, the same half as without CP). Rows: the ring's first step is one
    // causal call over the rank's own two chunks (2 Sc rows, as in Transformer Engine and cairn-train), then
    // cairn-train runs 2cp - 2 blocks of Sc rows, and Transformer Engine's slowest rank cp - 1 calls of 2 Sc rows: 2cp
    // Sc rows either way. The all-gather runs each query chunk against its whole prefix: 2 Sc rows.
    double pairs = s_local * s * causal_fraction(a, c, s), rows = s_local;
    if (p.cp > 1 && a.causal) {
      const double Sc = s / (2.0 * p.cp);
      pairs = Sc * Sc * (2.0 * p.cp - 1 + 2 * causal_fraction(a, c, Sc));
      rows = Sc * 2.0 * (p.cp_allgather ? 1.0 : p.cp);
    }
    const double flops = 4 * pairs * d * double(p.mb) * heads_local;
    const double bytes = T * (2 * h + 2 * kv) / t * e;
    const double rate = c.peak_tflops * 1e12 * c.clock_factor() * attention_efficiency(c, a.attention_kernel);
    core_f = std::max(flops * (1 + c.attention_row_keys * rows / pairs) / rate, bytes / hbm) + k0;
    core_b = 2.5 * core_f;
  } else {
    const double cnt = double(p.mb) * heads_local;
    core_f = gemm_time(c, s_local, s, d, cnt, e) + gemm_time(c, s_local, d, s, cnt, e);
    core_b = 2 * core_f;
  }
  L.f_gemm = fw + core_f;
  L.b_gemm = bw + core_b;
  L.f_attn = core_f;
  L.b_attn = core_b;
  // Elementwise work: replicated bytes are split by TP only with SP; backward moves about twice the bytes.
  const ElementwiseBytes eb = layer_elementwise(m, a);
  const double mf = a.memory_bound_factor;
  const double rep = mf * eb.replicated * T / (p.sp ? t : 1.0), split = mf * eb.split * T / t;
  const double scores = mf * eb.scores * T / t;
  L.f_mem = (rep + split + scores) / hbm + eb.kernels * k0;
  L.b_mem = 2 * (rep + split + scores) / hbm + 2 * eb.kernels * k0;
  if (separate) {
    // Autograd adds the input gradients of the linears that share an input (K and V into Q's; llama's up into its
    // gate's): read two T x h 16-bit tensors, write one, per extra linear (T: the gathered tokens under SP).
    const int extra = 2 + (up_parts - 1);
    L.b_mem += extra * 3 * T * h * e / hbm + extra * k0;
  }
  if (a.fp8) {
    const Fp8CastBytes cast = fp8_cast_bytes(m, a, p);
    L.f_cast = T * cast.forward / hbm + 4 * k0;
    L.b_cast = T * cast.backward / hbm + 4 * k0;
    L.f_mem += L.f_cast;
    L.b_mem += L.b_cast;
  }
  add_tp_comm(c, a, p, g, T * h, gemm_f, dgrad, wgrad, L);
  double cp_merge_f = 0;  // forward merging of the ring steps' partial outputs (rerun by selective recompute)
  if (p.cp > 1 && p.cp_allgather) {
    // All-gather CP (Megatron --cp-comm-type all_gather): every rank's K/V chunk gathered before attention, which
    // then runs each local chunk against the whole prefix in one kernel (no partial outputs to merge); backward
    // gathers K/V again and reduce-scatters their gradients. Nothing hides the transfers.
    const double kv_all = p.cp * 2 * T * kv / t * e;
    const int per_node = g.cp_spans ? std::max(1, g.cp_per_node) : p.cp;
    const double gather = collective_time(c, Collective::AllGather, kv_all, p.cp, per_node);
    L.f_cp = gather;
    L.b_cp = gather + collective_time(c, Collective::ReduceScatter, kv_all, p.cp, per_node);
  } else if (p.cp > 1) {
    // Ring attention: cp - 1 steps, each passing the local K and V chunk to the next rank while the
    // current block is computed; backward passes K, V and their gradients.
    const double kv_bytes = 2 * T * kv / t * e;
    const int per_node = g.cp_spans ? 1 : 2;
    const double step_f = collective_time(c, Collective::SendRecv, kv_bytes, 2, per_node);
    const double step_b = collective_time(c, Collective::SendRecv, 2 * kv_bytes, 2, per_node);
    if (c.async_comm) {
      const Overlap of = overlap(c, step_f, core_f / p.cp), ob = overlap(c, step_b, core_b / p.cp);
      L.f_cp = (p.cp - 1) * of.exposed;
      L.f_slow += (p.cp - 1) * of.slowdown;
      L.b_cp = (p.cp - 1) * ob.exposed;
      L.b_slow += (p.cp - 1) * ob.slowdown;
    } else {
      // CPU ranks (cairn-train over MPI, one thread each): nothing moves the bytes beside the compute; they are
      // copied inside the wait for each exchange, so every transfer is exposed. The ring as cairn-train runs it:
      // forward cp - 1 exchanges of the K/V chunk; backward cp + 1 (the K/V, then K/V with the dK/dV accumulator
      // of the previous step, the last accumulator, and its hop home), 2cp - 1 chunks' worth in all.
      L.f_cp = (p.cp - 1) * step_f;
      L.b_cp = 3 * step_f + (p.cp - 2) * step_b;
    }
    // Each of the cp steps yields a partial attention output that is merged into the running one by its
    // log-sum-exp (Transformer Engine's flash_attn_fwd_out_correction: read the step's 16-bit output, read and
    // write the fp32 accumulator, 10 bytes per query element); backward adds each step's dQ, dK and dV into their
    // accumulators (read both, write one: 6 bytes per element). Two small kernels per step each way. (cairn-train's
    // step 0 writes its results directly: cp - 1 merges, which on a CPU are within the noise.)
    const double qd = T * h / t, kvd_local = 2 * T * kv / t;
    cp_merge_f = p.cp * (10 * qd / hbm + 2 * k0);
    L.f_mem += cp_merge_f;
    L.b_mem += p.cp * (6 * (qd + kvd_local) / hbm + 2 * k0);
  }
  if (p.recompute == Recompute::Full) {
    L.r_gemm = L.f_gemm;
    L.r_attn = L.f_attn;
    L.r_mem = L.f_mem;
    L.r_cast = L.f_cast;
    L.r_tp = L.f_tp;
    L.r_cp = L.f_cp;
    L.r_slow = L.f_slow;
  } else if (p.recompute == Recompute::Selective && a.selective_alternate_mm) {
    // torchtitan's op-level policy keeps every odd matmul's output and the attention kernel's, and reruns the
    // rest of the layer forward: the even matmuls in execution order (llama: wq, WK, wv, WO, w1, W3, w2;
    // gpt: qkv, PROJ, fc1, FC2) and every elementwise kernel.
    const double up1 = f / t;  // one of SwiGLU's two up projections
    L.r_gemm = m.arch == Arch::Gpt ? gemm_f[1] + gemm_f[3] : linear(T, kv / t, h) + gemm_f[1] + linear(T, up1, h);
    L.r_mem = L.f_mem;
    L.r_cast = L.f_cast;
    // Under SP the policy keeps the reduce-scatters' outputs but not the all-gathers': the rerun gathers the
    // sequence again before the recomputed matmuls, and the weight gradients then use those inputs (no re-gather).
    L.r_tp = L.f_tp_gather;
    L.r_slow = L.f_slow_gather;
    L.b_tp -= L.b_tp_regather;
    L.b_slow -= L.b_slow_regather;
  } else if (p.recompute == Recompute::Selective) {
    L.r_gemm = core_f;
    L.r_attn = core_f;
    L.r_mem = scores / hbm + k0 + cp_merge_f;
  }
  return L;
}

// Checks the plan's shape against the model, batch and cluster; kOk or the first violation.
Reject check_plan(const ModelSpec& m, const Cluster& c, const Plan& p, int64_t global_batch, const Assumptions& a,
                  std::string* why) {
  auto no = [&](Reject r, std::string text) {
    if (why) *why = std::move(text);
    return r;
  };
  if (p.dp < 1 || p.tp < 1 || p.pp < 1 || p.v < 1 || p.mb < 1 || p.cp < 1 || p.zero < 0 || p.zero > 3)
    return no(Reject::kWorld, "every degree must be >= 1 and zero in 0..3: " + plan_string(p));
  if (m.heads % p.tp != 0)
    return no(Reject::kHeads, strprintf("heads = %lld is not divisible by tp = %d", (long long)m.heads, p.tp));
  // Whole key/value heads per rank: Megatron-Core divides num_query_groups by tp, and so does cairn-train.
  if (m.kv_heads % p.tp != 0)
    return no(Reject::kKvHeads, strprintf("kv_heads = %lld is not divisible by tp = %d (each rank holds whole "
                                          "key/value heads, as Megatron-Core and cairn-train split them)",
                                          (long long)m.kv_heads, p.tp));
  const int64_t gpus = int64_t(p.dp) * p.tp * p.pp * p.cp;
  if (gpus != c.world())
    return no(Reject::kWorld,
              strprintf("dp*tp*pp*cp = %lld but the cluster has %d devices", (long long)gpus, c.world()));
  if (p.v > 1 && p.pp == 1) return no(Reject::kInterleave, "interleaving (v > 1) needs pipeline parallelism (pp > 1)");
  const int64_t stages = int64_t(p.pp) * p.v;
  if (!p.stage_layers.empty()) {
    if (int64_t(p.stage_layers.size()) != stages)
      return no(Reject::kLayers, strprintf("stage_layers has %zu entries for pp*v = %lld virtual stages",
                                           p.stage_layers.size(), (long long)stages));
    int64_t sum = 0;
    for (int n : p.stage_layers) {
      if (n < 1) return no(Reject::kLayers, "every stage_layers entry must be >= 1");
      sum += n;
    }
    if (sum != m.layers)
      return no(Reject::kLayers, strprintf("stage_layers sum to %lld, not the model's %lld layers", (long long)sum,
                                           (long long)m.layers));
  } else if (stages > m.layers) {
    return no(p.v > 1 ? Reject::kInterleave : Reject::kLayers,
              strprintf("%lld layers cannot fill pp*v = %d*%d stages with a layer each", (long long)m.layers, p.pp,
                        p.v));
  }
  if (global_batch % (int64_t(p.dp) * p.mb) != 0)
    return no(Reject::kBatch,
              strprintf("global batch %lld is not a multiple of dp*mb = %d*%d", (long long)global_batch, p.dp, p.mb));
  const int64_t micro = global_batch / (int64_t(p.dp) * p.mb);
  if (p.v > 1 && micro % p.pp != 0)
    return no(Reject::kInterleave, strprintf("interleaved schedule needs micro-batches (%lld) divisible by pp = %d",
                                             (long long)micro, p.pp));
  if (p.sp && p.tp == 1) return no(Reject::kSp, "sequence parallelism needs tp > 1");
  if (p.sp && m.seq_len % (int64_t(p.tp) * p.cp) != 0)
    return no(Reject::kSp,
              strprintf("seq_len = %lld is not divisible by tp*cp = %d", (long long)m.seq_len, p.tp * p.cp));
  if (p.tp_overlap && !p.sp)
    return no(Reject::kTpOverlap, "TP communication overlap needs sequence parallelism (sp = on), as in "
                                  "Megatron-Core");
  if (p.tp_overlap && p.tp > c.gpus_per_node)
    return no(Reject::kTpOverlap, strprintf("TP communication overlap needs the TP group inside a node (tp = %d, "
                                            "%d devices per node): its chunked exchanges run over NVLink",
                                            p.tp, c.gpus_per_node));
  if (p.cp > 1 && m.seq_len % (2 * int64_t(p.cp)) != 0)
    return no(Reject::kCp, strprintf("seq_len = %lld is not divisible by 2*cp = %d (load-balanced causal chunks)",
                                     (long long)m.seq_len, 2 * p.cp));
  if (p.cp > 1 && !a.flash_attention)
    return no(Reject::kCp, "context parallelism needs a fused attention kernel (plan.flash_attention = true), as "
                           "Megatron-Core's ring attention does");
  if (p.zero >= 2 && p.pp > 1 && a.zero3 != Zero3Impl::Fsdp)
    return no(Reject::kZeroPp, strprintf("ZeRO-2/3 with pipeline parallelism runs as FSDP (PyTorch pipelining, "
                                         "cairn-train); %s does not combine them (plan.zero3_impl = \"fsdp\")",
                                         zero3_impl_stack(a.zero3)));
  return Reject::kOk;
}

// Layers per virtual stage of the plan: given, even, or balanced (stage_split).
std::vector<int> plan_stage_layers(const ModelSpec& m, const Plan& p, double embed_layers, double head_layers) {
  if (!p.stage_layers.empty()) return p.stage_layers;
  const int64_t stages = int64_t(p.pp) * p.v;
  if (m.layers % stages == 0) return std::vector<int>(size_t(stages), int(m.layers / stages));
  return stage_split(m.layers, p.pp, p.v, embed_layers, head_layers);
}

// Seconds of PyTorch FSDP's memory-bound copies over one whole (unsharded) layer per micro-batch; they run beside
// the layer's compute on the same SMs and HBM, so they are charged, not hidden: the unsharded gradient copied and
// cast into the reduce-scatter buffer in the reduce dtype (read e, write grad_bytes per parameter; FSDP1 _reduce_grad's
// .to(reduce_dtype), FSDP2 foreach_reduce_scatter_copy_in), then FSDP1's in-place pre-divide of that buffer (read
// and write grad_bytes), or FSDP2's copy-out of the gathered parameters after each of its two all-gathers (read and
// write weight_bytes twice: 4 x weight_bytes = 2 x grad_bytes with bf16 weights and fp32 reduction, where both
// implementations move the 14 bytes counted; with bf16 reduction FSDP1 skips the cast and moves 4 of the 8 counted,
// FSDP2 about 12). docs/cost-model.md section 3.
double fsdp_copy_kernels(const Cluster& c, const Assumptions& a, double layer_params) {
  const double bytes = layer_params * (a.activation_bytes + 3 * a.grad_bytes);
  return bytes / c.hbm_rate() + 2 * c.kernel_overhead_us * 1e-6;
}

// Parameter tensors of one layer that DeepSpeed stage 3 gathers, each separately: the weight matrices, gpt QKV,
// projection, MLP up and down; llama (Hugging Face modules) q, k, v, o, gate, up and down. Biases and norm weights
// stay whole on every rank (below stage3_param_persistence_threshold, 10^5 parameters) and are never gathered.
int layer_tensor_count(const ModelSpec& m) { return m.arch == Arch::Gpt ? 4 : 7; }

// Data-parallel (and ZeRO) communication of one step and the part of it the step waits for.
struct DpComm {
  double total = 0, exposed = 0, slowdown = 0;
};

// edge_params: the parameters outside the transformer layers that a rank of a pipeline-free plan holds (the
// embedding, and an untied head): the first to be gathered in the forward and, the embedding, the last gradients
// the backward produces.
DpComm dp_comm(const Cluster& c, const Assumptions& a, const Plan& p, const Groups& g, const LayerTimes& L,
               double params, double layer_params, int layers, double microbatches, int layer_tensors,
               double embed_params, double edge_params) {
  DpComm r;
  const int n = p.dp * p.cp;
  if (n <= 1) return r;
  auto coll = [&](Collective k, double bytes) { return collective_time(c, k, bytes, n, g.dp_per_node); };
  // The layers' weights are gathered at layer_weight_bytes (FP8 with plan.fp8_param_gather), the rest at 16 bits.
  const double layer_total = std::min(params, double(std::max(1, layers)) * layer_params);
  const double grad_b = params * a.grad_bytes,
               w_b = layer_total * layer_weight_bytes(a, p) + (params - layer_total) * a.weight_bytes;
  const double lay = std::max(1, layers);
  // Bucketed collectives hide behind the backward (or forward) that precedes them except the last bucket: about one
  // layer, or the embedding where it is larger (its gradient is the backward's last, its weights the forward's first
  // need: Megatron's buckets never split a parameter), exposed = max(C - W (L-1)/L, C tail / P); the hidden part slows
  // that compute.
  const double tail = std::max(params / lay, embed_params);
  auto bucketed = [&](double comm, double window) {
    const double exposed =
        a.dp_overlap && c.async_comm ? std::max(comm - window * (lay - 1) / lay, comm * tail / params) : comm;
    r.exposed += exposed;
    if (a.dp_overlap) r.slowdown += c.overlap_slowdown * (comm - exposed);
  };
  const double bwd = layers * L.bwd(), fwd = layers * L.fwd();
  if (p.zero == 0) {
    r.total = coll(Collective::AllReduce, grad_b);
    bucketed(r.total, bwd);
  } else if (p.zero <= 2) {
    const double rs = coll(Collective::ReduceScatter, grad_b), ag = coll(Collective::AllGather, w_b);
    // ZeRO-2: gradients never held whole, reduced every micro-batch (once per step when kept whole: zero_sync)
    const double reductions = p.zero == 2 && !a.zero_sync_per_step ? microbatches : 1.0;
    r.total = reductions * rs + ag;
    for (int i = 0; i < int(reductions); ++i) bucketed(rs, bwd);
    bucketed(ag, fwd);  // the updated parameters are gathered beside the next forward
  } else if (a.zero3 == Zero3Impl::DeepSpeed) {
    // DeepSpeed stage 3, per micro-batch and layer: one all-gather per parameter tensor as each sub-module
    // runs, and only zero3_prefetch_params of the next parameters fetched ahead, so a layer larger than the
    // prefetch bucket waits for the rest of its gathers, forward and again in backward; the gradients'
    // reduce-scatters (one per tensor) run beside the backward. Across nodes each rank's collectives reach
    // one NIC's bandwidth, not the node's (Narayanan et al. 2021 Table 2: ZeRO-3 at 384-2240 A100 holds a
    // step time of 15-17 GB/s per GPU for its parameter traffic as the GPUs double; docs/cost-model.md).
    const double k = std::max(1, layer_tensors);
    const int bw_members = g.dp_spans ? 1 : g.dp_per_node;
    const double ag = k * collective_time(c, Collective::AllGather, layer_params * a.weight_bytes / k, n, bw_members);
    const double rs = k * collective_time(c, Collective::ReduceScatter, layer_params * a.grad_bytes / k, n, bw_members);
    const double ahead = std::clamp(a.zero3_prefetch_params / std::max(1.0, layer_params), 0.0, 1.0);
    const Overlap of = overlap(c, ag * ahead, L.fwd()), ob_ag = overlap(c, ag * ahead, L.bwd());
    const Overlap ob_rs = overlap(c, rs, L.bwd());
    const double waited = ag * (1 - ahead);  // forward and backward each
    r.total = microbatches * layers * (2 * ag + rs);
    r.exposed =
        microbatches * (ag + rs + layers * 2 * waited + (layers - 1) * (of.exposed + ob_ag.exposed + ob_rs.exposed));
    r.slowdown = microbatches * (layers - 1) * (of.slowdown + ob_ag.slowdown + ob_rs.slowdown);
  } else {
    // ZeRO-3 / FSDP, per micro-batch and layer: gather the layer's parameters beside the previous layer's
    // forward (prefetch of one), gather them again and reduce-scatter their gradients beside the next
    // layer's backward. The first gather and the last reduce-scatter cannot hide.
    // zero_sync = step (PyTorch pipelining): the first micro-batch's forward gathers each layer once, the
    // parameters stay for the step, and the last micro-batch's backward reduce-scatters each layer's gradient once.
    const double ag = coll(Collective::AllGather, layer_params * layer_weight_bytes(a, p));
    const double rs = coll(Collective::ReduceScatter, layer_params * a.grad_bytes);
    const double rounds = a.zero_sync_per_step ? 1.0 : microbatches, gathers = a.zero_sync_per_step ? 1.0 : 2.0;
    const Overlap of = overlap(c, ag, L.fwd()), ob = overlap(c, (gathers - 1) * ag + rs, L.bwd());
    r.total = rounds * layers * (gathers * ag + rs);
    r.exposed = rounds * (ag + rs + (layers - 1) * (of.exposed + ob.exposed));
    // The root unit (FSDP wraps each layer, then the model: embedding, final norm and an untied head) is gathered
    // before the first layer's forward and kept to the end of the backward, then reduce-scattered: neither hides.
    // cairn-train keeps it gathered across the step's micro-batches (plan.zero3_root_gather = step): one gather.
    if (edge_params > 0) {
      const double root_gathers = a.zero3_root_per_step ? 1.0 : rounds;
      const double root = root_gathers * coll(Collective::AllGather, edge_params * a.weight_bytes) +
                          rounds * coll(Collective::ReduceScatter, edge_params * a.grad_bytes);
      r.total += root;
      r.exposed += root;
    }
    r.slowdown = rounds * (layers - 1) * (of.slowdown + ob.slowdown);
    // GPUs only: the CPU path (cairn-train's own ZeRO-3) has no such copies.
    // Megatron-FSDP keeps parameters and gradients in persistent communication buffers: no copies.
    if (c.sm_count > 0 && a.zero3 == Zero3Impl::Fsdp)
      r.exposed += rounds * layers * fsdp_copy_kernels(c, a, layer_params);
  }
  return r;
}

}  // namespace

std::vector<int> stage_split(int64_t layers, int pp, int v, double embed_layers, double head_layers) {
  const int64_t stages = int64_t(pp) * v;
  if (pp < 1 || v < 1 || stages > layers) return {};
  // Per rank: how many layers it can take under a load target (first rank pays the embedding, the last
  // the head and loss); the smallest target whose capacities cover every layer, found by bisection.
  // (At or above v, truncation is the floor; floor is a libm call, and the bisection makes a hundred per plan.)
  auto capacity = [&](int r, double target) {
    const double x = target - ((r == 0 ? embed_layers : 0.0) + (r == pp - 1 ? head_layers : 0.0)) + 1e-9;
    return x < double(v) ? int64_t(v) : int64_t(x);
  };
  // The middle ranks' capacities are all the same: three terms, not pp (the search splits a million plans).
  auto covered = [&](double target) {
    return pp == 1 ? capacity(0, target)
                   : capacity(0, target) + capacity(pp - 1, target) + (pp - 2) * capacity(pp > 2 ? 1 : 0, target);
  };
  double lo = double(layers) / pp, hi = double(layers) + embed_layers + head_layers + v;
  // covered() never falls as the target grows, so the bisection ends on the smallest double that covers the layers.
  // Found directly first (a search asks for half a million splits, and the bisection takes 50 steps to get there):
  // the capacities step only at k + extra - 1e-9 for integers k, so once the integer n with covered(n - 1) short
  // and covered(n) enough is known, the answer is one of at most four such points in (n - 1, n], each computed to
  // within a few ulps, which a walk of single ulps settles. Anything the walk cannot settle is bisected as before.
  const double answer = [&]() -> double {
    if (covered(lo) >= layers) return 0;  // the bisection's invariant fails: its own answer is kept
    double n = std::ceil(lo);
    for (int i = 0; covered(n) < layers; ++i, n += 1)
      if (i == 64) return 0;
    const double below = n - 1;
    auto step_point = [&](double extra) {  // where a rank with this extra steps within (n - 1, n]
      const double y = extra - 1e-9, f = y - std::floor(y);
      return f > 0 ? below + f : n;
    };
    double points[4] = {step_point(embed_layers), step_point(head_layers), step_point(0), n};
    std::sort(points, points + 4);
    constexpr int kUlps = 16;
    for (double g : points) {
      if (g <= lo) continue;
      int up = 0;
      while (covered(g) < layers && up++ < kUlps) g = std::nextafter(g, HUGE_VAL);
      if (covered(g) < layers) continue;
      for (int down = 0;; ++down) {
        const double prev = std::nextafter(g, -HUGE_VAL);
        if (prev <= lo || covered(prev) < layers) return g;
        if (down == kUlps) return 0;
        g = prev;
      }
    }
    return 0;
  }();
  if (answer > 0) {
    hi = answer;
  } else {
    for (int it = 0; it < 60; ++it) {
      const double mid = 0.5 * (lo + hi);
      if (mid == lo || mid == hi) break;  // adjacent doubles: the remaining iterations would change nothing
      (covered(mid) >= layers ? hi : lo) = mid;
    }
  }
  std::vector<int64_t> per_rank(static_cast<size_t>(pp));
  int64_t total = 0;
  for (int r = 0; r < pp; ++r) total += per_rank[size_t(r)] = capacity(r, hi);
  // Trim the surplus one layer at a time from the most loaded rank that has more than v (on a tie the first and
  // last, which carry the embedding and head, then the lowest rank). The middle ranks reach the target together,
  // so the surplus can be most of pp: a heap of the ranks' loads, not a scan of all of them per layer.
  struct Load {
    double load;
    int r;
  };
  auto load_of = [&](int r) {
    return Load{double(per_rank[size_t(r)]) + (r == 0 ? embed_layers : 0.0) + (r == pp - 1 ? head_layers : 0.0) +
                    ((r == 0 || r == pp - 1) ? 1e-6 : 0.0),
                r};
  };
  auto lighter = [](const Load& x, const Load& y) { return x.load != y.load ? x.load < y.load : x.r > y.r; };
  std::vector<Load> heap;
  if (total > layers) {
    for (int r = 0; r < pp; ++r)
      if (per_rank[size_t(r)] > v) heap.push_back(load_of(r));
    std::make_heap(heap.begin(), heap.end(), lighter);
  }
  while (total > layers) {
    if (heap.empty()) return {};
    std::pop_heap(heap.begin(), heap.end(), lighter);
    const int best = heap.back().r;
    heap.pop_back();
    --per_rank[size_t(best)];
    --total;
    if (per_rank[size_t(best)] > v) {
      heap.push_back(load_of(best));
      std::push_heap(heap.begin(), heap.end(), lighter);
    }
  }
  // Each rank's layers over its v chunks (virtual stage j*pp + r): as even as possible, the extra layers on the
  // rank's later chunks, which the interleaved warm-up holds least (it runs p forwards of each earlier chunk
  // before the first backward: extras on chunk 0 made Llama 3 405B's v7 plan need 93 GiB on rank 1, 13 over); the
  // first chunk, which rank 0 shares with the embedding, is then the lighter. The last rank keeps its extras on
  // its early chunks, its last one carrying the head and loss.
  std::vector<int> out(static_cast<size_t>(stages));
  for (int r = 0; r < pp; ++r) {
    const int64_t n = per_rank[size_t(r)], base = n / v, rem = n % v;
    for (int j = 0; j < v; ++j) {
      const int slot = (r == pp - 1 && pp > 1) ? j : v - 1 - j;
      out[size_t(j) * pp + r] = int(base + (slot < rem ? 1 : 0));
    }
  }
  return out;
}

namespace {

// Per-micro-batch times on one rank of what is not a transformer layer: the embedding (first stage), the
// output head and cross-entropy (last stage), and the pipeline's point-to-point transfers.
struct EdgeTimes {
  double embed_f = 0, embed_b = 0;
  double head_f_gemm = 0, head_b_gemm = 0;
  double ce_bytes = 0;   // memory traffic of the cross-entropy, forward and backward together
  double ce_launch = 0;  // its kernels' launch and tail, forward and backward together
  double loss_tp = 0;    // the vocab-parallel loss's TP all-reduces (max and sum)
  double head_f = 0, head_b = 0;
  double p2p_stage = 0;  // per stage: each of its chunks receives and sends once each way
  // Interleaved schedule with its transfers overlapped: the time the chain of transfers adds to the fill and drain,
  // which no compute of the rank that waits can hide (pipeline_schedule).
  double p2p_chain = 0;
};

// T: tokens per micro-batch per rank.
EdgeTimes edge_times(const ModelSpec& m, const Cluster& c, const Assumptions& a, const Plan& p, const Groups& g,
                     double T) {
  EdgeTimes E;
  const double t = double(p.tp), e = a.activation_bytes;
  const double hbm = c.hbm_rate(), k0 = c.kernel_overhead_us * 1e-6;
  const double V = double(m.vocab), h = double(m.hidden);
  E.embed_f = T * h * e * 2 / hbm + k0;
  E.embed_b = 2 * E.embed_f;
  E.head_f_gemm = gemm_time(c, T, V / t, h, 1, e);
  E.head_b_gemm = gemm_time(c, T, h, V / t, 1, e) + gemm_time(c, h, V / t, T, 1, e);
  // Cross-entropy over the T x V/t logits (cross_entropy_cost: bytes per logit by implementation).
  const CrossEntropyCost ce = cross_entropy_cost(a.cross_entropy, e);
  const double logits = T * V / t;
  E.ce_bytes = logits * (ce.bytes_f + ce.bytes_b);
  E.ce_launch = (ce.kernels_f + ce.kernels_b) * k0;
  E.loss_tp = p.tp > 1 ? 2 * collective_time(c, Collective::AllReduce, T * 4, p.tp, g.tp_per_node) : 0;
  E.head_f = E.head_f_gemm + logits * ce.bytes_f / hbm + ce.kernels_f * k0 + E.loss_tp;
  E.head_b = E.head_b_gemm + logits * ce.bytes_b / hbm + ce.kernels_b * k0;
  return E;
}

// The pipeline's point-to-point part of the edge times (E.p2p_stage, E.p2p_chain): the rest depends on neither v
// nor the ZeRO stage.
void add_pipeline_p2p(EdgeTimes& E, const ModelSpec& m, const Cluster& c, const Assumptions& a, const Plan& p,
                      const Groups& g, double T, const LayerTimes& L) {
  const double t = double(p.tp), e = a.activation_bytes, h = double(m.hidden);
  // Pipeline p2p: Megatron sends T x h / tp per boundary (scatter-gather or SP shards) each way.
  double p2p = 0;
  if (p.pp > 1) {
    const double bytes = T * h * e / (a.pp_scatter_gather || p.sp ? t : 1.0);
    p2p = collective_time(c, Collective::SendRecv, bytes, 2, g.pp_spans ? 1 : 2);
  }
  if (p.pp > 1 && p.v > 1 && a.pp_overlap) {
    // Interleaved 1F1B overlaps each chunk's sends and receives with the next chunk's compute (Megatron's
    // overlap_p2p_comm, on by default with virtual stages): only what the chunk's compute cannot cover waits.
    const double chunk_layers = double(m.layers) / (double(p.pp) * p.v);
    const Overlap of = overlap(c, p2p, chunk_layers * L.fwd()), ob = overlap(c, p2p, chunk_layers * L.bwd());
    E.p2p_stage = p.v * (of.exposed + of.slowdown + ob.exposed + ob.slowdown);
    // Overlap hides a transfer behind other work, not from the work that needs it. Rank 0 runs chunk k of p
    // micro-batches, then chunk k + 1 of the first: that one's input has gone round the ring, through p - 1 other
    // ranks' chunk k and p transfers, while rank 0 had only p - 1 more chunks to run. Each of the v - 1 wraps of
    // the warm-up waits p transfers; the cool-down's backward wraps the same; the fill and drain themselves cross
    // p - 1 boundaries each way. (In the steady state the backward chunks between leave room.) Where nothing
    // overlaps (async_comm = false) every transfer is already in each chunk's time, and the ring has no extra wait.
    if (c.async_comm) E.p2p_chain = (2.0 * (p.pp - 1) + 2.0 * (p.v - 1) * p.pp) * p2p;
  } else {
    E.p2p_stage = p.pp > 1 ? 2.0 * p.v * p2p : 0.0;  // 1F1B: blocking send/receive pairs
  }
}

// The pipeline: layers per virtual stage and per rank (its v chunks), and the time of all micro-batches through
// it, set by the critical (busiest) rank.
struct Pipeline {
  std::vector<int> stage_layers, rank_layers;
  std::vector<double> tau;  // busy time of each pipeline rank per micro-batch, its point-to-point transfers included
  int crit = 0;
  double t_max = 0;   // busy time of the critical rank per micro-batch
  double t_pipe = 0;  // every micro-batch through the pipeline, bubble included
};

// stage_layers: plan_stage_layers of the plan, with the embedding and head weighed in layers' worth of time.
Pipeline pipeline_schedule(const Plan& p, const EdgeTimes& E, double layer_time, double mb_count,
                           std::vector<int> stage_layers) {
  Pipeline P;
  P.stage_layers = std::move(stage_layers);
  const std::vector<int>& sl = P.stage_layers;
  P.rank_layers.assign(size_t(p.pp), 0);
  for (size_t j = 0; j < sl.size(); j += size_t(p.pp))  // virtual stage j + r is rank r's
    for (size_t r = 0; r < size_t(p.pp); ++r) P.rank_layers[r] += sl[j + r];
  std::vector<double>& tau = P.tau;
  tau.assign(size_t(p.pp), 0.0);
  for (int r = 0; r < p.pp; ++r) {
    tau[size_t(r)] = P.rank_layers[size_t(r)] * layer_time + (r == 0 ? E.embed_f + E.embed_b : 0.0) +
                     (r == p.pp - 1 ? E.head_f + E.head_b : 0.0) + E.p2p_stage;
    if (tau[size_t(r)] > tau[size_t(P.crit)]) P.crit = r;
  }
  P.t_max = tau[size_t(P.crit)];
  double t_sum = 0;
  for (double x : tau) t_sum += x;
  // 1F1B: the first micro-batch crosses every stage, the rest follow the slowest (Narayanan 2021);
  // interleaved: bubble (p-1)/(v m) of the busy time.
  P.t_pipe =
      p.v == 1 ? (mb_count - 1) * P.t_max + t_sum : mb_count * P.t_max + (p.pp - 1) * P.t_max / p.v + E.p2p_chain;
  return P;
}

// The step's time on the critical rank by kind (GEMM, memory-bound, communication, bubble, ...).
// per_stage: also the per-stage detail (Breakdown::stage_layers, stage_busy), which a search's rows do not keep.
void fill_time_breakdown(Breakdown& B, const Plan& p, const LayerTimes& L, const EdgeTimes& E, const Pipeline& P,
                         double mb_count, double hbm, bool per_stage) {
  const int lay_crit = P.rank_layers[size_t(P.crit)];
  const bool crit_first = P.crit == 0, crit_last = P.crit == p.pp - 1;
  if (per_stage) B.stage_layers = P.stage_layers;
  B.layers_max_stage = *std::max_element(P.rank_layers.begin(), P.rank_layers.end());
  B.gemm = mb_count * (lay_crit * (L.f_gemm + L.b_gemm + L.r_gemm) + (crit_last ? E.head_f_gemm + E.head_b_gemm : 0));
  B.attention = mb_count * lay_crit * (L.f_attn + L.b_attn + L.r_attn);
  // Its launches too: they were in the step but in no term, up to 10 % of a tiny model's step.
  B.cross_entropy = crit_last ? mb_count * (E.ce_bytes / hbm + E.ce_launch) : 0.0;
  B.memory_bound = mb_count * (lay_crit * (L.f_mem + L.b_mem + L.r_mem) + (crit_first ? E.embed_f + E.embed_b : 0)) +
                   B.cross_entropy;
  B.recompute = mb_count * lay_crit * L.recompute();
  // The vocab-parallel loss's all-reduces are TP communication too (the terms fell short of the step without them).
  B.tp_comm = mb_count * (lay_crit * (L.f_tp + L.b_tp + L.r_tp) + (crit_last ? E.loss_tp : 0.0));
  B.cp_comm = mb_count * lay_crit * (L.f_cp + L.b_cp + L.r_cp);
  B.overlap_slowdown = mb_count * lay_crit * (L.f_slow + L.b_slow + L.r_slow);
  B.pp_p2p = mb_count * E.p2p_stage;
  B.bubble = std::max(0.0, P.t_pipe - mb_count * P.t_max);  // not -3e-17 where there is none
  B.stage_forward = lay_crit * L.fwd();
  B.stage_backward = lay_crit * L.bwd();
  B.stage_busy.clear();
  if (p.pp > 1 && per_stage)
    for (double tau : P.tau) B.stage_busy.push_back(mb_count * (tau - E.p2p_stage));
}

// Parameters a rank holds per TP rank: its layers, plus the embedding on the first pipeline rank and the head
// (or, tied, a copy of the embedding when pp > 1) and final norm on the last.
struct RankParams {
  double layer_tp = 0, embed_tp = 0, head_tp = 0;
  double of(const std::vector<int>& rank_layers, int r, int pp) const {
    return rank_layers[size_t(r)] * layer_tp + (r == 0 ? embed_tp : 0.0) + (r == pp - 1 ? head_tp : 0.0);
  }
};

RankParams params_per_rank(const ModelSpec& m, const Plan& p, const ParamCounts& pc) {
  const double t = double(p.tp);
  RankParams rp;
  rp.layer_tp = double(pc.per_layer - pc.per_layer_norms) / t + double(pc.per_layer_norms);
  rp.embed_tp = double(m.vocab * m.hidden) / t + double(pc.embedding - m.vocab * m.hidden);
  rp.head_tp = (m.tied_embeddings ? (p.pp > 1 ? double(m.vocab * m.hidden) / t : 0.0) : double(pc.head) / t) +
               double(pc.final_norm);
  return rp;
}

// Memory per rank: the first stage (most activations in flight) and the last (logits); the larger is reported.
// micro: micro-batches per step; T: tokens per micro-batch per rank.
// Layers' activations pipeline rank r holds at its peak, in layer-micro-batches. 1F1B: min(m, p - r) micro-batches
// of its layers. Interleaved (Megatron's schedule, micro-batch groups of p): the warm-up runs 2 (p - r - 1) +
// (v - 1) p chunk forwards, and one more forward precedes each backward, so N = min(m v, that + 1) chunks are held
// at once; forward k runs model chunk (k / p) mod v, backward k chunk v - 1 - (k / p) mod v. With chunks of
// different sizes the set held changes as the steady state replaces them: after forward j it is the first j + 1
// forwards less the first j - N + 1 backwards, periodic in p v, so one period past the warm-up finds the peak.
double inflight_layers_of_rank(const std::vector<int>& stage_layers, int pp, int v, int64_t micro, int r) {
  const size_t P = size_t(pp), R = size_t(r);
  if (v == 1) return double(std::min<int64_t>(micro, pp - r)) * stage_layers[R];
  const int64_t total = micro * v;
  const int64_t n = std::min<int64_t>(total, 2 * int64_t(pp - r - 1) + int64_t(v - 1) * pp + 1);
  auto chunk_layers = [&](int c) { return double(stage_layers[size_t(c) * P + R]); };
  bool even = true;
  for (int c = 1; c < v; ++c) even = even && chunk_layers(c) == chunk_layers(0);
  if (even) return double(n) * chunk_layers(0);
  // Both change only every p steps, so the held count moves linearly between their block bounds and peaks at one:
  // O(v) blocks, not O(p v) steps (the search prices a million plans). Forward step k runs chunk (k / p) mod v,
  // backward step k chunk v - 1 - (k / p) mod v; the block indices and their chunks are stepped, not divided.
  double held = 0;
  int chunk = 0;
  for (int64_t k = 0; k < n; k += pp) {
    held += double(std::min<int64_t>(pp, n - k)) * chunk_layers(chunk);
    chunk = chunk + 1 == v ? 0 : chunk + 1;
  }
  double peak = held;
  const int64_t end = std::min<int64_t>(total, n + int64_t(pp) * v);  // one period past the warm-up
  // From step j = n: the forward block of j (its end fwd_end, its chunk fwd_chunk) and the backward block of j - n.
  int64_t fwd_end = (n / pp + 1) * pp, bwd_end = n + pp;
  int fwd_chunk = int((n / pp) % v), bwd_chunk = 0;
  for (int64_t j = n; j < end;) {
    const int64_t next = std::min({end, fwd_end, bwd_end});
    held += double(next - j) * (chunk_layers(fwd_chunk) - chunk_layers(v - 1 - bwd_chunk));
    peak = std::max(peak, held);
    j = next;
    if (j == fwd_end) fwd_end += pp, fwd_chunk = fwd_chunk + 1 == v ? 0 : fwd_chunk + 1;
    if (j == bwd_end) bwd_end += pp, bwd_chunk = bwd_chunk + 1 == v ? 0 : bwd_chunk + 1;
  }
  return peak;
}

}  // namespace

bool fsdp_mixed_precision(const Assumptions& a, const Plan& p) {
  return p.zero >= 3 && !a.zero_sync_per_step && a.zero3 == Zero3Impl::Fsdp && a.weight_bytes < 4.0;
}

namespace {

// inflight: the layers' worth of activations each rank holds at its peak (inflight_layers_of_rank).
void fill_memory(Breakdown& B, const ModelSpec& m, const Cluster& c, const Assumptions& a, const Plan& p, double T,
                 const std::vector<double>& inflight, const std::vector<int>& rank_layers, const RankParams& rp) {
  const double t = double(p.tp), e = a.activation_bytes;
  const double V = double(m.vocab), h = double(m.hidden);
  const double shards = double(p.dp) * p.cp;
  auto params_of = [&](int r) { return rp.of(rank_layers, r, p.pp); };
  // zero_sync = step holds the stage's parameters gathered and its gradients whole for the step (ZeRO-1's peak).
  const bool whole = a.zero_sync_per_step;
  // FP8 parameters (plan.fp8_param_gather) store the layers' weights in 1 byte; the embedding and head stay 16-bit.
  const double fp8_param_saving = fp8_params(a, p) ? a.weight_bytes - 1.0 : 0.0;
  // PyTorch FSDP (ZeRO-3 per micro-batch) with 16-bit working weights keeps the rank's shard of the parameters in
  // fp32, and that shard is the optimizer's master copy (counted in optimizer_bytes): no 16-bit shard beside it, as
  // the ZeRO paper's stage 3 (DeepSpeed) keeps. Its sharded gradient takes the parameters' dtype, fp32, whatever
  // the reduce dtype: 4 + 4 + 8 bytes per parameter over the shards, not 2 + grad_bytes + 12 (llm-foundry's MPT-30B
  // on 8 A100, fp32 reduction: 7 GiB over-counted). The root unit (what the stage holds outside its layers: the
  // embedding, final norm and head) stays gathered from its forward to the end of the backward, with its unsharded
  // gradient (in the 16-bit dtype autograd writes; cast for the reduce-scatter at the end): FSDP does not reshard
  // the root after forward (its parameters are needed at once by the backward).
  // cairn-train's ZeRO-3 keeps fp32 weights (its shard is the parameter, weight_bytes 4): priced by the ZeRO paper's
  // count, plus the root unit gathered beside it (root_gathered below).
  const bool fsdp_mixed = fsdp_mixed_precision(a, p);
  auto states = [&](double P, double layer_P) {
    if (fsdp_mixed) {
      const double root = P - layer_P;
      return std::array<double, 3>{root * a.weight_bytes, P * 4.0 / shards + root * a.weight_bytes,
                                   P * a.optimizer_bytes / shards};
    }
    return std::array<double, 3>{(P * a.weight_bytes - layer_P * fp8_param_saving) /
                                     (p.zero >= 3 && !whole ? shards : 1.0),
                                 P * a.grad_bytes / (p.zero >= 2 && !whole ? shards : 1.0),
                                 P * a.optimizer_bytes / (p.zero >= 1 ? shards : 1.0)};
  };
  ModelSpec m_local = m;  // activations of the s/cp tokens a rank holds
  m_local.seq_len = m.seq_len / p.cp;
  const double act_layer = activation_bytes_per_layer(m_local, a, p.mb, p.tp, p.sp, p.recompute);
  B.act_per_layer = act_layer;
  const bool dropout = a.dropout && m.arch == Arch::Gpt;
  const double embed_act = dropout ? T * h / (p.sp ? t : 1.0) : 0.0;  // embedding dropout mask
  // Activations each rank holds at its peak (inflight_layers_of_rank): with uneven stages the first rank, which
  // holds the most micro-batches, is not always the one holding the most layers (Llama 3 405B's split: rank 1
  // holds 15 x 8 layers, rank 0 16 x 7).
  auto acts_of = [&](int r, double* micro_batches) {
    const double layers = inflight[size_t(r)];
    *micro_batches = layers / std::max(1, rank_layers[size_t(r)]);  // in micro-batches of the whole rank
    return layers * act_layer + (r == 0 ? embed_act * *micro_batches : 0.0);
  };
  // Recompute working set: one layer's full activations rebuilt during backward.
  // Context parallelism's attention working set, one layer's at a time (T tokens a rank holds, per TP rank: h/t
  // query and kvd = max(kv_heads, t) d / t key/value widths). The ring double-buffers the K/V it passes on with the
  // dK/dV accumulator beside them (2 x 4 kvd), keeps the received chunk, dQ and the dK/dV partials in QKV rows (3 x
  // (h + 2 kvd)), a step's partial output (h) and a packed dK/dV (2 kvd): 20 h per token without GQA, as cairn-train
  // allocates; Transformer Engine's p2p CP holds about as much. The all-gather (Transformer Engine's) holds this
  // rank's K/V, every rank's, and their gradient: (2 + 4 cp) kvd per token (cairn-train gathers whole QKV rows and
  // holds more: (2 + 8 cp) h without GQA).
  double cp_work = 0;
  if (p.cp > 1) {
    const double hl = h / t, kvd = std::max(double(m.kv_heads), t) * double(m.head_dim()) / t, row = hl + 2 * kvd;
    cp_work = p.cp_allgather ? T * (2 + 4 * p.cp) * kvd * e : T * (8 * kvd + 3 * row + hl + 2 * kvd) * e;
  }
  const double work =
      cp_work +
      (p.recompute != Recompute::None ? activation_bytes_per_layer(m_local, a, p.mb, p.tp, p.sp, Recompute::None) : 0);
  // Logits (16-bit) and the fp32 cross-entropy buffer on the last stage (Korthikanti: 4sbv/t); a fused
  // cross-entropy keeps no fp32 copy (it writes the gradient over the logits).
  const double logits = T * V / t * (e + (a.cross_entropy == CrossEntropyImpl::Fused ? 0.0 : 4.0));
  // ZeRO-3 keeps gathered parameters: FSDP two whole layers (current + prefetch), DeepSpeed the tensor in use
  // plus its prefetch bucket (never more than two layers).
  const double largest_tensor = std::max(h * (h + 2.0 * m.kv_heads * m.head_dim()), h * double(m.ffn_hidden)) / t;
  const double gathered = a.zero3 == Zero3Impl::DeepSpeed
                              ? std::min(2 * rp.layer_tp, largest_tensor + a.zero3_prefetch_params)
                              : 2 * rp.layer_tp;
  // ZeRO-2/3 as FSDP also hold unsharded gradients in flight: the layer backward is writing and the two whose
  // reduce-scatters have not finished (cairn-train's bound; FSDP2 holds about as many reduce-scatter inputs).
  const double grads_in_flight =
      p.zero >= 2 && !whole && a.zero3 == Zero3Impl::Fsdp ? 3 * rp.layer_tp * a.grad_bytes : 0.0;
  const double zero_buffers = (p.zero >= 3 && !whole ? gathered * layer_weight_bytes(a, p) : 0.0) + grads_in_flight;
  const double reserved = c.reserved_gib * kGiB;
  // FP8 linear layers keep an FP8 copy of each weight and of its transpose (2 bytes per parameter of the rank's
  // layers) across the micro-batches of a step; under ZeRO-3 only the gathered layers have them. FP8 parameters
  // are the copy: only the transpose is extra (1 byte).
  auto layer_params_of = [&](int r) { return double(rank_layers[size_t(r)]) * rp.layer_tp; };
  // The root unit gathered (FSDP without mixed precision, where the states above leave it out; cairn-train): held
  // from its forward to the end of its backward, by cairn-train for the whole step (plan.zero3_root_gather).
  auto root_gathered = [&](int r) {
    return p.zero >= 3 && !whole && !fsdp_mixed && a.zero3 == Zero3Impl::Fsdp
               ? std::max(0.0, params_of(r) - layer_params_of(r)) * a.weight_bytes
               : 0.0;
  };
  auto fp8_copies = [&](int r) {
    if (!a.fp8) return 0.0;
    return (fp8_params(a, p) ? 1.0 : 2.0) * (p.zero >= 3 && !whole ? gathered : layer_params_of(r));
  };
  auto total = [&](int r, double acts, bool has_logits) {
    auto s3 = states(params_of(r), layer_params_of(r));
    return s3[0] + s3[1] + s3[2] + acts + (has_logits ? logits : 0.0) + work + zero_buffers + root_gathered(r) +
           fp8_copies(r) + reserved;
  };
  // The rank with the most memory is the plan's: its states, activations and buffers are the breakdown's.
  int r_max = 0;
  double mem_max = -1, acts_max = 0, inflight_max = 0;
  for (int r = 0; r < p.pp; ++r) {
    double micro_batches = 0;
    const double acts = acts_of(r, &micro_batches);
    const double mem = total(r, acts, r == p.pp - 1);
    if (mem > mem_max) mem_max = mem, r_max = r, acts_max = acts, inflight_max = micro_batches;
  }
  const auto s3 = states(params_of(r_max), layer_params_of(r_max));
  B.mem_rank = r_max;
  B.mem_params = int64_t(params_of(r_max));
  B.inflight = inflight_max;
  B.mem_weights = s3[0];
  B.mem_grads = s3[1];
  B.mem_optimizer = s3[2];
  B.mem_activations = acts_max;
  B.mem_logits = r_max == p.pp - 1 ? logits : 0.0;
  B.mem_buffers = work + zero_buffers + root_gathered(r_max) + fp8_copies(r_max) + reserved;
  B.mem_total = mem_max;
}

// Throughput, achieved model and hardware FLOP/s per GPU (hardware: with recompute), MFU and HFU.
void fill_rates(Evaluation& ev, const ModelSpec& m, const Cluster& c, const Plan& p, const Assumptions& a,
                const FlopsPerToken& fl, int64_t global_batch) {
  const double tokens = double(global_batch) * double(m.seq_len);
  ev.tokens_per_s = tokens / ev.step_time_s;
  const double model_flops = fl.model_train * tokens;
  double hw_per_token = fl.model_train;
  if (p.recompute == Recompute::Full) hw_per_token += double(m.layers) * fl.layer_forward;
  if (p.recompute == Recompute::Selective && a.selective_alternate_mm) {
    const double h = double(m.hidden), kvd = double(m.kv_heads * m.head_dim()), f = double(m.ffn_hidden);
    hw_per_token += double(m.layers) * 2 * h * ((m.arch == Arch::Gpt ? 0.0 : kvd) + h + f);
  } else if (p.recompute == Recompute::Selective) {
    hw_per_token += double(m.layers) * fl.attention_core;
  }
  // Hardware FLOPs are the ones run: a fused causal kernel skips the masked score blocks (the model FLOPs count
  // them, as Megatron does), in the forward and in each forward recompute reruns. Without this, HFU passed 0.9 at
  // 1M tokens, far above any rate the pricing assumed.
  if (a.flash_attention && a.causal) {
    const double skipped = double(m.layers) * fl.attention_core * (1 - causal_fraction(a, c, double(m.seq_len)));
    const double passes =
        3.0 + (p.recompute == Recompute::Full || (p.recompute == Recompute::Selective && !a.selective_alternate_mm)
                   ? 1.0
                   : 0.0);
    hw_per_token -= passes * skipped;
  }
  const double denom = ev.step_time_s * double(c.world());
  ev.tflops_per_gpu = model_flops / denom / 1e12;
  ev.hw_tflops_per_gpu = hw_per_token * tokens / denom / 1e12;
  ev.mfu = ev.tflops_per_gpu / c.peak_tflops;
  ev.hfu = ev.hw_tflops_per_gpu / c.peak_tflops;
}

// Bytes the optimizer step moves per local parameter. Fused Adam (Megatron, apex): one pass reading the gradient
// and the states and writing the states and the 16-bit weight. Eager PyTorch Adam (optimizer_fused = false:
// Composer's DecoupledAdamW, torch.optim.AdamW for-loop/foreach) runs each update as its own kernel over the
// fp32 tensors: weight decay (r1 w1), m = b1 m + (1-b1) g (mul_: r1 w1, add_: r2 w1), v (mul_: r1 w1, addcmul_:
// r3 w1), sqrt (r1 w1), / (r1 w1), + eps (r1 w1), p.addcdiv_ (r3 w1) and the gradient-norm clip (r1, then
// r1 w1): 26 element accesses of optimizer_bytes/3 (4 for fp32 master, m, v).
double optimizer_bytes_per_param(const Assumptions& a) {
  if (!a.optimizer_fused) return 26 * a.optimizer_bytes / 3;
  return 2 * a.grad_bytes + 2 * a.optimizer_bytes + a.weight_bytes;
}

// Rejects a plan whose memory exceeds the HBM left after the headroom.
void check_memory(Evaluation& ev, const Cluster& c, const Assumptions& a, bool fill_reason) {
  const double capacity = c.hbm_gib * (1 - a.memory_headroom);
  if (ev.memory_gib > capacity) {
    ev.reject = Reject::kMemory;
    if (fill_reason)
      ev.reason =
          strprintf("needs %.1f GiB per device, %.1f GiB over the %.1f GiB available (%.3g GiB HBM%s)", ev.memory_gib,
                    ev.memory_gib - capacity, capacity, c.hbm_gib,
                    a.memory_headroom > 0 ? strprintf(", %.0f%% headroom", a.memory_headroom * 100).c_str() : "");
  }
}

}  // namespace

struct EvaluationCache::Impl {
  int dp = 0, tp = 0, pp = 0, cp = 0;  // the layout the layer times are of
  struct Layer {
    LayerTimes times;
    EdgeTimes edges;  // without the pipeline's p2p
  };
  std::unordered_map<uint64_t, Layer> layers;
  // The last plan's stage split and micro-batch count, and the layers each rank held in flight.
  std::vector<int> stage_layers;
  int v = 0;
  int64_t micro = -1;
  std::vector<double> inflight;
  // Stage splits of the current (layers, pp, v) by the embedding's and head's weight in layers: the plans that
  // differ only in the ZeRO stage split alike.
  int64_t split_layers = -1;
  int split_pp = 0, split_v = 0;
  std::map<std::pair<double, double>, std::vector<int>> splits;
};
EvaluationCache::EvaluationCache() : impl(std::make_unique<Impl>()) {}
EvaluationCache::~EvaluationCache() = default;

namespace {

// layer_times and edge_times (but its p2p) through the cache: keyed by what they read of the plan beside the layout
// (which g follows).
void cached_layer_and_edges(EvaluationCache* cache, const ModelSpec& m, const Cluster& c, const Assumptions& a,
                            const Plan& p, const Groups& g, double T, LayerTimes& L, EdgeTimes& E) {
  if (!cache) {
    L = layer_times(m, c, a, p, g);
    E = edge_times(m, c, a, p, g, T);
    return;
  }
  EvaluationCache::Impl& k = *cache->impl;
  if (k.dp != p.dp || k.tp != p.tp || k.pp != p.pp || k.cp != p.cp) {
    k.layers.clear();
    k.dp = p.dp, k.tp = p.tp, k.pp = p.pp, k.cp = p.cp;
  }
  const uint64_t key = (uint64_t(uint32_t(p.mb)) << 8) | (uint64_t(p.recompute) << 3) | (uint64_t(p.sp) << 2) |
                       (uint64_t(p.tp_overlap) << 1) | uint64_t(p.cp_allgather);
  auto it = k.layers.find(key);
  if (it == k.layers.end())
    it = k.layers.emplace(key, EvaluationCache::Impl::Layer{layer_times(m, c, a, p, g), edge_times(m, c, a, p, g, T)})
             .first;
  L = it->second.times;
  E = it->second.edges;
}

// plan_stage_layers through the cache.
std::vector<int> cached_stage_layers(EvaluationCache* cache, const ModelSpec& m, const Plan& p, double embed_layers,
                                     double head_layers) {
  if (!cache || !p.stage_layers.empty() || m.layers % (int64_t(p.pp) * p.v) == 0)
    return plan_stage_layers(m, p, embed_layers, head_layers);
  EvaluationCache::Impl& k = *cache->impl;
  if (k.split_layers != m.layers || k.split_pp != p.pp || k.split_v != p.v) {
    k.splits.clear();
    k.split_layers = m.layers, k.split_pp = p.pp, k.split_v = p.v;
  }
  auto [it, added] = k.splits.try_emplace({embed_layers, head_layers});
  if (added) it->second = plan_stage_layers(m, p, embed_layers, head_layers);
  return it->second;
}

// inflight_layers_of_rank for every rank, through the cache (else into `local`).
const std::vector<double>& inflight_layers(EvaluationCache* cache, const std::vector<int>& stage_layers, int pp, int v,
                                           int64_t micro, std::vector<double>& local) {
  auto compute = [&](std::vector<double>& out) {
    out.assign(size_t(pp), 0.0);
    for (int r = 0; r < pp; ++r) out[size_t(r)] = inflight_layers_of_rank(stage_layers, pp, v, micro, r);
  };
  if (!cache) {
    compute(local);
    return local;
  }
  EvaluationCache::Impl& k = *cache->impl;
  if (k.micro != micro || k.v != v || k.inflight.size() != size_t(pp) || k.stage_layers != stage_layers) {
    compute(k.inflight);
    k.stage_layers = stage_layers;
    k.v = v;
    k.micro = micro;
  }
  return k.inflight;
}

}  // namespace

Evaluation evaluate(const ModelSpec& model, const Cluster& c, const Plan& p, int64_t global_batch, const Assumptions& a,
                    bool fill_reason, EvaluationCache* cache) {
  Evaluation ev;
  ev.plan = p;
  // A vocabulary tp does not divide is padded (Megatron's rule): the plan prices the rows it runs.
  ModelSpec m = model;
  m.vocab = tp_padded_vocab(model.vocab, p.tp);
  if (m.vocab != model.vocab) ev.b.padded_vocab = m.vocab;
  if (a.fp8) require_fp8_cores(c);  // before the plan checks: every plan would fail the same way
  {
    std::string why;
    ev.reject = check_plan(m, c, p, global_batch, a, fill_reason ? &why : nullptr);
    if (ev.reject != Reject::kOk) {
      ev.reason = why;
      return ev;
    }
  }
  Breakdown& B = ev.b;
  const int64_t micro = global_batch / (int64_t(p.dp) * p.mb);
  const double mb_count = double(micro);
  B.microbatches = int(micro);
  const ParamCounts pc = parameter_counts(m);
  const FlopsPerToken fl = flops_per_token(m);
  const double T = double(p.mb) * double(m.seq_len) / p.cp;  // tokens per micro-batch per rank
  const double hbm = c.hbm_rate(), k0 = c.kernel_overhead_us * 1e-6;
  const Groups g = place_groups(c, p);
  B.tp_tier = p.tp == 1 ? "-" : (g.tp_spans ? "inter" : "intra");
  B.cp_tier = p.cp == 1 ? "-" : (g.cp_spans ? "inter" : "intra");
  B.dp_tier = p.dp * p.cp == 1 ? "-" : (g.dp_spans ? "inter" : "intra");
  B.pp_tier = p.pp == 1 ? "-" : (g.pp_spans ? "inter" : "intra");

  // ---- per-micro-batch layer, embedding and head times; the pipeline over them
  LayerTimes L;
  EdgeTimes E;
  cached_layer_and_edges(cache, m, c, a, p, g, T, L, E);
  add_pipeline_p2p(E, m, c, a, p, g, T, L);
  const double layer_time = std::max(1e-30, L.fwd() + L.bwd());
  const Pipeline P = pipeline_schedule(p, E, layer_time, mb_count,
                                       cached_stage_layers(cache, m, p, (E.embed_f + E.embed_b) / layer_time,
                                                           (E.head_f + E.head_b) / layer_time));
  fill_time_breakdown(B, p, L, E, P, mb_count, hbm, cache == nullptr);
  const int lay_crit = P.rank_layers[size_t(P.crit)];

  // ---- parameters per rank (per TP rank)
  const RankParams rp = params_per_rank(m, p, pc);
  double params_max = 0;
  for (int r = 0; r < p.pp; ++r) params_max = std::max(params_max, rp.of(P.rank_layers, r, p.pp));
  B.stage_params = int64_t(params_max);

  // ---- data parallel / ZeRO communication, optimizer
  // The parameters outside the critical stage's layers (embedding, final norm, head; with pp > 1 those of the
  // stage that holds them): ZeRO-3 gathers and reduce-scatters them as FSDP's root unit. With pp > 1 they were left
  // out, and ZeRO-3 moved less than ZeRO-2 (gpt2-124m, dp4 x pp2, one micro-batch: 0.87 against 1.06 ms).
  const bool one_stage = p.pp == 1;
  const double edge_params = std::max(0.0, params_max - double(lay_crit) * rp.layer_tp);
  const DpComm dc = dp_comm(c, a, p, g, L, params_max, rp.layer_tp, lay_crit, mb_count, layer_tensor_count(m),
                            one_stage ? rp.embed_tp : 0.0, edge_params);
  B.dp_comm = dc.total;
  B.dp_exposed = dc.exposed + dc.slowdown;  // what the step waits for, incl. compute slowed by the hidden part
  const double shards = double(p.dp) * p.cp;
  const double local_params = params_max / (p.zero >= 1 ? shards : 1.0);
  B.optimizer = local_params * optimizer_bytes_per_param(a) / hbm + 4 * k0;
  B.fp8_cast = mb_count * lay_crit * (L.f_cast + L.b_cast + L.r_cast);
  if (a.fp8) {
    // The updated weights are cast to FP8 (with their transposes) once per step, at the first micro-batch;
    // ZeRO-3 gathers them again for every micro-batch and casts them again (read 2, write 1 + 1; + 2 for amax).
    // With FP8 parameters the optimizer writes its shard in FP8 (read the fp32 master 4, write 1; + 4 for amax)
    // and each gather is followed by the transpose alone (read 1, write 1).
    const double casts = p.zero >= 3 && !a.zero_sync_per_step ? mb_count : 1.0;
    const double layer_w = lay_crit * rp.layer_tp;
    const double weights = fp8_params(a, p)
                               ? (casts * layer_w * 2.0 + layer_w / shards * (a.fp8_current_scaling ? 9.0 : 5.0)) / hbm
                               : casts * layer_w * fp8_cast_bytes_per_element(a, false) / hbm;
    B.optimizer += weights;
    B.fp8_cast += weights;
  }
  ev.step_time_s = P.t_pipe + B.dp_exposed + B.optimizer;

  // ---- memory per rank, rates, and whether it fits
  std::vector<double> inflight_here;
  fill_memory(B, m, c, a, p, T, inflight_layers(cache, P.stage_layers, p.pp, p.v, micro, inflight_here), P.rank_layers,
              rp);
  ev.memory_gib = B.mem_total / kGiB;
  fill_rates(ev, m, c, p, a, fl, global_batch);
  check_memory(ev, c, a, fill_reason);
  return ev;
}

}  // namespace cairn::costmodel
