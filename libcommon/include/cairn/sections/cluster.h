// [cluster]: the machine a plan runs on (cairn-plan's cost model; cairn-train for predicted step time).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cairn/config_section.h"

namespace cairn {

struct ClusterSection {
  static constexpr const char* kSection = "cluster";
  std::string name = "cluster";
  int64_t nodes = 1;
  int gpus_per_node = 1;
  std::string gpu;
  double peak_tflops = 312.0;
  double peak_fp8_tflops = 0.0;
  double fp8_gemm_max_efficiency = 0.0;
  double hbm_gib = 80.0;
  double hbm_gbps = 2039.0;
  double hbm_efficiency = 0.8;
  std::vector<double> gemm_flops;
  std::vector<double> gemm_efficiency;
  double gemm_max_efficiency = 0.8;
  int sm_count = 0;
  double gemm_k_half = 64.0;
  std::vector<double> gemm_table_m, gemm_table_n, gemm_table_k, gemm_table_efficiency;
  std::vector<double> gemm_table_fp8_efficiency;
  double attention_efficiency = 0.6;
  double flash2_efficiency = 0.0;
  double attention_row_keys = 0.0;
  bool attention_measured = false;
  int64_t attention_tile = 128;
  double tdp_w = 0.0;
  double power_limit_w = 0.0;
  double overlap_slowdown = 0.1;
  bool async_comm = true;
  double kernel_overhead_us = 4.0;
  double reserved_gib = 1.0;
  double intra_bw_gbps = 300.0;
  double intra_latency_us = 1.0;
  double intra_efficiency = 0.8;
  double inter_bw_gbps = 25.0;
  double inter_latency_us = 5.0;
  double inter_efficiency = 0.8;
  double intra_fabric_efficiency = 1.0;
  double inter_fabric_efficiency = 1.0;
  std::string fabric;
  std::string calibrated;
  template <class K>
  static void keys(K& k) {
    using S = ClusterSection;
    k(&S::name, "name", "name shown in tables and reports");
    k(&S::nodes, "nodes", Range{1, 1e6}, "nodes");
    k(&S::gpus_per_node, "gpus_per_node", Range{1, 1024}, "devices (GPUs, or CPU sockets) per node");
    k(&S::gpu, "gpu", "device model, for the record (e.g. A100-SXM4-80GB)");
    k(&S::peak_tflops, "peak_tflops", Range{1e-6, 1e6},
      "dense peak TFLOP/s per device in the training dtype (bf16 tensor cores on GPUs)");
    k(&S::peak_fp8_tflops, "peak_fp8_tflops", Range{0, 1e6},
      "dense FP8 tensor-core peak TFLOP/s per device (H100/H200 SXM 1979; 0 = no FP8 tensor cores, as A100)");
    k(&S::fp8_gemm_max_efficiency, "fp8_gemm_max_efficiency", Range{0, 1.0},
      "large-GEMM efficiency of FP8 GEMMs as a fraction of peak_fp8_tflops (0 = gemm_max_efficiency)");
    k(&S::hbm_gib, "hbm_gib", Range{1e-3, 1e6}, "device memory capacity (GiB)");
    k(&S::hbm_gbps, "hbm_gbps", Range{1e-3, 1e7}, "device memory bandwidth (GB/s)");
    k(&S::hbm_efficiency, "hbm_efficiency", Range{0.01, 4.0},
      "achievable fraction of memory bandwidth for streaming kernels (above 1 where their tensors stay in a cache "
      "faster than hbm_gbps: a CPU's small tensors against its measured DRAM stream; calibrate --from-runs fits it)");
    k(&S::gemm_flops, "gemm_flops", Range{1, 1e30},
      "GEMM sizes (FLOPs = 2mnk) of the efficiency table, ascending (cairn-plan calibrate writes it)");
    k(&S::gemm_efficiency, "gemm_efficiency", Range{1e-6, 1.0},
      "achieved fraction of peak at each gemm_flops size (log-linear interpolation)");
    k(&S::gemm_max_efficiency, "gemm_max_efficiency", Range{0.01, 1.0}, "large-GEMM efficiency when no table is given");
    k(&S::sm_count, "sm_count", Range{0, 100000},
      "streaming multiprocessors per GPU for the GEMM wave model (A100 108, H100/H200 132); 0 = CPU");
    k(&S::gemm_k_half, "gemm_k_half", Range{0, 1e6},
      "GEMM K at which a tile's prologue/epilogue halves its efficiency (GPU shape model)");
    k(&S::gemm_table_m, "gemm_table_m", Range{1, 1e12},
      "measured GEMM shapes: M of each (cairn-plan calibrate writes the four gemm_table_* lists)");
    k(&S::gemm_table_n, "gemm_table_n", Range{1, 1e12}, "measured GEMM shapes: N of each");
    k(&S::gemm_table_k, "gemm_table_k", Range{1, 1e12}, "measured GEMM shapes: K of each");
    k(&S::gemm_table_efficiency, "gemm_table_efficiency", Range{1e-6, 1.0},
      "measured GEMM shapes: achieved fraction of peak_tflops");
    k(&S::gemm_table_fp8_efficiency, "gemm_table_fp8_efficiency", Range{1e-6, 1.0},
      "measured FP8 (E4M3) GEMMs at the gemm_table shapes: achieved fraction of peak_fp8_tflops (empty: FP8 GEMMs "
      "take the bf16 table's correction)");
    k(&S::attention_efficiency, "attention_efficiency", Range{0.01, 1.0},
      "fused (flash) attention: achieved fraction of peak over the FLOPs it runs, forward and backward");
    k(&S::flash2_efficiency, "flash2_efficiency", Range{0.0, 1.0},
      "FlashAttention-2 (plan.attention_kernel = flash2: PyTorch SDPA's flash backend) on this device, as "
      "attention_efficiency; 0 = attention_efficiency (devices where it is the best kernel, as the A100)");
    k(&S::attention_row_keys, "attention_row_keys", Range{0, 1e7},
      "fused attention's fixed work per query row and kernel call (softmax statistics, output), in keys' worth: a "
      "call whose rows see n keys on average runs at attention_efficiency x n / (n + attention_row_keys) (0 = none; "
      "bench/layout_predict.sh measures it at two sequence lengths)");
    k(&S::attention_measured, "attention_measured",
      "attention_efficiency was learned on this site (calibrate --from-runs from kernel-profiled runs writes true): "
      "cairn-plan then stops warning that an attention-bound plan is priced at a kernel benchmark's rate");
    k(&S::attention_tile, "attention_tile", Range{1, 65536},
      "keys per score block of the fused attention kernel: a causal call computes the blocks below the diagonal and "
      "the diagonal ones whole, (1 + 1/ceil(s/tile))/2 of the s^2 scores (FlashAttention-2, cuDNN and their peers: "
      "128; cairn's CPU kernel: 16)");
    k(&S::tdp_w, "tdp_w", Range{0, 1e5},
      "board power (W) at which gemm_max_efficiency and attention_efficiency hold (0 = no power model)");
    k(&S::power_limit_w, "power_limit_w", Range{0, 1e5},
      "power cap the job runs under (W; 0 = tdp_w): compute rates scale by (cap / tdp)^(1/3), the clock a "
      "power-bound chip sustains (P ~ f V^2, V ~ f)");
    k(&S::overlap_slowdown, "overlap_slowdown", Range{0.0, 1.0},
      "fraction by which compute slows while a collective runs beside it (SMs, HBM taken by NCCL)");
    k(&S::async_comm, "async_comm",
      "collectives and transfers progress beside the compute (GPUs: NCCL on its own stream); false: a rank's one "
      "thread moves the bytes inside the wait (CPU ranks over MPI), so no communication hides behind compute");
    k(&S::kernel_overhead_us, "kernel_overhead_us", Range{0, 1e6},
      "fixed time per kernel (launch, tail effects) when no table is given");
    k(&S::reserved_gib, "reserved_gib", Range{0, 1e6},
      "memory per device not available to the model (runtime context, communicator buffers)");
    k(&S::intra_bw_gbps, "intra_bw_gbps", Range{1e-6, 1e7},
      "intra-node link bandwidth per device per direction (GB/s), e.g. NVLink");
    k(&S::intra_latency_us, "intra_latency_us", Range{0, 1e6}, "intra-node latency per ring step (us)");
    k(&S::intra_efficiency, "intra_efficiency", Range{0.01, 1.0},
      "achievable fraction of intra-node bandwidth (bus bandwidth / nominal)");
    k(&S::inter_bw_gbps, "inter_bw_gbps", Range{1e-6, 1e7},
      "inter-node bandwidth per device per direction (GB/s), e.g. one 200 Gb/s HCA = 25");
    k(&S::inter_latency_us, "inter_latency_us", Range{0, 1e6}, "inter-node latency per ring step (us)");
    k(&S::inter_efficiency, "inter_efficiency", Range{0.01, 1.0}, "achievable fraction of inter-node bandwidth");
    k(&S::fabric, "fabric", "cairn-sweep fabric.toml whose fitted per-tier alpha/beta replace the nominal links");
    k(&S::intra_fabric_efficiency, "intra_fabric_efficiency", Range{0.01, 1.0},
      "with a fabric: the fraction of the sweep's intra-node speed that training's collectives get (each takes "
      "1/x of the fitted alpha + bytes/busbw: ranks arriving apart, compute beside them; calibrate --from-runs fits "
      "it)");
    k(&S::inter_fabric_efficiency, "inter_fabric_efficiency", Range{0.01, 1.0},
      "with a fabric: the fraction of the sweep's inter-node speed that training's collectives get (as "
      "intra_fabric_efficiency)");
    k(&S::calibrated, "calibrated", "how the GEMM table was measured (calibrate writes it)");
  }
};

}  // namespace cairn
