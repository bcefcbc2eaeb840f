// Checking a dataset's shards once per job, split over the ranks of an MPI communicator (cairn-train, cairn-eval).
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

#include "cairn/shards.h"

namespace cairn::shards {

// The shards `shards` (indices into `ds`) against index.json once per job, not once per rank: rank r of `comm` hashes
// shards[r], shards[r + size], ... on `threads` threads (Dataset::verify_shard). Rank 0 says what is checked
// ("<what>: checking N shards (X M tokens) against index.json, 1 in S on each rank (rank 0: Y M tokens)") and shows
// its progress; every rank hears the verdict (mpi::agree_or_throw): a bad shard throws on every rank the lowest
// failing rank's error naming the shard file ("rank 1: corrupt dataset shard ..."), with its exit code (GateFailure:
// 3), so no rank goes on to read or write anything. Collective: every rank of `comm` calls it with the same shards.
void verify_shards_across_ranks(const Dataset& ds, const std::vector<size_t>& shards, int threads,
                                const std::string& what, MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace cairn::shards
