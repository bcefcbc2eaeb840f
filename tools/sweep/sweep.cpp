// cairn-sweep's driver: validates the request, runs every (tier, collective, type, op) block over
// the chosen backend, gathers per-rank timings and checks on rank 0, fits, writes the outputs.
#include "sweep.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <optional>
#include <stdexcept>

#include "cairn/cli.h"
#include "cairn/clock.h"
#include "cairn/config_origin.h"
#include "cairn/dir_lock.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/json_text.h"
#include "cairn/log.h"
#include "cairn/malloc_tune.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "cairn/sections/run.h"
#include "cairn/sections/sweep.h"
#include "cairn/stop_signal.h"
#include "cairn/sysinfo.h"

extern char** environ;

namespace cairn::sweep {

std::vector<uint64_t> sweep_sizes(const SweepOptions& o) {
  std::vector<uint64_t> sizes;
  for (uint64_t s = o.minbytes; s <= o.maxbytes;) {
    sizes.push_back(s);
    uint64_t next = o.stepfactor > 1 ? s * static_cast<uint64_t>(o.stepfactor) : s + o.stepbytes;
    if (next <= s) break;
    s = next;
  }
  return sizes;
}

std::vector<uint64_t> warmup_sizes(const SweepOptions& o) {
  const std::vector<uint64_t> sizes = sweep_sizes(o);
  std::vector<uint64_t> warm;
  for (uint64_t s = o.minbytes; !sizes.empty() && s <= sizes.back(); s *= 2) {
    warm.push_back(s);
    if (s > std::numeric_limits<uint64_t>::max() / 2) break;
  }
  return warm;
}

void apply_nccl_tests_min_bw(Config& cfg) {
  const char* text = std::getenv(kNcclTestsMinBw);
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  const double gbps = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(gbps) || gbps < 0)
    throw UsageError(strprintf("env %s: '%s' is not a bus bandwidth in GB/s (a number >= 0)", kNcclTestsMinBw,
                               printable_text(text).c_str()));
  const Origin::Kind set_by = cfg.origin("sweep.min_busbw").kind;
  if (set_by != Origin::Default && set_by != Origin::File) return;  // CAIRN_SWEEP_MIN_BUSBW, a flag or --set wins
  // x90/100 keeps whole values whole (x0.9 made 100 into 90.00000000000001)
  cfg.set("sweep.min_busbw", gbps * kNcclTestsMinBwPassPercent / 100, Origin{Origin::Env, kNcclTestsMinBw});
}

std::string min_busbw_source(const Config& cfg) {
  const Origin& from = cfg.origin("sweep.min_busbw");
  const char* env = std::getenv(kNcclTestsMinBw);
  const std::string nccl = env != nullptr ? printable_text(env) : std::string();
  if (from.kind == Origin::Env && from.where == kNcclTestsMinBw)
    return strprintf("env %s=%s (nccl-tests fails a run below %d%% of it)", kNcclTestsMinBw, nccl.c_str(),
                     kNcclTestsMinBwPassPercent);
  const std::string by = from.kind == Origin::Default ? std::string("the default") : from.describe();
  if (!nccl.empty()) return strprintf("%s (over env %s=%s)", by.c_str(), kNcclTestsMinBw, nccl.c_str());
  return by;
}

SweepOptions sweep_options(const Config& cfg) {
  const SweepSection sw = read_section<SweepSection>(cfg);
  SweepOptions o;
  o.backend = sw.backend;
  for (const auto& c : sw.collectives) {
    if (c == "all") {
      for (const auto& k : collectives()) o.collectives.emplace_back(k.name);
    } else {
      o.collectives.emplace_back(find_collective(c).name);
    }
  }
  if (o.collectives.empty()) throw UsageError("sweep.collectives: no collective given");
  // "all" (nccl-tests' -d all / -o all): every type or op the backend measures, chosen once it is known
  for (const auto& t : sw.types) {
    if (t == "all") o.all_types = true;
    else o.types.push_back(parse_type(t));
  }
  if (o.types.empty() && !o.all_types) throw UsageError("sweep.types: no type given");
  for (const auto& op : sw.ops) {
    if (op == "all") o.all_ops = true;
    else o.ops.push_back(parse_op(op));
  }
  if (o.ops.empty() && !o.all_ops) throw UsageError("sweep.ops: no reduction op given");
  o.root = static_cast<int>(sw.root);
  // A size is text (K/M/G suffixes) parsed here, after the config layers: its error names where it was set.
  auto size_of = [&](const std::string& text, const char* key, const char* label) {
    try {
      return parse_byte_count(text, label);
    } catch (const UsageError& e) {
      throw with_origin(cfg, std::string("sweep.") + key, e);
    }
  };
  o.minbytes = size_of(sw.minbytes, "minbytes", "sweep.minbytes (-b)");
  o.maxbytes = size_of(sw.maxbytes, "maxbytes", "sweep.maxbytes (-e)");
  o.stepbytes = size_of(sw.stepbytes, "stepbytes", "sweep.stepbytes (-i)");
  o.stepfactor = static_cast<int>(sw.stepfactor);
  o.minbytes_defaulted = cfg.origin("sweep.minbytes").kind == Origin::Default;
  if (o.minbytes == 0) throw UsageError("sweep.minbytes (-b) must be at least 1 byte");
  if (o.maxbytes < o.minbytes) {
    throw UsageError(strprintf("size range is inverted: sweep.maxbytes (-e) %llu < sweep.minbytes (-b) %llu",
                               static_cast<unsigned long long>(o.maxbytes),
                               static_cast<unsigned long long>(o.minbytes)));
  }
  if (o.stepfactor <= 1 && o.stepbytes == 0) {
    throw UsageError("sweep.stepbytes (-i) must be > 0 when sweep.stepfactor (-f) is 1");
  }
  o.iters = static_cast<int>(sw.iters);
  o.warmup = static_cast<int>(sw.warmup_iters);
  o.check = static_cast<int>(sw.check);
  o.average = sw.average;
  o.blocking = sw.blocking;
  o.agg_iters = static_cast<int>(sw.agg_iters);
  o.report_cputime = sw.report_cputime;
  o.tiers = sw.tiers;
  if (o.tiers.empty()) throw UsageError("sweep.tiers: no tier given");
  o.min_busbw = sw.min_busbw;
  o.min_busbw_source = min_busbw_source(cfg);
  o.keep_samples = sw.keep_samples;
  o.malloc_tune = sw.malloc_tune;
  o.mpi_nonblocking = sw.mpi_nonblocking;
  o.run_dir = read_section<RunSection>(cfg).dir;
  return o;
}

