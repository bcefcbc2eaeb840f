// ZeRO-2/3 for one model chunk over its data-parallel group: the model's units (embedding, layers, final norm)
// borrow gradient memory (ZeRO-2 and 3) and parameters (ZeRO-3) from here, so no rank holds all of either.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "backend_buffer.h"
#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"
#include "gpu.h"
#include "grad_sync.h"

namespace cairn::train {

// Gradients: a unit's gradient is reduce-scattered over the group as soon as a backward has finished it (every
// micro-batch, as DeepSpeed's stage 2 does), non-blocking, and this rank's part is added into its shard of the
// gradient; the unit's buffer then serves the next unit. One unit may be `deferred` (a wte whose tied copy lives
// on another pipeline stage): it keeps its buffer for the whole step, so the caller can sum it over the embedding
// group before reduce_deferred().
// Parameters (ZeRO-3): this rank keeps only its shard [lo, hi) of the chunk's flat parameters (the optimizer
// updates it in place); a unit is all-gathered just before the model uses it, the unit the model names as its next
// is prefetched, and the buffer is released after use (FSDP's schedule). The units the model marks `keep` (the
// embedding and final norm, used at both ends of every pass) stay gathered until the step ends.
// Transport: MPI (host memory; on a device backend every buffer is staged through a host copy), or NCCL (`nccl`, the
// trainer's communicator of the group, shared with the other chunks; device memory only: the collectives run on the
// communicator's stream behind the compute stream, and the compute stream waits for them on the device where it needs
// their result, so the host never blocks and nothing is copied).
class ZeroUnits {
 public:
  ZeroUnits(MPI_Comm dp, const Shards& shards, std::vector<std::pair<size_t, size_t>> units,
            const kernels::Backend& backend, bool shard_params, float* param_shard, float* shard_grads,
            int deferred_unit, gpu::Nccl* nccl = nullptr);
  ~ZeroUnits();
  ZeroUnits(const ZeroUnits&) = delete;
  ZeroUnits& operator=(const ZeroUnits&) = delete;

  gpt::UnitStorage storage();
  // Before the step's first backward: the gradient shard and the deferred unit's buffer start at zero.
  void begin_step();
  // After the step's last backward: waits for the reduce-scatters still in flight (neither this nor reduce_deferred is
  // reported to on_wait: the caller times them as the step's exposed data-parallel communication), and drops the
  // gathered parameters (the update follows).
  void finish_step();
  // Drops the parameters kept gathered: whoever replaces the shard outside a step (a checkpoint restore) calls it.
  void drop_kept_params();
  // ZeRO-3: starts gathering unit u unless it is gathered or on its way (the first unit of the pass a pipeline rank
  // runs next, started before it waits for that pass's input).
  void prefetch_params(int u);
  // ZeRO-3 parameter gathers since begin_step: how many, their floats, and how many a use had to wait for from the
  // start (not prefetched).
  struct GatherStats {
    int gathers = 0;
    int unprefetched = 0;
    size_t floats = 0;
  };
  const GatherStats& gather_stats() const { return gather_stats_; }
  // Called with the seconds of each MPI call this object makes inside forward and backward (starting, poking and
  // waiting for a gather or reduce-scatter): the ZeRO-2/3 communication the step waited for (StepTimes::zero_comm).
  // Over NCCL the host never waits, so nothing is reported (the waits are inside the forward and backward times).
  void set_on_wait(std::function<void(double)> on_wait) { on_wait_ = std::move(on_wait); }
  // The deferred unit's accumulated gradient (backend memory), and its reduce-scatter into the shard.
  float* deferred_grads();
  void reduce_deferred();
  // Bytes of buffers held now (memory reports).
  size_t bytes() const;

 private:
  struct Buffer {
    size_t capacity = 0;      // floats
    std::vector<float> host;  // CPU backends: the buffer; MPI on a device backend: its staging copy
    BackendBuffer device;     // device backends only
    float* data() { return device.data() ? device.data() : host.data(); }
  };
  struct Pending {  // a reduce-scatter in flight
    int unit = -1;
    std::unique_ptr<Buffer> buf;
    std::unique_ptr<Buffer> part_dev;  // NCCL: this rank's summed part (MPI: the start of buf, summed in place)
    size_t part_count = 0;
    MPI_Request req = MPI_REQUEST_NULL;
    uint64_t done = 0;  // NCCL: the point on the communication stream where it has finished
  };
  struct Gather {  // a unit's parameters being, or having been, gathered
    int unit = -1;
    std::unique_ptr<Buffer> buf;
    MPI_Request req = MPI_REQUEST_NULL;
    uint64_t done = 0;  // NCCL
    bool ready = false;
  };

  std::unique_ptr<Buffer> take_buffer(size_t floats);
  void give_back(std::unique_ptr<Buffer> b);
  // Counts and displacements of unit u's floats over the group's shards.
  void split(int u, std::vector<int>& counts, std::vector<int>& displs) const;
  void split(int u, std::vector<size_t>& counts, std::vector<size_t>& displs) const;
  // Starts unit u's gradient reduce-scatter from `buf` (which the pending entry then owns).
  Pending start_reduce(int u, std::unique_ptr<Buffer> buf);
  void start_gather(int u);
  Gather* find_gather(int u);
  void complete(Pending& p);  // adds its part into the shard
  const float* acquire_params(int u, int next);
  void release_params(int u, bool keep);
  float* acquire_grads(int u);
  void grads_done(int u);
  // Runs one MPI call; its seconds go to on_wait_ except after the last backward (finish_step, reduce_deferred).
  template <typename F>
  void mpi_call(F&& f);

  MPI_Comm dp_;
  Shards sh_;
  std::vector<std::pair<size_t, size_t>> units_;
  const kernels::Backend& be_;
  bool shard_params_;
  float* param_shard_;
  float* shard_grads_;
  int deferred_;
  size_t max_unit_ = 0;
  size_t held_floats_ = 0;  // capacity of every buffer made (in use or pooled)
  std::vector<std::unique_ptr<Buffer>> pool_;
  std::unique_ptr<Buffer> deferred_buf_;
  std::vector<Buffer*> grads_of_;  // per unit: its gradient buffer while a backward fills it
  std::vector<std::unique_ptr<Buffer>> grads_owned_;
  std::deque<Pending> pending_;
  std::vector<Gather> gathers_;
  GatherStats gather_stats_;
  std::function<void(double)> on_wait_;
  bool after_backward_ = false;
  gpu::Nccl* nccl_;  // NCCL transport (device backends), the trainer's; null: MPI
};

}  // namespace cairn::train
