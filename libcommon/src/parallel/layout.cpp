// The parallel layout: rank <-> coordinates, validation of a requested layout, stage split, communicators.
#include "cairn/parallel.h"
#include "cairn/vocab_padding.h"

#include <algorithm>
#include <numeric>

#include "cairn/error.h"
#include "cairn/mpi.h"

namespace cairn::parallel {
namespace {

std::string str(int64_t x) { return std::to_string(x); }

std::string list_text(const std::vector<int>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + str(xs[i]);
  return out + "]";
}

// "pp*v = 2*3 = 6" or "pp = 4" when v == 1, so a message shows where a stage count comes from.
std::string stages_text(int pp, int v) {
  if (v == 1) return "[parallel] pp = " + str(pp);
  return "[parallel] pp*v = " + str(pp) + "*" + str(v) + " = " + str(int64_t{pp} * v);
}

void check_layout_shape(const Layout& l) {
  if (l.dp < 1 || l.tp < 1 || l.pp < 1 || l.v < 1 || l.cp < 1 || int64_t{l.dp} * l.cp * l.tp * l.pp != l.world)
    throw RuntimeError("internal: parallel layout dp" + str(l.dp) + " x cp" + str(l.cp) + " x tp" + str(l.tp) +
                       " x pp" + str(l.pp) + " does not match its world of " + str(l.world) +
                       " (use resolve_layout())");
}

// All violations in one error, so a user fixes a config in one go.
[[noreturn]] void raise(const std::vector<std::string>& errors) {
  std::string m = errors.size() == 1 ? "invalid parallel layout: "
                                     : "invalid parallel layout (" + str(errors.size()) + " problems): ";
  for (size_t i = 0; i < errors.size(); ++i) m += (i ? "; " : "") + errors[i];
  throw UsageError(m);
}

void free_comms(Groups& g) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm* c : {&g.tp, &g.dp, &g.pp, &g.embedding, &g.cp, &g.dp_cp})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

}  // namespace

Coords coords_of(const Layout& l, int rank) {
  check_layout_shape(l);
  if (rank < 0 || rank >= l.world)
    throw RuntimeError("internal: rank " + str(rank) + " is outside the world of " + str(l.world));
  const int inner = rank / l.tp;  // cp + cp_size * (dp + dp_size * pp)
  return Coords{(inner / l.cp) % l.dp, rank % l.tp, inner / (l.cp * l.dp), inner % l.cp};
}

int rank_of(const Layout& l, const Coords& c) {
  check_layout_shape(l);
  if (c.dp < 0 || c.dp >= l.dp || c.tp < 0 || c.tp >= l.tp || c.pp < 0 || c.pp >= l.pp || c.cp < 0 || c.cp >= l.cp)
    throw RuntimeError("internal: coordinates dp" + str(c.dp) + " cp" + str(c.cp) + " tp" + str(c.tp) + " pp" +
                       str(c.pp) + " are outside dp" + str(l.dp) + " x cp" + str(l.cp) + " x tp" + str(l.tp) + " x pp" +
                       str(l.pp));
  return c.tp + l.tp * (c.cp + l.cp * (c.dp + l.dp * c.pp));
}

std::vector<int> suggest_stage_layers(int layers, int stages) {
  if (stages < 1 || layers < stages)
    throw RuntimeError("internal: cannot split " + str(layers) + " layers into " + str(stages) + " stages");
  std::vector<int> out(stages, layers / stages);
  int extra = layers % stages;
  int middle = stages - 2;  // stages 1 .. stages-2
  if (middle > 0) {
    // Spread the extra layers evenly over the middle stages (at most one each, since extra < stages).
    int give = std::min(extra, middle);
    for (int k = 0; k < give; ++k) out[1 + static_cast<int>((int64_t{2 * k + 1} * middle) / (2 * give))] += 1;
    extra -= give;
  }
  // Left over only when extra > stages - 2: the first stage takes one before the last, whose output head and loss
  // (a vocab-wide matmul) weigh more than the embedding lookup.
  if (extra > 0) out.front() += 1, --extra;
  if (extra > 0) out.back() += 1, --extra;
  return out;
}

