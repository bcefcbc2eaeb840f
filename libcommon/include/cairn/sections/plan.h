// [plan]: cairn-plan's search constraints and the precision/memory assumptions of its cost model.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cairn/config_section.h"

namespace cairn {

struct PlanSection {
  static constexpr const char* kSection = "plan";
  // Search constraints: unset searches every valid value; one value fixes it; a list restricts it.
  using IntChoice = std::optional<std::vector<int64_t>>;
  using StringChoice = std::optional<std::vector<std::string>>;
  IntChoice dp, tp, pp, v, mb, zero;
  StringChoice recompute, sp;
  IntChoice cp;
  StringChoice tp_overlap, cp_comm;
  int64_t cp_min_seq = 16384;
  int64_t max_mb = 16;
  int64_t max_tp = 0;
  int64_t max_v = 0;
  int64_t global_batch = 0;
  int64_t top_k = 10;
  double memory_headroom = 0.0;
  double weight_bytes = 2.0;
  double grad_bytes = 2.0;
  double optimizer_bytes = 12.0;
  double activation_bytes = 2.0;
  bool flash_attention = false;
  std::string attention_kernel = "fused";
  double memory_bound_factor = 1.0;
  bool causal = true;
  bool dropout = true;
  bool optimizer_fused = true;
  std::string cross_entropy = "unfused";
  std::string selective_policy = "attention";
  bool tp_async_backward = true;
  std::string tp_overlap_impl = "megatron";
  std::string sp_layout = "sbh";
  bool fused_projections = true;
  bool dp_overlap = true;
  bool pp_scatter_gather = true;
  bool pp_overlap = true;
  std::string zero3_impl = "fsdp";
  double zero3_prefetch_bucket = 5e7;
  std::string zero_sync = "micro_batch";
  std::string zero3_root_gather = "micro_batch";
  std::string precision = "bf16";
  std::string fp8_scaling = "delayed";
  bool fp8_param_gather = false;
  bool explain = false;

