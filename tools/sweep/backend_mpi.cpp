// MPI backend of cairn-sweep: host buffers, MPI collectives on the tier's communicator, blocking or
// (sweep.mpi_nonblocking) each started non-blocking and waited for.
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "backend.h"
#include "cairn/error.h"
#include "cairn/log.h"
#include "cairn/mpi.h"

namespace cairn::sweep {

struct BackendComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  uint64_t count_limit = INT_MAX;  // largest count one MPI call takes (MpiCountLimit can lower it)
  // The last large-count type built (built outside the timed loop by the untimed call, reused).
  MPI_Datatype big_type = MPI_DATATYPE_NULL, big_base = MPI_DATATYPE_NULL;
  uint64_t big_count = 0;
};

namespace {
uint64_t g_count_limit = INT_MAX;  // MPI's int count: what every real run uses
}  // namespace

uint64_t mpi_count_limit() { return g_count_limit; }

MpiCountLimit::MpiCountLimit(uint64_t limit) : saved_(g_count_limit) {
  if (limit > 0 && limit < INT_MAX) g_count_limit = limit;
}
MpiCountLimit::~MpiCountLimit() { g_count_limit = saved_; }

namespace {

bool mpi_supports_type(DataType t) { return t == DataType::Int32 || t == DataType::Float32 || t == DataType::Float64; }
bool mpi_supports_op(RedOp op) { return op == RedOp::Sum || op == RedOp::Prod || op == RedOp::Max || op == RedOp::Min; }
int mpi_visible_devices() { return -1; }
std::string mpi_device_problem(bool* broken) {
  if (broken) *broken = false;
  return {};
}

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::Int32: return MPI_INT32_T;
    case DataType::Float64: return MPI_DOUBLE;
    default: return MPI_FLOAT;
  }
}
MPI_Op mpi_op(RedOp op) {
  switch (op) {
    case RedOp::Max: return MPI_MAX;
    case RedOp::Min: return MPI_MIN;
    case RedOp::Prod: return MPI_PROD;
    default: return MPI_SUM;
  }
}

BackendComm* mpi_open(MPI_Comm comm, int) {
  auto* bc = new BackendComm;
  bc->comm = comm;
  bc->count_limit = mpi_count_limit();
  MPI_Comm_rank(comm, &bc->rank);
  MPI_Comm_size(comm, &bc->size);
  return bc;
}
void mpi_close(BackendComm* bc) {
  if (bc->big_type != MPI_DATATYPE_NULL) MPI_Type_free(&bc->big_type);
  delete bc;
}
DeviceInfo mpi_device_info(int) { return DeviceInfo{}; }
std::string mpi_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<size_t>(len));
  auto nl = s.find_first_of("\n,");
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// Page-aligned so that timings do not depend on where malloc happened to put the buffer.
void* mpi_alloc(BackendComm*, size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) {
    throw RuntimeError(strprintf("cannot allocate %zu bytes of host memory for the sweep buffers", bytes));
  }
  return p;
}
void mpi_release(BackendComm*, void* p) { std::free(p); }

template <typename T>
T sentinel() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::quiet_NaN();
  else return std::numeric_limits<T>::min() + 7;
}

// The untimed fill and check cost ~25 ns an element on one thread (a minute per 2 G elements): large buffers spread
// them over this rank's share of the node's cores, so ranks that fill the node stay on one thread each and no idle
// OpenMP thread competes with a timed loop. Small segments stay serial (a parallel region costs microseconds).
// OMP_NUM_THREADS, when lower, caps it.
constexpr int64_t kParallelFrom = int64_t{1} << 20;
int pattern_threads() {
  static const int share = std::max(1, std::min(mpi::cores_per_local_rank(), omp_get_max_threads()));
  return share;
}

template <typename T>
void fill_typed(T* p, const Segment& s, const PatternParams& pp) {
  const int64_t n = static_cast<int64_t>(s.count);
  T* out = p + s.offset;
  if (s.kind == ValueKind::Sentinel) {
    std::fill(out, out + n, sentinel<T>());
    return;
  }
#pragma omp parallel for schedule(static) if (n >= kParallelFrom) num_threads(pattern_threads())
  for (int64_t j = 0; j < n; ++j) out[j] = static_cast<T>(segment_value(pp, s, static_cast<uint64_t>(j)));
}

template <typename T>
int64_t check_typed(const T* p, const Segment& s, const PatternParams& pp) {
  const int64_t n = static_cast<int64_t>(s.count);
  const T* in = p + s.offset;
  int64_t wrong = 0;
#pragma omp parallel for schedule(static) reduction(+ : wrong) if (n >= kParallelFrom) num_threads(pattern_threads())
  for (int64_t j = 0; j < n; ++j) {
    if (!value_matches(pp, static_cast<double>(in[j]), segment_value(pp, s, static_cast<uint64_t>(j)))) ++wrong;
  }
  return wrong;
}

