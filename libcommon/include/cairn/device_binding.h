// One rule for which GPU a rank drives, shared by every tool (cairn-train, cairn-eval, cairn-sweep's NCCL backend):
// pure functions, so the rule is tested on machines without GPUs.
#pragma once

namespace cairn {

// The visible device a rank uses: its node-local rank modulo the devices it sees. With one rank per GPU and all
// GPUs visible that is the local rank; under `srun --gpus-per-task=1` each rank sees one device and uses device 0.
// Ranks that end up on the same physical GPU are caught by the caller's PCI bus id check. Throws UsageError naming
// `what` when no device is visible.
int device_for_local_rank(int local_rank, int visible_devices, const char* what);

// How many of `physical` devices CUDA_VISIBLE_DEVICES = `value` leaves visible (nullptr: unset, all of them).
// CUDA's rule: the comma-separated entries (indices, or GPU-/MIG- UUIDs) up to the first invalid one; an index
// outside 0..physical-1 or a repeated index is invalid and ends the list; "" or "-1" hides every device.
int visible_devices_from_env(const char* value, int physical);

}  // namespace cairn
