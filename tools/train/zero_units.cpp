// ZeRO-2/3 unit storage of a model chunk (zero_units.h): per-unit reduce-scatter of gradients, per-unit all-gather
// of parameter shards with prefetch.
#include "zero_units.h"

#include <algorithm>
#include <climits>
#include <exception>

#include "cairn/clock.h"
#include "cairn/error.h"
#include "cairn/mpi.h"

namespace cairn::train {

ZeroUnits::ZeroUnits(MPI_Comm dp, const Shards& shards, std::vector<std::pair<size_t, size_t>> units,
                     const kernels::Backend& backend, bool shard_params, float* param_shard, float* shard_grads,
                     int deferred_unit, gpu::Nccl* nccl)
    : dp_(dp),
      sh_(shards),
      units_(std::move(units)),
      be_(backend),
      shard_params_(shard_params),
      param_shard_(param_shard),
      shard_grads_(shard_grads),
      deferred_(deferred_unit),
      nccl_(nccl) {
  for (const auto& u : units_) max_unit_ = std::max(max_unit_, u.second);
  if (max_unit_ > static_cast<size_t>(INT_MAX)) throw RuntimeError("ZeRO: a unit of the model exceeds MPI's int count");
  grads_of_.assign(units_.size(), nullptr);
  grads_owned_.resize(units_.size());
  if (deferred_ >= 0) deferred_buf_ = take_buffer(units_[deferred_].second);
}

ZeroUnits::~ZeroUnits() {
  // nothing may be in flight when the buffers go (an exception mid-step): let MPI finish first (NCCL: the trainer
  // aborts its communicators before unwinding reaches the chunks, and cudaFree waits for the device otherwise)
  if (nccl_) return;
  if (std::uncaught_exceptions() > 0) {
    // Unwinding from this rank's error: a peer may never post its side (it waits in a pipeline receive from this
    // rank), so a wait here could hold the job until its time limit instead of the MPI_Abort that follows. The
    // buffers MPI may still write into are kept, reachable, for the little time left.
    static std::deque<Pending> kept_pending;
    static std::vector<Gather> kept_gathers;
    for (Pending& p : pending_) kept_pending.push_back(std::move(p));
    for (Gather& g : gathers_) kept_gathers.push_back(std::move(g));
    return;
  }
  for (Pending& p : pending_) MPI_Wait(&p.req, MPI_STATUS_IGNORE);
  for (Gather& g : gathers_) MPI_Wait(&g.req, MPI_STATUS_IGNORE);
}

gpt::UnitStorage ZeroUnits::storage() {
  gpt::UnitStorage s;
  if (shard_params_) {
    s.acquire_params = [this](int u, int next) { return acquire_params(u, next); };
    s.release_params = [this](int u, bool keep) { release_params(u, keep); };
  }
  s.acquire_grads = [this](int u) { return acquire_grads(u); };
  s.grads_done = [this](int u) { grads_done(u); };
  return s;
}

// The smallest pooled buffer that holds `floats`, or a new one of exactly that size (units differ: a large
// vocabulary's embedding can be several layers' worth).
std::unique_ptr<ZeroUnits::Buffer> ZeroUnits::take_buffer(size_t floats) {
  size_t best = pool_.size();
  for (size_t i = 0; i < pool_.size(); ++i)
    if (pool_[i]->capacity >= floats && (best == pool_.size() || pool_[i]->capacity < pool_[best]->capacity)) best = i;
  if (best < pool_.size()) {
    auto b = std::move(pool_[best]);
    pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(best));
    return b;
  }
  auto b = std::make_unique<Buffer>();
  b->capacity = floats;
  if (!be_.device_memory || !nccl_) b->host.resize(floats);
  if (be_.device_memory) b->device = BackendBuffer(&be_, floats);
  held_floats_ += floats;
  return b;
}

template <typename F>
void ZeroUnits::mpi_call(F&& f) {
  static const std::function<void(double)> unreported;
  timed_call(after_backward_ ? unreported : on_wait_, std::forward<F>(f));
}

void ZeroUnits::give_back(std::unique_ptr<Buffer> b) { pool_.push_back(std::move(b)); }

void ZeroUnits::split(int u, std::vector<size_t>& counts, std::vector<size_t>& displs) const {
  const size_t a = units_[u].first, b = a + units_[u].second;
  counts.assign(sh_.size, 0);
  displs.assign(sh_.size, 0);
  for (int r = 0; r < sh_.size; ++r) {
    const size_t lo = std::max(a, sh_.begin(r)), hi = std::min(b, sh_.end(r));
    counts[r] = hi > lo ? hi - lo : 0;
    displs[r] = hi > lo ? lo - a : 0;
  }
}