double time_collective(const Backend& be, BackendComm* bc, MPI_Comm comm, const TimedCall& call, int iters,
                       int blocking, double* samples, int agg, double* cpu_seconds) {
  auto run_once = [&]() {
    be.run(bc, call.kind, call.send, call.recv, call.count, call.type, call.op, call.root, call.in_place);
  };
  if (agg < 1) agg = 1;
  run_once();  // untimed: settles this size's protocol and buffers
  be.sync(bc);
  mpi::check(MPI_Barrier(comm), "MPI_Barrier");
  double t0 = monotonic_seconds(), last = t0, excluded = 0;
  for (int i = 0; i < iters; ++i) {
    for (int a = 0; a < agg; ++a) {
      run_once();
      if (blocking == 1 || blocking == 2) be.sync(bc);  // nccl-tests -z 1/2: wait after every call
      if (blocking == 1) mpi::check(MPI_Barrier(comm), "MPI_Barrier");
    }
    if (blocking == 3) {
      // -z 3: wait, then a barrier that the time excludes. So do the samples, as nccl-tests' paired events do: a
      // sample ends when the iteration's calls are done and the next begins after the barrier, so the samples add up
      // to the averaged time (they held the barrier's wait, up to the slowest rank's whole iteration).
      be.sync(bc);
      const double done = monotonic_seconds();
      mpi::check(MPI_Barrier(comm), "MPI_Barrier");
      const double resumed = monotonic_seconds();
      excluded += resumed - done;
      if (samples) samples[i] = (done - last) * 1e6 / agg;
      last = resumed;
    } else if (samples) {
      be.sync(bc);
      double t = monotonic_seconds();
      samples[i] = (t - last) * 1e6 / agg;
      last = t;
    }
  }
  double calls = static_cast<double>(iters) * agg;
  if (cpu_seconds) *cpu_seconds = (monotonic_seconds() - t0 - excluded) / calls;
  be.sync(bc);
  return (monotonic_seconds() - t0 - excluded) / calls;
}

