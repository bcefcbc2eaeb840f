// [parallel]: the parallel layout cairn-plan chooses (best.toml) and cairn-train runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cairn/config_section.h"

namespace cairn {

struct ParallelSection {
  static constexpr const char* kSection = "parallel";
  int dp = 0;
  int tp = 1;
  int pp = 1;
  int v = 1;
  int64_t mb = 0;
  int zero = 0;
  std::string recompute = "none";
  int cp = 1;
  std::string cp_comm = "p2p";
  std::string tp_overlap = "off";
  std::string sp = "off";
  std::vector<int64_t> stage_layers;
  template <class K>
  static void keys(K& k) {
    using S = ParallelSection;
    k(&S::dp, "dp", Range{0, 1e7}, "data-parallel degree (0 = world size / (tp*pp))");
    k(&S::tp, "tp", Range{1, 1e5}, "tensor-parallel degree");
    k(&S::pp, "pp", Range{1, 1e5}, "pipeline-parallel degree");
    k(&S::v, "v", Range{1, 1e4}, "virtual pipeline stages per rank (interleaving)");
    k(&S::mb, "mb", Range{0, 1e6}, "micro-batch size in sequences (0 = train.micro_batch)");
    k(&S::zero, "zero", Range{0, 3}, "ZeRO stage (0 = none, 1 = optimizer states sharded, ...)");
    k(&S::recompute, "recompute", Choices{"none", "selective", "full", "gelu"},
      "activation recomputation (cairn-train: selective = none, its attention never stores the probabilities; "
      "gelu/full as [train] recompute)");
    k(&S::cp, "cp", Range{1, 1e5},
      "context-parallel degree: each sequence split over cp ranks in 2*cp load-balanced chunks");
    k(&S::cp_comm, "cp_comm", Choices{"p2p", "allgather"},
      "how context parallelism moves K/V (Megatron's --cp-comm-type): p2p = a ring overlapped with the attention "
      "blocks, allgather = all-gathered before attention (cairn-plan writes the plan.cp_comm it priced)");
    k(&S::tp_overlap, "tp_overlap", Choices{"on", "off"},
      "TP collectives overlapped with the neighbouring GEMMs (Megatron-Core tp_comm_overlap; cairn-plan models it, "
      "cairn-train runs its TP collectives synchronously)");
    k(&S::sp, "sp", Choices{"on", "off"}, "sequence parallelism");
    k(&S::stage_layers, "stage_layers", Range{1, 100000},
      "layers of each pipeline stage (pp*v entries in virtual-stage order); empty = even split");
  }
};

}  // namespace cairn
