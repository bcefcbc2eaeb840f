// [sweep]: keys of cairn-sweep (collective-bandwidth sweeps; names follow nccl-tests' flags).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cairn/config_section.h"

namespace cairn {

struct SweepSection {
  static constexpr const char* kSection = "sweep";
  std::string backend = "auto";
  std::vector<std::string> collectives{"allreduce"};
  std::vector<std::string> types{"float32"};
  std::vector<std::string> ops{"sum"};
  int64_t root = 0;
  std::string minbytes = "8";
  std::string maxbytes = "128M";
  int64_t stepfactor = 2;
  std::string stepbytes = "1M";
  int64_t iters = 20;
  int64_t agg_iters = 1;
  int64_t warmup_iters = 5;
  int64_t check = 1;
  int average = 1;
  int blocking = 0;
  int report_cputime = 0;
  std::vector<std::string> tiers{"world"};
  double min_busbw = 0.0;
  bool keep_samples = false;
  bool malloc_tune = false;
  bool mpi_nonblocking = false;
  template <class K>
  static void keys(K& k) {
    using S = SweepSection;
    k(&S::backend, "backend", Choices{"auto", "mpi", "nccl"}, Flag{"--backend"},
      "communication backend (auto: nccl when built with CUDA and GPUs are visible, else mpi)");
    // nccl-tests' binary names (all_reduce_perf) name the collective they measure, as a script written for nccl-tests
    // would.
    k(&S::collectives, "collectives", NonEmpty{}, Flag{"collectives,--collectives"},
      Choices{"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv", "all",
              "all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf", "broadcast_perf",
              "reduce_perf", "sendrecv_perf"},
      "collectives to sweep, in order (\"all\" = every one; nccl-tests' names, all_reduce_perf..., name theirs)");
    k(&S::types, "types", NonEmpty{},
      Choices{"float32", "float", "float64", "double", "int32", "int", "float16", "half", "bfloat16", "bf16", "all"},
      "element types (-d; float16/bfloat16 need the nccl backend; \"all\" = every type the backend has)");
    k(&S::ops, "ops", NonEmpty{}, Choices{"sum", "prod", "max", "min", "avg", "all"},
      "reduction ops for allreduce/reducescatter/reduce (-o; avg needs the nccl backend; \"all\" = every op the "
      "backend has)");
    k(&S::root, "root", Range{-1, 1e7},
      "root rank of broadcast and reduce within each tier (-r; -1 = every rank in turn)");
    k(&S::minbytes, "minbytes", ByteCount{}, Flag{"-b,--minbytes"},
      "smallest size: bytes, or with a K/M/G suffix (-b)");
    k(&S::maxbytes, "maxbytes", ByteCount{}, Flag{"-e,--maxbytes"}, "largest size: bytes, or with a K/M/G suffix (-e)");
    k(&S::stepfactor, "stepfactor", Range{1, 1024}, Flag{"-f,--stepfactor"},
      "multiply the size by this each step (-f; 1 = use stepbytes)");
    k(&S::stepbytes, "stepbytes", ByteCount{}, "add this many bytes each step when stepfactor = 1 (-i)");
    k(&S::iters, "iters", Range{1, 1e7}, Flag{"-n,--iters"}, "timed iterations per size (-n)");
    k(&S::agg_iters, "agg_iters", Range{1, 1e6},
      "collective calls aggregated into each timed iteration; times are per call (-m)");
    k(&S::warmup_iters, "warmup_iters", Range{0, 1e7}, Flag{"-w,--warmup_iters"},
      "untimed warm-up iterations at the largest and smallest size (-w)");
    k(&S::check, "check", Range{0, 1000}, Flag{"-c,--check"},
      "correctness-check iterations per size (-c; 0 = no check)");
    k(&S::average, "average", Range{0, 3}, Flag{"-a,--average"},
      "per-op time across ranks: 0 = rank 0, 1 = mean, 2 = min, 3 = max (-a)");
    k(&S::blocking, "blocking", Range{0, 3},
      "-z: 0 = no, 1 = wait and barrier after every call, 2 = wait after every call, 3 = wait and barrier after "
      "every iteration (barrier not timed)");
    k(&S::report_cputime, "report_cputime", Range{0, 1}, "1 = the time columns show host time to issue the calls (-C)");
    k(&S::tiers, "tiers", NonEmpty{}, Choices{"world", "intra", "inter"}, Flag{"--tiers"},
      "communicators to sweep: whole job, node-local (all nodes at once), one rank per node");
    k(&S::min_busbw, "min_busbw", Range{0.0, 1e9}, Flag{"--min-busbw"},
      "gate: exit 3 if any block's average bus bandwidth (GB/s) is below this (0 = off)");
    k(&S::keep_samples, "keep_samples", Flag{"--keep-samples"}, "store every iteration's time in sweep.h5");
    k(&S::malloc_tune, "malloc_tune", Flag{"--malloc-tune"},
      "call mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, -1) at start: no mmap'd blocks and no trimming, so "
      "large MPI temporaries are not re-faulted each call (see README)");
    k(&S::mpi_nonblocking, "mpi_nonblocking", Flag{"--mpi-nonblocking"},
      "MPI backend: start each collective with its non-blocking call (MPI_Iallreduce, MPI_Ireduce_scatter_block, ...; "
      "sendrecv as MPI_Irecv + MPI_Isend) and wait for it, as cairn-train's gradient and ZeRO reductions do: Open MPI "
      "runs these with other algorithms (libnbc) than the blocking calls");
  }
};

}  // namespace cairn