namespace {

// Node layout of the job; with SweepFaults::ranks_per_node (tests), consecutive ranks are
// grouped into pretend nodes so intra/inter tiers can be exercised on one machine.
struct SweepTopology {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, node_index = 0, node_count = 1;
  int device_local_rank = 0;  // the real local rank (GPU choice)
  std::vector<int> node_of_rank;
  std::vector<std::string> hosts_by_rank;
  MPI_Comm node = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  bool simulated = false, owns_comms = false;
  bool uniform = true;  // every node has the same number of ranks
};

SweepTopology make_topology(int simulated_per_node) {
  const mpi::Topology& t = mpi::topology();
  SweepTopology s;
  s.rank = t.rank;
  s.size = t.size;
  s.device_local_rank = t.local_rank;
  s.hosts_by_rank = t.hosts_by_rank;
  if (simulated_per_node > 0) {
    s.simulated = true;
    s.owns_comms = true;
    s.node_index = t.rank / simulated_per_node;
    s.node_count = (t.size + simulated_per_node - 1) / simulated_per_node;
    mpi::check(MPI_Comm_split(t.world, s.node_index, t.rank, &s.node), "MPI_Comm_split");
    MPI_Comm_rank(s.node, &s.local_rank);
    MPI_Comm_size(s.node, &s.local_size);
    mpi::check(MPI_Comm_split(t.world, s.local_rank, t.rank, &s.cross), "MPI_Comm_split");
  } else {
    s.local_rank = t.local_rank;
    s.local_size = t.local_size;
    s.node_index = t.node_index;
    s.node_count = t.node_count;
    s.node = t.node;
    s.cross = t.cross;
  }
  s.node_of_rank = mpi::allgather_value<int>(s.node_index);
  std::vector<int> per_node(s.node_count, 0);
  for (int n : s.node_of_rank) per_node[n]++;
  for (int c : per_node) s.uniform &= c == per_node[0];
  return s;
}

// One communicator layer the sweep measures.
struct TierPlan {
  std::string name;
  MPI_Comm comm = MPI_COMM_NULL;  // this rank's communicator (null: not taking part)
  int nranks = 1;
  std::vector<std::vector<int>> groups;  // world ranks of each communicator measured at once
  std::vector<std::string> group_hosts;
};

std::vector<TierPlan> plan_tiers(const SweepOptions& o, const SweepTopology& t, std::vector<std::string>& notes) {
  std::vector<TierPlan> plans;
  for (const auto& name : o.tiers) {
    TierPlan p;
    p.name = name;
    if (name == "world") {
      p.comm = MPI_COMM_WORLD;
      p.nranks = t.size;
      p.groups.resize(1);
      for (int r = 0; r < t.size; ++r) p.groups[0].push_back(r);
      p.group_hosts.push_back(t.node_count == 1 ? t.hosts_by_rank[0] : strprintf("%d nodes", t.node_count));
    } else if (name == "intra") {
      if (t.local_size == 1) {
        notes.emplace_back("tier intra skipped: one rank per node");
        continue;
      }
      // On one node the node's communicator holds the world's ranks: measuring it again would time the
      // same collectives twice. fabric.toml's world fits price intra-node groups of a one-node sweep.
      if (t.node_count == 1 && std::find(o.tiers.begin(), o.tiers.end(), "world") != o.tiers.end()) {
        notes.emplace_back("tier intra skipped: the job runs on one node, where it is the world tier");
        continue;
      }
      if (!t.uniform) throw UsageError("tier intra needs the same number of ranks on every node");
      p.comm = t.node;
      p.nranks = t.local_size;
      p.groups.resize(t.node_count);
      for (int r = 0; r < t.size; ++r) p.groups[t.node_of_rank[r]].push_back(r);
      for (const auto& g : p.groups) {
        p.group_hosts.push_back(t.simulated
                                    ? strprintf("%s/node%d", t.hosts_by_rank[g[0]].c_str(), t.node_of_rank[g[0]])
                                    : t.hosts_by_rank[g[0]]);
      }
    } else if (name == "inter") {
      if (t.node_count == 1) {
        notes.emplace_back("tier inter skipped: the job runs on one node");
        continue;
      }
      p.comm = t.local_rank == 0 ? t.cross : MPI_COMM_NULL;
      p.nranks = t.node_count;
      p.groups.resize(1);
      std::vector<bool> seen(t.node_count, false);
      for (int r = 0; r < t.size; ++r) {
        if (!seen[t.node_of_rank[r]]) {
          seen[t.node_of_rank[r]] = true;
          p.groups[0].push_back(r);
        }
      }
      p.group_hosts.push_back(strprintf("%d nodes, 1 rank each", t.node_count));
    }
    plans.push_back(std::move(p));
  }
  return plans;
}

PatternParams make_params(const Collective& c, DataType t, RedOp op, int nranks, uint64_t seed) {
  PatternParams p;
  p.seed = seed;
  p.nranks = nranks;
  p.reducing = c.reducing;
  p.op = c.reducing ? op : RedOp::None;
  p.type = t;
  // Integers exact in the type, so a value survives every transfer bit for bit.
  switch (t) {
    case DataType::Float16: p.modulus = 2048; break;
    case DataType::BFloat16: p.modulus = 256; break;
    default: p.modulus = 1 << 24; break;
  }
  if (c.reducing) {
    for (int r = 0; r < nranks; ++r) p.sign_prod *= rank_sign(seed, r);
    p.c_min = INT64_MAX;
    p.c_max = INT64_MIN;
    for (int r = 0; r < nranks; ++r) {
      int64_t f = rank_factor(seed, r);
      p.c_sum += f;
      p.c_min = std::min(p.c_min, f);
      p.c_max = std::max(p.c_max, f);
    }
    // |partial sums| <= 7n; beyond the type's exact-integer range the order of additions matters.
    double bound = 7.0 * nranks;
    bool half = t == DataType::Float16 || t == DataType::BFloat16;
    if (half && bound > (t == DataType::Float16 ? 2048 : 256)) {
      p.tol_abs = 1;
      p.tol_rel = t == DataType::Float16 ? 2e-3 : 1.6e-2;
    }
    if (p.op == RedOp::Avg) {
      switch (t) {
        case DataType::Int32: p.tol_abs = 1; break;
        case DataType::Float32:
          p.tol_abs = 1e-5;
          p.tol_rel = 1e-5;
          break;
        case DataType::Float64:
          p.tol_abs = 1e-12;
          p.tol_rel = 1e-12;
          break;
        case DataType::Float16:
          p.tol_abs = 0.02;
          p.tol_rel = 1e-2;
          break;
        case DataType::BFloat16:
          p.tol_abs = 0.1;
          p.tol_rel = 3e-2;
          break;
      }
    }
  }
  return p;
}

// A collective/type/op the sweep runs, with its sizes already reduced to nccl-tests' rows.
struct BlockPlan {
  const Collective* coll = nullptr;
  DataType type = DataType::Float32;
  RedOp op = RedOp::None;
  int root = -1;
  std::vector<SizeRow> rows;
  std::vector<SizeRow> warm_rows;  // warmup_sizes(), reduced like the rows
};

std::vector<SizeRow> plan_rows(const SweepOptions& o, const Collective& c, DataType t, int nranks,
                               const std::string& tier, const std::string& backend, std::vector<std::string>& notes) {
  size_t ws = type_size(t);
  std::vector<SizeRow> rows;
  uint64_t skipped = 0, large = 0;
  for (uint64_t bytes : sweep_sizes(o)) {
    // Sizes too small to give every rank a block print 0-byte rows, as nccl-tests does.
    SizeRow r = size_row(c, bytes, ws, nranks);
    if (r.count == 0) ++skipped;
    if (backend == "mpi" && r.count > mpi_count_limit()) {
      if (c.kind == CollKind::ReduceScatter) {
        throw UsageError(
            strprintf("reducescatter over MPI: %llu elements per rank exceed MPI's int count limit (Open MPI 4 has no "
                      "large-count reduce-scatter); lower -e/--maxbytes or use the nccl backend",
                      static_cast<unsigned long long>(r.count)));
      }
      ++large;
    }
    rows.push_back(r);
  }
  if (skipped) {
    // Why the count is 0 (nccl-tests' getCollByteCount): the size holds less than one element, or, for collectives
    // that split the buffer among the ranks, each rank's share (size / element / ranks elements) rounds down to a
    // multiple of 16 bytes of elements, which is 0 below ranks x 16 bytes.
    const bool splits = size_row(c, ws, ws, 1).count == 0;  // one element on one rank: only the split trims it away
    const std::string why =
        splits ? strprintf("below %llu B (%d ranks x 16 B): each rank's share, size / %zu B / %d elements, rounds down "
                           "to a multiple of %zu elements (16 B), which is 0 there",
                           static_cast<unsigned long long>(16ull * nranks), nranks, ws, nranks, 16 / ws)
               : strprintf("below %zu B: the size holds no whole %zu-byte %s element", ws, ws, type_info(t).name);
    notes.push_back(strprintf("%s %s (tier %s, %d ranks): %llu size(s) run as 0-byte rows, %s", c.name,
                              type_info(t).name, tier.c_str(), nranks, static_cast<unsigned long long>(skipped),
                              why.c_str()));
  }
  if (large) {
    notes.push_back(strprintf("%s %s (tier %s): %llu size(s) above %llu elements per rank use MPI large-count "
                              "handling (%s)",
                              c.name, type_info(t).config_name, tier.c_str(), static_cast<unsigned long long>(large),
                              static_cast<unsigned long long>(mpi_count_limit()),
                              c.reducing ? "consecutive calls of at most that many elements"
                                         : "one element of a derived type spanning the count"));
  }
  return rows;
}

// One rank's figures for one size, packed for one MPI_Gather per size: per placement (+0 out of place, +1 in place)
// the seconds per call, this rank's wrong elements in the check the row reports, whether it was checked (0/1) and the
// host seconds per call; then --keep-samples' per-iteration microseconds, out of place then in place.
constexpr size_t kSeconds = 0, kWrong = 2, kChecked = 4, kCpuSeconds = 6, kSamples = 8;
size_t row_stride(const SweepOptions& o) { return kSamples + (o.keep_samples ? 2 * static_cast<size_t>(o.iters) : 0); }

struct Buffers {
  const Backend* be = nullptr;
  BackendComm* bc = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  Buffers() = default;
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    if (send) be->release(bc, send);
    if (recv) be->release(bc, recv);
  }
};

// Bytes of each of a block's two buffers: both hold max(send, recv) elements, as in nccl-tests (in place, the send
// view of reduce-scatter and alltoall spans the whole receive buffer); 0-byte rows still get a valid pointer.
uint64_t block_buffer_bytes(const BlockPlan& bp) {
  uint64_t bytes = 64;
  for (const auto* rows : {&bp.rows, &bp.warm_rows})
    for (const auto& r : *rows) bytes = std::max(bytes, std::max(r.counts.send, r.counts.recv) * type_size(bp.type));
  return bytes;
}

// The MPI backend's buffers are host memory, shared by the node's ranks: a sweep the node cannot hold is refused
// (exit 2) before anything is allocated. Each allocation on its own fits, so without this check the ranks were
// killed by the OOM killer once they touched their buffers, or failed with exit 1 after the table's header.
void check_host_buffers(const Backend& be, const std::vector<std::vector<BlockPlan>>& plans,
                        const SweepTopology& topo) {
  if (std::string(be.name) != "mpi") return;
  uint64_t largest = 0;
  for (const auto& tier : plans)
    for (const auto& bp : tier) largest = std::max(largest, block_buffer_bytes(bp));
  const double need = 2.0 * static_cast<double>(largest) * topo.local_size;
  const double have = available_memory_bytes();
  std::string why;
  if (need > 0.8 * have)
    why = strprintf("the sweep's buffers need %s per rank (2 x %s at -e/--maxbytes), %s for the %d ranks on this "
                    "node, more than 80%% of the %s of memory available here (MemAvailable, cgroup limit, ulimit -v); "
                    "lower -e/--maxbytes",
                    human_bytes(2.0 * static_cast<double>(largest)).c_str(),
                    human_bytes(static_cast<double>(largest)).c_str(), human_bytes(need).c_str(), topo.local_size,
                    human_bytes(have).c_str());
  mpi::agree_or_throw(why.empty(), why, kExitUsage);
}

