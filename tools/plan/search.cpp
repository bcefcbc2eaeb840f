// Exhaustive enumeration of parallel plans and the [plan] constraints that restrict it.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <parallel/algorithm>

#include "cairn/error.h"
#include "cairn/log.h"
#include "plan.h"

namespace cairn::plan {

using costmodel::Evaluation;
using costmodel::Plan;
using costmodel::Recompute;

namespace {

constexpr double kProgressEverySeconds = 5.0;

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i) continue;
    d.push_back(i);
    if (i != n / i) d.push_back(n / i);
  }
  std::sort(d.begin(), d.end());
  return d;
}

bool allowed(const std::vector<int64_t>& list, int64_t x) {
  return list.empty() || std::find(list.begin(), list.end(), x) != list.end();
}

struct Layout {
  int64_t dp, tp, pp, cp;
};

// Every (v, mb, zero, recompute, sp, tp_overlap, cp_comm) of one (dp, tp, pp, cp) layout. Interleaving is limited
// only by the layers (one per virtual stage at least); uneven splits are balanced by the cost model. visit(plan) is
// called for each plan, done_v(n) after each interleaving factor with the plans it had.
template <class Visit, class DoneV>
void for_each_plan(const costmodel::ModelSpec& m, const costmodel::Cluster& c, int64_t global_batch,
                   const Constraints& k, const Layout& l, const std::vector<Recompute>& recomputes,
                   const std::vector<int64_t>& zeros, Visit&& visit, DoneV&& done_v) {
  const int64_t per_rank = global_batch / l.dp;
  std::vector<int64_t> vs;
  if (!k.v.empty()) vs = k.v;
  else
    for (int64_t v = 1; v * l.pp <= m.layers && (k.max_v <= 0 || v <= k.max_v); ++v)
      if (v == 1 || l.pp > 1) vs.push_back(v);
  std::vector<int64_t> mbs;
  for (int64_t mb : divisors(per_rank))
    if (allowed(k.mb, mb) && (!k.mb.empty() || mb <= k.max_mb)) mbs.push_back(mb);
  std::vector<int> sps = k.sp;
  if (sps.empty()) sps = l.tp > 1 ? std::vector<int>{0, 1} : std::vector<int>{0};
  std::vector<int> cp_comms = l.cp > 1 ? k.cp_comm : std::vector<int>{0};  // how K/V move means nothing at cp = 1
  if (cp_comms.empty()) cp_comms = {0, 1};
  for (int64_t v : vs) {
    size_t n = 0;
    for (int64_t mb : mbs) {
      // The interleaved schedule needs micro-batches divisible by pp: skip what the model would reject.
      if (v > 1 && k.v.empty() && (per_rank / mb) % l.pp != 0) continue;
      for (int64_t zero : zeros) {
        // ZeRO-2/3 with pipeline stages are priced (as FSDP) but searched only when asked ([plan] zero): pipelined
        // Megatron runs shard the optimizer alone (ZeRO-1), and the default search stays the size it was.
        if (zero >= 2 && l.pp > 1 && k.zero.empty()) continue;
        for (Recompute rc : recomputes)
          for (int sp : sps) {
            std::vector<int> overlaps = k.tp_overlap;
            if (overlaps.empty())
              overlaps = sp && l.tp <= c.gpus_per_node ? std::vector<int>{0, 1} : std::vector<int>{0};
            for (int ov : overlaps)
              for (int cc : cp_comms) {
                Plan p;
                p.dp = int(l.dp);
                p.tp = int(l.tp);
                p.pp = int(l.pp);
                p.cp = int(l.cp);
                p.v = int(v);
                p.mb = int(mb);
                p.zero = int(zero);
                p.recompute = rc;
                p.sp = sp != 0;
                p.tp_overlap = ov != 0;
                p.cp_allgather = cc != 0;
                // The split the trainer will run: [parallel] stage_layers, where its length is this plan's pp*v
                // (the search priced it balanced, and --explain and the trainer used it: 37 % apart for [2, 10]).
                if (int64_t(k.stage_layers.size()) == l.pp * v) p.stage_layers = k.stage_layers;
                visit(p);
                ++n;
              }
          }
      }
    }
    done_v(n);
  }
}

}  // namespace

