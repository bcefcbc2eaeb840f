// Unit tests of gpt::Model: parameter layout, init, gradient buckets, forward-only mode, backends, bad input.
#define BOOST_TEST_MODULE gpt_model
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "cairn/error.h"
#include "cairn/gpt.h"
#include "cairn/kernels/backend.h"
#include "gpt_checks.h"

using namespace cairn;

namespace {

gpt::GptConfig small_config() {
  gpt::GptConfig c;
  c.layers = 3;
  c.hidden = 48;
  c.heads = 4;
  c.seq_len = 24;
  c.vocab = 128;
  c.vocab_real = 101;
  return c;
}

struct Batch {
  int B = 3, T = 17;
  std::vector<int32_t> inputs, targets;
  explicit Batch(const gpt::GptConfig& c, uint32_t seed = 7) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> tok(0, c.vocab_real - 1);
    for (int i = 0; i < B * T; i++) {
      inputs.push_back(tok(rng));
      targets.push_back(tok(rng));
    }
    targets[3] = -1;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(layout_and_names) {
  const auto cfg = small_config();
  gpt::Model m(cfg, kernels::cpu_backend());
  BOOST_TEST(m.num_params() == gpt::count_params(cfg));
  const auto& t = m.tensors();
  BOOST_TEST(t.front().name == "wte");
  BOOST_TEST(t[1].name == "wpe");
  BOOST_TEST(t.back().name == "ln_f.bias");
  BOOST_TEST(t.size() == 2 + 12 * (size_t)cfg.layers + 2);
  size_t offset = 0;
  for (const auto& x : t) {
    BOOST_TEST(x.offset == offset);  // contiguous, no gaps
    size_t prod = 1;
    for (int d : x.shape) prod *= d;
    BOOST_TEST(prod == x.size);
    offset += x.size;
    const bool bias_or_norm = x.name.ends_with(".bias") || x.name.find("ln_") != std::string::npos;
    BOOST_TEST(x.weight_decay == !bias_or_norm, x.name);
  }
  const auto* qkv = m.find_tensor("h.2.attn.c_attn.weight");
  BOOST_REQUIRE(qkv);
  BOOST_TEST(qkv->shape == (std::vector<int>{48, 144}));  // HF Conv1D [in, out]
  BOOST_TEST(qkv->layer == 2);
  BOOST_TEST(m.find_tensor("nope") == nullptr);
  // 6N + 12 L T C with N the matmul parameters
  const double N = 3 * 12.0 * 48 * 48 + 48.0 * 128;
  BOOST_CHECK_CLOSE(gpt::train_flops_per_token(cfg), 6 * N + 12.0 * 3 * 24 * 48, 1e-9);
}

BOOST_AUTO_TEST_CASE(decay_ranges_split_and_merge) {
  const auto cfg = small_config();
  gpt::Model m(cfg, kernels::cpu_backend());
  auto all = gpt::decay_ranges(m.tensors(), 0, m.num_params());
  size_t covered = 0;
  for (size_t i = 0; i < all.size(); i++) {
    BOOST_TEST(all[i].first == covered);
    covered += all[i].count;
    if (i) BOOST_TEST(all[i].weight_decay != all[i - 1].weight_decay);  // maximal runs
  }
  BOOST_TEST(covered == m.num_params());
  BOOST_TEST(all.front().weight_decay);  // wte + wpe merged
  BOOST_TEST(all.front().count == m.tensors()[0].size + m.tensors()[1].size);
  // a shard cutting through tensors
  const auto* b = m.find_tensor("h.0.attn.c_attn.bias");
  auto part = gpt::decay_ranges(m.tensors(), b->offset + 5, 10 + b->size);
  BOOST_REQUIRE(part.size() == 2);
  BOOST_TEST(!part[0].weight_decay);
  BOOST_TEST(part[0].count == b->size - 5);
  BOOST_TEST(part[1].weight_decay);  // c_proj.weight
  BOOST_TEST(part[1].count == 15u);
}

BOOST_AUTO_TEST_CASE(init_is_deterministic_gpt2_style) {
  const auto cfg = small_config();
  gpt::Model a(cfg, kernels::cpu_backend()), b(cfg, kernels::cpu_backend()), c(cfg, kernels::cpu_backend());
  a.init(5);
  b.init(5);
  c.init(6);
  BOOST_TEST(std::equal(a.params(), a.params() + a.num_params(), b.params()));
  BOOST_TEST(!std::equal(a.params(), a.params() + a.num_params(), c.params()));
  auto stddev = [&](const std::string& name) {
    const auto* t = a.find_tensor(name);
    double s = 0;
    for (size_t i = 0; i < t->size; i++) s += (double)a.params()[t->offset + i] * a.params()[t->offset + i];
    return std::sqrt(s / t->size);
  };
  BOOST_CHECK_CLOSE(stddev("h.1.mlp.c_fc.weight"), 0.02, 5.0);
  BOOST_CHECK_CLOSE(stddev("h.1.mlp.c_proj.weight"), 0.02 / std::sqrt(6.0), 5.0);
  BOOST_CHECK_CLOSE(stddev("h.0.attn.c_proj.weight"), 0.02 / std::sqrt(6.0), 5.0);
  const auto* lnw = a.find_tensor("h.0.ln_2.weight");
  const auto* qb = a.find_tensor("h.0.attn.c_attn.bias");
  for (size_t i = 0; i < lnw->size; i++) BOOST_REQUIRE_EQUAL(a.params()[lnw->offset + i], 1.0f);
  for (size_t i = 0; i < qb->size; i++) BOOST_REQUIRE_EQUAL(a.params()[qb->offset + i], 0.0f);
  // padding rows of wte are zero
  for (size_t i = (size_t)cfg.vocab_real * cfg.hidden; i < (size_t)cfg.vocab * cfg.hidden; i++)
    BOOST_REQUIRE_EQUAL(a.params()[i], 0.0f);
}

BOOST_AUTO_TEST_CASE(grad_buckets_arrive_final_in_order) {
  const auto cfg = small_config();
  gpt::Model m(cfg, kernels::cpu_backend());
  m.init(1);
  Batch batch(cfg);
  m.zero_grad();
  const float loss = m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
  BOOST_TEST(std::isfinite(loss));
  BOOST_CHECK_CLOSE(loss, std::log((double)cfg.vocab_real), 5.0);  // near-uniform at init
  BOOST_TEST(m.valid_targets() == batch.B * batch.T - 1);
  std::vector<std::pair<size_t, size_t>> seen;
  std::vector<std::vector<float>> snapshots;
  m.backward([&](size_t first, size_t count) {
    seen.emplace_back(first, count);
    snapshots.emplace_back(m.grads() + first, m.grads() + first + count);
  });
  BOOST_TEST(seen == m.grad_ready_ranges());
  BOOST_REQUIRE(seen.size() == (size_t)cfg.layers + 2);
  size_t total = 0;
  for (auto [f, c] : seen) total += c;
  BOOST_TEST(total == m.num_params());
  // each bucket's gradient was already final when announced
  for (size_t i = 0; i < seen.size(); i++)
    BOOST_TEST(std::equal(snapshots[i].begin(), snapshots[i].end(), m.grads() + seen[i].first), "bucket " << i);
  // and the layer buckets come last layer first
  BOOST_TEST(seen[1].first == m.find_tensor("h.2.ln_1.weight")->offset);
  BOOST_TEST(seen.back().first == 0u);
}

BOOST_AUTO_TEST_CASE(accumulation_and_grad_scale) {
  const auto cfg = small_config();
  gpt::Model m(cfg, kernels::cpu_backend());
  m.init(2);
  Batch batch(cfg);
  m.zero_grad();
  m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
  m.backward();
  std::vector<float> once(m.grads(), m.grads() + m.num_params());
  m.zero_grad();
  for (int k = 0; k < 2; k++) {
    m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    m.backward({}, 0.5f);
  }
  BOOST_TEST(max_rel(m.grads(), once.data(), once.size()) < 1e-6);
  // backward twice for one forward is an error (the logits became gradients)
  BOOST_CHECK_THROW(m.backward(), RuntimeError);
}

BOOST_AUTO_TEST_CASE(forward_only_matches_training_and_backends_agree) {
  const auto cfg = small_config();
  gpt::Model train(cfg, kernels::cpu_backend()), eval(cfg, kernels::cpu_backend(), false),
      ref(cfg, kernels::cpu_reference_backend());
  BOOST_TEST(eval.grads() == nullptr);
  train.init(3);
  eval.init(3);
  ref.init(3);
  Batch batch(cfg);
  const size_t nlogits = (size_t)batch.B * batch.T * cfg.vocab;
  const float l1 = train.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
  const float l2 = eval.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
  const float l3 = ref.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
  BOOST_TEST(l1 == l2);
  BOOST_TEST(std::equal(train.logits(), train.logits() + nlogits, eval.logits()));
  BOOST_TEST(std::equal(train.position_losses(), train.position_losses() + batch.B * batch.T, eval.position_losses()));
  BOOST_CHECK_CLOSE(l1, l3, 1e-4);
  BOOST_TEST(max_rel(train.logits(), ref.logits(), nlogits) < 1e-5);
  BOOST_CHECK_THROW(eval.backward(), RuntimeError);
  std::vector<float> host_logits(nlogits), host_params(eval.num_params());
  eval.copy_logits_to_host(host_logits.data());
  BOOST_TEST(std::equal(host_logits.begin(), host_logits.end(), eval.logits()));
  BOOST_CHECK_THROW(eval.copy_grads_to_host(host_params.data()), RuntimeError);
  // params round-trip through the host: a forward-only copy of a trained model
  train.copy_params_to_host(host_params.data());
  host_params[0] += 1.0f;
  eval.copy_params_from_host(host_params.data());
  BOOST_TEST(eval.params()[0] == train.params()[0] + 1.0f);
  eval.copy_params_from_host(train.params());
  train.zero_grad();
  ref.zero_grad();
  train.backward();
  ref.backward();
  BOOST_CHECK_THROW(train.copy_logits_to_host(host_logits.data()), RuntimeError);  // now gradients
  for (const auto& t : train.tensors())
    BOOST_TEST(max_rel(train.grads() + t.offset, ref.grads() + t.offset, t.size) < 1e-4, t.name);
  // a smaller batch after a larger one reuses the buffers; without targets the loss is 0
  BOOST_TEST(eval.forward(batch.inputs.data(), nullptr, 1, 5) == 0.0f);
  const float l4 = eval.forward(batch.inputs.data(), batch.targets.data(), 1, batch.T);
  BOOST_TEST(std::isfinite(l4));
}

// The head at the targeted positions only (cairn-eval): the same losses and, row for row, the same logits as the full
// head at those positions, nothing at the others; the full head again once switched off.
BOOST_AUTO_TEST_CASE(head_at_targeted_positions_only) {
  const auto cfg = small_config();
  for (const kernels::Backend* be : {&kernels::cpu_backend(), &kernels::cpu_reference_backend()}) {
    gpt::Model full(cfg, *be, false), some(cfg, *be, false);
    full.init(5);
    some.init(5);
    some.set_head_targets_only(true);
    Batch batch(cfg);
    // A multiple-choice-like batch: targets on a few positions of each row only.
    std::vector<int32_t> targets(batch.targets.size(), -1);
    std::vector<size_t> scored;
    for (size_t p = 0; p < targets.size(); ++p)
      if (p % (size_t)batch.T >= 12) {
        targets[p] = batch.targets[p];
        scored.push_back(p);
      }
    const float lf = full.forward(batch.inputs.data(), targets.data(), batch.B, batch.T);
    const float ls = some.forward(batch.inputs.data(), targets.data(), batch.B, batch.T);
    BOOST_TEST(full.logit_rows() == batch.B * batch.T);
    BOOST_TEST(some.logit_rows() == (int)scored.size());
    BOOST_TEST(some.valid_targets() == full.valid_targets());
    BOOST_CHECK_CLOSE(ls, lf, 1e-4);
    for (size_t p = 0; p < targets.size(); ++p) {
      if (targets[p] < 0) BOOST_TEST(some.position_losses()[p] == 0.0f);
      else BOOST_CHECK_CLOSE(some.position_losses()[p], full.position_losses()[p], 1e-4);
    }
    for (size_t k = 0; k < scored.size(); ++k)
      BOOST_TEST(max_rel(some.logits() + k * cfg.vocab, full.logits() + scored[k] * cfg.vocab, cfg.vocab) < 1e-5);
    std::vector<float> host((size_t)some.logit_rows() * cfg.vocab);
    some.copy_logits_to_host(host.data());
    BOOST_TEST(std::equal(host.begin(), host.end(), some.logits()));
    // No target at all: loss 0, no rows; every position a target: every row.
    std::vector<int32_t> none(targets.size(), -1);
    BOOST_TEST(some.forward(batch.inputs.data(), none.data(), batch.B, batch.T) == 0.0f);
    BOOST_TEST(some.logit_rows() == 0);
    some.set_head_targets_only(false);
    BOOST_TEST(some.forward(batch.inputs.data(), targets.data(), batch.B, batch.T) == lf);
    BOOST_TEST(some.logit_rows() == batch.B * batch.T);
  }
}

// Every recompute mode gives bitwise the same logits, losses and accumulated gradients as none on both CPU
// backends (two micro-batches, the second smaller, so buffers are reused), with less activation memory.
BOOST_AUTO_TEST_CASE(recompute_modes_are_bitwise_identical_and_smaller) {
  const auto cfg = small_config();
  const gpt::Recompute modes[] = {gpt::Recompute::None, gpt::Recompute::Gelu, gpt::Recompute::Full};
  Batch big(cfg, 11), small(cfg, 12);
  small.B = 2;
  small.T = 9;
  for (const kernels::Backend* be : {&kernels::cpu_backend(), &kernels::cpu_reference_backend()}) {
    BOOST_TEST_CONTEXT("backend " << be->name) {
      std::vector<float> ref_logits, ref_grads;
      std::vector<float> ref_losses;
      size_t bytes[3] = {0, 0, 0};
      for (int mi = 0; mi < 3; mi++) {
        BOOST_TEST_CONTEXT("recompute " << gpt::recompute_name(modes[mi])) {
          gpt::Model m(cfg, *be);
          m.init(9);
          m.set_recompute(modes[mi]);
          BOOST_TEST((m.recompute() == modes[mi]));
          int hook_calls = 0;
          m.set_forward_layer_hook([&](int) { hook_calls++; });
          m.zero_grad();
          std::vector<float> logits((size_t)big.B * big.T * cfg.vocab), losses;
          losses.push_back(m.forward(big.inputs.data(), big.targets.data(), big.B, big.T));
          m.copy_logits_to_host(logits.data());
          BOOST_TEST(hook_calls == cfg.layers + 2);
          m.backward({}, 0.5f);
          BOOST_TEST(hook_calls == cfg.layers + 2);  // recomputing in backward is not a forward
          losses.push_back(m.forward(small.inputs.data(), small.targets.data(), small.B, small.T));
          m.backward({}, 0.5f);
          std::vector<float> grads(m.num_params());
          m.copy_grads_to_host(grads.data());
          bytes[mi] = m.activation_bytes();
          BOOST_TEST(bytes[mi] == gpt::planned_activation_bytes(cfg, (size_t)big.B * big.T, modes[mi], true));
          if (mi == 0) {
            ref_logits = logits;
            ref_grads = grads;
            ref_losses = losses;
            continue;
          }
          BOOST_TEST((losses == ref_losses));
          BOOST_TEST((logits == ref_logits));
          size_t differ = 0;
          for (size_t i = 0; i < grads.size(); i++) differ += grads[i] != ref_grads[i];
          BOOST_TEST(differ == 0u);
        }
      }
      // per token and layer: none keeps 16C + NH + 4 floats; gelu shares the 4C GELU output; full keeps only
      // the layer output (C) plus one shared set of 15C + NH + 4
      const size_t N = (size_t)big.B * big.T, C = cfg.hidden, L = cfg.layers, per_layer = 16 * C + cfg.heads + 4;
      BOOST_TEST(bytes[0] - bytes[1] == (L - 1) * N * 4 * C * sizeof(float));
      BOOST_TEST(bytes[0] - bytes[2] == (L - 1) * N * (per_layer - C) * sizeof(float));
      BOOST_TEST(bytes[2] < bytes[1]);
      BOOST_TEST(bytes[1] < bytes[0]);
    }
  }
}

BOOST_AUTO_TEST_CASE(recompute_mode_switches_and_names) {
  const auto cfg = small_config();
  gpt::Model m(cfg, kernels::cpu_backend());
  m.init(3);
  Batch batch(cfg);
  m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
  const size_t none_bytes = m.activation_bytes();
  m.set_recompute(gpt::Recompute::Full);  // frees the activations: the last forward is gone
  BOOST_TEST(m.activation_bytes() == 0u);
  BOOST_CHECK_THROW(m.backward(), RuntimeError);
  m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
  BOOST_TEST(m.activation_bytes() < none_bytes);
  m.backward();
  // the compatibility switch
  m.set_recompute_gelu(true);
  BOOST_TEST((m.recompute() == gpt::Recompute::Gelu));
  BOOST_TEST(m.recompute_gelu());
  m.set_recompute_gelu(false);
  BOOST_TEST((m.recompute() == gpt::Recompute::None));
  BOOST_TEST(!m.recompute_gelu());
  BOOST_TEST((gpt::parse_recompute("full") == gpt::Recompute::Full));
  BOOST_TEST(gpt::recompute_name(gpt::parse_recompute("gelu")) == std::string("gelu"));
  BOOST_CHECK_THROW(gpt::parse_recompute("selective"), UsageError);
  // hardware FLOPs: full reruns layers-1 layers without the MLP output projection
  const double C = cfg.hidden, T = cfg.seq_len;
  BOOST_TEST(gpt::recompute_flops_per_token(cfg, gpt::Recompute::Full) == 2 * (16 * C * C + 4 * T * C));
  BOOST_TEST(gpt::recompute_flops_per_token(cfg, gpt::Recompute::Gelu) == 0.0);
  // a forward-only model keeps one set of buffers whatever the mode
  gpt::Model eval(cfg, kernels::cpu_backend(), false);
  eval.copy_params_from_host(m.params());
  eval.set_recompute(gpt::Recompute::Full);
  eval.forward(batch.inputs.data(), nullptr, batch.B, batch.T);
  BOOST_TEST(eval.activation_bytes() ==
             gpt::planned_activation_bytes(cfg, (size_t)batch.B * batch.T, gpt::Recompute::None, false));
}

BOOST_AUTO_TEST_CASE(bad_input_is_a_clear_error) {
  auto cfg = small_config();
  gpt::Model m(cfg, kernels::cpu_backend());
  m.init(4);
  Batch batch(cfg);
  BOOST_CHECK_THROW(m.forward(batch.inputs.data(), batch.targets.data(), 1, cfg.seq_len + 1), RuntimeError);
  batch.inputs[20] = cfg.vocab_real;  // a padding id
  try {
    m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    BOOST_FAIL("expected an error");
  } catch (const RuntimeError& e) {
    BOOST_TEST(std::string(e.what()).find("row 1, position 3") != std::string::npos, e.what());
  }
  batch.inputs[20] = 0;
  batch.targets[0] = -5 + cfg.vocab * 2;
  BOOST_CHECK_THROW(m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T), RuntimeError);
  cfg.heads = 5;
  BOOST_CHECK_THROW(gpt::Model(cfg, kernels::cpu_backend()), UsageError);
  cfg = small_config();
  cfg.vocab_real = cfg.vocab + 1;
  BOOST_CHECK_THROW(gpt::validate(cfg), UsageError);
}

// Lent unit storage (ZeRO-3 parameters, ZeRO-2/3 gradients): parameters and gradients in the caller's memory give
// bitwise the resident model's loss and gradients; units are acquired only around their use and each unit's
// gradient is handed back once per backward.
BOOST_AUTO_TEST_CASE(lent_unit_storage_matches_resident) {
  const auto cfg = small_config();
  const Batch batch(cfg);
  gpt::Model resident(cfg, kernels::cpu_backend());
  resident.init(5);
  std::vector<float> params(resident.num_params()), grads(resident.num_params(), 0.0f), want(resident.num_params());
  resident.copy_params_to_host(params.data());
  const float want_loss = resident.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
  resident.backward();
  resident.copy_grads_to_host(want.data());

  gpt::Model lent(cfg, kernels::cpu_backend());
  for (gpt::Recompute mode : {gpt::Recompute::None, gpt::Recompute::Full}) {
    lent.set_recompute(mode);
    const auto units = lent.units();
    BOOST_TEST(units.size() == (size_t)cfg.layers + 2);
    std::vector<int> in_use(units.size(), 0), handed(units.size(), 0);
    std::vector<std::pair<int, int>> acquired;  // (unit, the next unit it announced)
    gpt::UnitStorage st;
    st.acquire_params = [&](int u, int next) {
      BOOST_TEST(in_use[u] == 0);
      in_use[u] = 1;
      acquired.emplace_back(u, next);
      return params.data() + units[u].first;
    };
    st.release_params = [&](int u, bool keep) {
      in_use[u] = 0;
      // kept: the embedding (unit 0) and the final norm (the last), which both ends of a pass use
      BOOST_TEST(keep == (u == 0 || u == (int)units.size() - 1), "unit " << u);
    };
    st.acquire_grads = [&](int u) { return grads.data() + units[u].first; };
    st.grads_done = [&](int u) { handed[u]++; };
    lent.set_unit_storage(st);
    BOOST_TEST(lent.params() == nullptr);
    BOOST_TEST(lent.grads() == nullptr);
    std::fill(grads.begin(), grads.end(), 0.0f);
    const float loss = lent.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    for (int u : in_use) BOOST_TEST(u == 0);  // every unit released after forward
    const size_t forward_acquires = acquired.size();
    lent.backward();
    BOOST_TEST_REQUIRE(forward_acquires < acquired.size());
    BOOST_TEST(acquired.front().first == lent.first_unit(false));
    BOOST_TEST(acquired[forward_acquires].first == lent.first_unit(true));
    for (int u : in_use) BOOST_TEST(u == 0);
    for (int h : handed) BOOST_TEST(h == 1);
    BOOST_TEST(loss == want_loss);
    BOOST_TEST(grads == want);  // bitwise
    // Every announced next unit is the one acquired next (a storage that prefetches it never gathers in vain), and
    // only the backward's last layer and the forward's second use of the embedding announce none.
    int unannounced = 0;
    for (size_t i = 0; i < acquired.size(); ++i) {
      if (acquired[i].second < 0) {
        unannounced++;
        continue;
      }
      BOOST_TEST_REQUIRE(i + 1 < acquired.size());
      BOOST_TEST(acquired[i + 1].first == acquired[i].second, "acquire " << i << " of unit " << acquired[i].first);
    }
    BOOST_TEST(unannounced == 2);
    // forward: embedding, layers, final norm, embedding (the head); backward: final norm, embedding, layers
    BOOST_TEST(acquired.size() == 2 * (size_t)cfg.layers + 5);
  }
  BOOST_CHECK_THROW(lent.init(1), RuntimeError);
}

// Two middle pipeline pieces of one rank sharing an activation pool (an interleaved schedule's chunks): a slot
// released after its backward serves the other piece's next forward, so the pool holds the most micro-batches in
// flight at once (2), not each piece's own peak (2 + 2); gradients are bitwise those of pieces with their own buffers.
BOOST_AUTO_TEST_CASE(activation_pool_shares_slots_across_pieces) {
  gpt::GptConfig c = small_config();
  c.layers = 4;
  const kernels::Backend& be = kernels::cpu_backend();
  auto piece = [&](int first) {
    gpt::ShardSpec s;
    s.first_layer = first;
    s.num_layers = 1;
    s.has_embedding = false;
    s.has_head = false;
    return s;
  };
  const int B = 2, T = 16;
  auto run = [&](bool pooled, size_t* pool_bytes, size_t* pool_blocks) {
    gpt::Model a(c, be, true, piece(1)), b(c, be, true, piece(2));
    auto pool = std::make_shared<gpt::ActivationPool>(be);
    if (pooled) {
      for (gpt::Model* m : {&a, &b}) {
        m->set_activation_pool(pool);
        m->add_pool_sizes(B, T);
      }
    }
    a.init(1), b.init(2);
    a.zero_grad(), b.zero_grad();
    const size_t n = a.stream_rows(B, T) * (size_t)c.hidden;
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<std::vector<float>> inputs(2, std::vector<float>(n)), dout(2, std::vector<float>(n));
    for (auto* v : {&inputs[0], &inputs[1], &dout[0], &dout[1]})
      for (float& x : *v) x = g(rng);
    auto fwd = [&](gpt::Model& m, int slot) {
      m.set_activation_slot(slot);
      std::copy(inputs[(size_t)slot].begin(), inputs[(size_t)slot].end(), m.stage_input(B, T));
      m.forward(nullptr, nullptr, B, T);
    };
    auto bwd = [&](gpt::Model& m, int slot) {
      m.set_activation_slot(slot);
      gpt::BackwardOptions o;
      o.output_grad = dout[(size_t)slot].data();
      m.backward(o);
      m.release_activation_slot(slot);
    };
    fwd(a, 0), fwd(a, 1), bwd(a, 0), fwd(b, 0), bwd(a, 1), fwd(b, 1), bwd(b, 0), bwd(b, 1);
    *pool_bytes = pool->allocated_bytes();
    *pool_blocks = pool->blocks();
    std::vector<float> grads(a.num_params() + b.num_params());
    a.copy_grads_to_host(grads.data());
    b.copy_grads_to_host(grads.data() + a.num_params());
    return grads;
  };
  size_t bytes = 0, blocks = 0, unused = 0;
  const std::vector<float> own = run(false, &unused, &unused);
  const std::vector<float> shared = run(true, &bytes, &blocks);
  BOOST_TEST(blocks == 2u);
  gpt::Model probe(c, be, true, piece(1));
  auto probe_pool = std::make_shared<gpt::ActivationPool>(be);
  probe.set_activation_pool(probe_pool);
  probe.add_pool_sizes(B, T);
  const size_t scratch = probe_pool->scratch(0) ? probe_pool->allocated_bytes() : 0;  // one shared scratch block
  BOOST_TEST(bytes == 2 * probe.pooled_slot_bytes(B, T) + scratch);
  BOOST_TEST(own == shared);
}

// Full recomputation keeps state in the scratch between a forward and its backward (the last layer's rebuilt
// activations): pieces sharing it, interleaved, still give bitwise the gradients of pieces with their own.
BOOST_AUTO_TEST_CASE(activation_pool_shared_scratch_with_recompute) {
  gpt::GptConfig c = small_config();
  c.layers = 4;
  const kernels::Backend& be = kernels::cpu_backend();
  const int B = 2, T = 16;
  for (gpt::Recompute mode : {gpt::Recompute::Gelu, gpt::Recompute::Full}) {
    auto run = [&](bool pooled) {
      gpt::ShardSpec sa, sb;
      sa.first_layer = 1, sa.num_layers = 2, sa.has_embedding = false, sa.has_head = false;
      sb.first_layer = 3, sb.num_layers = 1, sb.has_embedding = false, sb.has_head = false;
      gpt::Model a(c, be, true, sa), b(c, be, true, sb);
      auto pool = std::make_shared<gpt::ActivationPool>(be);
      for (gpt::Model* m : {&a, &b}) {
        m->set_recompute(mode);
        if (pooled) m->set_activation_pool(pool), m->add_pool_sizes(B, T);
        m->init(3);
        m->zero_grad();
      }
      const size_t n = a.stream_rows(B, T) * (size_t)c.hidden;
      std::mt19937 rng(9);
      std::normal_distribution<float> g(0.f, 1.f);
      std::vector<float> x(n), dy(n);
      for (float& v : x) v = g(rng);
      for (float& v : dy) v = g(rng);
      // a forward, then b's forward and backward over the shared scratch, then a's backward
      for (gpt::Model* m : {&a, &b}) {
        m->set_activation_slot(0);
        std::copy(x.begin(), x.end(), m->stage_input(B, T));
        m->forward(nullptr, nullptr, B, T);
      }
      gpt::BackwardOptions o;
      o.output_grad = dy.data();
      b.backward(o);
      a.backward(o);
      std::vector<float> grads(a.num_params() + b.num_params());
      a.copy_grads_to_host(grads.data());
      b.copy_grads_to_host(grads.data() + a.num_params());
      return grads;
    };
    BOOST_TEST(run(false) == run(true), "recompute " << gpt::recompute_name(mode));
  }
}

// A ZeRO-3 piece (ShardSpec::lent_params / lent_grads) allocates no flat buffers: a model that fits a rank only
// sharded is never held whole. Its shard's init values are the whole model's, drawn for any range alone (a TP piece's
// too), and it refuses to run, or to take storage that does not lend what it lacks, before it has its units.
BOOST_AUTO_TEST_CASE(lent_piece_holds_no_flat_buffers_and_inits_any_range) {
  const auto cfg = small_config();
  gpt::ShardSpec lent_spec;
  lent_spec.lent_params = lent_spec.lent_grads = true;
  gpt::Model lent(cfg, kernels::cpu_backend(), true, lent_spec);
  BOOST_TEST(lent.params() == nullptr);
  BOOST_TEST(lent.grads() == nullptr);
  BOOST_CHECK_THROW(lent.init(5), RuntimeError);
  const Batch batch(cfg);
  BOOST_CHECK_THROW(lent.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T), RuntimeError);
  gpt::UnitStorage grads_only;
  std::vector<float> grads(lent.num_params());
  grads_only.acquire_grads = [&](int) { return grads.data(); };
  grads_only.grads_done = [](int) {};
  BOOST_CHECK_THROW(lent.set_unit_storage(grads_only), RuntimeError);

