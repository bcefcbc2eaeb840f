// [parallel]: the parallel layout cairn-plan chooses (best.toml) and cairn-train runs.
#include "sections.h"

namespace cairn::schema {
void declare_parallel(Schema& s) {
  s.add_range("parallel", "dp", KeyType::Int, 0, 0, 1e7, "data-parallel degree (0 = world size / (tp*pp))");
  s.add_range("parallel", "tp", KeyType::Int, 1, 1, 1e5, "tensor-parallel degree");
  s.add_range("parallel", "pp", KeyType::Int, 1, 1, 1e5, "pipeline-parallel degree");
  s.add_range("parallel", "v", KeyType::Int, 1, 1, 1e4, "virtual pipeline stages per rank (interleaving)");
  s.add_range("parallel", "mb", KeyType::Int, 0, 0, 1e6, "micro-batch size in sequences (0 = train.micro_batch)");
  s.add_range("parallel", "zero", KeyType::Int, 0, 0, 3, "ZeRO stage (0 = none, 1 = optimizer states sharded, ...)");
  s.add_choice("parallel", "recompute", KeyType::String, "none", {"none", "selective", "full", "gelu"},
               "activation recomputation (cairn-train: selective = none, its attention never stores the "
               "probabilities; gelu/full as [train] recompute)");
  s.add_range("parallel", "cp", KeyType::Int, 1, 1, 1e5,
              "context-parallel degree: the sequence split over cp ranks with ring attention (cairn-plan; "
              "cairn-train runs cp = 1)");
  s.add_choice("parallel", "tp_overlap", KeyType::String, "off", {"on", "off"},
               "TP collectives overlapped with the neighbouring GEMMs (Megatron-Core tp_comm_overlap; cairn-plan "
               "models it, cairn-train runs its TP collectives synchronously)");
  s.add_choice("parallel", "sp", KeyType::String, "off", {"on", "off"}, "sequence parallelism");
  s.add_range("parallel", "stage_layers", KeyType::IntList, json::array(), 1, 100000,
              "layers of each pipeline stage (pp*v entries in virtual-stage order); empty = even split");
}
}  // namespace cairn::schema
