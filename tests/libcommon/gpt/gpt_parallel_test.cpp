// gpt::Model pieces against the whole model, over real MPI ranks: tensor parallelism (vocab-parallel embedding and
// cross-entropy, column/row-parallel layers), sequence parallelism, pipeline pieces with activation slots, context
// parallelism (load-balanced sequence chunks, K/V all-gathered).
#define BOOST_TEST_MODULE gpt_parallel
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "cairn/error.h"
#include "cairn/gpt.h"
#include "cairn/gpt_mpi.h"
#include "cairn/kernels/backend.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "gpt_checks.h"

using namespace cairn;

namespace {

struct MpiFixture {
  std::unique_ptr<mpi::Session> session;
  MpiFixture() {
    auto& m = boost::unit_test::framework::master_test_suite();
    session = std::make_unique<mpi::Session>(&m.argc, &m.argv);
    log_settings().level = LogLevel::Warn;
    kernels::set_cpu_threads(1);
  }
};

gpt::GptConfig config(int world) {
  gpt::GptConfig c;
  c.layers = 4;
  c.hidden = 16 * world;
  c.heads = 2 * world;
  c.seq_len = 16;
  c.vocab = 64 * world;
  c.vocab_real = 64 * world - 27;  // the last vocabulary block is part padding
  return c;
}

struct Batch {
  int B = 2, T = 12;
  std::vector<int32_t> inputs, targets;
  Batch(const gpt::GptConfig& c, uint32_t seed, int seq = 12) : T(seq) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> tok(0, c.vocab_real - 1);
    for (int i = 0; i < B * T; i++) {
      inputs.push_back(tok(rng));
      targets.push_back(tok(rng));
    }
    targets[5] = -1;  // an ignored position
  }
};

// The whole model's flat buffer from every rank's piece: each rank places its floats at their full positions
// (only `speaks` ranks for replicated tensors; `sum_copies` adds replicas instead, for gradients of tied copies),
// and a sum over ranks assembles it.
std::vector<float> assemble(const gpt::Model& piece, const std::vector<float>& local, bool speaks, bool add_all) {
  const gpt::GptConfig& c = piece.config();
  std::vector<float> full(gpt::count_params(c), 0.0f);
  const auto runs = gpt::full_model_runs(c, piece.shard());
  size_t ti = 0;
  const auto& tensors = piece.tensors();
  for (const auto& r : runs) {
    while (r.local >= tensors[ti].offset + tensors[ti].size) ti++;
    const bool replicated = tensors[ti].split == gpt::Split::None;
    if (replicated && !speaks && !add_all) continue;
    for (size_t i = 0; i < r.count; i++) full[r.full + i] += local[r.local + i];
  }
  mpi::allreduce_inplace(full);
  return full;
}

std::vector<float> host_params(const gpt::Model& m) {
  std::vector<float> v(m.num_params());
  m.copy_params_to_host(v.data());
  return v;
}
std::vector<float> host_grads(const gpt::Model& m) {
  std::vector<float> v(m.num_params());
  m.copy_grads_to_host(v.data());
  return v;
}

// Random whole-model parameters (non-zero biases and norms, unlike init), the same on every rank.
std::vector<float> random_params(const gpt::GptConfig& c) {
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> p(gpt::count_params(c));
  for (auto& x : p) x = normal(rng);
  return p;
}
// Loads this piece's part of whole-model parameters.
void load_piece(gpt::Model& m, const std::vector<float>& full) {
  std::vector<float> local(m.num_params());
  for (const auto& r : gpt::full_model_runs(m.config(), m.shard()))
    std::copy_n(full.begin() + r.full, r.count, local.begin() + r.local);
  m.copy_params_from_host(local.data());
}

