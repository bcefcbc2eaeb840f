// Pipeline-parallel schedules (Megatron 1F1B and interleaved 1F1B), p2p peers and tags, and the simulator.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <sstream>
#include <tuple>

#include "cairn/error.h"
#include "cairn/pipeline.h"

namespace cairn::pipeline {

namespace {

void check_dims(int pp, int v) {
  if (pp < 1 || v < 1)
    throw UsageError("pipeline: need pp >= 1 and v >= 1, got pp=" + std::to_string(pp) + " v=" + std::to_string(v));
}

void check_shape(int pp, int v, int M) {
  if (pp < 1 || v < 1 || M < 1)
    throw UsageError("pipeline: need pp >= 1, v >= 1 and M >= 1 micro-batches, got pp=" + std::to_string(pp) +
                     " v=" + std::to_string(v) + " M=" + std::to_string(M));
  if (v > 1 && M % pp != 0)
    throw UsageError("pipeline: the interleaved schedule (v=" + std::to_string(v) + ") needs the micro-batch count M=" +
                     std::to_string(M) + " to be a multiple of pp=" + std::to_string(pp));
}

void check_rank(int pp, int rank) {
  if (rank < 0 || rank >= pp)
    throw UsageError("pipeline: rank " + std::to_string(rank) + " outside [0, " + std::to_string(pp) + ")");
}

void check_action(int v, const Action& a) {
  if (a.chunk < 0 || a.chunk >= v || a.micro < 0)
    throw UsageError("pipeline: action " + to_string(a) + " has a chunk outside [0, " + std::to_string(v) +
                     ") or a negative micro-batch");
}

// Megatron's get_model_chunk_id / micro-batch order: groups of pp micro-batches go through chunk 0,
// then chunk 1, ... so that each rank has work while the group travels around the ring of ranks.
Action interleaved(int pp, int v, Op op, int k) {
  const int group = k / pp;
  int chunk = group % v;
  if (op == Op::Backward) chunk = v - 1 - chunk;
  return {op, (k / (pp * v)) * pp + k % pp, chunk};
}

}  // namespace

std::string to_string(const Action& a) {
  std::string s(1, a.op == Op::Forward ? 'F' : 'B');
  s += std::to_string(a.micro);
  s += '.';
  s += std::to_string(a.chunk);
  return s;
}

int warmup_forwards(int pp, int v, int rank, int M) {
  check_shape(pp, v, M);
  check_rank(pp, rank);
  if (v == 1) return std::min(pp - rank - 1, M);
  // The (v-1)*pp term fills every chunk once before the first backward of the last chunk can arrive;
  // the 2 per downstream rank covers the round trip of the first micro-batch there and back.
  const int64_t w = int64_t(pp - rank - 1) * 2 + int64_t(v - 1) * pp;
  return int(std::min<int64_t>(w, int64_t(M) * v));
}

std::vector<Action> one_f_one_b(int pp, int v, int rank, int M) {
  const int warm = warmup_forwards(pp, v, rank, M);  // validates
  std::vector<Action> out;
  out.reserve(size_t(2) * M * v);
  if (pp == 1) {
    // Nothing to overlap with: Megatron runs forward_backward_no_pipelining, one micro-batch at a time.
    for (int m = 0; m < M; ++m) {
      for (int c = 0; c < v; ++c) out.push_back({Op::Forward, m, c});
      for (int c = v - 1; c >= 0; --c) out.push_back({Op::Backward, m, c});
    }
    return out;
  }
  const int total = M * v;
  auto fwd = [&](int k) { return v == 1 ? Action{Op::Forward, k, 0} : interleaved(pp, v, Op::Forward, k); };
  auto bwd = [&](int k) { return v == 1 ? Action{Op::Backward, k, 0} : interleaved(pp, v, Op::Backward, k); };
  for (int k = 0; k < warm; ++k) out.push_back(fwd(k));
  const int steady = total - warm;
  for (int k = 0; k < steady; ++k) {
    out.push_back(fwd(warm + k));
    out.push_back(bwd(k));
  }
  for (int k = steady; k < total; ++k) out.push_back(bwd(k));
  return out;
}

int virtual_stage(int pp, int rank, int chunk) {
  if (pp < 1) throw UsageError("pipeline: need pp >= 1, got pp=" + std::to_string(pp));
  check_rank(pp, rank);
  if (chunk < 0) throw UsageError("pipeline: negative chunk " + std::to_string(chunk));
  return chunk * pp + rank;
}

int message_tag(int pp, int v, int rank, const Action& a) {
  check_dims(pp, v);
  check_action(v, a);
  const int64_t s = virtual_stage(pp, rank, a.chunk);
  const int64_t tag = (int64_t(a.micro) * pp * v + s) * 2 + (a.op == Op::Backward ? 1 : 0);
  if (tag > INT_MAX)
    throw UsageError("pipeline: message tag for " + to_string(a) + " with pp=" + std::to_string(pp) +
                     " v=" + std::to_string(v) + " exceeds INT_MAX");
  return int(tag);
}

int max_message_tag(int pp, int v, int M) {
  check_shape(pp, v, M);
  const int64_t tag = int64_t(M) * pp * v * 2 - 1;
  if (tag > INT_MAX)
    throw UsageError("pipeline: M=" + std::to_string(M) + " pp=" + std::to_string(pp) + " v=" + std::to_string(v) +
                     " needs message tags up to " + std::to_string(tag) + ", more than INT_MAX");
  return int(tag);
}

Peers peers(int pp, int v, int rank, const Action& a) {
  check_dims(pp, v);
  check_action(v, a);
  const int s = virtual_stage(pp, rank, a.chunk);
  const int last = pp * v - 1;
  Peers p;
  // The action this one feeds, on the stage downstream of it in its direction.
  const int to = a.op == Op::Forward ? s + 1 : s - 1;
  if (to >= 0 && to <= last) {
    p.send_to = to % pp;
    p.send_tag = message_tag(pp, v, p.send_to, {a.op, a.micro, to / pp});
  }
  const int from = a.op == Op::Forward ? s - 1 : s + 1;
  if (from >= 0 && from <= last) {
    p.recv_from = from % pp;
    p.recv_tag = message_tag(pp, v, rank, a);
  }
  return p;
}

std::string in_order_mismatch(int pp, int v, const std::vector<std::vector<Action>>& ranks) {
  check_dims(pp, v);
  if (int(ranks.size()) != pp)
    throw UsageError("pipeline: in_order_mismatch got " + std::to_string(ranks.size()) +
                     " action lists for pp=" + std::to_string(pp));
  if (pp == 1) return "";  // every hand-over is local
  // Per channel (from, to, kind): the messages in the order the sender posts them and in the order the receiver
  // posts its receives, each named by its tag (unique per message over the step).
  std::map<std::tuple<int, int, int>, std::vector<int>> sent, received;
  for (int r = 0; r < pp; ++r)
    for (const Action& a : ranks[static_cast<size_t>(r)]) {
      const Peers p = peers(pp, v, r, a);
      const int kind = a.op == Op::Forward ? 0 : 1;
      if (p.recv_from >= 0) received[{p.recv_from, r, kind}].push_back(p.recv_tag);
      if (p.send_to >= 0) sent[{r, p.send_to, kind}].push_back(p.send_tag);
    }
  for (const auto& [channel, tags] : sent) {
    const auto& [from, to, kind] = channel;
    const std::vector<int>& got = received[channel];
    std::ostringstream where;
    where << "pp=" << pp << " v=" << v << ": " << (kind == 0 ? "activations" : "gradients") << " from rank " << from
          << " to rank " << to;
    if (got.size() != tags.size()) {
      where << ": " << tags.size() << " sent, " << got.size() << " received";
      return where.str();
    }
    for (size_t i = 0; i < tags.size(); ++i)
      if (tags[i] != got[i]) {
        where << ": message " << i << " is sent as tag " << tags[i] << " but received as tag " << got[i];
        return where.str();
      }
  }
  return "";
}

std::string in_order_mismatch(int pp, int v, int M) {
  check_shape(pp, v, M);
  std::vector<std::vector<Action>> ranks;
  for (int r = 0; r < pp; ++r) ranks.push_back(one_f_one_b(pp, v, r, M));
  return in_order_mismatch(pp, v, ranks);
}

Simulation simulate(int pp, int v, const std::vector<std::vector<Action>>& ranks, double tf, double tb) {
  check_dims(pp, v);
  if (int(ranks.size()) != pp)
    throw UsageError("pipeline: simulate got " + std::to_string(ranks.size()) +
                     " action lists for pp=" + std::to_string(pp));
  int M = 0;
  for (const auto& list : ranks)
    for (const auto& a : list) {
      check_action(v, a);
      M = std::max(M, a.micro + 1);
    }
  const int S = pp * v;
  // End time of forward/backward of (micro, stage); negative = not finished yet.
  std::vector<double> fend(size_t(M) * S, -1.0), bend(size_t(M) * S, -1.0);
  auto at = [S](std::vector<double>& t, int m, int s) -> double& { return t[size_t(m) * S + s]; };

  Simulation sim;
  sim.start.assign(pp, {});
  sim.end.assign(pp, {});
  std::vector<size_t> next(pp, 0);
  std::vector<double> free_at(pp, 0.0);
  // An action's start depends only on its rank's previous action and its inputs' end times, so
  // completing actions in any order that respects readiness yields the same, exact times.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      while (next[r] < ranks[r].size()) {
        const Action& a = ranks[r][next[r]];
        const int s = a.chunk * pp + r;
        double ready = free_at[r];
        bool ok = true;
        if (a.op == Op::Forward) {
          if (s > 0) {
            const double t = at(fend, a.micro, s - 1);
            ok = t >= 0;
            ready = std::max(ready, t);
          }
        } else {
          const double own = at(fend, a.micro, s);
          ok = own >= 0;
          ready = std::max(ready, own);
          if (ok && s < S - 1) {
            const double t = at(bend, a.micro, s + 1);
            ok = t >= 0;
            ready = std::max(ready, t);
          }
        }
        if (!ok) break;
        const double end = ready + (a.op == Op::Forward ? tf : tb);
        sim.start[r].push_back(ready);
        sim.end[r].push_back(end);
        at(a.op == Op::Forward ? fend : bend, a.micro, s) = end;
        free_at[r] = end;
        sim.makespan = std::max(sim.makespan, end);
        sim.busy += end - ready;
        ++next[r];
        progress = true;
      }
    }
  }
  std::ostringstream stuck;
  for (int r = 0; r < pp; ++r) {
    if (next[r] == ranks[r].size()) continue;
    sim.deadlock = true;
    const Action& a = ranks[r][next[r]];
    const int s = a.chunk * pp + r;
    stuck << (stuck.tellp() > 0 ? "; " : "") << "rank " << r << " at #" << next[r] << " " << to_string(a) << " (stage "
          << s << ") waits for ";
    if (a.op == Op::Forward) stuck << "forward of stage " << s - 1;
    else if (at(fend, a.micro, s) < 0) stuck << "its own forward";
    else stuck << "backward of stage " << s + 1;
  }
  sim.stuck = stuck.str();
  return sim;
}

double simulated_bubble_fraction(int pp, int v, int M, double tf, double tb) {
  check_shape(pp, v, M);
  if (!(tf > 0) || !(tb > 0))
    throw UsageError("pipeline: forward and backward times must be positive, got tf=" + std::to_string(tf) +
                     " tb=" + std::to_string(tb));
  std::vector<std::vector<Action>> ranks;
  ranks.reserve(pp);
  for (int r = 0; r < pp; ++r) ranks.push_back(one_f_one_b(pp, v, r, M));
  const Simulation sim = simulate(pp, v, ranks, tf, tb);
  if (sim.deadlock) throw RuntimeError("pipeline: schedule deadlocks: " + sim.stuck);
  return 1.0 - sim.busy / (pp * sim.makespan);
}

}  // namespace cairn::pipeline
