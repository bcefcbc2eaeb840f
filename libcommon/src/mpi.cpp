// MPI session, topology (node-local and cross-node communicators) and string collectives.
#include "cairn/mpi.h"

#include <sched.h>

#include <climits>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <thread>

#include "cairn/error.h"
#include "cairn/log.h"
#include "cairn/provenance.h"

namespace cairn::mpi {

namespace {
Topology g_topology;
bool g_session_active = false;
bool g_we_initialized = false;

void compute_topology() {
  Topology& t = g_topology;
  MPI_Comm_rank(MPI_COMM_WORLD, &t.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t.size);
  t.host = hostname_string();
  t.hosts_by_rank = allgather_strings(t.host);
  // Node-local communicator: ranks that share memory (same host).
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &t.node),
        "MPI_Comm_split_type");
  MPI_Comm_rank(t.node, &t.local_rank);
  MPI_Comm_size(t.node, &t.local_size);
  // Nodes are numbered in order of their lowest world rank.
  int node_leader = t.rank;
  MPI_Allreduce(MPI_IN_PLACE, &node_leader, 1, MPI_INT, MPI_MIN, t.node);
  std::vector<int> leaders = allgather_value<int>(node_leader);
  std::vector<int> unique = leaders;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  t.node_count = static_cast<int>(unique.size());
  t.node_index = static_cast<int>(std::lower_bound(unique.begin(), unique.end(), node_leader) - unique.begin());
  // The CPUs this rank may run on (its affinity: a cgroup, taskset, or the launcher's binding), shared among the
  // local ranks whose CPUs overlap them. Unbound ranks share the node's cores; ranks bound to cores of their own
  // (srun --cpu-bind=cores, mpirun --map-by slot:PE=N) each take all of theirs. Dividing every rank's count by the
  // node's ranks, as before, shared bound ranks' cores out a second time (4 ranks x 8 bound CPUs ran 2 threads each).
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) {
    CPU_ZERO(&mine);
    for (int c = 0; c < omp_get_num_procs() && c < CPU_SETSIZE; ++c) CPU_SET(c, &mine);
  }
  std::vector<cpu_set_t> all(static_cast<size_t>(t.local_size));
  check(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, t.node), "MPI_Allgather");
  t.cores_per_rank = cpus_per_rank(mine, all);
  // Cross-node communicator: one rank per node (those with the same local rank).
  check(MPI_Comm_split(MPI_COMM_WORLD, t.local_rank, t.node_index, &t.cross), "MPI_Comm_split");
  LogSettings& ls = log_settings();
  ls.rank = t.rank;
  ls.size = t.size;
  ls.host = t.host;
}
}  // namespace

Session::Session(int* argc, char*** argv, int thread_level) {
  if (g_session_active) throw RuntimeError("internal: a second MPI session was started");
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, thread_level, &provided);
    if (rc != MPI_SUCCESS) throw RuntimeError("MPI_Init_thread failed");
    g_we_initialized = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  g_session_active = true;
  compute_topology();
}

Session::~Session() {
  // Unwinding from an error on a multi-rank job: other ranks may wait in a collective forever, so
  // leave MPI up and let run_tool() abort the job after printing the error (abort_if_failed).
  if (std::uncaught_exceptions() > 0 && g_topology.size > 1) {
    g_session_active = false;
    return;
  }
  if (g_topology.node != MPI_COMM_NULL) MPI_Comm_free(&g_topology.node);
  if (g_topology.cross != MPI_COMM_NULL) MPI_Comm_free(&g_topology.cross);
  g_session_active = false;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialized && !finalized) MPI_Finalize();
}

