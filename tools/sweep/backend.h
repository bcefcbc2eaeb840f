// The communication backends cairn-sweep drives (MPI on host buffers, NCCL on GPUs), as a table of
// plain function pointers so the driver is the same for both, as in nccl-tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <mpi.h>

#include "pattern.h"

namespace cairn::sweep {

enum class CollKind : int { AllReduce = 0, AllGather, ReduceScatter, AlltoAll, Broadcast, Reduce, SendRecv };

// One backend's communicator over one tier (opaque to the driver).
struct BackendComm;

// A rank's device, for the "#  Rank  0 Group  0 Pid ... device ..." lines.
struct DeviceInfo {
  int device = -1;
  std::string bus_id = "cpu";  // [xxxx:xx:xx] for GPUs
  std::string name = "host memory";
};

struct Backend {
  const char* name;
  bool (*supports_type)(DataType);
  bool (*supports_op)(RedOp);
  // MPI's in-place reduce-scatter leaves the result at the start of the buffer (NCCL: at rank*count).
  bool inplace_reducescatter_at_start;
  // MPI broadcast out of place: the root sends from its send buffer and its recv buffer is untouched.
  bool root_recv_untouched_by_broadcast;
  // Alltoall can run in place (MPI_IN_PLACE); NCCL's send/recv pairs on one buffer race, so its
  // in-place alltoall is timed but not checked (nccl-tests prints N/A there too).
  bool checked_inplace_alltoall;
  // How many devices this rank could use (GPUs visible; MPI: unlimited = -1).
  int (*visible_devices)();
  // Why this rank has no usable device ("" when it has one, or needs none: MPI), the CUDA error and driver/runtime
  // versions of cairn/kernels/cuda_probe.h; *broken is set when a driver is there but fails (a runtime failure, not a
  // missing GPU).
  std::string (*device_problem)(bool* broken);
  // Collective over `comm`; throws cairn errors (UsageError when the request cannot be satisfied).
  BackendComm* (*open)(MPI_Comm comm, int local_rank);
  void (*close)(BackendComm*);
  DeviceInfo (*device_info)(int local_rank);
  std::string (*version)();
  void* (*alloc)(BackendComm*, size_t bytes);
  void (*release)(BackendComm*, void* ptr);
  // Writes the segment's values (or the sentinel) into `view` (a pointer into a buffer).
  void (*fill)(BackendComm*, void* view, DataType, const Segment&, const PatternParams&);
  // Counts elements of the segment in `view` that differ from what they must hold.
  int64_t (*check)(BackendComm*, const void* view, DataType, const Segment&, const PatternParams&);
  // Starts one collective (MPI: runs it). In place when send == recv region semantics apply.
  void (*run)(BackendComm*, CollKind, const void* send, void* recv, size_t count, DataType, RedOp, int root,
              bool in_place);
  // Waits until everything started has completed.
  void (*sync)(BackendComm*);
};

// nonblocking: every collective started with its MPI_I* call and waited for (sweep.mpi_nonblocking).
const Backend& mpi_backend(bool nonblocking = false);
// The largest element count one MPI call takes (INT_MAX, or lower while an MpiCountLimit lives). Above
// it the MPI backend splits reductions into consecutive calls and sends the other collectives as one
// element of a derived type spanning the count.
uint64_t mpi_count_limit();
// Lowers mpi_count_limit() to `limit` (0 or >= INT_MAX: unchanged) for its lifetime, so a test
// (SweepFaults::mpi_count_limit) reaches the large-count paths with small buffers; communicators
// opened meanwhile keep the limit they started with.
class MpiCountLimit {
 public:
  explicit MpiCountLimit(uint64_t limit);
  ~MpiCountLimit();
  MpiCountLimit(const MpiCountLimit&) = delete;
  MpiCountLimit& operator=(const MpiCountLimit&) = delete;

 private:
  uint64_t saved_;
};
// nullptr when cairn was built without CUDA.
const Backend* nccl_backend();

size_t type_size(DataType t);

}  // namespace cairn::sweep