// One block measured a size at a time on a member of the tier's communicator; its buffers live as long as it does.
struct BlockMeasure {
  struct Views {
    char* send;
    char* recv;
  };

  const Backend& be;
  BackendComm* bc;
  MPI_Comm comm;
  const BlockPlan& bp;
  const SweepOptions& o;
  const SweepFaults& faults;
  int64_t* checks_done;
  int rank = 0, n = 1;
  size_t ws;
  Buffers buf;
  uint64_t seed = 1000;

  BlockMeasure(const Backend& be_in, BackendComm* bc_in, MPI_Comm comm_in, const BlockPlan& bp_in,
               const SweepOptions& o_in, const SweepFaults& faults_in, int64_t* checks_done_in)
      : be(be_in),
        bc(bc_in),
        comm(comm_in),
        bp(bp_in),
        o(o_in),
        faults(faults_in),
        checks_done(checks_done_in),
        ws(type_size(bp_in.type)) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    const uint64_t bytes = block_buffer_bytes(bp);
    buf.be = &be;
    buf.bc = bc;
    buf.send = be.alloc(bc, bytes);
    buf.recv = be.alloc(bc, bytes);
  }

  Views views(const SizeRow& r, bool ip) const {
    char* send = static_cast<char*>(buf.send);
    char* recv = static_cast<char*>(buf.recv);
    if (!ip) return Views{send, recv};
    uint64_t recv_off = r.counts.recv_inplace_offset;
    if (bp.coll->kind == CollKind::ReduceScatter && be.inplace_reducescatter_at_start) recv_off = 0;
    return Views{recv + r.counts.send_inplace_offset * rank * ws, recv + recv_off * rank * ws};
  }

  void run_once(const SizeRow& r, bool ip) {
    Views v = views(r, ip);
    be.run(bc, bp.coll->kind, v.send, v.recv, r.count, bp.type, bp.op, bp.root, ip);
  }

  // Writes the sentinel over the receive buffer and this rank's inputs into the send view: the buffers are touched
  // here, outside the timed loop.
  PatternParams prepare(const SizeRow& r, bool ip, uint64_t pattern_seed, std::vector<Segment>* expect) {
    PatternParams pp = make_params(*bp.coll, bp.type, bp.op, n, pattern_seed);
    std::vector<Segment> init, exp;
    bp.coll->layout(LayoutArgs{rank, n, bp.root, r.count, ip, &be}, init, exp);
    Views v = views(r, ip);
    be.fill(bc, static_cast<char*>(buf.recv), bp.type,
            Segment{true, 0, std::max(r.counts.send, r.counts.recv), ValueKind::Sentinel, 0, 0}, pp);
    for (const auto& s : init) be.fill(bc, s.recv_view ? v.recv : v.send, bp.type, s, pp);
    if (expect) *expect = exp;
    return pp;
  }

  // Warm-up at every doubling of the smallest size, as nccl-tests does (connections, protocols, first-touch faults).
  // At large sizes it takes as long as several measured sizes (a 1 GiB all-reduce sweep was silent for 20 s before
  // its first progress line), so it is announced.
  void warm_up() {
    if (o.warmup <= 0 || bp.warm_rows.empty()) return;
    const uint64_t bytes = block_buffer_bytes(bp);
    if (mpi::rank() == 0 && bytes >= (64ull << 20)) {
      const std::vector<uint64_t> sizes = warmup_sizes(o);
      CAIRN_LOG_INFO("%s %s: buffers 2 x %s; warm-up at %zu sizes, every doubling from %llu B to %llu B (%d "
                     "iterations each)",
                     bp.coll->name, type_info(bp.type).name, human_bytes(static_cast<double>(bytes)).c_str(),
                     sizes.size(), static_cast<unsigned long long>(sizes.front()),
                     static_cast<unsigned long long>(sizes.back()), o.warmup);
    }
    for (const SizeRow& r : bp.warm_rows) {
      prepare(r, false, 1, nullptr);
      for (int i = 0; i < o.warmup; ++i) run_once(r, false);
      be.sync(bc);
    }
  }

  // One size, out of place then in place: timed, then checked; `rec` gets this rank's record (row_stride doubles).
  void measure(const SizeRow& r, double* rec) {
    const Collective& c = *bp.coll;
    for (int mode = 0; mode < 2; ++mode) {
      bool ip = mode == 1;
      prepare(r, ip, ++seed, nullptr);
      double* samples = o.keep_samples ? rec + kSamples + mode * o.iters : nullptr;
      Views v = views(r, ip);
      TimedCall call{c.kind, v.send, v.recv, r.count, bp.type, bp.op, bp.root, ip};
      rec[kSeconds + mode] =
          time_collective(be, bc, comm, call, o.iters, o.blocking, samples, o.agg_iters, &rec[kCpuSeconds + mode]);

      bool checkable = o.check > 0 && !(ip && c.kind == CollKind::AlltoAll && !be.checked_inplace_alltoall);
      int64_t wrong = 0;
      for (int rep = 0; checkable && rep < o.check; ++rep) {
        std::vector<Segment> expect;
        PatternParams pp = prepare(r, ip, ++seed, &expect);
        run_once(r, ip);
        be.sync(bc);
        Views cv = views(r, ip);
        ++*checks_done;
        if (faults.corrupt_check > 0 && *checks_done == faults.corrupt_check && mpi::rank() == 0) {
          // The backend's own fill writes the sentinel (which no result matches) over expected elements.
          for (const auto& s : expect) {
            if (s.count == 0) continue;
            const uint64_t count = std::min<uint64_t>(s.count, std::max<int64_t>(1, faults.corrupt_elements));
            be.fill(bc, s.recv_view ? cv.recv : cv.send, bp.type,
                    Segment{s.recv_view, s.offset, count, ValueKind::Sentinel, 0, 0}, pp);
            CAIRN_LOG_WARN("injected fault: corrupted %llu element(s) of %s at %llu bytes",
                           static_cast<unsigned long long>(count), c.name, static_cast<unsigned long long>(r.size));
            break;
          }
        }
        wrong = 0;
        for (const auto& s : expect) wrong += be.check(bc, s.recv_view ? cv.recv : cv.send, bp.type, s, pp);
        // As nccl-tests: the checks stop at the first one that found wrong elements on any rank, and the row reports
        // that one (#wrong: its wrong elements over the ranks; "Out of bounds values": the ranks that found some).
        if (mpi::allreduce<int64_t>(wrong, MPI_SUM, comm) != 0) break;
      }
      rec[kWrong + mode] = static_cast<double>(wrong);
      rec[kChecked + mode] = checkable ? 1.0 : 0.0;
    }
  }
};

}  // namespace