  gpt::TpComm unused;  // a TP piece's init needs no collective; the model only checks they exist
  unused.all_reduce = [](float*, size_t) {};
  unused.all_gather = [](float*, const float*, size_t) {};
  unused.reduce_scatter = [](float*, const float*, size_t) {};
  for (int tp : {1, 2}) {
    gpt::ShardSpec spec;
    spec.tp = tp;
    spec.tp_rank = tp - 1;
    gpt::Model resident(cfg, kernels::cpu_backend(), true, spec, unused);
    resident.init(5);
    std::vector<float> want(resident.num_params());
    resident.copy_params_to_host(want.data());
    spec.lent_params = spec.lent_grads = true;
    const gpt::Model piece(cfg, kernels::cpu_backend(), true, spec, unused);
    const size_t n = piece.num_params();
    // ranges that start and end inside tensors, at odd elements (Box-Muller pairs), across several tensors
    for (auto [first, count] : std::vector<std::pair<size_t, size_t>>{{0, n}, {1, 7}, {n / 3 + 1, n / 3}, {n - 5, 5}}) {
      std::vector<float> got(count, -1.0f);
      piece.init_values(5, first, count, got.data());
      BOOST_TEST(std::equal(got.begin(), got.end(), want.begin() + static_cast<std::ptrdiff_t>(first)),
                 "tp " << tp << " range [" << first << ", " << first + count << ")");
    }
    std::vector<float> past(2);
    BOOST_CHECK_THROW(piece.init_values(5, n - 1, 2, past.data()), RuntimeError);
  }
}
