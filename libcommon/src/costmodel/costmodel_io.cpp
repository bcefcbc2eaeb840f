// Cost model I/O: [model]/[cluster] from the config, cairn-sweep's fabric.toml, JSON and --explain text.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "cairn/config.h"
#include "cairn/costmodel.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/records.h"
#include "cairn/sections.h"

namespace cairn::costmodel {

namespace {

std::string normalise(const std::string& s) {
  std::string r;
  for (char ch : s)
    if (std::isalnum(static_cast<unsigned char>(ch))) r += char(std::tolower(static_cast<unsigned char>(ch)));
  return r;
}

int collective_index(const std::string& name) {
  const std::string n = normalise(name);
  if (n == "allreduce") return int(Collective::AllReduce);
  if (n == "allgather") return int(Collective::AllGather);
  if (n == "reducescatter") return int(Collective::ReduceScatter);
  if (n == "sendrecv" || n == "p2p") return int(Collective::SendRecv);
  return -1;
}

}  // namespace

ModelSpec model_from_section(const ModelSection& s) {
  ModelSpec m;
  m.arch = s.architecture == "llama" ? Arch::Llama : Arch::Gpt;
  m.layers = s.layers;
  m.hidden = s.hidden;
  m.heads = s.heads;
  m.kv_heads = s.kv_heads;
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  m.seq_len = s.seq_len;
  m.vocab = s.vocab;
  m.tied_embeddings = s.tied_embeddings;
  if (m.hidden % m.heads != 0) validate_model(m);  // reports the key before ffn defaults use it
  m.ffn_hidden = s.ffn_hidden;
  if (m.ffn_hidden == 0) m.ffn_hidden = default_ffn_hidden(m.arch, m.hidden);
  validate_model(m);
  return m;
}

ModelSpec model_from_config(const Config& cfg) { return model_from_section(read_section<ModelSection>(cfg)); }

void apply_fabric(Cluster& c, const std::string& path) {
  if (!path_exists(path)) throw UsageError(file_message("cannot open", path, "No such file or directory"));
  json f;
  try {
    f = read_toml_file_as_json(path);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(file_message("cannot parse", path, e.what()));
  }
  // Every figure is read through JsonFields: wrong types, non-finite or negative numbers are
  // errors naming the file and key (exit 2), never a raw library message or a `nan` plan.
  JsonFields top(f, path, "fabric file");
  int rpn = 0, nodes = 1;
  if (top.has("fabric")) {
    const records::FabricHeader header = records::FabricHeader::from_json(top.object("fabric"));
    rpn = static_cast<int>(header.ranks_per_node);
    nodes = static_cast<int>(header.nodes);
  }
  int found = 0;
  for (const char* tier_name : {"intra", "inter", "world"}) {
    if (!top.has(tier_name)) continue;
    JsonFields tier_fields = top.object(tier_name);
    const std::string tn = tier_name;
    // "world" spans nodes when the sweep ran on several; use it for the inter tier if no inter fit.
    Tier* tier = tn == "intra" ? &c.intra : &c.inter;
    if (tn == "world") {
      const bool multi_node = nodes > 1;
      if (!multi_node) tier = &c.intra;
      bool have = false;
      for (const auto& x : tier->fitted) have |= x.valid;
      if (have) continue;
    }
    for (auto it = f[tier_name].begin(); it != f[tier_name].end(); ++it) {
      const int idx = collective_index(it.key());
      if (idx < 0 || !it.value().is_object()) continue;
      const records::FabricTier measured = records::FabricTier::from_json(tier_fields.nested(it.value(), it.key()));
      Tier::Fit fit;
      fit.alpha_us = measured.alpha_us;
      fit.busbw_gbps = measured.busbw_gbps;
      fit.ranks = static_cast<int>(measured.ranks);
      fit.valid = true;
      tier->fitted[size_t(idx)] = fit;
      // The inter fit is driven by the ranks of each node in that communicator (1 for a cross-node
      // communicator of one rank per node; ranks_per_node for the world).
      if (tier == &c.inter) tier->fitted_ranks_per_node = tn == "world" ? std::max(1, rpn) : 1;
      ++found;
    }
  }
  if (found == 0)
    throw UsageError(file_message("no [intra.*], [inter.*] or [world.*] collective fits in", path,
                                  "expected tables like [intra.allreduce] with alpha_us and busbw_gbps"));
  c.has_fabric = true;
  c.fabric_path = path;
}

Cluster cluster_from_section(const ClusterSection& s) {
  Cluster c;
  c.name = s.name;
  c.nodes = int(s.nodes);
  c.gpus_per_node = s.gpus_per_node;
  c.peak_tflops = s.peak_tflops;
  c.peak_fp8_tflops = s.peak_fp8_tflops;
  c.fp8_gemm_max_efficiency = s.fp8_gemm_max_efficiency;
  c.hbm_gib = s.hbm_gib;
  c.hbm_gbps = s.hbm_gbps;
  c.hbm_efficiency = s.hbm_efficiency;
  c.gemm_flops = s.gemm_flops;
  c.gemm_efficiency = s.gemm_efficiency;
  if (c.gemm_flops.size() != c.gemm_efficiency.size())
    throw UsageError(strprintf("[cluster] gemm_flops has %zu entries but gemm_efficiency has %zu", c.gemm_flops.size(),
                               c.gemm_efficiency.size()));
  for (size_t i = 0; i < c.gemm_flops.size(); ++i) {
    if (!(c.gemm_flops[i] > 0) || (i > 0 && c.gemm_flops[i] <= c.gemm_flops[i - 1]))
      throw UsageError("[cluster] gemm_flops must be positive and strictly ascending");
    if (!(c.gemm_efficiency[i] > 0) || c.gemm_efficiency[i] > 1.0)
      throw UsageError(strprintf("[cluster] gemm_efficiency[%zu] = %g is outside (0, 1]", i, c.gemm_efficiency[i]));
  }
  c.gemm_max_efficiency = s.gemm_max_efficiency;
  c.sm_count = s.sm_count;
  c.gemm_k_half = s.gemm_k_half;
  c.gemm_table_m = s.gemm_table_m;
  c.gemm_table_n = s.gemm_table_n;
  c.gemm_table_k = s.gemm_table_k;
  c.gemm_table_efficiency = s.gemm_table_efficiency;
  const size_t shapes = c.gemm_table_m.size();
  if (c.gemm_table_n.size() != shapes || c.gemm_table_k.size() != shapes || c.gemm_table_efficiency.size() != shapes)
    throw UsageError(strprintf("[cluster] gemm_table_m/n/k/efficiency must have equal lengths (%zu, %zu, %zu, %zu)",
                               shapes, c.gemm_table_n.size(), c.gemm_table_k.size(), c.gemm_table_efficiency.size()));
  for (size_t i = 0; i < shapes; ++i) {
    if (!(c.gemm_table_m[i] >= 1 && c.gemm_table_n[i] >= 1 && c.gemm_table_k[i] >= 1))
      throw UsageError(strprintf("[cluster] gemm_table shape %zu has a dimension below 1", i));
    if (!(c.gemm_table_efficiency[i] > 0) || c.gemm_table_efficiency[i] > 1.0)
      throw UsageError(
          strprintf("[cluster] gemm_table_efficiency[%zu] = %g is outside (0, 1]", i, c.gemm_table_efficiency[i]));
  }
  c.gemm_table_fp8_efficiency = s.gemm_table_fp8_efficiency;
  const auto& fp8 = c.gemm_table_fp8_efficiency;
  if (!fp8.empty() && fp8.size() != shapes)
    throw UsageError(strprintf("[cluster] gemm_table_fp8_efficiency has %zu entries but gemm_table_m has %zu shapes "
                               "(the FP8 efficiencies are measured at the same shapes)",
                               fp8.size(), shapes));
  if (!fp8.empty() && !(s.peak_fp8_tflops > 0))
    throw UsageError("[cluster] gemm_table_fp8_efficiency is given but peak_fp8_tflops = 0: its efficiencies are "
                     "fractions of the FP8 peak");
  for (size_t i = 0; i < fp8.size(); ++i)
    if (!(fp8[i] > 0) || fp8[i] > 1.0)
      throw UsageError(strprintf("[cluster] gemm_table_fp8_efficiency[%zu] = %g is outside (0, 1]", i, fp8[i]));
  c.attention_efficiency = s.attention_efficiency;
  c.flash2_efficiency = s.flash2_efficiency;
  c.attention_row_keys = s.attention_row_keys;
  c.attention_measured = s.attention_measured;
  c.attention_tile = double(s.attention_tile);
  if (!(s.tdp_w >= 0) || !(s.power_limit_w >= 0))
    throw UsageError(strprintf("[cluster] tdp_w = %g, power_limit_w = %g: watts, 0 or more (0: no power model)",
                               s.tdp_w, s.power_limit_w));
  // A cap with nothing to compare it to would be ignored (clock_factor 1): said instead.
  if (s.power_limit_w > 0 && s.tdp_w <= 0)
    throw UsageError(strprintf("[cluster] power_limit_w = %g needs tdp_w, the board power the cluster's efficiencies "
                               "hold at (datasheet TDP: A100 SXM 400, H100/H200 SXM 700); without it the cap prices "
                               "nothing",
                               s.power_limit_w));
  c.tdp_w = s.tdp_w;
  c.power_limit_w = s.power_limit_w;
  c.overlap_slowdown = s.overlap_slowdown;
  c.async_comm = s.async_comm;
  c.kernel_overhead_us = s.kernel_overhead_us;
  c.reserved_gib = s.reserved_gib;
  c.intra.bandwidth_gbps = s.intra_bw_gbps;
  c.intra.latency_us = s.intra_latency_us;
  c.intra.efficiency = s.intra_efficiency;
  c.inter.bandwidth_gbps = s.inter_bw_gbps;
  c.inter.latency_us = s.inter_latency_us;
  c.inter.efficiency = s.inter_efficiency;
  c.intra.fabric_efficiency = s.intra_fabric_efficiency;
  c.inter.fabric_efficiency = s.inter_fabric_efficiency;
  if (!s.fabric.empty()) apply_fabric(c, s.fabric);
  return c;
}

Cluster cluster_from_config(const Config& cfg) { return cluster_from_section(read_section<ClusterSection>(cfg)); }

Evaluation evaluate_config(const Config& cfg, int world) {
  const ModelSpec m = model_from_section(read_section<ModelSection>(cfg));
  Cluster c = cluster_from_section(read_section<ClusterSection>(cfg));
  if (world > 0 && world != c.world()) {
    if (world % c.gpus_per_node == 0) {
      c.nodes = world / c.gpus_per_node;
    } else {
      c.nodes = 1;
      c.gpus_per_node = world;
    }
  }
  const auto plan = read_section<PlanSection>(cfg);
  const int64_t batch = plan.global_batch > 0 ? plan.global_batch : read_section<TrainSection>(cfg).global_batch;
  const Plan p = plan_from_section(read_section<ParallelSection>(cfg), c.world());
  return evaluate(m, c, p, batch, assumptions_from_section(plan), true);
}

json to_json(const Evaluation& e) {
  const Plan& p = e.plan;
  const Breakdown& b = e.b;
  records::PlanRow row;
  row.dp = p.dp;
  row.tp = p.tp;
  row.pp = p.pp;
  row.v = p.v;
  row.mb = p.mb;
  row.zero = p.zero;
  row.cp = p.cp;
  row.recompute = recompute_name(p.recompute);
  row.sp = p.sp;
  row.tp_overlap = p.tp_overlap;
  row.cp_comm = p.cp_allgather ? "allgather" : "p2p";
  row.feasible = e.feasible();
  if (!e.feasible()) row.reason = e.reason.empty() ? reject_name(e.reject) : e.reason;
  row.step_time_s = e.step_time_s;
  row.tokens_per_s = e.tokens_per_s;
  row.tflops_per_gpu = e.tflops_per_gpu;
  row.hw_tflops_per_gpu = e.hw_tflops_per_gpu;
  row.mfu = e.mfu;
  row.hfu = e.hfu;
  row.memory_gib = e.memory_gib;
  row.breakdown = {{"time_s",
                    {{"gemm", b.gemm},
                     {"attention", b.attention},
                     {"memory_bound", b.memory_bound},
                     {"cross_entropy", b.cross_entropy},
                     {"recompute", b.recompute},
                     {"tp_comm", b.tp_comm},
                     {"cp_comm", b.cp_comm},
                     {"overlap_slowdown", b.overlap_slowdown},
                     {"pp_p2p", b.pp_p2p},
                     {"bubble", b.bubble},
                     {"dp_comm", b.dp_comm},
                     {"dp_exposed", b.dp_exposed},
                     {"optimizer", b.optimizer},
                     {"fp8_cast", b.fp8_cast},
                     {"stage_forward_per_microbatch", b.stage_forward},
                     {"stage_backward_per_microbatch", b.stage_backward}}},
                   {"memory_gib",
                    {{"weights", b.mem_weights / kGiB},
                     {"grads", b.mem_grads / kGiB},
                     {"optimizer", b.mem_optimizer / kGiB},
                     {"activations", b.mem_activations / kGiB},
                     {"logits", b.mem_logits / kGiB},
                     {"buffers", b.mem_buffers / kGiB}}},
                   {"microbatches", b.microbatches},
                   {"inflight_microbatches", b.inflight},
                   {"memory_rank", b.mem_rank},
                   {"padded_vocab", b.padded_vocab},
                   {"layers_max_stage", b.layers_max_stage},
                   {"stage_layers", b.stage_layers},
                   {"stage_busy_s", b.stage_busy},
                   {"stage_params", b.stage_params},
                   {"activation_bytes_per_layer", b.act_per_layer},
                   {"tiers", {{"tp", b.tp_tier}, {"cp", b.cp_tier}, {"dp", b.dp_tier}, {"pp", b.pp_tier}}}};
  return row.to_json();
}

namespace {

// A figure that stays readable for a CPU "cluster" too: 0.024 TFLOP/s and 0.6 GiB printed as 0 and 1.
std::string figure_text(double v) { return std::abs(v) >= 10 || v == 0 ? strprintf("%.0f", v) : strprintf("%.3g", v); }
// An achieved rate: one decimal as before from 10 up, three significant digits below.
std::string rate_text(double v) { return std::abs(v) >= 10 ? strprintf("%.1f", v) : strprintf("%.3g", v); }

// A parameter count as people say it: 3.411 B, 1.53 M, 540.
std::string param_count_text(double n) {
  return n >= 1e9 ? strprintf("%.3f B", n / 1e9) : n >= 1e6 ? strprintf("%.3f M", n / 1e6) : strprintf("%.0f", n);
}

// The model FLOPs per token and the formula of the model's family that gives them (flops_per_token: 2 FLOPs per
// multiply-add of each GEMM, training = 3 x forward). Per layer forward: QKV 2h(h + 2kvd), attention 4sh,
// projection 2h^2, MLP 2 x 2hf (gpt: GELU, up and down) or 3 x 2hf (llama: SwiGLU gate, up and down); head 2hV.
std::string flops_formula(const ModelSpec& m, const FlopsPerToken& fl) {
  const long long kvd = static_cast<long long>(m.kv_heads) * m.head_dim();
  if (m.arch == Arch::Gpt) {
    std::string f = strprintf("%.4g model FLOPs/token = 6lh(2h + 2kvd + 2f + 2s) + 6hV (gpt: GELU MLP", fl.model_train);
    if (m.kv_heads == m.heads && m.ffn_hidden == 4 * m.hidden)
      return f +
             strprintf("; kvd = h, f = 4h: Narayanan 72lh^2(1 + s/6h + V/12lh) = %.4g)", narayanan_flops_per_token(m));
    return f + strprintf("; kvd = %lld, f = %lld)", kvd, (long long)m.ffn_hidden);
  }
  return strprintf("%.4g model FLOPs/token = 6lh(2h + 2kvd + 3f + 2s) + 6hV (llama: SwiGLU MLP, 3 matrices; "
                   "GQA kvd = kv_heads x head_dim = %lld x %lld = %lld; f = %lld)",
                   fl.model_train, (long long)m.kv_heads, (long long)m.head_dim(), kvd, (long long)m.ffn_hidden);
}

}  // namespace

std::string explain(const ModelSpec& model, const Cluster& c, const Evaluation& e, int64_t global_batch,
                    const Assumptions& a) {
  std::ostringstream os;
  const Breakdown& b = e.b;
  ModelSpec m = model;  // as priced: a vocabulary tp does not divide is padded
  if (b.padded_vocab > 0) m.vocab = b.padded_vocab;
  const ParamCounts pc = parameter_counts(m);
  const FlopsPerToken fl = flops_per_token(m);
  // Every key the price depends on, off ones included: a plan given without tp_overlap (or cp_comm) is priced
  // with it off, and the line should say so rather than leave it to be guessed from the search's best.toml.
  os << "plan      " << plan_string(e.plan);
  if (e.plan.tp > 1 && !e.plan.tp_overlap) os << ",tp_overlap=off";
  if (e.plan.cp > 1 && !e.plan.cp_allgather) os << ",cp_comm=p2p";
  os << "\n";
  os << strprintf("model     %s, %lld layers, h=%lld, heads=%lld (kv %lld), ffn=%lld, s=%lld, V=%lld: %s params\n",
                  m.arch == Arch::Gpt ? "gpt" : "llama", (long long)m.layers, (long long)m.hidden, (long long)m.heads,
                  (long long)m.kv_heads, (long long)m.ffn_hidden, (long long)m.seq_len, (long long)m.vocab,
                  param_count_text(double(pc.total)).c_str());
  if (b.padded_vocab > 0)
    os << strprintf("          V padded from %lld to %lld: tp = %d does not divide it (Megatron's rule, a multiple "
                    "of 128 x tp; best.toml sets [model] vocab)\n",
                    (long long)model.vocab, (long long)b.padded_vocab, e.plan.tp);
  os << "flops     " << flops_formula(m, fl) << "\n";
  std::string links;
  if (c.has_fabric) {
    links = ", links from " + c.fabric_path;
    // the site's fraction of the sweep's speed (calibrate --from-runs), when it is not all of it
    if (c.intra.fabric_efficiency < 1 || c.inter.fabric_efficiency < 1)
      links += strprintf(" at %.2f (intra) / %.2f (inter) of their speed", c.intra.fabric_efficiency,
                         c.inter.fabric_efficiency);
  }
  os << strprintf("cluster   %s: %d x %d devices, %s TFLOP/s peak, %s GiB at %s GB/s%s\n", c.name.c_str(), c.nodes,
                  c.gpus_per_node, figure_text(c.peak_tflops).c_str(), figure_text(c.hbm_gib).c_str(),
                  figure_text(c.hbm_gbps).c_str(), links.c_str());
  if (a.fp8) {
    // Which measurements correct the FP8 GEMMs: a calibrated FP8 table, the bf16 table's, or none (the shape model).
    const size_t shapes = c.gemm_table_m.size();
    const std::string measured =
        shapes == 0 ? std::string()
                    : strprintf("; FP8 GEMMs corrected by %s%zu measured %s shape%s", c.has_fp8_table() ? "" : "the ",
                                shapes, c.has_fp8_table() ? "FP8" : "bf16", shapes == 1 ? "" : "s");
    const char* params = !a.fp8_param_gather ? ""
                         : e.plan.zero >= 1  ? "; layer weights kept and gathered in FP8 (plan.fp8_param_gather)"
                                             : "; plan.fp8_param_gather needs zero >= 1: 16-bit weights here";
    os << strprintf("precision FP8 linear layers at %.0f TFLOP/s peak, %s scaling; attention, head and the rest "
                    "16-bit (MFU against the %.0f TFLOP/s 16-bit peak)%s%s\n",
                    c.peak_fp8_tflops, a.fp8_current_scaling ? "current" : "delayed", c.peak_tflops, measured.c_str(),
                    params);
  }
  if (c.clock_factor() < 1.0)
    os << strprintf(
        "power     capped at %.0f W of %.0f W: compute-bound kernels at %.3f of their rate ((cap/tdp)^1/3)\n",
        c.power_limit_w, c.tdp_w, c.clock_factor());
  if (b.microbatches > 0)
    os << strprintf("batch     %lld sequences = %d micro-batches of %d per DP rank; tiers tp:%s dp:%s pp:%s\n",
                    (long long)global_batch, b.microbatches, e.plan.mb, b.tp_tier.c_str(), b.dp_tier.c_str(),
                    b.pp_tier.c_str());
  if (!e.feasible() && e.reject != Reject::kMemory) {
    os << "REJECTED  " << e.reason << "\n";
    return os.str();
  }
  const double T = e.step_time_s;
  auto line = [&](const char* name, double s, const char* note) {
    os << strprintf("  %-22s %10.4f s  %5.1f%%  %s\n", name, s, T > 0 ? 100 * s / T : 0.0, note);
  };
  os << strprintf("time per step %.4f s  (%.0f tokens/s, %s TFLOP/s/GPU model, %s hardware; MFU %.1f%%, HFU %.1f%%)\n",
                  T, e.tokens_per_s, rate_text(e.tflops_per_gpu).c_str(), rate_text(e.hw_tflops_per_gpu).c_str(),
                  100 * e.mfu, 100 * e.hfu);
  line("GEMM compute", b.gemm, "slowest stage, all micro-batches, incl. recompute");
  if (a.flash_attention && b.attention > 0) {
    const char* kernel = a.attention_kernel == AttentionKernel::Flash2       ? "FlashAttention-2"
                         : a.attention_kernel == AttentionKernel::Triton2023 ? "the 2023 Triton FlashAttention"
                                                                             : "the device's fused kernel";
    line("  attention (included)", b.attention,
         strprintf("%s at %.2f of peak (plan.attention_kernel)", kernel, attention_efficiency(c, a.attention_kernel))
             .c_str());
  }
  line("memory-bound kernels", b.memory_bound, "norms, activations, softmax, loss, incl. recompute");
  if (b.cross_entropy > 0) {
    const CrossEntropyCost ce = cross_entropy_cost(a.cross_entropy, a.activation_bytes);
    const char* impl = a.cross_entropy == CrossEntropyImpl::Fused    ? "one fused kernel"
                       : a.cross_entropy == CrossEntropyImpl::Native ? "Megatron-Core's jit fusion"
                                                                     : "unfused";
    line("  cross-entropy", b.cross_entropy,
         strprintf("included: %s, %g bytes per logit (plan.cross_entropy)", impl, ce.bytes_f + ce.bytes_b).c_str());
  }
  if (a.fp8) line("  FP8 casts (included)", b.fp8_cast, "inputs, output gradients and weights cast + transposed");
  line("TP communication", b.tp_comm,
       !e.plan.tp_overlap      ? "exposed, incl. recompute (SP's wgrad re-gather beside the dgrad GEMM)"
       : a.tp_overlap_backward ? "exposed: first chunks + what the GEMMs cannot cover, incl. recompute"
                               : "forward pipelined with its GEMMs (PyTorch async TP), backward exposed; incl. "
                                 "recompute");
  if (e.plan.cp > 1 && e.plan.cp_allgather)
    line("CP K/V all-gather", b.cp_comm, "exposed K/V transfers, incl. recompute");
  if (e.plan.cp > 1 && !e.plan.cp_allgather)
    line("CP ring attention", b.cp_comm, "exposed K/V transfers, incl. recompute");
  line("overlap slowdown", b.overlap_slowdown, "compute slowed by collectives running beside it");
  // Not another term of the step: the forward work rerun in backward, already inside the three lines above.
  line("recompute (included)", b.recompute,
       e.plan.recompute == Recompute::None ? "none"
                                           : strprintf("%s: rerun in backward; part of GEMM, memory-bound and TP above",
                                                       recompute_name(e.plan.recompute))
                                                 .c_str());
  line("PP point-to-point", b.pp_p2p, "");
  line("pipeline bubble", b.bubble,
       e.plan.v > 1 ? "(p-1)/(v m) of the busy time + the warm-up's and cool-down's ring of transfers"
                    : "(p-1)/m of the busy time");
  line("DP communication", b.dp_comm,
       e.plan.zero < 3 ? "total"
       : a.zero3 == Zero3Impl::DeepSpeed
           ? "total; ZeRO-3 as DeepSpeed stage 3: a collective per tensor, one NIC per rank (plan.zero3_impl)"
       : a.zero3 == Zero3Impl::Fsdp && a.zero_sync_per_step
           ? "total; ZeRO-3 as PyTorch FSDP, once per step: each layer gathered at the first forward and reduced "
             "after the last backward (plan.zero_sync)"
       : a.zero3 == Zero3Impl::Fsdp && a.zero3_root_per_step
           ? "total; ZeRO-3 as cairn-train: per-layer gathers, next layer prefetched, the root unit gathered once per "
             "step (plan.zero3_root_gather)"
       : a.zero3 == Zero3Impl::Fsdp
           ? "total; ZeRO-3 as PyTorch FSDP: per-layer gathers, next layer prefetched (plan.zero3_impl)"
           : "total; ZeRO-3 as Megatron-FSDP: per-layer gathers from persistent buffers (plan.zero3_impl)");
  line("  exposed", b.dp_exposed, "counted in the step");
  line("optimizer", b.optimizer, a.fp8 ? "incl. the FP8 cast of the updated weights" : "");
  os << strprintf("  per micro-batch on the slowest stage (%d layers): forward %.4f s, backward %.4f s\n",
                  b.layers_max_stage, b.stage_forward, b.stage_backward);
  if (e.plan.pp > 1) {
    std::string list;
    for (size_t i = 0; i < b.stage_layers.size(); ++i) {
      if (i) list += ',';
      list += std::to_string(b.stage_layers[i]);
    }
    os << "  layers per virtual stage [" << list << "]\n";
  }
  const double capacity = c.hbm_gib * (1 - a.memory_headroom);
  os << strprintf("memory per device %.2f GiB of %.2f GiB usable%s%s\n", e.memory_gib, capacity,
                  e.plan.pp > 1 ? strprintf(" (pipeline rank %d, the fullest)", b.mem_rank).c_str() : "",
                  e.feasible() ? "" : "  -> DOES NOT FIT");
  auto mem = [&](const char* name, double bytes, const std::string& note) {
    os << strprintf("  %-22s %9.2f GiB  %s\n", name, bytes / kGiB, note.c_str());
  };
  const bool fp8_weights = fp8_params(a, e.plan);
  if (fsdp_mixed_precision(a, e.plan)) {
    const double root = b.mem_weights / a.weight_bytes;
    mem("weights", b.mem_weights,
        strprintf("the root unit's %.0f params (embedding, final norm, head) x %.0f B, gathered for the step; the "
                  "shards are the fp32 masters",
                  root, a.weight_bytes));
    mem("gradients", b.mem_grads,
        strprintf("%lld params x 4 B (fp32 shard) / dp, + the root unit's x %.0f B", (long long)b.mem_params,
                  a.weight_bytes));
  } else {
    mem("weights", b.mem_weights,
        strprintf("%lld params x %.0f B%s%s", (long long)b.mem_params, a.weight_bytes,
                  fp8_weights ? " (the layers' 1 B: FP8)" : "", e.plan.zero >= 3 ? " / dp" : ""));
    mem("gradients", b.mem_grads, strprintf("x %.0f B%s", a.grad_bytes, e.plan.zero >= 2 ? " / dp" : ""));
  }
  // 12 B: an fp32 master copy beside Adam's m and v (mixed precision); 8 B: the weights are the fp32 master (fp32
  // training, as on CPU ranks).
  const char* states = a.optimizer_bytes == 12  ? "fp32 master + Adam m, v"
                       : a.optimizer_bytes == 8 ? "Adam m, v"
                                                : "optimizer states";
  mem("optimizer states", b.mem_optimizer,
      strprintf("x %.0f B (%s)%s", a.optimizer_bytes, states, e.plan.zero >= 1 ? " / dp" : ""));
  mem("activations", b.mem_activations,
      strprintf("%.3f GiB/layer/micro-batch, %.2f micro-batches of %s layers in flight", b.act_per_layer / kGiB,
                b.inflight, e.plan.pp > 1 ? "the rank's" : "all"));
  mem("logits + loss", b.mem_logits, "last stage");
  mem("buffers + reserved", b.mem_buffers,
      fp8_weights ? "recompute working set, ZeRO-3 prefetch, FP8 weight transposes, runtime"
      : a.fp8     ? "recompute working set, ZeRO-3 prefetch, FP8 weight copies, runtime"
                  : "recompute working set, ZeRO-3 prefetch, runtime");
  if (!e.feasible()) os << "REJECTED  " << e.reason << "\n";
  return os.str();
}

}  // namespace cairn::costmodel
