// One GPU per MPI rank for every tool that drives a GPU (cairn-train, cairn-eval, cairn-sweep's NCCL backend): device
// binding by local rank, the device's identity and peak rates, device-memory figures, NVTX ranges. Without CUDA in
// the build the binding throws UsageError and the figures are zero. Check macros: cairn/gpu_check.h; NCCL
// communicators: cairn/gpu_nccl.h.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <string>

namespace cairn::gpu {

struct DeviceInfo {
  int ordinal = -1;  // CUDA device index within this process's visible devices
  std::string name;  // e.g. "NVIDIA H100 80GB HBM3"
  std::string pci_bus_id;
  double total_gib = 0;
  double peak_tflops_fp32 = 0;  // non-tensor-core fp32 peak from a table of known GPUs; 0 if unknown
  double peak_tflops_bf16 = 0;  // dense bf16 tensor-core peak from the same table; 0 if unknown
};

// Makes GPU (local_rank % visible GPUs) current for this rank; call before the CUDA backend allocates anything.
// Collective over MPI_COMM_WORLD: throws UsageError naming the ranks when two ranks would share one physical GPU
// (compared by host and PCI bus id, so per-rank CUDA_VISIBLE_DEVICES from Slurm is handled). `config_key` names
// the setting that asked for a GPU in error messages, e.g. "[train] backend".
DeviceInfo bind_rank_to_gpu(const char* config_key);
// The same rule for any communicator and local rank (cairn-sweep binds per tier communicator): device
// device_for_local_rank(local_rank, visible devices), then the shared-GPU check over `comm` (collective over it).
// Errors start with `what`, e.g. "backend nccl".
DeviceInfo bind_rank_to_gpu(const char* what, MPI_Comm comm, int local_rank);

// High-water mark of device memory allocated through cairn's CUDA backend (what PyTorch calls
// max_memory_allocated), and device memory in use on the current GPU as cudaMemGetInfo sees it (context, cuBLAS
// and NCCL buffers included).
size_t peak_allocated_bytes();
size_t device_used_bytes();
void reset_peak_allocated();  // the high-water mark restarts at what is allocated now

// precision = "bf16": the CUDA backend's GEMMs take bf16 copies of their inputs (fp32 accumulation and output).
void set_bf16_matmul(bool on);

// NVTX ranges (Nsight Systems timelines); free when no profiler is attached, no-ops without CUDA.
void range_push(const char* name);
void range_pop();

}  // namespace cairn::gpu