void mpi_fill(BackendComm*, void* view, DataType t, const Segment& s, const PatternParams& pp) {
  switch (t) {
    case DataType::Int32: fill_typed(static_cast<int32_t*>(view), s, pp); break;
    case DataType::Float64: fill_typed(static_cast<double*>(view), s, pp); break;
    default: fill_typed(static_cast<float*>(view), s, pp); break;
  }
}
int64_t mpi_check(BackendComm*, const void* view, DataType t, const Segment& s, const PatternParams& pp) {
  switch (t) {
    case DataType::Int32: return check_typed(static_cast<const int32_t*>(view), s, pp);
    case DataType::Float64: return check_typed(static_cast<const double*>(view), s, pp);
    default: return check_typed(static_cast<const float*>(view), s, pp);
  }
}

void run_counted(BackendComm* bc, CollKind kind, const void* send, void* recv, int n, MPI_Datatype dt, RedOp op,
                 int root, bool in_place, bool nonblocking);

// A datatype spanning `count` elements of `base` (extent exactly count elements) built from
// blocks of at most `limit`, so that counts above MPI's int range go as one element of it
// (the usual large-count construction for MPI 3: contiguous blocks plus a remainder, in a struct).
MPI_Datatype large_count_type(uint64_t count, MPI_Datatype base, size_t elem_size, uint64_t limit) {
  uint64_t blocks = count / limit, rest = count % limit;
  MPI_Datatype block = MPI_DATATYPE_NULL, body = MPI_DATATYPE_NULL, out = MPI_DATATYPE_NULL;
  mpi::check(MPI_Type_contiguous(static_cast<int>(limit), base, &block), "MPI_Type_contiguous");
  mpi::check(MPI_Type_contiguous(static_cast<int>(blocks), block, &body), "MPI_Type_contiguous");
  if (rest == 0) {
    out = body;
  } else {
    MPI_Datatype tail = MPI_DATATYPE_NULL;
    mpi::check(MPI_Type_contiguous(static_cast<int>(rest), base, &tail), "MPI_Type_contiguous");
    int lengths[2] = {1, 1};
    MPI_Aint displacements[2] = {0, static_cast<MPI_Aint>(blocks * limit * elem_size)};
    MPI_Datatype types[2] = {body, tail};
    mpi::check(MPI_Type_create_struct(2, lengths, displacements, types, &out), "MPI_Type_create_struct");
    MPI_Type_free(&tail);
    MPI_Type_free(&body);
  }
  MPI_Type_free(&block);
  mpi::check(MPI_Type_commit(&out), "MPI_Type_commit");
  return out;
}

void mpi_run(BackendComm* bc, CollKind kind, const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
             bool in_place, bool nonblocking) {
  MPI_Datatype dt = mpi_type(t);
  if (count > bc->count_limit) {
    size_t ws = type_size(t);
    // Predefined reduction ops take only predefined types (Open MPI 4 checks it), so reductions go
    // as consecutive calls over slices of at most count_limit elements.
    if (kind == CollKind::AllReduce || kind == CollKind::Reduce) {
      for (uint64_t done = 0; done < count;) {
        uint64_t part = std::min<uint64_t>(bc->count_limit, count - done);
        const char* s = static_cast<const char*>(send) + done * ws;
        char* r = static_cast<char*>(recv) + done * ws;
        run_counted(bc, kind, s, r, static_cast<int>(part), dt, op, root, in_place, nonblocking);
        done += part;
      }
      return;
    }
    if (kind == CollKind::ReduceScatter) {
      // Each rank's slice of the send buffer is strided, and predefined ops refuse derived types.
      throw UsageError("reducescatter over MPI: more than 2^31-1 elements per rank need MPI 4 large-count calls");
    }
    // Non-reducing collectives: one element of a type that spans the whole per-rank count.
    if (bc->big_type == MPI_DATATYPE_NULL || bc->big_count != count || bc->big_base != dt) {
      if (bc->big_type != MPI_DATATYPE_NULL) MPI_Type_free(&bc->big_type);
      bc->big_type = large_count_type(count, dt, ws, bc->count_limit);
      bc->big_count = count;
      bc->big_base = dt;
    }
    run_counted(bc, kind, send, recv, 1, bc->big_type, op, root, in_place, nonblocking);
    return;
  }
  run_counted(bc, kind, send, recv, static_cast<int>(count), dt, op, root, in_place, nonblocking);
}
void mpi_run_blocking(BackendComm* bc, CollKind kind, const void* send, void* recv, size_t count, DataType t, RedOp op,
                      int root, bool in_place) {
  mpi_run(bc, kind, send, recv, count, t, op, root, in_place, false);
}
void mpi_run_nonblocking(BackendComm* bc, CollKind kind, const void* send, void* recv, size_t count, DataType t,
                         RedOp op, int root, bool in_place) {
  mpi_run(bc, kind, send, recv, count, t, op, root, in_place, true);
}

