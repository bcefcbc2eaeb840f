// [sweep]: keys of cairn-sweep (collective-bandwidth sweeps; names follow nccl-tests' flags).
#include "sections.h"

namespace cairn::schema {
void declare_sweep(Schema& s) {
  s.add_choice("sweep", "backend", KeyType::String, "auto", {"auto", "mpi", "nccl"},
               "communication backend (auto: nccl when built with CUDA and GPUs are visible, else mpi)");
  s.add_choice("sweep", "collectives", KeyType::StringList, json::array({"allreduce"}),
               {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv", "all"},
               "collectives to sweep, in order (\"all\" = every one)");
  s.add_choice("sweep", "types", KeyType::StringList, json::array({"float32"}),
               {"float32", "float", "float64", "double", "int32", "int", "float16", "half", "bfloat16", "bf16", "all"},
               "element types (-d; float16/bfloat16 need the nccl backend; \"all\" = every type the backend has)");
  s.add_choice("sweep", "ops", KeyType::StringList, json::array({"sum"}), {"sum", "prod", "max", "min", "avg", "all"},
               "reduction ops for allreduce/reducescatter/reduce (-o; avg needs the nccl backend; \"all\" = every op "
               "the backend has)");
  s.add_range("sweep", "root", KeyType::Int, 0, -1, 1e7,
              "root rank of broadcast and reduce within each tier (-r; -1 = every rank in turn)");
  s.add("sweep", "minbytes", KeyType::String, "8", "smallest size, bytes with optional K/M/G suffix (-b)");
  s.add("sweep", "maxbytes", KeyType::String, "128M", "largest size, bytes with optional K/M/G suffix (-e)");
  s.add_range("sweep", "stepfactor", KeyType::Int, 2, 1, 1024, "multiply the size by this each step (-f; 1 = use stepbytes)");
  s.add("sweep", "stepbytes", KeyType::String, "1M", "add this many bytes each step when stepfactor = 1 (-i)");
  s.add_range("sweep", "iters", KeyType::Int, 20, 1, 1e7, "timed iterations per size (-n)");
  s.add_range("sweep", "agg_iters", KeyType::Int, 1, 1, 1e6,
              "collective calls aggregated into each timed iteration; times are per call (-m)");
  s.add_range("sweep", "warmup_iters", KeyType::Int, 5, 0, 1e7, "untimed warm-up iterations at the largest and smallest size (-w)");
  s.add_range("sweep", "check", KeyType::Int, 1, 0, 1000, "correctness-check iterations per size (-c; 0 = no check)");
  s.add_range("sweep", "average", KeyType::Int, 1, 0, 3, "per-op time across ranks: 0 = rank 0, 1 = mean, 2 = min, 3 = max (-a)");
  s.add_range("sweep", "blocking", KeyType::Int, 0, 0, 3,
              "-z: 0 = no, 1 = wait and barrier after every call, 2 = wait after every call, 3 = wait and barrier "
              "after every iteration (barrier not timed)");
  s.add_range("sweep", "report_cputime", KeyType::Int, 0, 0, 1,
              "1 = the time columns show host time to issue the calls (-C)");
  s.add_choice("sweep", "tiers", KeyType::StringList, json::array({"world"}), {"world", "intra", "inter"},
               "communicators to sweep: whole job, node-local (all nodes at once), one rank per node");
  s.add_range("sweep", "min_busbw", KeyType::Float, 0.0, 0.0, 1e9,
              "gate: exit 3 if any block's average bus bandwidth (GB/s) is below this (0 = off)");
  s.add("sweep", "keep_samples", KeyType::Bool, false, "store every iteration's time in sweep.h5");
  s.add("sweep", "malloc_tune", KeyType::Bool, false,
        "call mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD=1 GiB) at start, as MALLOC_MMAP_MAX_=0 would (see README)");
}
}  // namespace cairn::schema