PlanRow plan_row(const Evaluation& e) {
  constexpr double G = costmodel::kGiB;
  PlanRow r;
  r.plan = e.plan;
  r.reject = e.reject;
  r.microbatches = e.b.microbatches;
  r.step_time_s = e.step_time_s;
  r.tokens_per_s = e.tokens_per_s;
  r.tflops_per_gpu = e.tflops_per_gpu;
  r.hw_tflops_per_gpu = e.hw_tflops_per_gpu;
  r.mfu = e.mfu;
  r.hfu = e.hfu;
  r.memory_gib = e.memory_gib;
  r.time_gemm = e.b.gemm;
  r.time_attention = e.b.attention;
  r.time_memory_bound = e.b.memory_bound;
  r.time_recompute = e.b.recompute;
  r.time_tp_comm = e.b.tp_comm;
  r.time_cp_comm = e.b.cp_comm;
  r.time_overlap_slowdown = e.b.overlap_slowdown;
  r.time_pp_p2p = e.b.pp_p2p;
  r.time_bubble = e.b.bubble;
  r.time_dp_comm = e.b.dp_comm;
  r.time_dp_exposed = e.b.dp_exposed;
  r.time_optimizer = e.b.optimizer;
  r.time_cross_entropy = e.b.cross_entropy;
  r.time_fp8_cast = e.b.fp8_cast;
  r.mem_weights = e.b.mem_weights / G;
  r.mem_grads = e.b.mem_grads / G;
  r.mem_optimizer = e.b.mem_optimizer / G;
  r.mem_activations = e.b.mem_activations / G;
  r.mem_logits = e.b.mem_logits / G;
  r.mem_buffers = e.b.mem_buffers / G;
  return r;
}

Constraints constraints_from_section(const PlanSection& s) {
  Constraints k;
  // An unset constraint (nullopt) searches every valid value: the empty list.
  auto ints = [](const PlanSection::IntChoice& choice, const char* key, int64_t lo, int64_t hi) {
    std::vector<int64_t> out = choice.value_or(std::vector<int64_t>{});
    for (int64_t x : out)
      if (x < lo || x > hi)
        throw UsageError(strprintf("%s.%s = %lld is out of range", PlanSection::kSection, key, (long long)x));
    return out;
  };
  auto on_off = [](const PlanSection::StringChoice& choice) {
    std::vector<int> out;
    for (const auto& x : choice.value_or(std::vector<std::string>{})) out.push_back(x == "on" ? 1 : 0);
    return out;
  };
  constexpr int64_t kAny = std::numeric_limits<int64_t>::max();
  k.dp = ints(s.dp, "dp", 1, kAny);
  k.tp = ints(s.tp, "tp", 1, kAny);
  k.pp = ints(s.pp, "pp", 1, kAny);
  k.v = ints(s.v, "v", 1, kAny);
  k.mb = ints(s.mb, "mb", 1, kAny);
  k.zero = ints(s.zero, "zero", 0, 3);
  k.cp = ints(s.cp, "cp", 1, kAny);
  for (const auto& x : s.recompute.value_or(std::vector<std::string>{}))
    k.recompute.push_back(costmodel::parse_recompute(x));
  k.sp = on_off(s.sp);
  k.tp_overlap = on_off(s.tp_overlap);
  for (const auto& x : s.cp_comm.value_or(std::vector<std::string>{})) k.cp_comm.push_back(x == "allgather" ? 1 : 0);
  k.cp_min_seq = s.cp_min_seq;
  k.max_mb = s.max_mb;
  k.max_tp = s.max_tp;
  k.max_v = s.max_v;
  k.detailed = size_t(s.top_k);
  return k;
}

Constraints constraints_from_config(const Config& cfg) {
  Constraints k = constraints_from_section(read_section<PlanSection>(cfg));
  k.stage_layers = costmodel::stage_layers_of(read_section<ParallelSection>(cfg));
  return k;
}

int64_t global_batch_from_sections(const PlanSection& plan, const TrainSection& train) {
  const int64_t b = plan.global_batch > 0 ? plan.global_batch : train.global_batch;
  if (b <= 0) throw UsageError("global batch is 0: set [train] global_batch (sequences)");
  return b;
}

