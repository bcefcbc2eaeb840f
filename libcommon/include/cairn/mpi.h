// MPI session (single process, mpirun or srun), topology sub-communicators and typed collectives.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <mpi.h>
#include <sched.h>

namespace cairn::mpi {

// RAII MPI init/finalize. Works launched directly (singleton), under mpirun and under srun.
// Also fills log_settings() rank/size/host. Only one may exist; nested use is an error.
class Session {
 public:
  // thread_level: FUNNELED by default (helper threads such as data prefetch never call MPI); a tool
  // with no helper threads may ask for MPI_THREAD_SINGLE, which some MPI builds run faster.
  Session(int* argc, char*** argv, int thread_level = MPI_THREAD_FUNNELED);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

bool initialized();  // MPI_Init called and not finalized
// After an error escaped a tool: on a multi-rank job, MPI_Abort with `code` (other ranks may be
// blocked in a collective); on one rank, finalize. Called by run_tool().
void abort_if_failed(int code);
// On a rank other than 0 after an error every rank raises alike: sleep up to `seconds` so that rank 0
// reports it and aborts the job (killing this process); returns if it did not.
void wait_for_root_abort(double seconds);

// Topology of the world communicator, computed once per Session.
struct Topology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // within this node
  int node_index = 0, node_count = 1;  // nodes numbered by their lowest world rank
  int cores_per_rank = 1;              // this rank's CPUs over the local ranks sharing them (cores_per_local_rank)
  std::string host;
  std::vector<std::string> hosts_by_rank;  // hostname of every world rank
  MPI_Comm world = MPI_COMM_WORLD;
  MPI_Comm node = MPI_COMM_NULL;   // ranks on this node
  MPI_Comm cross = MPI_COMM_NULL;  // ranks with the same local_rank across nodes (one per node)
};
const Topology& topology();
// The CPUs this rank may run on (its affinity mask) over the number of ranks on this node whose CPUs overlap them, at
// least 1: the CPU threads a rank takes when its tool's `threads` setting is 0. Unbound ranks share the node's cores;
// ranks bound to cores of their own take all of them.
int cores_per_local_rank();
// The rule behind it: the CPUs of `mine` over the masks in `local` (every local rank's, this one's included) that
// overlap it, at least 1.
int cpus_per_rank(const cpu_set_t& mine, const std::vector<cpu_set_t>& local);

int rank();
int size();
void barrier(MPI_Comm comm = MPI_COMM_WORLD);
void check(int mpi_rc, const char* what);  // throws RuntimeError with MPI's error string
// n as an MPI count (int); RuntimeError "<what> of <n> elements exceeds MPI's int count" when it does not fit.
int int_count(size_t n, const std::string& what);

template <typename T>
MPI_Datatype datatype() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, uint32_t>) return MPI_UINT32_T;
  else if constexpr (std::is_same_v<T, uint16_t>) return MPI_UINT16_T;
  else if constexpr (std::is_same_v<T, uint8_t>) return MPI_UINT8_T;
  else if constexpr (std::is_same_v<T, char>) return MPI_CHAR;
  else static_assert(sizeof(T) == 0, "no MPI datatype for T");
}

template <typename T>
void allreduce_inplace(T* data, size_t count, MPI_Op op = MPI_SUM, MPI_Comm comm = MPI_COMM_WORLD) {
  check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), datatype<T>(), op, comm), "MPI_Allreduce");
}
template <typename T>
void allreduce_inplace(std::vector<T>& v, MPI_Op op = MPI_SUM, MPI_Comm comm = MPI_COMM_WORLD) {
  allreduce_inplace(v.data(), v.size(), op, comm);
}
template <typename T>
T allreduce(T value, MPI_Op op = MPI_SUM, MPI_Comm comm = MPI_COMM_WORLD) {
  allreduce_inplace(&value, 1, op, comm);
  return value;
}
template <typename T>
void broadcast(T* data, size_t count, int root = 0, MPI_Comm comm = MPI_COMM_WORLD) {
  check(MPI_Bcast(data, static_cast<int>(count), datatype<T>(), root, comm), "MPI_Bcast");
}
template <typename T>
T broadcast_value(T value, int root = 0, MPI_Comm comm = MPI_COMM_WORLD) {
  broadcast(&value, 1, root, comm);
  return value;
}
// Every rank's value, in rank order.
template <typename T>
std::vector<T> allgather_value(T value, MPI_Comm comm = MPI_COMM_WORLD) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  std::vector<T> out(n);
  check(MPI_Allgather(&value, 1, datatype<T>(), out.data(), 1, datatype<T>(), comm), "MPI_Allgather");
  return out;
}
std::string broadcast_string(const std::string& s, int root = 0, MPI_Comm comm = MPI_COMM_WORLD);
std::vector<std::string> allgather_strings(const std::string& s, MPI_Comm comm = MPI_COMM_WORLD);
// Every rank's string on `root` (in rank order; an empty vector elsewhere), of any total size.
std::vector<std::string> gather_strings(const std::string& s, int root = 0, MPI_Comm comm = MPI_COMM_WORLD);

// Raises an error on every rank if any rank failed: each rank passes its local ok flag and message;
// returns normally only if all are ok, else throws on all ranks with the first failing rank's message
// and the highest exit code. Use around work where one rank can fail alone, to avoid hangs.
void agree_or_throw(bool ok, const std::string& message, int code, MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace cairn::mpi