// Whole model reference: loss and gradient of the mean loss over the given batches (accumulated).
struct Reference {
  std::vector<float> losses, grads, params;  // params: the whole model's init
  Reference(const gpt::GptConfig& c, const std::vector<Batch>& batches) {
    gpt::Model m(c, kernels::cpu_backend());
    m.init(42);
    params = host_params(m);  // init
    m.copy_params_from_host(random_params(c).data());
    for (const Batch& b : batches) {
      losses.push_back(m.forward(b.inputs.data(), b.targets.data(), b.B, b.T));
      m.backward({}, 1.0f / batches.size());
    }
    grads = host_grads(m);
  }
};

void tensor_parallel_case(bool sequence_parallel, gpt::Recompute recompute) {
  const int world = mpi::size(), rank = mpi::rank();
  const gpt::GptConfig c = config(world);
  std::vector<Batch> batches = {Batch(c, 1), Batch(c, 2)};
  Reference ref(c, batches);

  gpt::ShardSpec spec;
  spec.tp = world;
  spec.tp_rank = rank;
  spec.sequence_parallel = sequence_parallel;
  gpt::Model m(c, kernels::cpu_backend(), true, spec, gpt::mpi_tp_comm(MPI_COMM_WORLD));
  m.set_recompute(recompute);
  m.init(42);
  // init: every piece is cut out of the whole model's init, bitwise
  const auto params = assemble(m, host_params(m), rank == 0, false);
  BOOST_TEST(params == ref.params);
  load_piece(m, random_params(c));
  for (size_t k = 0; k < batches.size(); k++) {
    const Batch& b = batches[k];
    const float loss = m.forward(b.inputs.data(), b.targets.data(), b.B, b.T);
    BOOST_TEST(std::fabs(loss - ref.losses[k]) <= 1e-5 * std::fabs(ref.losses[k]));
    gpt::BackwardOptions o;
    o.grad_scale = 1.0f / batches.size();
    o.last_micro_batch = k + 1 == batches.size();
    m.backward(o);
  }
  const auto grads = assemble(m, host_grads(m), rank == 0, false);
  BOOST_TEST(max_rel(grads.data(), ref.grads.data(), grads.size()) < 2e-5);
  // replicated tensors (norms, row-parallel biases, wpe) got the same gradient on every rank
  const auto mine = host_grads(m);
  for (const auto& t : m.tensors()) {
    if (t.split != gpt::Split::None) continue;
    std::vector<float> first(mine.begin() + t.offset, mine.begin() + t.offset + t.size);
    mpi::broadcast(first.data(), first.size());
    BOOST_TEST_CONTEXT(t.name) { BOOST_TEST(max_rel(mine.data() + t.offset, first.data(), t.size) < 1e-6); }
  }
}

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

BOOST_AUTO_TEST_CASE(piece_tensors_cover_the_model_once) {
  const gpt::GptConfig c = config(4);
  std::vector<int> hits(gpt::count_params(c), 0);
  for (int r = 0; r < 4; r++) {
    gpt::ShardSpec s;
    s.tp = 4;
    s.tp_rank = r;
    for (const auto& run : gpt::full_model_runs(c, s))
      for (size_t i = 0; i < run.count; i++) hits[run.full + i]++;
  }
  // split tensors are covered once over the 4 ranks, replicated ones 4 times
  gpt::Model whole(c, kernels::cpu_reference_backend(), false);
  for (const auto& t : whole.tensors()) {
    const bool replicated = t.name == "wpe" || t.name.find("ln_") != std::string::npos ||
                            t.name.ends_with("c_proj.bias");
    for (size_t i = t.offset; i < t.offset + t.size; i++) {
      if (hits[i] != (replicated ? 4 : 1)) {
        BOOST_FAIL(t.name << " element " << i - t.offset << " covered " << hits[i] << " times");
      }
    }
  }
  gpt::ShardSpec bad;
  bad.tp = 3;
  BOOST_CHECK_THROW(gpt::piece_tensors(c, bad), UsageError);  // 8 heads, vocab 256: not divisible by 3
}

