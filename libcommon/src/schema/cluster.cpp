// [cluster]: the machine a plan runs on (cairn-plan's cost model; cairn-train for predicted step time).
#include "sections.h"

namespace cairn::schema {
void declare_cluster(Schema& s) {
  s.add("cluster", "name", KeyType::String, "cluster", "name shown in tables and reports");
  s.add_range("cluster", "nodes", KeyType::Int, 1, 1, 1e6, "nodes");
  s.add_range("cluster", "gpus_per_node", KeyType::Int, 1, 1, 1024, "devices (GPUs, or CPU sockets) per node");
  s.add("cluster", "gpu", KeyType::String, "", "device model, for the record (e.g. A100-SXM4-80GB)");
  s.add_range("cluster", "peak_tflops", KeyType::Float, 312.0, 1e-6, 1e6,
              "dense peak TFLOP/s per device in the training dtype (bf16 tensor cores on GPUs)");
  s.add_range("cluster", "hbm_gib", KeyType::Float, 80.0, 1e-3, 1e6, "device memory capacity (GiB)");
  s.add_range("cluster", "hbm_gbps", KeyType::Float, 2039.0, 1e-3, 1e7, "device memory bandwidth (GB/s)");
  s.add_range("cluster", "hbm_efficiency", KeyType::Float, 0.8, 0.01, 1.0,
              "achievable fraction of memory bandwidth for streaming kernels");
  s.add("cluster", "gemm_flops", KeyType::FloatList, json::array(),
        "GEMM sizes (FLOPs = 2mnk) of the efficiency table, ascending (cairn-plan calibrate writes it)");
  s.add("cluster", "gemm_efficiency", KeyType::FloatList, json::array(),
        "achieved fraction of peak at each gemm_flops size (log-linear interpolation)");
  s.add_range("cluster", "gemm_max_efficiency", KeyType::Float, 0.8, 0.01, 1.0,
              "large-GEMM efficiency when no table is given");
  s.add_range("cluster", "sm_count", KeyType::Int, 0, 0, 100000,
              "streaming multiprocessors per GPU for the GEMM wave model (A100 108, H100/H200 132); 0 = CPU");
  s.add_range("cluster", "gemm_k_half", KeyType::Float, 64.0, 0, 1e6,
              "GEMM K at which a tile's prologue/epilogue halves its efficiency (GPU shape model)");
  s.add("cluster", "gemm_table_m", KeyType::FloatList, json::array(),
        "measured GEMM shapes: M of each (cairn-plan calibrate writes the four gemm_table_* lists)");
  s.add("cluster", "gemm_table_n", KeyType::FloatList, json::array(), "measured GEMM shapes: N of each");
  s.add("cluster", "gemm_table_k", KeyType::FloatList, json::array(), "measured GEMM shapes: K of each");
  s.add("cluster", "gemm_table_efficiency", KeyType::FloatList, json::array(),
        "measured GEMM shapes: achieved fraction of peak_tflops");
  s.add_range("cluster", "attention_efficiency", KeyType::Float, 0.6, 0.01, 1.0,
              "fused (flash) attention: achieved fraction of peak over the FLOPs it runs, forward and backward");
  s.add_range("cluster", "overlap_slowdown", KeyType::Float, 0.1, 0.0, 1.0,
              "fraction by which compute slows while a collective runs beside it (SMs, HBM taken by NCCL)");
  s.add_range("cluster", "kernel_overhead_us", KeyType::Float, 4.0, 0, 1e6,
              "fixed time per kernel (launch, tail effects) when no table is given");
  s.add_range("cluster", "reserved_gib", KeyType::Float, 1.0, 0, 1e6,
              "memory per device not available to the model (runtime context, communicator buffers)");
  s.add_range("cluster", "intra_bw_gbps", KeyType::Float, 300.0, 1e-6, 1e7,
              "intra-node link bandwidth per device per direction (GB/s), e.g. NVLink");
  s.add_range("cluster", "intra_latency_us", KeyType::Float, 1.0, 0, 1e6, "intra-node latency per ring step (us)");
  s.add_range("cluster", "intra_efficiency", KeyType::Float, 0.8, 0.01, 1.0,
              "achievable fraction of intra-node bandwidth (bus bandwidth / nominal)");
  s.add_range("cluster", "inter_bw_gbps", KeyType::Float, 25.0, 1e-6, 1e7,
              "inter-node bandwidth per device per direction (GB/s), e.g. one 200 Gb/s HCA = 25");
  s.add_range("cluster", "inter_latency_us", KeyType::Float, 5.0, 0, 1e6, "inter-node latency per ring step (us)");
  s.add_range("cluster", "inter_efficiency", KeyType::Float, 0.8, 0.01, 1.0,
              "achievable fraction of inter-node bandwidth");
  s.add("cluster", "fabric", KeyType::String, "",
        "cairn-sweep fabric.toml whose fitted per-tier alpha/beta replace the nominal links");
  s.add("cluster", "calibrated", KeyType::String, "", "how the GEMM table was measured (calibrate writes it)");
}
}  // namespace cairn::schema