// MPI's int counts (every unit fits: the constructor checked max_unit_).
void ZeroUnits::split(int u, std::vector<int>& counts, std::vector<int>& displs) const {
  std::vector<size_t> c, d;
  split(u, c, d);
  counts.assign(c.begin(), c.end());
  displs.assign(d.begin(), d.end());
}

// ---------------------------------------------------------------- parameters (ZeRO-3)

ZeroUnits::Gather* ZeroUnits::find_gather(int u) {
  for (Gather& g : gathers_)
    if (g.unit == u) return &g;
  return nullptr;
}

void ZeroUnits::start_gather(int u) {
  Gather g;
  g.unit = u;
  g.buf = take_buffer(units_[u].second);
  gather_stats_.gathers++;
  gather_stats_.floats += units_[u].second;
  if (nccl_) {
    std::vector<size_t> counts, displs;
    split(u, counts, displs);
    const float* mine = param_shard_ + (units_[u].first + displs[sh_.rank] - sh_.lo);
    nccl_->gather_pieces(counts[sh_.rank] ? mine : param_shard_, g.buf->data(), counts, displs);
    g.done = nccl_->mark();
    gathers_.push_back(std::move(g));
    return;
  }
  std::vector<int> counts, displs;
  split(u, counts, displs);
  const int mine = counts[sh_.rank];
  // In place: this rank's piece goes straight into its own place of the unit's host buffer (no staging vector per
  // gather: allocations per unit and micro-batch left the heap fragmented, above ZeRO-1's resident size)
  if (mine > 0) {
    const size_t from = units_[u].first + static_cast<size_t>(displs[sh_.rank]) - sh_.lo;
    be_.copy_to_host(g.buf->host.data() + displs[sh_.rank], param_shard_ + from,
                     static_cast<size_t>(mine) * sizeof(float));
  }
  mpi_call([&] {
    mpi::check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g.buf->host.data(), counts.data(), displs.data(),
                               MPI_FLOAT, dp_, &g.req),
               "MPI_Iallgatherv (ZeRO-3 parameters)");
  });
  gathers_.push_back(std::move(g));
}

const float* ZeroUnits::acquire_params(int u, int next) {
  if (!find_gather(u)) {
    gather_stats_.unprefetched++;
    start_gather(u);
  }
  Gather* g = find_gather(u);
  if (!g->ready && nccl_) {
    nccl_->compute_waits(g->done);  // the unit's kernels, queued next, start once it has arrived
    g->ready = true;
  }
  if (!g->ready) {
    mpi_call([&] { mpi::check(MPI_Wait(&g->req, MPI_STATUS_IGNORE), "MPI_Wait (ZeRO-3 parameters)"); });
    if (g->buf->device.data())
      be_.copy_to_device(g->buf->device.data(), g->buf->host.data(), units_[u].second * sizeof(float));
    g->ready = true;
  }
  const float* out = g->buf->data();
  prefetch_params(next);  // gathered beside this unit's compute (FSDP's forward and backward prefetch)
  return out;
}

void ZeroUnits::prefetch_params(int u) {
  if (shard_params_ && u >= 0 && u < static_cast<int>(units_.size()) && !find_gather(u)) start_gather(u);
}

