// A dataset's shards checked once per job, split over MPI ranks, every rank told the verdict (cairn/shards_mpi.h).
#include <memory>

#include "cairn/error.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/shards_mpi.h"

namespace cairn::shards {

void verify_shards_across_ranks(const Dataset& ds, const std::vector<size_t>& shards, int threads,
                                const std::string& what, MPI_Comm comm) {
  int rank = 0, world = 1;
  mpi::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  mpi::check(MPI_Comm_size(comm, &world), "MPI_Comm_size");
  const size_t first = static_cast<size_t>(rank), stride = static_cast<size_t>(world);
  uint64_t tokens = 0, my_tokens = 0;
  for (size_t k = 0; k < shards.size(); ++k) {
    tokens += ds.info(shards[k]).tokens;
    if (k % stride == first) my_tokens += ds.info(shards[k]).tokens;
  }
  if (rank == 0)
    CAIRN_LOG_INFO("%s: checking %zu shards (%.3g M tokens) against index.json%s", what.c_str(), shards.size(),
                   static_cast<double>(tokens) / 1e6,
                   world > 1 ? strprintf(", 1 in %d on each rank (rank 0: %.3g M tokens)", world,
                                         static_cast<double>(my_tokens) / 1e6)
                                   .c_str()
                             : "");
  bool ok = true;
  std::string why;
  int code = kExitRuntime;
  try {
    // By tokens: a dataset of a few multi-GB shards advances within each.
    std::unique_ptr<Progress> progress;
    if (rank == 0) progress = std::make_unique<Progress>(what + ": tokens checked on rank 0", my_tokens, "tokens");
    for_each_index_parallel(first, shards.size(), stride, threads,
                            [&](size_t k) { ds.verify_shard(shards[k], progress.get()); });
    if (progress) progress->finish();
  } catch (const Error& e) {
    ok = false;
    why = e.what();
    code = e.code();
  } catch (const std::exception& e) {
    ok = false;
    why = e.what();
  }
  mpi::agree_or_throw(ok, why, code, comm);
}

}  // namespace cairn::shards