SearchResult search(const costmodel::ModelSpec& m, const costmodel::Cluster& c, int64_t global_batch,
                    const costmodel::Assumptions& a, const Constraints& k) {
  const auto t0 = std::chrono::steady_clock::now();
  // Freed memory stays in the heap: each plan's per-stage vectors (thousands of entries for a deep model) are freed
  // and made again by the next plan, and glibc gave the space back to the kernel every time the heap's top passed
  // its 128 KiB threshold; on a VM each madvise's TLB shootdown and the faults that follow cost more than the
  // pricing (3000 layers on 64 GPUs: 6.5 CPU-seconds, 3.4 of them in the kernel; 3.2 and 0.25 with this).
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  SearchResult r;
  const int64_t world = c.world();
  std::vector<Recompute> recomputes = k.recompute;
  if (recomputes.empty()) recomputes = {Recompute::None, Recompute::Selective, Recompute::Full};
  std::vector<int64_t> zeros = k.zero.empty() ? std::vector<int64_t>{0, 1, 2, 3} : k.zero;
  // Context parallelism only pays off for long sequences; below cp_min_seq the search keeps cp = 1. Without a fused
  // attention kernel the model rejects every cp > 1 plan: not enumerated (1.08 M of a 1T model's plans on 3072 GPUs
  // at 32k tokens, 5-7 s).
  std::vector<int64_t> cps = k.cp;
  if (cps.empty())
    for (int64_t cp : divisors(world))
      if (cp == 1 || (a.flash_attention && m.seq_len >= k.cp_min_seq && m.seq_len % (2 * cp) == 0)) cps.push_back(cp);
  std::vector<Layout> layouts;
  for (int64_t cp : cps) {
    if (world % cp != 0) continue;
    for (int64_t tp : divisors(world / cp)) {
      if (!allowed(k.tp, tp)) continue;
      if (k.tp.empty() && ((k.max_tp > 0 && tp > k.max_tp) || m.heads % tp != 0)) continue;
      for (int64_t pp : divisors(world / (cp * tp))) {
        if (!allowed(k.pp, pp) || pp > m.layers) continue;
        const int64_t dp = world / (cp * tp * pp);
        if (!allowed(k.dp, dp) || global_batch % dp != 0) continue;
        layouts.push_back({dp, tp, pp, cp});
      }
    }
  }
  // The layouts are independent: their plans are counted first, each layout gets its slice of one array of rows
  // (allocated once, in huge pages: a million rows of 288 bytes), and the slices are priced on every core. Rows sit
  // in enumeration order, so the ranking does not depend on the thread count.
  std::vector<size_t> first(layouts.size() + 1, 0);
  for (size_t i = 0; i < layouts.size(); ++i) {
    size_t n = 0;
    for_each_plan(
        m, c, global_batch, k, layouts[i], recomputes, zeros, [&](const Plan&) { ++n; }, [](size_t) {});
    first[i + 1] = first[i] + n;
  }
  const size_t total = first.back();
  if (total > std::numeric_limits<uint32_t>::max())
    throw UsageError(strprintf("the search would price %zu plans, more than it can rank; narrow it with [plan] "
                               "tp, pp, v, mb or max_v",
                               total));
  r.rows = HugePageArray<PlanRow>(total);
  // Each row's ranking key is written beside it while the slices are priced: feasible plans fastest first, rejected
  // ones after (over memory first, then the rest), smallest memory first; ties broken by the row's index, which
  // makes the order total, so any sort algorithm (and thread count) gives the same ranking.
  struct Key {
    double value;
    uint32_t index;
    int32_t group;  // 0 feasible, 1 over memory, 2 rejected otherwise
  };
  HugePageArray<Key> keys(total);
  std::vector<std::exception_ptr> errors(layouts.size());
  const auto n_layouts = static_cast<std::ptrdiff_t>(layouts.size());
  // Progress every few seconds (most searches end well before the first): layouts done of all, plans so far. Plans
  // are counted as each interleaving factor's are priced: one layout of a deep model takes minutes (10,000 layers on
  // pp = 2: 5,000 values of v, each pricing 5,000-stage pipelines), and a count of finished layouts stood still.
  std::mutex progress_mutex;
  size_t layouts_done = 0, plans_done = 0;
  double next_report = kProgressEverySeconds;
  auto report = [&](size_t new_plans, bool layout_done) {
    std::lock_guard<std::mutex> lk(progress_mutex);
    plans_done += new_plans;
    layouts_done += layout_done;
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (t >= next_report && layouts_done < layouts.size()) {
      CAIRN_LOG_INFO("searched %zu of %zu layouts (%zu of %zu plans) in %.0f s%s", layouts_done, layouts.size(),
                     plans_done, total, t,
                     k.max_v <= 0 && m.layers > 256 ? "; plan.max_v bounds the interleavings a deep model tries" : "");
      next_report = t + kProgressEverySeconds;
    }
  };
#pragma omp parallel for schedule(dynamic, 1)
  for (std::ptrdiff_t i = 0; i < n_layouts; ++i) {
    try {
      size_t row = first[size_t(i)];
      costmodel::EvaluationCache cache;
      for_each_plan(
          m, c, global_batch, k, layouts[size_t(i)], recomputes, zeros,
          [&](const Plan& p) {
            PlanRow& e = r.rows[row];
            e = plan_row(costmodel::evaluate(m, c, p, global_batch, a, false, &cache));
            const int32_t group = e.feasible() ? 0 : e.reject == costmodel::Reject::kMemory ? 1 : 2;
            keys[row] = {group == 0 ? e.step_time_s : e.memory_gib, uint32_t(row), group};
            ++row;
          },
          [&](size_t n) { report(n, false); });
    } catch (...) {
      errors[size_t(i)] = std::current_exception();  // an exception must not leave the parallel region
    }
    report(0, true);
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  // On every core (libstdc++'s parallel mode, over OpenMP): a million keys took a tenth of a second on one.
  __gnu_parallel::sort(keys.begin(), keys.end(), [](const Key& x, const Key& y) {
    if (x.group != y.group) return x.group < y.group;
    if (x.value != y.value) return x.value < y.value;
    return x.index < y.index;
  });
  r.order.resize(total);
  for (size_t i = 0; i < total; ++i) {
    r.order[i] = keys[i].index;
    r.feasible += keys[i].group == 0;
  }
  // The plans the tool shows (table, plans.json, best.toml) priced again whole: the same evaluation, with its detail.
  for (size_t i = 0; i < std::min(std::max<size_t>(k.detailed, 1), r.size()); ++i)
    r.top.push_back(costmodel::evaluate(m, c, r.ranked(i).plan, global_batch, a, false));
  r.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<std::string> plan_flag_to_sets(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  auto flush = [&]() {
    size_t a = cur.find_first_not_of(" \t"), b = cur.find_last_not_of(" \t");
    if (a != std::string::npos) {
      std::string item = cur.substr(a, b - a + 1);
      if (item.find('=') == std::string::npos)
        throw UsageError("--plan expects key=value pairs like dp=8,tp=4,recompute=full; got \"" + item + "\"");
      // Lists of bare words ([selective,full]) become TOML strings; numbers stay numbers.
      const size_t eq = item.find('=');
      std::string value = item.substr(eq + 1);
      if (value.size() >= 2 && value.front() == '[' && value.back() == ']') {
        std::string inner = value.substr(1, value.size() - 2), list = "[";
        size_t pos = 0;
        while (pos <= inner.size()) {
          size_t comma = inner.find(',', pos);
          if (comma == std::string::npos) comma = inner.size();
          std::string e = inner.substr(pos, comma - pos);
          e.erase(0, e.find_first_not_of(" \t"));
          e.erase(e.find_last_not_of(" \t") + 1);
          if (!e.empty()) {
            const bool number = e.find_first_not_of("0123456789+-.eE") == std::string::npos;
            const bool quoted = e.front() == '"';
            if (list.size() > 1) list.push_back(',');
            if (!number && !quoted) list.push_back('"');
            list.append(e);
            if (!number && !quoted) list.push_back('"');
          }
          pos = comma + 1;
        }
        value = list + "]";
      }
      out.push_back("plan." + item.substr(0, eq) + "=" + value);
    }
    cur.clear();
  };
  for (char ch : text) {
    if (ch == '[') ++depth;
    if (ch == ']') --depth;
    if (ch == ',' && depth == 0) flush();
    else cur += ch;
  }
  flush();
  return out;
}

}  // namespace cairn::plan
