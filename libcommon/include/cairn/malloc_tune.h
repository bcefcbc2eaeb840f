// glibc malloc settings for processes whose libraries allocate a large temporary on every call (Open MPI's reductions).
#pragma once

namespace cairn {

// Never serve an allocation with its own mmap and never trim the heap: a freed block stays mapped and serves the
// next request. Open MPI's large-message reductions (reduce-scatter, allreduce) allocate and free a buffer as large
// as the message on every call; above glibc's mmap threshold (at most 32 MiB) each one is a fresh mapping whose pages
// fault in again. On a 2-core VM, MPI_Ireduce_scatter of 64 MiB over 2 ranks took 0.35 s with the default malloc and
// 0.022 s with these settings. The cost: memory a process frees is kept (its resident size stays at its peak).
// Returns false if glibc refused either setting.
bool keep_freed_memory_mapped();

}  // namespace cairn