// Init draws each piece's values alone from the per-name stream (Box-Muller pairs); a piece that starts at an
// odd element of its tensor begins with the second value of a pair. Heads of 5 put such starts in c_attn.
BOOST_AUTO_TEST_CASE(tensor_parallel_init_with_odd_piece_starts) {
  const int world = mpi::size(), rank = mpi::rank();
  gpt::GptConfig c = config(world);
  c.hidden = 5 * world;
  c.heads = world;
  gpt::Model whole(c, kernels::cpu_backend(), false);
  whole.init(7);
  gpt::ShardSpec spec;
  spec.tp = world;
  spec.tp_rank = rank;
  gpt::Model m(c, kernels::cpu_backend(), false, spec, gpt::mpi_tp_comm(MPI_COMM_WORLD));
  m.init(7);
  size_t odd_starts = 0;
  for (const auto& r : gpt::full_model_runs(c, spec)) odd_starts += r.full % 2;
  if (rank % 2 == 1) BOOST_TEST(odd_starts > 0u);  // odd ranks' heads start at odd columns
  BOOST_TEST(assemble(m, host_params(m), rank == 0, false) == host_params(whole));
}

BOOST_AUTO_TEST_CASE(tensor_parallel_matches_whole_model) { tensor_parallel_case(false, gpt::Recompute::None); }
BOOST_AUTO_TEST_CASE(sequence_parallel_matches_whole_model) { tensor_parallel_case(true, gpt::Recompute::None); }
BOOST_AUTO_TEST_CASE(sequence_parallel_with_full_recompute) { tensor_parallel_case(true, gpt::Recompute::Full); }