void abort_if_failed(int code) {
  if (!initialized()) return;
  if (g_topology.size > 1) {
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  MPI_Finalize();
}

void wait_for_root_abort(double seconds) {
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

bool initialized() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

const Topology& topology() { return g_topology; }

int cpus_per_rank(const cpu_set_t& mine, const std::vector<cpu_set_t>& local) {
  int sharing = 0;
  for (const auto& other : local) {
    cpu_set_t both;
    CPU_AND(&both, &mine, &other);
    if (CPU_COUNT(&both) > 0) ++sharing;
  }
  return std::max(1, CPU_COUNT(&mine) / std::max(1, sharing));
}

int cores_per_local_rank() { return std::max(1, g_topology.cores_per_rank); }
int rank() { return g_topology.rank; }
int size() { return g_topology.size; }

void barrier(MPI_Comm comm) { check(MPI_Barrier(comm), "MPI_Barrier"); }

int int_count(size_t n, const std::string& what) {
  if (n > static_cast<size_t>(INT_MAX))
    throw RuntimeError(what + " of " + std::to_string(n) + " elements exceeds MPI's int count");
  return static_cast<int>(n);
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw RuntimeError(std::string(what) + " failed: " + std::string(msg, len));
}

std::string broadcast_string(const std::string& s, int root, MPI_Comm comm) {
  uint64_t n = s.size();
  broadcast(&n, 1, root, comm);
  std::string out = s;
  out.resize(n);
  if (n) check(MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, root, comm), "MPI_Bcast");
  return out;
}

std::vector<std::string> allgather_strings(const std::string& s, MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  const int len = int_count(s.size(), "a string to all-gather");
  std::vector<int> lens(n), displs(n);
  check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm), "MPI_Allgather");
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    displs[i] = int_count(total, "the all-gathered strings");
    total += static_cast<size_t>(lens[i]);
  }
  int_count(total, "the all-gathered strings");
  std::string all(total, '\0');
  check(MPI_Allgatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, comm),
        "MPI_Allgatherv");
  std::vector<std::string> out(n);
  for (int i = 0; i < n; ++i) out[i] = all.substr(displs[i], lens[i]);
  return out;
}

std::vector<std::string> gather_strings(const std::string& s, int root, MPI_Comm comm) {
  int n = 0, me = 0;
  MPI_Comm_size(comm, &n);
  MPI_Comm_rank(comm, &me);
  uint64_t len = s.size();
  std::vector<uint64_t> lens(me == root ? static_cast<size_t>(n) : 0);
  check(MPI_Gather(&len, 1, MPI_UINT64_T, lens.data(), 1, MPI_UINT64_T, root, comm), "MPI_Gather");
  // Point to point in parts of 1 GiB: no int count or displacement to overflow, whatever the sizes add up to.
  constexpr size_t kPart = size_t{1} << 30;
  constexpr int kTag = 0x6a7;
  std::vector<std::string> out;
  if (me != root) {
    for (size_t a = 0; a < s.size(); a += kPart)
      check(MPI_Send(s.data() + a, static_cast<int>(std::min(kPart, s.size() - a)), MPI_CHAR, root, kTag, comm),
            "MPI_Send");
    return out;
  }
  out.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (i == root) {
      out[static_cast<size_t>(i)] = s;
      continue;
    }
    std::string& dst = out[static_cast<size_t>(i)];
    dst.resize(lens[static_cast<size_t>(i)]);
    for (size_t a = 0; a < dst.size(); a += kPart)
      check(MPI_Recv(dst.data() + a, static_cast<int>(std::min(kPart, dst.size() - a)), MPI_CHAR, i, kTag, comm,
                     MPI_STATUS_IGNORE),
            "MPI_Recv");
  }
  return out;
}

void agree_or_throw(bool ok, const std::string& message, int code, MPI_Comm comm) {
  int local_bad = ok ? 0 : std::max(code, 1);
  int worst = local_bad;
  check(MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  if (worst == 0) return;
  // The lowest failing rank's message goes to everyone.
  int r = 0;
  MPI_Comm_rank(comm, &r);
  int first_bad = ok ? INT32_MAX : r;
  check(MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  std::string msg = broadcast_string(message, first_bad, comm);
  if (first_bad != 0) msg = "rank " + std::to_string(first_bad) + ": " + msg;
  throw Error(worst, msg);
}

}  // namespace cairn::mpi