namespace {

// resolve_layout's checks, in the order their messages appear. Each adds its violations to `errors`.
using Errors = std::vector<std::string>;

// Sizes the later checks divide by.
void check_sizes(const LayoutRequest& r, Errors& errors) {
  auto fail = [&](std::string m) { errors.push_back(std::move(m)); };
  if (r.world < 1) fail("the MPI world has " + str(r.world) + " ranks");
  if (r.tp < 1) fail("[parallel] tp = " + str(r.tp) + " must be at least 1");
  if (r.pp < 1) fail("[parallel] pp = " + str(r.pp) + " must be at least 1");
  if (r.v < 1) fail("[parallel] v = " + str(r.v) + " must be at least 1");
  if (r.cp < 1) fail("[parallel] cp = " + str(r.cp) + " must be at least 1");
  if (r.dp < 0) fail("[parallel] dp = " + str(r.dp) + " must be at least 1 (or 0 = derived from the world size)");
  if (r.layers < 1) fail("[model] layers = " + str(r.layers) + " must be at least 1");
  if (r.global_batch < 1) fail("[train] global_batch = " + str(r.global_batch) + " must be at least 1");
  if (r.micro_batch < 0)
    fail("micro-batch = " + str(r.micro_batch) +
         " ([train] micro_batch / [parallel] mb) must be at least 1 (or 0 = auto)");
}

// The world: dp * cp * tp * pp ranks; sets l.dp when consistent (derived when r.dp == 0).
void resolve_dp(const LayoutRequest& r, Layout& l, Errors& errors) {
  auto fail = [&](std::string m) { errors.push_back(std::move(m)); };
  const int64_t others = int64_t{r.tp} * r.cp * r.pp;
  // the sizes that multiply with dp, as "cp*tp*pp" and "2*2*2" (cp only when context parallelism is on)
  const std::string names = r.cp > 1 ? "cp*tp*pp" : "tp*pp";
  const std::string values = (r.cp > 1 ? str(r.cp) + "*" : "") + str(r.tp) + "*" + str(r.pp);
  if (r.dp == 0) {
    if (r.world % others != 0)
      fail("the " + str(r.world) + " MPI ranks are not divisible by [parallel] " + names + " = " + values + " = " +
           str(others) + ", so [parallel] dp = 0 cannot be derived");
    else l.dp = static_cast<int>(r.world / others);
  } else if (r.dp * others != r.world) {
    fail("[parallel] dp*" + names + " = " + str(r.dp) + "*" + values + " = " + str(r.dp * others) +
         " does not match the " + str(r.world) + " MPI ranks (set [parallel] dp = 0 to derive dp)");
  } else {
    l.dp = r.dp;
  }
}

// Context parallelism: every sequence is cut into 2*cp equal chunks and rank c of the group holds chunks c and
// 2cp-1-c (Megatron's load balancing: causal attention's work is then the same on every rank).
void check_cp_split(const LayoutRequest& r, Errors& errors) {
  if (r.cp <= 1) return;
  if (r.seq_len % (2 * r.cp) != 0)
    errors.push_back("[model] seq_len = " + str(r.seq_len) + " is not divisible by 2*[parallel] cp = 2*" + str(r.cp) +
                     " = " + str(2 * r.cp) + " (each sequence is split into 2*cp equal chunks)");
}

// Tensor parallelism splits heads, the hidden size, the MLP and the embedding rows over tp ranks.
void check_tp_splits(const LayoutRequest& r, Errors& errors) {
  auto fail = [&](std::string m) { errors.push_back(std::move(m)); };
  if (r.heads % r.tp != 0)
    fail("[model] heads = " + str(r.heads) + " is not divisible by [parallel] tp = " + str(r.tp));
  if (r.kv_heads > 0 && r.kv_heads % r.tp != 0)
    fail("[model] kv_heads = " + str(r.kv_heads) + " is not divisible by [parallel] tp = " + str(r.tp));
  if (r.hidden % r.tp != 0)
    fail("[model] hidden = " + str(r.hidden) + " is not divisible by [parallel] tp = " + str(r.tp));
  if (r.ffn_hidden > 0 && r.ffn_hidden % r.tp != 0)
    fail("[model] ffn_hidden = " + str(r.ffn_hidden) +
         " (the MLP inner size) is not divisible by [parallel] tp = " + str(r.tp));
  if (r.vocab > 0 && r.vocab % r.tp != 0)
    fail("[model] vocab = " + str(r.vocab) +
         " (rows of the embedding) is not divisible by [parallel] tp = " + str(r.tp) +
         "; pad it as Megatron does, to a multiple of 128*tp: [model] vocab = " + str(tp_padded_vocab(r.vocab, r.tp)) +
         " (cairn-plan's best.toml sets it)");
}

// Batch: global_batch = dp * micro_batch * micro_steps; sets l.micro_batch and l.micro_steps (needs l.dp).
void resolve_batch(const LayoutRequest& r, Layout& l, Errors& errors) {
  auto fail = [&](std::string m) { errors.push_back(std::move(m)); };
  int64_t mb = r.micro_batch;
  if (mb == 0) {
    if (r.global_batch % l.dp != 0)
      fail("[train] global_batch = " + str(r.global_batch) + " is not divisible by [parallel] dp = " + str(l.dp));
    else mb = r.global_batch / l.dp;
  } else if (r.global_batch % (l.dp * mb) != 0) {
    fail("[train] global_batch = " + str(r.global_batch) +
         " is not divisible by [parallel] dp * micro-batch ([train] "
         "micro_batch / [parallel] mb) = " +
         str(l.dp) + "*" + str(mb) + " = " + str(l.dp * mb));
    mb = 0;
  }
  if (mb > 0) {
    l.micro_batch = static_cast<int>(mb);
    l.micro_steps = static_cast<int>(r.global_batch / (l.dp * mb));
    const int64_t local_seq = r.seq_len / std::max(r.cp, 1);  // tokens of a sequence on one rank
    if (r.sp && r.tp > 1 && (mb * local_seq) % r.tp != 0)
      fail("[parallel] sp = on splits micro-batch * [model] seq_len" + std::string(r.cp > 1 ? " / cp" : "") + " = " +
           str(mb) + "*" + str(local_seq) + " = " + str(mb * local_seq) + " tokens over [parallel] tp = " + str(r.tp) +
           ", which does not divide them");
    // Megatron's interleaved schedule runs micro-batches in groups of pp.
    if (r.v > 1 && r.pp > 1 && l.micro_steps % r.pp != 0)
      fail("[parallel] v = " + str(r.v) +
           " (interleaved schedule) needs the micro-batches per step, [train] "
           "global_batch / (dp * micro-batch) = " +
           str(r.global_batch) + "/(" + str(l.dp) + "*" + str(mb) + ") = " + str(l.micro_steps) +
           ", to be a multiple of [parallel] pp = " + str(r.pp));
  }
}

// Stages: pp*v virtual stages of at least one layer each, split evenly or as [parallel] stage_layers gives;
// sets l.stage_layers when valid.
void resolve_stages(const LayoutRequest& r, Layout& l, Errors& errors) {
  auto fail = [&](std::string m) { errors.push_back(std::move(m)); };
  int64_t stages = int64_t{r.pp} * r.v;
  if (r.stage_layers.empty()) {
    if (r.layers < stages) {
      fail("[model] layers = " + str(r.layers) + " is fewer than the " + stages_text(r.pp, r.v) +
           " pipeline stages (each needs at least one layer)");
    } else if (r.layers % stages != 0) {
      fail("[model] layers = " + str(r.layers) + " is not divisible by " + stages_text(r.pp, r.v) +
           " pipeline stages; give an uneven split explicitly, e.g. [parallel] stage_layers = " +
           list_text(suggest_stage_layers(r.layers, static_cast<int>(stages))));
    } else {
      l.stage_layers.assign(stages, static_cast<int>(r.layers / stages));
    }
    return;
  }
  bool ok = true;
  if (static_cast<int64_t>(r.stage_layers.size()) != stages) {
    fail("[parallel] stage_layers = " + list_text(r.stage_layers) + " has " + str(r.stage_layers.size()) +
         " entries, expected one per virtual stage: " + stages_text(r.pp, r.v));
    ok = false;
  }
  for (size_t i = 0; i < r.stage_layers.size(); ++i)
    if (r.stage_layers[i] < 1) {
      fail("[parallel] stage_layers[" + str(i) + "] = " + str(r.stage_layers[i]) +
           ": every stage needs at least one layer");
      ok = false;
    }
  int64_t sum = std::accumulate(r.stage_layers.begin(), r.stage_layers.end(), int64_t{0});
  if (sum != r.layers) {
    fail("[parallel] stage_layers = " + list_text(r.stage_layers) + " sums to " + str(sum) +
         ", but [model] layers = " + str(r.layers));
    ok = false;
  }
  if (ok) l.stage_layers = r.stage_layers;
}

}  // namespace