// One MPI call of `n` elements of `dt` (a predefined type, or the large-count type with n = 1): the blocking call, or
// (nonblocking) its MPI_I* form and a wait, as cairn-train's gradient and ZeRO reductions make them. Open MPI runs the
// two with different algorithms (tuned vs libnbc). A sendrecv in place stays MPI_Sendrecv_replace, which has no
// non-blocking form before MPI 4.
void run_counted(BackendComm* bc, CollKind kind, const void* send, void* recv, int n, MPI_Datatype dt, RedOp op,
                 int root, bool in_place, bool nonblocking) {
  MPI_Comm comm = bc->comm;
  const MPI_Op mop = mpi_op(op);
  const void* src = in_place ? MPI_IN_PLACE : send;
  const void* root_src = in_place && bc->rank == root ? MPI_IN_PLACE : send;
  // All-gather and all-to-all in place name no send buffer, count or type.
  const int send_n = in_place ? 0 : n;
  const MPI_Datatype send_dt = in_place ? MPI_DATATYPE_NULL : dt;
  // Out of place, the broadcast root sends straight from its send buffer (no extra copy timed).
  void* bcast_buf = bc->rank == root && !in_place ? const_cast<void*>(send) : recv;
  const int next = (bc->rank + 1) % bc->size, prev = (bc->rank - 1 + bc->size) % bc->size;
  const bool nb = nonblocking && !(kind == CollKind::SendRecv && in_place);
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int rc = MPI_SUCCESS;
  const char* what = "";
  switch (kind) {
    case CollKind::AllReduce:
      what = nb ? "MPI_Iallreduce" : "MPI_Allreduce";
      rc = nb ? MPI_Iallreduce(src, recv, n, dt, mop, comm, req) : MPI_Allreduce(src, recv, n, dt, mop, comm);
      break;
    case CollKind::AllGather:
      what = nb ? "MPI_Iallgather" : "MPI_Allgather";
      rc = nb ? MPI_Iallgather(src, send_n, send_dt, recv, n, dt, comm, req)
              : MPI_Allgather(src, send_n, send_dt, recv, n, dt, comm);
      break;
    case CollKind::ReduceScatter:
      what = nb ? "MPI_Ireduce_scatter_block" : "MPI_Reduce_scatter_block";
      rc = nb ? MPI_Ireduce_scatter_block(src, recv, n, dt, mop, comm, req)
              : MPI_Reduce_scatter_block(src, recv, n, dt, mop, comm);
      break;
    case CollKind::AlltoAll:
      what = nb ? "MPI_Ialltoall" : "MPI_Alltoall";
      rc = nb ? MPI_Ialltoall(src, send_n, send_dt, recv, n, dt, comm, req)
              : MPI_Alltoall(src, send_n, send_dt, recv, n, dt, comm);
      break;
    case CollKind::Broadcast:
      what = nb ? "MPI_Ibcast" : "MPI_Bcast";
      rc = nb ? MPI_Ibcast(bcast_buf, n, dt, root, comm, req) : MPI_Bcast(bcast_buf, n, dt, root, comm);
      break;
    case CollKind::Reduce:
      what = nb ? "MPI_Ireduce" : "MPI_Reduce";
      rc = nb ? MPI_Ireduce(root_src, recv, n, dt, mop, root, comm, req)
              : MPI_Reduce(root_src, recv, n, dt, mop, root, comm);
      break;
    case CollKind::SendRecv:
      if (nb) {
        what = "MPI_Irecv/MPI_Isend";
        rc = MPI_Irecv(recv, n, dt, prev, 7, comm, &req[0]);
        if (rc == MPI_SUCCESS) rc = MPI_Isend(send, n, dt, next, 7, comm, &req[1]);
      } else {
        what = "MPI_Sendrecv";
        rc = in_place ? MPI_Sendrecv_replace(recv, n, dt, next, 7, prev, 7, comm, MPI_STATUS_IGNORE)
                      : MPI_Sendrecv(send, n, dt, next, 7, recv, n, dt, prev, 7, comm, MPI_STATUS_IGNORE);
      }
      break;
  }
  mpi::check(rc, what);
  if (nb) mpi::check(MPI_Waitall(2, req, MPI_STATUSES_IGNORE), "MPI_Waitall");
}

void mpi_sync(BackendComm*) {}

}  // namespace

const Backend& mpi_backend(bool nonblocking) {
  static const Backend blocking = {"mpi",
                                   mpi_supports_type,
                                   mpi_supports_op,
                                   true,
                                   true,
                                   true,
                                   mpi_visible_devices,
                                   mpi_device_problem,
                                   mpi_open,
                                   mpi_close,
                                   mpi_device_info,
                                   mpi_version,
                                   mpi_alloc,
                                   mpi_release,
                                   mpi_fill,
                                   mpi_check,
                                   mpi_run_blocking,
                                   mpi_sync};
  static const Backend started = [] {
    Backend b = blocking;
    b.run = mpi_run_nonblocking;
    return b;
  }();
  return nonblocking ? started : blocking;
}

#ifndef CAIRN_SWEEP_NCCL
const Backend* nccl_backend() { return nullptr; }
#endif

}  // namespace cairn::sweep
