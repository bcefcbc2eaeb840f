// cairn-train's pipeline messages: a chunk's activations to the next virtual stage and its input gradient to the
// previous one, over MPI (host memory, staged on device backends) or NCCL (device memory, no host copy).
#pragma once
#include <cstddef>
#include <memory>

#include "cairn/kernels/backend.h"

namespace cairn::train {

// What a message carries: the channel it travels on (NCCL has one per direction and kind; MPI tells them apart by
// the tag).
enum class PipeKind { Activations, Gradients };

// Pipeline point-to-point transport between world ranks. Peers and tags come from cairn/pipeline.h (peers()).
//   send: n floats at backend pointer src to world rank `to`; src may be overwritten as soon as send returns (the
//     transport keeps its own copy until the message has left). Never waits for the receiver: a rank blocked on its
//     own send while its receiver waits for that rank would deadlock.
//   recv: n floats from world rank `from` into backend pointer dst, ready for the next kernel when it returns;
//     returns the seconds the host waited for it (work queued before the call excluded).
//   wait_sends: until every send has left (end of step).
//   abort: unwinding after an error, stop what is in flight before its buffers are freed.
class PipeTransport {
 public:
  virtual ~PipeTransport() = default;
  virtual void send(const float* src, size_t n, int to, int tag, PipeKind kind) = 0;
  virtual double recv(float* dst, size_t n, int from, int tag, PipeKind kind) = 0;
  virtual void wait_sends() = 0;
  virtual void abort() {}
};

// MPI over MPI_COMM_WORLD; on a device backend each message is copied through host memory. Matching: by the
// schedule's tags (unique per message, so it never depends on order), or with `in_order` as NCCL matches on GPUs:
// one tag per kind, so messages between two ranks pair up in the order they are posted, per direction and kind
// ([train] pipe_match = "order": the CPU tests' check that the trainer keeps the order NCCL needs).
std::unique_ptr<PipeTransport> make_mpi_pipe(const kernels::Backend& backend, bool in_order = false);

}  // namespace cairn::train