  template <class K>
  static void keys(K& k) {
    using S = PlanSection;
    const std::string fix = "fix (x) or restrict ([x, y]) the search; unset searches every valid value";
    k(&S::dp, "dp", Range{1, 1e7}, "data-parallel degree: " + fix);
    k(&S::tp, "tp", Range{1, 1e7}, "tensor-parallel degree: " + fix);
    k(&S::pp, "pp", Range{1, 1e7}, "pipeline-parallel degree: " + fix);
    k(&S::v, "v", Range{1, 1e7}, "virtual stages per pipeline rank: " + fix);
    k(&S::mb, "mb", Range{1, 1e7}, "micro-batch size (sequences): " + fix);
    k(&S::zero, "zero", Range{0, 3}, "ZeRO stage 0-3: " + fix);
    k(&S::recompute, "recompute", Choices{"none", "selective", "full"},
      "activation recomputation none|selective|full: " + fix);
    k(&S::sp, "sp", Choices{"on", "off"}, "sequence parallelism on|off: " + fix);
    k(&S::cp, "cp", Range{1, 1e7}, "context-parallel degree: " + fix + " (unset: 1 below plan.cp_min_seq tokens)");
    k(&S::tp_overlap, "tp_overlap", Choices{"on", "off"}, "TP communication overlap on|off (needs sp = on): " + fix);
    k(&S::cp_min_seq, "cp_min_seq", Range{1, 1e9},
      "the search tries context parallelism only for sequences at least this long");
    k(&S::max_mb, "max_mb", Range{1, 1e6}, "largest micro-batch size searched");
    k(&S::max_tp, "max_tp", Range{0, 1e6}, "largest TP degree searched (0 = no limit)");
    k(&S::max_v, "max_v", Range{0, 1e4},
      "largest interleaving factor searched (0 = as many as the layers allow: one per virtual stage)");
    k(&S::global_batch, "global_batch", Range{0, 1e9}, "global batch in sequences (0 = [train] global_batch)");
    k(&S::top_k, "top_k", Range{1, 1e6}, Flag{"--top"}, "plans shown in the ranked table");
    k(&S::memory_headroom, "memory_headroom", Range{0.0, 0.9}, "fraction of device memory a plan must leave free");
    k(&S::weight_bytes, "weight_bytes", Range{1, 8}, "bytes per working weight (2 = bf16/fp16)");
    k(&S::grad_bytes, "grad_bytes", Range{1, 8},
      "bytes per gradient (2: ZeRO paper fp16/bf16 grads; 4: Megatron fp32 main grads)");
    k(&S::optimizer_bytes, "optimizer_bytes", Range{0, 64},
      "optimizer bytes per parameter (12 = fp32 master + Adam m, v; ZeRO paper's K)");
    k(&S::activation_bytes, "activation_bytes", Range{1, 8}, "bytes per activation element (2 = bf16)");
    k(&S::flash_attention, "flash_attention",
      "fused attention that never stores the s x s scores (drops Korthikanti's 5as/h term)");
    k(&S::attention_kernel, "attention_kernel", Choices{"fused", "flash2", "triton2023"},
      "which fused attention kernel the stack runs (with flash_attention = true): fused (the device's best: "
      "Transformer Engine / cuDNN, FlashAttention-3; cluster.attention_efficiency), flash2 (FlashAttention-2, "
      "PyTorch SDPA's flash backend: cluster.flash2_efficiency) or triton2023 (the 2023 Triton FlashAttention, "
      "flash_attn_triton.py: 0.54 of FlashAttention-2's rate, Dao 2023)");
    k(&S::memory_bound_factor, "memory_bound_factor", Range{0.1, 20.0},
      "bytes moved by memory-bound kernels relative to Megatron/TE's fused kernels (eager PyTorch: more)");
    k(&S::causal, "causal", "causal attention: a fused attention kernel skips the masked half of the scores");
    k(&S::dropout, "dropout",
      "gpt models train with dropout (masks stored and moved: Megatron's GPT); false: no dropout (MPT, Llama)");
    k(&S::optimizer_fused, "optimizer_fused",
      "Adam runs as one fused kernel (Megatron, apex); false: eager PyTorch's separate elementwise kernels "
      "(Composer, torch.optim for-loop/foreach), which move about 3x the bytes");
    k(&S::cross_entropy, "cross_entropy", Choices{"unfused", "native", "fused"},
      "the loss over the vocabulary, by the bytes per logit its kernels move (bf16 logits): unfused (52: Megatron's "
      "vocab-parallel cross-entropy, PyTorch's F.cross_entropy on fp32 logits), native (28: Megatron-Core "
      "--cross-entropy-loss-fusion with --cross-entropy-fusion-impl native, jit-fused steps over an fp32 copy) or "
      "fused (6: one kernel over the 16-bit logits, as flash-attn's, Liger's and Transformer Engine's)");
    k(&S::selective_policy, "selective_policy", Choices{"attention", "alternate_mm"},
      "what recompute = selective reruns: attention (Korthikanti et al. 2022: the attention core and softmax; "
      "Megatron) or alternate_mm (torchtitan's op-level policy: every second matmul of the layer and every "
      "elementwise kernel; the attention kernel's output is kept)");
    k(&S::tp_async_backward, "tp_async_backward",
      "without SP, the backward all-reduce of column-parallel layers runs beside their weight-gradient GEMM "
      "(Megatron-LM since 2022; Megatron 2021: false)");
    k(&S::tp_overlap_impl, "tp_overlap_impl", Choices{"megatron", "torch"},
      "what tp_overlap = on hides: megatron (Megatron-Core --tp-comm-overlap, Transformer Engine's userbuffers: every "
      "all-gather and reduce-scatter of the layer, forward and backward, pipelined with its GEMM) or torch "
      "(PyTorch's async TP, torchtitan's enable_async_tensor_parallel: the forward's only; the backward's run as "
      "without overlap)");
    k(&S::sp_layout, "sp_layout", Choices{"sbh", "bsh"},
      "activation layout under sp = on: sbh (Megatron: sequence first, so the sequence-parallel all-gathers and "
      "reduce-scatters work in place) or bsh (PyTorch DTensor, torchtitan: batch first, so each one along the "
      "sequence dimension also copies the whole tensor: torch.cat of the gathered chunks, or of the chunks before "
      "the scatter; PyTorch's async TP avoids it for the forward's fused collectives)");
    k(&S::fused_projections, "fused_projections",
      "Q, K and V run as one linear, and SwiGLU's gate and up as another (Megatron, Transformer Engine); false: as "
      "separate linears (torchtitan, Hugging Face Llama), each reading the input again and the backward summing "
      "their input gradients");
    k(&S::dp_overlap, "dp_overlap",
      "overlap gradient reduction with backward (Megatron; DeepSpeed's pipeline engine reduces after the flush: "
      "false)");
    k(&S::pp_scatter_gather, "pp_scatter_gather",
      "pipeline sends 1/tp of the activation per TP rank (Megatron); false: every TP rank sends it whole (DeepSpeed)");
    k(&S::pp_overlap, "pp_overlap",
      "interleaved schedules (v > 1) overlap point-to-point sends and receives with compute (Megatron "
      "overlap_p2p_comm, the default); false: every transfer is waited for");
    k(&S::zero3_impl, "zero3_impl", Choices{"fsdp", "megatron", "deepspeed"},
      "how ZeRO-3 moves parameters: fsdp (PyTorch FSDP/FSDP2: one flat all-gather and reduce-scatter per layer, "
      "the next layer prefetched, gradients and parameters copied through flat buffers), megatron (Megatron-FSDP: "
      "the same collectives from persistent buffers, no copies) or deepspeed (DeepSpeed stage 3: one collective "
      "per parameter tensor, prefetch bounded by zero3_prefetch_bucket, cross-node traffic at one NIC per rank)");
    k(&S::cp_comm, "cp_comm", Choices{"p2p", "allgather"},
      "how context parallelism moves K/V, Megatron's --cp-comm-type: p2p (ring attention, each chunk's K/V passed on "
      "while the current block computes) or allgather (K/V all-gathered before attention and again in backward, "
      "their gradients reduce-scattered, exposed): " +
          fix + " (plans with cp > 1)");
    k(&S::zero_sync, "zero_sync", Choices{"micro_batch", "step"},
      "when ZeRO-2/3 (zero3_impl = fsdp) gather parameters and reduce-scatter gradients: every micro-batch (FSDP with "
      "gradient accumulation, cairn-train) or once per step (PyTorch pipelining with FSDP2, torchtitan's PP: the "
      "parameters stay gathered and the gradients whole from the first forward to the last backward)");
    k(&S::zero3_root_gather, "zero3_root_gather", Choices{"micro_batch", "step"},
      "when ZeRO-3 (zero3_impl = fsdp, zero_sync = micro_batch) gathers the root unit (embedding, final norm, head): "
      "every micro-batch (PyTorch FSDP, which reshards it after each backward) or once per step (cairn-train, which "
      "keeps it gathered from the step's first forward to its last backward); its gradient is reduce-scattered every "
      "micro-batch either way");
    k(&S::zero3_prefetch_bucket, "zero3_prefetch_bucket", Range{0, 1e13},
      "zero3_impl = deepspeed: parameters gathered ahead of use (DeepSpeed stage3_prefetch_bucket_size)");
    k(&S::precision, "precision", Choices{"bf16", "fp8"},
      "dtype of the transformer layers' linear GEMMs: bf16, or fp8 (Transformer Engine / Megatron --fp8-format "
      "hybrid: E4M3 forward, E5M2 gradients; attention, the output head, communication of gradients and the "
      "optimizer stay 16/32-bit; needs cluster.peak_fp8_tflops)");
    k(&S::fp8_scaling, "fp8_scaling", Choices{"delayed", "current"},
      "precision = fp8: delayed scaling (scales from an amax history; casts fuse into the producing kernels) or "
      "current scaling (Megatron-Bridge FP8-CS: each tensor's amax is read before its cast)");
    k(&S::fp8_param_gather, "fp8_param_gather",
      "precision = fp8: the layers' weights are kept in FP8 and gathered in FP8 (Megatron --fp8-param-gather, "
      "Megatron-Bridge's FP8-CS recipe; torchao's FSDP float8 all-gather): 1 byte per parameter stored and moved "
      "instead of 2, no bf16 copy beside the FP8 one, only the transpose made after each gather; for plans with "
      "zero >= 1 (the distributed optimizer or FSDP; not zero3_impl = deepspeed)");
    k(&S::explain, "explain", "evaluate the one plan given by [plan]/--plan and print its breakdown");
  }
};

}  // namespace cairn