Layout resolve_layout(const LayoutRequest& r) {
  std::vector<std::string> errors;
  Layout l;
  l.world = r.world;
  l.tp = r.tp;
  l.pp = r.pp;
  l.v = r.v;
  l.cp = r.cp;
  l.zero = r.zero;
  l.sp = r.sp;

  check_sizes(r, errors);
  if (!errors.empty()) raise(errors);  // the checks below divide by these
  if (r.zero < 0 || r.zero > 3)
    errors.push_back("[parallel] zero = " + str(r.zero) + " is not a ZeRO stage (0, 1, 2 or 3)");
  resolve_dp(r, l, errors);
  check_tp_splits(r, errors);
  check_cp_split(r, errors);
  if (l.dp >= 1) resolve_batch(r, l, errors);
  if (r.v > 1 && r.pp == 1)
    errors.push_back("[parallel] v = " + str(r.v) +
                     " (virtual stages per pipeline rank) needs [parallel] pp > 1, got pp = 1");
  resolve_stages(r, l, errors);

  if (!errors.empty()) raise(errors);
  if (r.sp && r.tp == 1) {
    l.sp = false;
    l.notes.emplace_back(
        "[parallel] sp = on does nothing at tp = 1 (no tensor-parallel group to split the sequence over)");
  }
  if (l.zero > 0 && l.dp * l.cp == 1)
    l.notes.push_back("[parallel] zero = " + str(l.zero) +
                      " does nothing at dp = 1 (no data-parallel ranks to shard over)");
  return l;
}

