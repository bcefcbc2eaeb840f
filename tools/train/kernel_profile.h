// cairn-train's per-kernel profile ([train] profile_kernels): every op of the kernel table timed, per rank, written
// to <run>/train/kernel_profile.json and summarised on stderr at the end of the run.
#pragma once
#include <cstdint>

#include "cairn/kernels/backend.h"
#include "settings.h"

namespace cairn::train {

// `inner` wrapped in the profiled backend (kernels/profile.h: each op synchronizes, then adds its wall time to a
// process-wide table, emptied here) when s.profile_kernels, else `inner` itself.
const kernels::Backend* maybe_profiled(const Settings& s, const kernels::Backend* inner);

// Collective over MPI_COMM_WORLD when s.profile_kernels (a no-op otherwise): every rank's table (each op's calls and
// seconds) to rank 0, which writes <train_dir>/kernel_profile.json with the run's provenance and logs the ops that took
// the most time over all ranks. `steps` is how many steps this process trained (the per-step figures divide by it);
// the table also holds the kernels of validation passes and initialisation.
void write_kernel_profile(const Settings& s, int64_t steps);

}  // namespace cairn::train