// Pipeline pieces: rank r holds an equal share of the layers; the first holds the embedding, the last the head
// (with its own wte copy); two micro-batches are in flight in two activation slots (forward, forward, backward,
// backward), and the activations travel with MPI send/recv.
void pipeline_case(gpt::Recompute recompute) {
  const int world = mpi::size(), rank = mpi::rank();
  const gpt::GptConfig c = config(world);
  if (c.layers % world != 0) return;
  std::vector<Batch> batches = {Batch(c, 3), Batch(c, 4)};
  Reference ref(c, batches);
  gpt::ShardSpec spec;
  spec.first_layer = rank * c.layers / world;
  spec.num_layers = c.layers / world;
  spec.has_embedding = rank == 0;
  spec.has_head = rank == world - 1;
  gpt::Model m(c, kernels::cpu_backend(), true, spec);
  m.set_recompute(recompute);  // full: the rebuilt layer buffers are shared by both slots
  m.init(42);
  const auto params = assemble(m, host_params(m), true, false);
  // each tensor has one owner except wte (first and last stage), so compare all but wte
  const size_t wte = (size_t)c.vocab * c.hidden;
  BOOST_TEST(std::equal(params.begin() + wte, params.end(), ref.params.begin() + wte));
  load_piece(m, random_params(c));
  const Batch& b0 = batches[0];
  const size_t rows = m.stream_rows(b0.B, b0.T) * c.hidden;
  std::vector<float> losses;
  for (size_t k = 0; k < batches.size(); k++) {
    const Batch& b = batches[k];
    m.set_activation_slot((int)k);
    if (rank > 0)
      mpi::check(MPI_Recv(m.stage_input(b.B, b.T), (int)rows, MPI_FLOAT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                 "recv");
    losses.push_back(m.forward(b.inputs.data(), b.targets.data(), b.B, b.T));
    if (rank < world - 1)
      mpi::check(MPI_Send(m.stage_output(), (int)rows, MPI_FLOAT, rank + 1, 0, MPI_COMM_WORLD), "send");
  }
  std::vector<float> dout(rows);
  for (size_t k = 0; k < batches.size(); k++) {
    m.set_activation_slot((int)k);
    gpt::BackwardOptions o;
    o.grad_scale = 1.0f / batches.size();
    if (rank < world - 1) {
      mpi::check(MPI_Recv(dout.data(), (int)rows, MPI_FLOAT, rank + 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "recv");
      o.output_grad = dout.data();
    }
    m.backward(o);
    if (rank > 0) mpi::check(MPI_Send(m.stage_input_grad(), (int)rows, MPI_FLOAT, rank - 1, 1, MPI_COMM_WORLD), "send");
  }
  if (rank == world - 1) {
    for (size_t k = 0; k < batches.size(); k++) BOOST_TEST(std::fabs(losses[k] - ref.losses[k]) <= 1e-6 * ref.losses[k]);
  }
  // the two wte copies' gradients add up to the whole model's (the trainer sums them over the embedding group)
  const auto grads = assemble(m, host_grads(m), true, true);
  BOOST_TEST(max_rel(grads.data(), ref.grads.data(), grads.size()) < 1e-5);
}

BOOST_AUTO_TEST_CASE(pipeline_pieces_match_whole_model) { pipeline_case(gpt::Recompute::None); }
BOOST_AUTO_TEST_CASE(pipeline_pieces_with_full_recompute) { pipeline_case(gpt::Recompute::Full); }

// Context parallelism over all ranks: rank r holds chunks r and 2cp-1-r of every sequence (cp = world). The whole
// model's mean loss is the ranks' losses weighted by their valid targets (one target is ignored, so the counts
// differ), and its gradient the sum of each rank's scaled by the same weights.
// ring = true: K/V around a ring ([parallel] cp_comm = "p2p"), else all-gathered.
void context_parallel_case(gpt::Recompute recompute, bool ring = false) {
  const int world = mpi::size(), rank = mpi::rank();
  const gpt::GptConfig c = config(world);
  std::vector<Batch> batches = {Batch(c, 5, 16), Batch(c, 6, 16)};
  Reference ref(c, batches);
  gpt::ShardSpec spec;
  spec.cp = world;
  spec.cp_rank = rank;
  spec.cp_ring = ring;
  gpt::Model m(c, kernels::cpu_backend(), true, spec, {}, gpt::mpi_tp_comm(MPI_COMM_WORLD));
  m.set_recompute(recompute);
  load_piece(m, random_params(c));  // every rank holds the whole model
  for (size_t k = 0; k < batches.size(); k++) {
    const Batch& b = batches[k];
    const int S = b.T / (2 * world), T_local = 2 * S;
    std::vector<int32_t> inputs, targets;
    for (int row = 0; row < b.B; row++)
      for (int chunk : {rank, 2 * world - 1 - rank}) {
        const size_t first = (size_t)row * b.T + (size_t)chunk * S;
        inputs.insert(inputs.end(), b.inputs.begin() + first, b.inputs.begin() + first + S);
        targets.insert(targets.end(), b.targets.begin() + first, b.targets.begin() + first + S);
      }
    const float loss = m.forward(inputs.data(), targets.data(), b.B, T_local);
    const int valid = m.valid_targets(), total = mpi::allreduce(valid);
    const double whole = mpi::allreduce((double)loss * valid) / total;
    BOOST_TEST(std::fabs(whole - ref.losses[k]) <= 1e-5 * std::fabs(ref.losses[k]));
    gpt::BackwardOptions o;
    o.grad_scale = (float)valid / (float)total / (float)batches.size();
    m.backward(o);
  }
  std::vector<float> grads = host_grads(m);
  mpi::allreduce_inplace(grads);
  BOOST_TEST(max_rel(grads.data(), ref.grads.data(), grads.size()) < 2e-5);
}

BOOST_AUTO_TEST_CASE(context_parallel_matches_whole_model) { context_parallel_case(gpt::Recompute::None); }
BOOST_AUTO_TEST_CASE(context_parallel_with_full_recompute) { context_parallel_case(gpt::Recompute::Full); }
BOOST_AUTO_TEST_CASE(ring_context_parallel_matches_whole_model) { context_parallel_case(gpt::Recompute::None, true); }
BOOST_AUTO_TEST_CASE(ring_context_parallel_with_full_recompute) { context_parallel_case(gpt::Recompute::Full, true); }