std::pair<int, int> stage_layer_range(const Layout& l, int s) {
  if (s < 0 || s >= static_cast<int>(l.stage_layers.size()))
    throw RuntimeError("internal: virtual stage " + str(s) + " is outside the layout's " + str(l.stage_layers.size()) +
                       " stages");
  int first = std::accumulate(l.stage_layers.begin(), l.stage_layers.begin() + s, 0);
  return {first, l.stage_layers[s]};
}

int virtual_stage(const Layout& l, int pp_rank, int chunk) {
  if (pp_rank < 0 || pp_rank >= l.pp || chunk < 0 || chunk >= l.v)
    throw RuntimeError("internal: pipeline rank " + str(pp_rank) + " chunk " + str(chunk) + " is outside pp" +
                       str(l.pp) + " x v" + str(l.v));
  return chunk * l.pp + pp_rank;
}

std::string describe(const Layout& l) {
  std::string out =
      "dp" + str(l.dp) + (l.cp > 1 ? " x cp" + str(l.cp) : "") + " x tp" + str(l.tp) + " x pp" + str(l.pp);
  if (l.pp > 1 || l.v > 1) {
    out += " (";
    if (l.v > 1) out += "v" + str(l.v) + ", ";
    if (l.stage_layers.size() <= 16) {
      out += "layers ";
      for (size_t i = 0; i < l.stage_layers.size(); ++i) {
        if (i) out += '+';
        out += str(l.stage_layers[i]);
      }
    } else {
      auto [lo, hi] = std::minmax_element(l.stage_layers.begin(), l.stage_layers.end());
      out += str(l.stage_layers.size()) + " stages of " + str(*lo) + (*lo == *hi ? "" : "-" + str(*hi)) + " layers";
    }
    out += ")";
  }
  out += ", micro-batch " + str(l.micro_batch) + " x " + str(l.micro_steps);
  if (l.zero > 0) out += ", ZeRO-" + str(l.zero);
  if (l.sp) out += ", sp";
  return out;
}

Groups::Groups(const Layout& l, MPI_Comm world) {
  int size = 0;
  mpi::check(MPI_Comm_size(world, &size), "MPI_Comm_size");
  mpi::check(MPI_Comm_rank(world, &rank), "MPI_Comm_rank");
  if (size != l.world)
    throw UsageError("the parallel layout " + describe(l) + " is for " + str(l.world) + " ranks, but " + str(size) +
                     " were started");
  coords = coords_of(l, rank);
  // Split colours: the index of the group among its kind; keys order members by the coordinate that varies.
  try {
    const Coords& c = coords;
    mpi::check(MPI_Comm_split(world, c.cp + l.cp * (c.dp + l.dp * c.pp), c.tp, &tp), "MPI_Comm_split (tp)");
    mpi::check(MPI_Comm_split(world, c.tp + l.tp * (c.dp + l.dp * c.pp), c.cp, &cp), "MPI_Comm_split (cp)");
    mpi::check(MPI_Comm_split(world, c.tp + l.tp * (c.cp + l.cp * c.pp), c.dp, &dp), "MPI_Comm_split (dp)");
    mpi::check(MPI_Comm_split(world, c.tp + l.tp * c.pp, c.cp + l.cp * c.dp, &dp_cp), "MPI_Comm_split (dp_cp)");
    const int line = c.tp + l.tp * (c.cp + l.cp * c.dp);  // the pipeline this rank is a stage of
    mpi::check(MPI_Comm_split(world, line, c.pp, &pp), "MPI_Comm_split (pp)");
    if (l.pp > 1) {  // the layout is the same on every rank, so either all ranks split here or none
      bool end = c.pp == 0 || c.pp == l.pp - 1;
      mpi::check(MPI_Comm_split(world, end ? line : MPI_UNDEFINED, c.pp, &embedding), "MPI_Comm_split (embedding)");
      prev_stage_rank = rank_of(l, {c.dp, c.tp, (c.pp + l.pp - 1) % l.pp, c.cp});
      next_stage_rank = rank_of(l, {c.dp, c.tp, (c.pp + 1) % l.pp, c.cp});
    }
  } catch (...) {
    free_comms(*this);  // a throwing constructor runs no destructor
    throw;
  }
}

Groups::~Groups() { free_comms(*this); }

}  // namespace cairn::parallel
