// Batched, data-parallel scoring of requests with a forward-only model, and harness-style rolling windows.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>

#include "cairn/error.h"
#include "cairn/kernels/backend.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "eval.h"

namespace cairn::eval {

std::vector<RollingWindow> rolling_windows(int64_t n, int max_seq_len, int context_len) {
  if (context_len < 1 || context_len > max_seq_len)
    throw UsageError(strprintf("rolling_context = %d must be in [1, context = %d]", context_len, max_seq_len));
  std::vector<RollingWindow> out;
  if (n <= 0) return out;
  const int64_t T = max_seq_len;
  const int64_t pred_len = T - context_len + 1;
  // First window: the prefix token then the document, every position predicted.
  int64_t first = std::min(T, n);
  out.push_back({-1, static_cast<int>(first), static_cast<int>(first)});
  int64_t predicted = first;
  while (predicted < n) {
    int64_t k = std::min(n - predicted, pred_len);
    int64_t end = predicted + k;
    // Inputs doc[end-T-1, end-1): as much context as fits before the k predicted tokens.
    out.push_back({end - T - 1, static_cast<int>(T), static_cast<int>(k)});
    predicted += k;
  }
  return out;
}

namespace {

// A device (or host, on CPU backends) int32 buffer from the backend, freed with it.
struct BackendInts {
  const kernels::Backend& be;
  int32_t* ptr = nullptr;
  size_t capacity = 0;
  explicit BackendInts(const kernels::Backend& b) : be(b) {}
  ~BackendInts() { be.free(ptr); }
  BackendInts(const BackendInts&) = delete;
  BackendInts& operator=(const BackendInts&) = delete;
  int32_t* get(size_t n) {
    if (n > capacity) {
      be.free(ptr);
      ptr = nullptr;
      ptr = static_cast<int32_t*>(be.alloc(n * sizeof(int32_t)));
      capacity = n;
    }
    return ptr;
  }
};

}  // namespace

std::vector<Score> score_requests(gpt::Model& model, const RequestSet& requests, int batch_size, ScoreStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  const size_t n = requests.lengths.size();
  const int ctx = model.config().seq_len;
  for (size_t i = 0; i < n; ++i) {
    if (requests.lengths[i] <= 0 || requests.lengths[i] > ctx)
      throw RuntimeError(strprintf("internal: request %zu has length %d outside [1, %d]", i, requests.lengths[i], ctx));
  }
  // Longest first (ties by index) so each batch pads little; the order is a function of the requests only.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests.lengths[a] > requests.lengths[b]; });
  const size_t B = static_cast<size_t>(std::max(1, batch_size));
  const size_t num_batches = (n + B - 1) / B;
  const int rank = mpi::rank(), world = mpi::size();

  const gpt::GptConfig& gc = model.config();
  const int V = gc.vocab_real, Vp = gc.vocab;
  const kernels::Backend& be = model.backend();
  std::vector<int32_t> inputs, targets;
  std::vector<int32_t> argmax;
  BackendInts argmax_buffer(be);
  // Local results: (request index, loglik, tokens, correct) for the batches this rank owns.
  std::vector<int64_t> local_idx, local_tok, local_cor;
  std::vector<double> local_ll;
  int64_t forwards = 0, scored = 0, processed = 0;
  // Rank 0 shows how far the task is (its batches stand for every rank's: they are dealt round-robin); a task of
  // thousands of requests ran for minutes with no word.
  std::optional<Progress> progress;
  if (rank == 0 && !requests.label.empty()) progress.emplace(requests.label, n, "requests");
  for (size_t b = static_cast<size_t>(rank); b < num_batches; b += static_cast<size_t>(world)) {
    const size_t lo = b * B, hi = std::min(n, lo + B);
    if (progress) progress->update(lo);
    int rows = static_cast<int>(hi - lo);
    int T = requests.lengths[order[lo]];
    inputs.assign(static_cast<size_t>(rows) * T, 0);
    targets.assign(static_cast<size_t>(rows) * T, -1);
    for (int r = 0; r < rows; ++r) {
      size_t idx = order[lo + r];
      // Right padding: causal attention keeps padded tails from touching real positions.
      requests.fill(idx, inputs.data() + static_cast<size_t>(r) * T, targets.data() + static_cast<size_t>(r) * T);
    }
    model.forward(inputs.data(), targets.data(), rows, T);
    ++forwards;
    processed += static_cast<int64_t>(rows) * T;
    const float* losses = model.position_losses();
    // The argmax runs where the logits are: a GPU returns one int per row, not a row of Vp floats. The rows are the
    // scored positions in order (the head ran there only: Model::set_head_targets_only), or every position.
    const size_t positions = static_cast<size_t>(rows) * T;
    const int logit_rows = model.logit_rows();
    const bool every_position = static_cast<size_t>(logit_rows) == positions;
    argmax.resize(static_cast<size_t>(logit_rows));
    if (logit_rows > 0) {
      int32_t* dev_argmax = argmax_buffer.get(static_cast<size_t>(logit_rows));
      be.argmax_rows(dev_argmax, model.logits(), logit_rows, V, Vp);
      be.copy_to_host(argmax.data(), dev_argmax, static_cast<size_t>(logit_rows) * sizeof(int32_t));
    }
    size_t logit_row = 0;  // the next scored position's row of the logits
    for (int r = 0; r < rows; ++r) {
      double ll = 0;
      int64_t tok = 0, cor = 0;
      // Padding past the request's length has no target, so no logits row either.
      for (int t = 0; t < requests.lengths[order[lo + r]]; ++t) {
        size_t p = static_cast<size_t>(r) * T + t;
        if (targets[p] < 0) continue;
        size_t row = every_position ? p : logit_row++;
        ll -= static_cast<double>(losses[p]);
        ++tok;
        if (argmax[row] == targets[p]) ++cor;
      }
      local_idx.push_back(static_cast<int64_t>(order[lo + r]));
      local_ll.push_back(ll);
      local_tok.push_back(tok);
      local_cor.push_back(cor);
      scored += tok;
    }
  }

  if (progress) progress->finish();
  std::vector<Score> out(n);
  auto place = [&](const std::vector<int64_t>& idx, const std::vector<double>& ll, const std::vector<int64_t>& tok,
                   const std::vector<int64_t>& cor) {
    for (size_t k = 0; k < idx.size(); ++k) out[static_cast<size_t>(idx[k])] = {ll[k], tok[k], cor[k]};
  };
  if (world == 1) {
    place(local_idx, local_ll, local_tok, local_cor);
  } else {
    // Gather every rank's per-request values to every rank; sums are then taken in request order.
    std::vector<int> counts = mpi::allgather_value(static_cast<int>(local_idx.size()));
    std::vector<int> displs(world, 0);
    for (int r = 1; r < world; ++r) displs[r] = displs[r - 1] + counts[r - 1];
    size_t total = static_cast<size_t>(displs[world - 1]) + static_cast<size_t>(counts[world - 1]);
    std::vector<int64_t> idx(total), tok(total), cor(total);
    std::vector<double> ll(total);
    auto gather = [&](const auto& local, auto& all) {
      using T = typename std::decay_t<decltype(local)>::value_type;
      mpi::check(MPI_Allgatherv(local.data(), static_cast<int>(local.size()), mpi::datatype<T>(), all.data(),
                                counts.data(), displs.data(), mpi::datatype<T>(), MPI_COMM_WORLD),
                 "MPI_Allgatherv");
    };
    gather(local_idx, idx);
    gather(local_ll, ll);
    gather(local_tok, tok);
    gather(local_cor, cor);
    if (total != n) throw RuntimeError("internal: gathered scores do not cover every request");
    place(idx, ll, tok, cor);
    scored = mpi::allreduce(scored);
    processed = mpi::allreduce(processed);
  }
  if (stats) {
    stats->forwards += forwards;
    stats->tokens_scored += scored;
    stats->tokens_processed += processed;
    stats->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return out;
}

}  // namespace cairn::eval