double combine_times(const std::vector<double>& v, int average) {
  if (v.empty()) return 0;
  switch (average) {
    case 0: return v.front();
    case 2: return *std::min_element(v.begin(), v.end());
    case 3: return *std::max_element(v.begin(), v.end());
    default: {
      double s = 0;
      for (double x : v) s += x;
      return s / static_cast<double>(v.size());
    }
  }
}

namespace {

Measure make_measure(const Collective& c, const SizeRow& r, size_t ws, int nranks, double seconds, int64_t wrong,
                     int64_t failed_ranks, bool checked) {
  Measure m;
  m.time_us = seconds * 1e6;
  bandwidths(c, r.count, ws, nranks, seconds, &m.algbw, &m.busbw);
  m.wrong = wrong;
  m.failed_ranks = failed_ranks;
  m.checked = checked;
  return m;
}

// Rank 0: one size's row from every rank's record of it (`all`: row_stride doubles per world rank).
Row assemble_row(const BlockPlan& bp, const SizeRow& sr, const TierPlan& tier, const std::vector<double>& all,
                 const SweepOptions& o) {
  const size_t stride = row_stride(o);
  const size_t ws = type_size(bp.type);
  const Collective& c = *bp.coll;
  auto at = [&](int rank, size_t field) { return all[static_cast<size_t>(rank) * stride + field]; };
  // One placement's measure over `ranks`: time combined as -a says, wrong elements summed, failed checks counted.
  auto measure_over = [&](const std::vector<int>& ranks, int mode) {
    std::vector<double> times;
    int64_t wrong = 0, failed = 0;
    bool checked = true;
    for (int r : ranks) {
      times.push_back(at(r, kSeconds + mode));
      const auto w = static_cast<int64_t>(at(r, kWrong + mode));
      wrong += w;
      failed += w > 0 ? 1 : 0;
      checked &= at(r, kChecked + mode) != 0;
    }
    return make_measure(c, sr, ws, tier.nranks, combine_times(times, o.average), wrong, failed, checked);
  };
  std::vector<int> members;
  for (const auto& g : tier.groups) members.insert(members.end(), g.begin(), g.end());
  Row row;
  row.size = sr.size;
  row.count = sr.count;
  for (int mode = 0; mode < 2; ++mode) {
    (mode == 0 ? row.oop : row.ip) = measure_over(members, mode);
    // nccl-tests prints the host time of the process that writes the table (-C 1).
    (mode == 0 ? row.oop_cpu_us : row.ip_cpu_us) = at(members.front(), kCpuSeconds + mode) * 1e6;
    if (tier.groups.size() > 1) {
      auto& per_node = mode == 0 ? row.nodes_oop : row.nodes_ip;
      for (const auto& g : tier.groups) per_node.push_back(measure_over(g, mode));
    }
    if (o.keep_samples) {
      auto& samples = mode == 0 ? row.samples_oop : row.samples_ip;
      samples.assign(o.iters, 0.0);
      for (int i = 0; i < o.iters; ++i) {
        for (int r : members) samples[i] = std::max(samples[i], at(r, kSamples + mode * o.iters + i));
      }
    }
  }
  return row;
}

std::vector<std::string> recorded_env() {
  static const char* prefixes[] = {"MALLOC_",      "GLIBC_TUNABLES",       "NCCL_",           "OMPI_MCA_",
                                   "UCX_",         "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "SLURM_JOB_ID",
                                   "SLURM_NNODES", "SLURM_NTASKS"};
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    for (const char* p : prefixes) {
      if (kv.rfind(p, 0) == 0) {
        out.push_back(kv);
        break;
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// nccl-tests' JSON time format (local time).
std::string local_time_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string malloc_note(const SweepOptions& o) {
  bool mmap_off = false, trim_high = false;
  if (const char* v = std::getenv("MALLOC_MMAP_MAX_")) mmap_off = std::atoll(v) == 0;
  if (const char* v = std::getenv("MALLOC_TRIM_THRESHOLD_")) trim_high = std::atoll(v) >= (64ll << 20);
  if (o.malloc_tune) {
    return "malloc tuned in-process (sweep.malloc_tune): mmap_max=0, no trimming; "
           "MPI's per-call temporary buffers are reused, not re-faulted";
  }
  if (mmap_off && trim_high) {
    return "MALLOC_MMAP_MAX_=0 and a high MALLOC_TRIM_THRESHOLD_: MPI's per-call temporary buffers are reused, "
           "not re-faulted";
  }
  return "default malloc: large-message MPI reductions may page-fault a fresh temporary buffer on every call "
         "(set MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824 or sweep.malloc_tune; see README)";
}

}  // namespace

void check_outputs(const SweepOptions& o, bool with_run_dir) {
  // Rank 0 writes every output; a path it cannot use must fail now, not after minutes of measuring.
  std::string err;
  if (mpi::rank() == 0) {
    try {
      if (with_run_dir) {
        std::string dir = join_path(o.run_dir, "sweep");
        check_writable_dir(dir);
        for (const char* f : {"sweep.txt", "sweep.json", "sweep.h5", "fabric.toml"})
          check_writable_file(join_path(dir, f));
      }
      if (!o.json_path.empty()) check_writable_file(o.json_path);
    } catch (const Error& e) {
      err = e.what();
    }
  }
  mpi::agree_or_throw(err.empty(), err, kExitUsage);
}

namespace {

// Backend: auto picks NCCL when built with it and every rank sees a GPU.
const Backend& choose_backend(SweepOptions& o) {
  const Backend* nccl = nccl_backend();
  if (o.backend == "auto" && o.mpi_nonblocking) o.backend = "mpi";  // only MPI has the choice (same on every rank)
  if (o.backend == "auto") {
    const int own = nccl ? nccl->visible_devices() : 0;
    const int visible = mpi::allreduce<int>(own, MPI_MIN);
    o.backend = visible > 0 ? "nccl" : "mpi";
    bool broken = false;
    const std::string problem = nccl && own == 0 ? nccl->device_problem(&broken) : std::string();
    if (broken) CAIRN_LOG_WARN("backend auto: taking MPI: %s", problem.c_str());  // a GPU whose CUDA fails: say so
  }
  if (o.backend == "nccl" && o.mpi_nonblocking)
    throw UsageError("sweep.mpi_nonblocking (--mpi-nonblocking) is for the MPI backend, and sweep.backend is nccl");
  if (o.backend == "nccl" && !nccl) {
    throw UsageError("backend nccl: this cairn-sweep was built without CUDA (configure with -DCAIRN_CUDA=ON)");
  }
  return o.backend == "nccl" ? *nccl : mpi_backend(o.mpi_nonblocking);
}

// -d all / -o all: every type and op this backend has, in nccl-tests' order; then every asked-for
// type (and op, where a collective reduces) must be one the backend has.
void resolve_types_and_ops(SweepOptions& o, const Backend& be) {
  if (o.all_types) {
    o.types.clear();
    for (DataType t : {DataType::Int32, DataType::Float16, DataType::Float32, DataType::Float64, DataType::BFloat16}) {
      if (be.supports_type(t)) o.types.push_back(t);
    }
  }
  if (o.all_ops) {
    o.ops.clear();
    for (RedOp op : {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg}) {
      if (be.supports_op(op)) o.ops.push_back(op);
    }
  }
  for (DataType t : o.types) {
    if (!be.supports_type(t)) {
      throw UsageError(std::string("type ") + type_info(t).config_name + " is not available on backend " + be.name +
                       " (MPI: float32, float64, int32; NCCL adds float16, bfloat16)");
    }
  }
  bool any_reducing = false;
  for (const auto& name : o.collectives) any_reducing |= find_collective(name).reducing;
  for (RedOp op : o.ops) {
    if (any_reducing && !be.supports_op(op)) {
      throw UsageError(std::string("reduction op ") + op_name(op) + " is not available on backend " + be.name +
                       " (MPI has sum, prod, max, min; NCCL adds avg)");
    }
  }
}

// nccl-tests flags accepted for compatibility that do not change how cairn measures: say so.
void note_compatibility_flags(SweepOptions& o) {
  const char* why =
      o.backend == "mpi" ? "not applicable to the mpi backend" : "not implemented by cairn's nccl backend";
  if (o.graph_launches > 0) {
    o.flag_notes.push_back(
        strprintf("-G %d (CUDA graph launches): %s; calls are launched directly", o.graph_launches, why));
  }
  if (o.local_register > 0) {
    o.flag_notes.push_back(
        strprintf("-R %d (NCCL buffer registration): %s; buffers are not registered", o.local_register, why));
  }
  if (o.agg_iters > 1 && o.backend == "nccl") {
    o.flag_notes.push_back(strprintf("-m %d: the %d calls of an iteration are issued one by one, not in one NCCL group",
                                     o.agg_iters, o.agg_iters));
  }
}

void check_root_and_devices(const SweepOptions& o, const Backend& be, const mpi::Topology& world) {
  if (o.root < -1) throw UsageError(strprintf("sweep.root (-r) %d: give a rank, or -1 for every rank in turn", o.root));
  if (o.backend == "nccl") {
    int visible = be.visible_devices();
    int need = world.local_size;
    int ok = mpi::allreduce<int>(visible >= need ? 1 : 0, MPI_MIN);
    if (!ok) {
      bool broken = false;
      const std::string problem = be.device_problem(&broken);
      std::string msg =
          strprintf("backend nccl: %d ranks on a node need %d GPUs but only %d are visible", need, need, visible);
      if (!problem.empty()) msg += " (" + problem + ")";
      if (broken) throw RuntimeError(msg);  // the driver is there but fails: a runtime failure (exit 1), not usage
      throw UsageError(msg);
    }
  }
}

// Plans every block of every tier first, so that bad sizes or roots fail before anything runs.
std::vector<std::vector<BlockPlan>> plan_blocks(const SweepOptions& o, const std::vector<TierPlan>& tiers,
                                                std::vector<std::string>& notes) {
  std::vector<std::vector<BlockPlan>> plans(tiers.size());
  for (size_t ti = 0; ti < tiers.size(); ++ti) {
    for (const auto& name : o.collectives) {
      const Collective& c = find_collective(name);
      if (c.rooted && o.root >= tiers[ti].nranks) {
        throw UsageError(strprintf("sweep.root (-r) %d is not a rank of tier %s (%d ranks)", o.root,
                                   tiers[ti].name.c_str(), tiers[ti].nranks));
      }
      // nccl-tests' loops: type, then op (collectives with an op column), then root (-r -1: all).
      for (DataType t : o.types) {
        std::vector<SizeRow> rows = plan_rows(o, c, t, tiers[ti].nranks, tiers[ti].name, o.backend, notes);
        std::vector<RedOp> ops = c.op_column ? o.ops : std::vector<RedOp>{RedOp::None};
        std::vector<int> roots{-1};
        if (c.rooted && o.root >= 0) roots = {o.root};
        if (c.rooted && o.root < 0) {
          roots.clear();
          for (int r = 0; r < tiers[ti].nranks; ++r) roots.push_back(r);
        }
        std::vector<SizeRow> warm_rows;
        for (uint64_t bytes : warmup_sizes(o)) warm_rows.push_back(size_row(c, bytes, type_size(t), tiers[ti].nranks));
        for (RedOp op : ops) {
          for (int root_rank : roots) plans[ti].push_back(BlockPlan{&c, t, op, root_rank, rows, warm_rows});
        }
      }
    }
  }
  return plans;
}

// Every rank's node, pid and device, gathered as tab-separated lines (same list on every rank).
std::vector<RankInfo> gather_rank_infos(const Backend& be, const SweepTopology& topo) {
  DeviceInfo d = be.device_info(topo.device_local_rank);
  std::string line = strprintf("%d\t%d\t%s\t%s\t%s", topo.node_index, static_cast<int>(getpid()),
                               std::to_string(d.device).c_str(), d.bus_id.c_str(), d.name.c_str());
  std::vector<std::string> lines = mpi::allgather_strings(line);
  std::vector<RankInfo> ranks;
  for (int r = 0; r < topo.size; ++r) {
    RankInfo ri;
    ri.rank = r;
    ri.host = topo.hosts_by_rank[r];
    std::vector<std::string> f;
    size_t pos = 0;
    const std::string& s = lines[r];
    while (true) {
      size_t tab = s.find('\t', pos);
      f.push_back(s.substr(pos, tab == std::string::npos ? std::string::npos : tab - pos));
      if (tab == std::string::npos) break;
      pos = tab + 1;
    }
    ri.group = std::atoi(f[0].c_str());
    ri.pid = std::atoi(f[1].c_str());
    ri.device.device = std::atoi(f[2].c_str());
    ri.device.bus_id = f[3];
    ri.device.name = f[4];
    ranks.push_back(ri);
  }
  return ranks;
}

// The preamble's facts (rank 0 prints them): versions, options, topology, devices, environment.
void describe_run(RunInfo& info, const SweepOptions& o, const Backend& be, const SweepTopology& topo) {
  info.opts = o;
  info.backend = o.backend;
  info.backend_version = be.version();
  if (o.backend == "nccl") {  // "NCCL X.Y.Z" -> nccl-tests' version code
    int major = 0, minor = 0, patch = 0;
    if (std::sscanf(info.backend_version.c_str(), "NCCL %d.%d.%d", &major, &minor, &patch) == 3) {
      info.nccl_version = major * 10000 + minor * 100 + patch;
    }
  }
  info.hosts_by_rank = topo.hosts_by_rank;
  info.nodes = topo.node_count;
  info.ranks_per_node = topo.local_size;
  info.simulated_nodes = topo.simulated;
  info.env = recorded_env();
  info.malloc_note = malloc_note(o);
  for (RankInfo& ri : gather_rank_infos(be, topo)) info.ranks.push_back(ri);
}

// The text table: kept in the result and, unless turned off, printed as it grows (rank 0 only).
struct TableOutput {
  bool root;
  const SweepOptions& o;
  SweepResult& res;
  void operator()(const std::string& text) const {
    if (!root) return;
    res.table += text;
    if (o.print_table) {
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
    }
  }
};

// Rank 0: a plan's block before its sizes are measured.
Block new_block(const BlockPlan& bp, const TierPlan& tier) {
  Block b;
  b.collective = bp.coll->name;
  b.perf_name = bp.coll->perf_name;
  b.tier = tier.name;
  b.type = bp.type;
  b.op = bp.op;
  b.root = bp.root;
  b.nranks = tier.nranks;
  b.groups = static_cast<int>(tier.groups.size());
  b.group_hosts = tier.group_hosts;
  return b;
}

// Rank 0: the block's totals and fit, once its rows are in.
void finish_block(Block& b, const BlockPlan& bp, const TierPlan& tier) {
  double bw_sum = 0;
  for (const Row& row : b.rows) {
    bw_sum += row.oop.busbw + row.ip.busbw;
    b.wrong += row.oop.wrong + row.ip.wrong;
    b.failed_checks += row.oop.failed_ranks + row.ip.failed_ranks;
  }
  b.avg_busbw = b.rows.empty() ? 0 : bw_sum / static_cast<double>(2 * b.rows.size());
  b.fit = fit_block(b, bp.coll->busbw_factor(tier.nranks));
}

// Everything measuring a tier needs besides the tier.
struct SweepContext {
  const SweepOptions& o;
  const Backend& be;
  const SweepTopology& topo;
  const SweepFaults& faults;
  const RunInfo& info;
  const TableOutput& emit;
  SweepResult& res;
  bool root;
};

// Measures one block a size at a time and prints each size's row as soon as every rank's figures for it are in, as
// nccl-tests prints a row per size: a job killed mid-block (Slurm's SIGKILL after its grace time) keeps the sizes it
// measured on stdout, where they used to wait for the block's end. Collective over MPI_COMM_WORLD: ranks outside the
// tier (bc null) join each size's gather with empty records. Rank 0 appends the rows to *b. Returns the stop signal
// that ended the block before its last size (0: none).
int measure_rows(const SweepContext& x, const TierPlan& tier, BackendComm* bc, const BlockPlan& bp, Block* b,
                 int64_t* checks_done) {
  const SweepOptions& o = x.o;
  std::optional<BlockMeasure> m;
  if (bc) {
    m.emplace(x.be, bc, tier.comm, bp, o, x.faults, checks_done);
    m->warm_up();
  }
  std::optional<Progress> progress;
  if (x.root) {
    progress.emplace(strprintf("%s %s", bp.coll->name, type_info(bp.type).name), bp.rows.size(), "sizes");
    // A size costs its bytes over the link plus a latency floor (about what 256 KiB take), so the doubling sizes at
    // the end hold most of the time.
    std::vector<double> work;
    for (const SizeRow& r : bp.rows) work.push_back(static_cast<double>(r.size) + 262144.0);
    progress->set_work(work);
  }
  const size_t stride = row_stride(o);
  std::vector<double> mine(stride, std::numeric_limits<double>::quiet_NaN());
  std::vector<double> all(x.root ? stride * x.topo.size : 0);
  size_t measured = 0;
  int stop = 0;
  for (const SizeRow& r : bp.rows) {
    static int64_t sizes_measured = 0;  // over the whole sweep, for the injected signals
    if (x.root && x.faults.kill_after_sizes > 0 && sizes_measured == x.faults.kill_after_sizes) raise(SIGKILL);
    if (x.root && x.faults.term_after_sizes > 0 && sizes_measured == x.faults.term_after_sizes) raise(SIGTERM);
    ++sizes_measured;
    // A stop signal (Slurm's time limit or preemption, Ctrl-C) ends the block before its next size, on every rank at
    // once (it may have reached one rank only, or another group of the tier).
    stop = mpi::allreduce(stop_signal(), MPI_MAX);
    if (stop != 0) break;
    if (progress) progress->update(measured, strprintf("%llu B", static_cast<unsigned long long>(r.size)));
    if (m) m->measure(r, mine.data());
    mpi::check(MPI_Gather(mine.data(), static_cast<int>(stride), MPI_DOUBLE, all.data(), static_cast<int>(stride),
                          MPI_DOUBLE, 0, MPI_COMM_WORLD),
               "MPI_Gather");
    if (b) {
      b->rows.push_back(assemble_row(bp, r, tier, all, o));
      x.emit(format_row(b->rows.back(), *b, o.report_cputime != 0));
    }
    ++measured;
  }
  // Stopped: the last line says how far it got (it said 16/16 sizes, 100 %, for a block stopped at 13).
  if (progress) progress->finish_at(measured, measured < bp.rows.size() ? "stopped" : "");
  return stop;
}

// One section per (tier, collective), as one nccl-tests binary run: every type/op/root row in one
// table, one footer; cairn's extra lines (tier, fits, per-node figures) after the footer.
// Returns false when a stop signal ended it (the block in progress is kept with the sizes it measured).
bool measure_tier(const SweepContext& x, const TierPlan& tier, const std::vector<BlockPlan>& plans,
                  int64_t* checks_done) {
  const SweepOptions& o = x.o;
  BackendComm* bc = tier.comm != MPI_COMM_NULL ? x.be.open(tier.comm, x.topo.device_local_rank) : nullptr;
  size_t section_start = x.res.blocks.size();
  for (size_t pi = 0; pi < plans.size(); ++pi) {
    const BlockPlan& bp = plans[pi];
    bool first = pi == 0 || plans[pi - 1].coll != bp.coll;
    bool last = pi + 1 == plans.size() || plans[pi + 1].coll != bp.coll;
    if (first) {
      section_start = x.res.blocks.size();
      x.emit(format_section_header(x.info, bp.coll->perf_name));
    }
    std::optional<Block> b;
    if (x.root) b = new_block(bp, tier);
    int stop = measure_rows(x, tier, bc, bp, b ? &*b : nullptr, checks_done);
    // A signal during the block's last size stops the sweep before the next block.
    if (stop == 0) stop = mpi::allreduce(stop_signal(), MPI_MAX);
    if (stop != 0) {
      x.res.stopped_by = stop_signal_name(stop);
      last = true;
    }
    if (b) {
      finish_block(*b, bp, tier);
      if (!b->rows.empty()) x.res.blocks.push_back(std::move(*b));
    }
    // The footer of the collective's table (none when a stop signal came before its first size was measured).
    if (x.root && last && section_start < x.res.blocks.size()) {
      std::vector<const Block*> section;
      for (size_t k = section_start; k < x.res.blocks.size(); ++k) section.push_back(&x.res.blocks[k]);
      if (o.min_busbw > 0 && section_avg_busbw(section) < o.min_busbw) x.res.gate_failed = true;
      x.emit(format_section_footer(section, o.min_busbw) + format_section_extras(section));
    }
    if (stop != 0) break;
  }
  if (bc) x.be.close(bc);
  return x.res.stopped_by.empty();
}

// Rank 0: summary, trailer and the files under <run>/sweep/; returns the exit code.
int finish_on_root(RunInfo& info, SweepResult& res, const SweepOptions& o, const TableOutput& emit) {
  res.fabric_notes = mark_fabric_blocks(res.blocks, o.types.front(), o.ops.front());
  res.notes.insert(res.notes.end(), res.fabric_notes.begin(), res.fabric_notes.end());
  double sum = 0;
  for (const auto& b : res.blocks) {
    sum += b.avg_busbw;
    res.wrong += b.wrong;
    res.failed_checks += b.failed_checks;
  }
  res.avg_busbw = res.blocks.empty() ? 0 : sum / static_cast<double>(res.blocks.size());
  info.end_time = utc_now_iso8601();
  info.end_time_local = local_time_now();
  emit(format_trailer(info, res));
  std::string dir = run_subdir(o.run_dir, "sweep");
  res.out_dir = dir;
  atomic_write(join_path(dir, "sweep.txt"), res.table);
  std::string doc = json_text(sweep_json(info, res), 1) + "\n";
  atomic_write(join_path(dir, "sweep.json"), doc);
  if (!o.json_path.empty()) write_json_output(o.json_path, doc);
  write_sweep_h5(join_path(dir, "sweep.h5"), info, res);
  atomic_write(join_path(dir, "fabric.toml"), fabric_toml(info, res));
  CAIRN_LOG_INFO("wrote %s/{sweep.txt,sweep.json,sweep.h5,fabric.toml}", dir.c_str());
  // Every tier skipped (--tiers inter on one node): nothing was measured, which neither a bandwidth floor nor a
  // nightly script may read as a pass (it exited 0 with empty tables).
  if (res.blocks.empty() && res.stopped_by.empty()) {
    if (o.min_busbw > 0) {
      CAIRN_LOG_ERROR("the bandwidth floor (--min-busbw %g GB/s) was not checked: no tier of this job could be "
                      "measured (see the notes above)",
                      o.min_busbw);
      return kExitGate;
    }
    CAIRN_LOG_ERROR("nothing was measured: no tier of --tiers can run on this job (see the notes above)");
    return kExitUsage;
  }
  if (res.wrong > 0) return kExitGate;
  if (res.gate_failed) return kExitGate;
  return 0;
}

}  // namespace

int run_sweep(const Config& cfg, const SweepOptions& opts_in, SweepResult* result_out, const SweepFaults& faults) {
  SweepOptions o = opts_in;
  const MpiCountLimit count_limit(faults.mpi_count_limit);
  const mpi::Topology& world = mpi::topology();
  bool root = world.rank == 0;
  RunInfo info;
  info.sweep_config = cfg.section("sweep");  // what the sweep needs is in opts (sweep_options(cfg)); this is a record
  info.start_time = utc_now_iso8601();
  info.start_time_local = local_time_now();
  if (o.malloc_tune) {
    keep_freed_memory_mapped();
  }
  const Backend& be = choose_backend(o);
  resolve_types_and_ops(o, be);
  note_compatibility_flags(o);
  check_root_and_devices(o, be, world);

  SweepTopology topo = make_topology(faults.ranks_per_node);
  SweepResult res;
  res.backend = o.backend;
  std::vector<TierPlan> tiers = plan_tiers(o, topo, res.notes);
  std::vector<std::vector<BlockPlan>> plans = plan_blocks(o, tiers, res.notes);
  check_host_buffers(be, plans, topo);
  check_outputs(o, true);
  // One sweep per run directory: a second one (a resubmitted job, another shell) would share the fabric with this
  // one, skewing both measurements, and replace this one's files one by one with its own.
  DirLock lock;
  acquire_on_rank0(lock, join_path(join_path(o.run_dir, "sweep"), "LOCK"), o.run_dir,
                   "another cairn-sweep is running in", "wait for it to exit, or use another --out");

  describe_run(info, o, be, topo);
  // Which setting set the floor (or turned it off over NCCL_TESTS_MIN_BW): nccl-tests users carry that variable over.
  const char* nccl_min_bw = std::getenv(kNcclTestsMinBw);
  if (root && (o.min_busbw > 0 || (nccl_min_bw != nullptr && *nccl_min_bw != '\0'))) {
    if (o.min_busbw > 0)
      CAIRN_LOG_INFO("bandwidth floor %g GB/s (each table's average bus bandwidth), set by %s", o.min_busbw,
                     o.min_busbw_source.c_str());
    else CAIRN_LOG_INFO("bandwidth floor off, set by %s", o.min_busbw_source.c_str());
  }
  const TableOutput emit{root, o, res};
  emit(format_preamble(info));

  int64_t checks_done = 0;
  const SweepContext ctx{o, be, topo, faults, info, emit, res, root};
  install_stop_handlers();
  size_t tables = 0;
  for (const auto& p : plans) tables += p.size();
  for (size_t ti = 0; ti < tiers.size(); ++ti)
    if (!measure_tier(ctx, tiers[ti], plans[ti], &checks_done)) break;
  if (!res.stopped_by.empty()) {
    const std::string note = strprintf("stopped by %s with %zu of %zu tables begun; the tables above and the files "
                                       "hold what was measured",
                                       res.stopped_by.c_str(), res.blocks.size(), tables);
    res.notes.push_back(note);
    if (root) CAIRN_LOG_WARN("%s", note.c_str());
  }
  if (topo.owns_comms) {
    MPI_Comm_free(&topo.node);
    MPI_Comm_free(&topo.cross);
  }

  // Summary, files and the verdict (decided on rank 0, shared with every rank).
  int code = root ? finish_on_root(info, res, o, emit) : 0;
  code = mpi::broadcast_value<int>(code);
  if (!res.stopped_by.empty() && code == kExitOk) code = kExitStopped;
  res.wrong = mpi::broadcast_value<int64_t>(res.wrong);
  res.failed_checks = mpi::broadcast_value<int64_t>(res.failed_checks);
  if (code == kExitGate) {
    res.verdict =
        res.wrong > 0
            ? strprintf("%lld wrong element(s) in the results, %lld failed check(s) (see #wrong and "
                        "\"Out of bounds values\" in the table)",
                        static_cast<long long>(res.wrong), static_cast<long long>(res.failed_checks))
            : strprintf("average bus bandwidth below --min-busbw %.3g GB/s in at least one table", o.min_busbw);
  }
  if (result_out) *result_out = std::move(res);
  return code;
}

}  // namespace cairn::sweep
