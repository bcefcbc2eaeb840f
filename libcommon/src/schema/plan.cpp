// [plan]: cairn-plan's search constraints and the precision/memory assumptions of its cost model.
#include "sections.h"

namespace cairn::schema {
void declare_plan(Schema& s) {
  const char* fix = "fix (x) or restrict ([x, y]) the search; unset searches every valid value";
  s.add("plan", "dp", KeyType::IntOrIntList, nullptr, std::string("data-parallel degree: ") + fix);
  s.add("plan", "tp", KeyType::IntOrIntList, nullptr, std::string("tensor-parallel degree: ") + fix);
  s.add("plan", "pp", KeyType::IntOrIntList, nullptr, std::string("pipeline-parallel degree: ") + fix);
  s.add("plan", "v", KeyType::IntOrIntList, nullptr, std::string("virtual stages per pipeline rank: ") + fix);
  s.add("plan", "mb", KeyType::IntOrIntList, nullptr, std::string("micro-batch size (sequences): ") + fix);
  s.add("plan", "zero", KeyType::IntOrIntList, nullptr, std::string("ZeRO stage 0-3: ") + fix);
  s.add_choice("plan", "recompute", KeyType::StringOrStringList, nullptr, {"none", "selective", "full"},
               std::string("activation recomputation none|selective|full: ") + fix);
  s.add_choice("plan", "sp", KeyType::StringOrStringList, nullptr, {"on", "off"},
               std::string("sequence parallelism on|off: ") + fix);
  s.add("plan", "cp", KeyType::IntOrIntList, nullptr,
        std::string("context-parallel degree: ") + fix + " (unset: 1 below plan.cp_min_seq tokens)");
  s.add_choice("plan", "tp_overlap", KeyType::StringOrStringList, nullptr, {"on", "off"},
               std::string("TP communication overlap on|off (needs sp = on): ") + fix);
  s.add_range("plan", "cp_min_seq", KeyType::Int, 16384, 1, 1e9,
              "the search tries context parallelism only for sequences at least this long");
  s.add_range("plan", "max_mb", KeyType::Int, 16, 1, 1e6, "largest micro-batch size searched");
  s.add_range("plan", "max_tp", KeyType::Int, 0, 0, 1e6, "largest TP degree searched (0 = no limit)");
  s.add_range("plan", "max_v", KeyType::Int, 0, 0, 1e4,
              "largest interleaving factor searched (0 = as many as the layers allow: one per virtual stage)");
  s.add_range("plan", "global_batch", KeyType::Int, 0, 0, 1e9,
              "global batch in sequences (0 = [train] global_batch)");
  s.add_range("plan", "top_k", KeyType::Int, 10, 1, 1e6, "plans shown in the ranked table");
  s.add_range("plan", "memory_headroom", KeyType::Float, 0.0, 0.0, 0.9,
              "fraction of device memory a plan must leave free");
  s.add_range("plan", "weight_bytes", KeyType::Float, 2.0, 1, 8, "bytes per working weight (2 = bf16/fp16)");
  s.add_range("plan", "grad_bytes", KeyType::Float, 2.0, 1, 8,
              "bytes per gradient (2: ZeRO paper fp16/bf16 grads; 4: Megatron fp32 main grads)");
  s.add_range("plan", "optimizer_bytes", KeyType::Float, 12.0, 0, 64,
              "optimizer bytes per parameter (12 = fp32 master + Adam m, v; ZeRO paper's K)");
  s.add_range("plan", "activation_bytes", KeyType::Float, 2.0, 1, 8, "bytes per activation element (2 = bf16)");
  s.add("plan", "flash_attention", KeyType::Bool, false,
        "fused attention that never stores the s x s scores (drops Korthikanti's 5as/h term)");
  s.add_range("plan", "memory_bound_factor", KeyType::Float, 1.0, 0.1, 20.0,
              "bytes moved by memory-bound kernels relative to Megatron/TE's fused kernels (eager PyTorch: more)");
  s.add("plan", "causal", KeyType::Bool, true,
        "causal attention: a fused attention kernel skips the masked half of the scores");
  s.add("plan", "tp_async_backward", KeyType::Bool, true,
        "without SP, the backward all-reduce of column-parallel layers runs beside their weight-gradient GEMM "
        "(Megatron-LM since 2022; Megatron 2021: false)");
  s.add("plan", "dp_overlap", KeyType::Bool, true,
        "overlap gradient reduction with backward (Megatron; DeepSpeed's pipeline engine reduces after the flush: false)");
  s.add("plan", "pp_scatter_gather", KeyType::Bool, true,
        "pipeline sends 1/tp of the activation per TP rank (Megatron); false: every TP rank sends it whole (DeepSpeed)");
  s.add("plan", "explain", KeyType::Bool, false, "evaluate the one plan given by [plan]/--plan and print its breakdown");
}
}  // namespace cairn::schema