void ZeroUnits::release_params(int u, bool keep) {
  for (size_t i = 0; i < gathers_.size(); ++i) {
    if (gathers_[i].unit != u) continue;
    // The embedding and final norm serve both ends of every pass: kept gathered until the parameters change
    // (drop_kept_params), once per step instead of once per use (FSDP gathers its root unit once per micro-batch)
    if (keep) return;
    // NCCL: the buffer's next user is queued behind the kernels that read it (a gather waits for the compute
    // stream; a gradient's zeroing runs on it)
    if (!nccl_)
      mpi_call([&] { mpi::check(MPI_Wait(&gathers_[i].req, MPI_STATUS_IGNORE), "MPI_Wait (ZeRO-3 parameters)"); });
    give_back(std::move(gathers_[i].buf));
    gathers_.erase(gathers_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

// ---------------------------------------------------------------- gradients (ZeRO-2 and 3)

float* ZeroUnits::acquire_grads(int u) {
  if (u == deferred_) return deferred_buf_->data();
  // keep at most a couple of reduce-scatters in flight: the oldest frees its buffer for this unit
  while (pending_.size() >= 2) {
    complete(pending_.front());
    pending_.pop_front();
  }
  grads_owned_[u] = take_buffer(units_[u].second);
  grads_of_[u] = grads_owned_[u].get();
  be_.fill_zero(grads_of_[u]->data(), units_[u].second * sizeof(float));
  return grads_of_[u]->data();
}

ZeroUnits::Pending ZeroUnits::start_reduce(int u, std::unique_ptr<Buffer> buf) {
  Pending p;
  p.unit = u;
  p.buf = std::move(buf);
  if (nccl_) {
    std::vector<size_t> counts, displs;
    split(u, counts, displs);
    p.part_count = counts[sh_.rank];
    p.part_dev = take_buffer(std::max<size_t>(1, p.part_count));  // a valid pointer even for an empty piece
    nccl_->reduce_pieces(p.buf->data(), p.part_dev->data(), counts, displs);
    p.done = nccl_->mark();
    return p;
  }
  std::vector<int> counts, displs;
  split(u, counts, displs);
  if (p.buf->device.data())
    be_.copy_to_host(p.buf->host.data(), p.buf->device.data(), units_[u].second * sizeof(float));
  // In place: this rank's summed part lands at the start of the unit's host buffer (no part buffer per reduction:
  // allocations per unit and micro-batch left the heap above ZeRO-1's resident size)
  p.part_count = static_cast<size_t>(counts[sh_.rank]);
  mpi_call([&] {
    mpi::check(MPI_Ireduce_scatter(MPI_IN_PLACE, p.buf->host.data(), counts.data(), MPI_FLOAT, MPI_SUM, dp_, &p.req),
               "MPI_Ireduce_scatter (ZeRO gradients)");
  });
  return p;
}

void ZeroUnits::grads_done(int u) {
  if (u == deferred_) return;  // summed over the embedding group first (reduce_deferred)
  grads_of_[u] = nullptr;
  pending_.push_back(start_reduce(u, std::move(grads_owned_[u])));
  if (nccl_) return;
  // Open MPI progresses non-blocking collectives only inside MPI calls: poke them
  mpi_call([&] {
    for (Pending& q : pending_) {
      int done = 0;
      MPI_Test(&q.req, &done, MPI_STATUS_IGNORE);
    }
  });
}

void ZeroUnits::complete(Pending& p) {
  const size_t a = std::max(units_[p.unit].first, sh_.lo);
  if (nccl_) {
    // shard += part on the compute stream, once the reduction has finished (on the device); both buffers' next
    // users are queued behind this add
    nccl_->compute_waits(p.done);
    if (p.part_count) {
      float* dst = shard_grads_ + (a - sh_.lo);
      be_.residual_forward(dst, dst, p.part_dev->data(), p.part_count);
    }
    give_back(std::move(p.part_dev));
    give_back(std::move(p.buf));
    return;
  }
  mpi_call([&] { mpi::check(MPI_Wait(&p.req, MPI_STATUS_IGNORE), "MPI_Wait (ZeRO gradients)"); });
  if (p.part_count) {
    // shard += part, with the backend's add (out = a + b) on its own memory (a device backend's part copied back into
    // the unit's device buffer first)
    float* dst = shard_grads_ + (a - sh_.lo);
    if (p.buf->device.data())
      be_.copy_to_device(p.buf->device.data(), p.buf->host.data(), p.part_count * sizeof(float));
    be_.residual_forward(dst, dst, p.buf->data(), p.part_count);
  }
  give_back(std::move(p.buf));
}

void ZeroUnits::drop_kept_params() {
  for (Gather& g : gathers_) {
    if (nccl_) nccl_->compute_waits(g.done);  // before a gradient's zeroing may reuse the buffer
    else mpi::check(MPI_Wait(&g.req, MPI_STATUS_IGNORE), "MPI_Wait (ZeRO-3 parameters)");
    give_back(std::move(g.buf));
  }
  gathers_.clear();
}

void ZeroUnits::begin_step() {
  drop_kept_params();  // gathered before the last update (a validation pass after it may have kept some: dropped too)
  gather_stats_ = GatherStats{};
  if (sh_.count()) be_.fill_zero(shard_grads_, sh_.count() * sizeof(float));
  if (deferred_buf_) be_.fill_zero(deferred_buf_->data(), units_[deferred_].second * sizeof(float));
}

void ZeroUnits::finish_step() {
  after_backward_ = true;
  for (Pending& p : pending_) complete(p);
  pending_.clear();
  // the kept units, and any prefetch nobody used: the optimizer changes the parameters next
  drop_kept_params();
  after_backward_ = false;
}

float* ZeroUnits::deferred_grads() { return deferred_buf_ ? deferred_buf_->data() : nullptr; }

void ZeroUnits::reduce_deferred() {
  if (deferred_ < 0) return;
  // A pooled copy of the deferred buffer (which stays for the next step) travels like any other unit's gradient.
  auto copy = take_buffer(units_[deferred_].second);
  be_.copy_device(copy->data(), deferred_buf_->data(), units_[deferred_].second * sizeof(float));
  after_backward_ = true;
  Pending p = start_reduce(deferred_, std::move(copy));
  complete(p);
  after_backward_ = false;
}

// A device backend over MPI holds each buffer twice (device and its host staging copy).
size_t ZeroUnits::bytes() const { return held_floats_ * sizeof(float) * (be_.device_memory && !nccl_ ? 2 : 1); }

}  // namespace cairn::train
