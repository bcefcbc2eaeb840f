// cairn-plan's body: search or explain, then the ranked table, plans.json, plans.h5 and best.toml.
#include "plan.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>

#include "cairn/cli.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/h5.h"
#include "cairn/h5_impl.h"
#include "cairn/json_text.h"
#include "cairn/log.h"
#include "cairn/provenance.h"
#include "cairn/shards.h"
#include "cairn/tokenizer.h"

namespace cairn::plan {

using namespace costmodel;

namespace {

// A parameter count for the table's header and the log, four digits in B from a billion, else in M (a CPU model's
// 0.0008507 B parameters read as nothing).
std::string short_param_count(double n) {
  return n >= 1e9 ? strprintf("%.4g B", n / 1e9) : strprintf("%.4g M", n / 1e6);
}

std::string table(const std::vector<Evaluation>& plans, size_t k) {
  // cpx: context parallelism's K/V exchange, p2p (ring) or ag (all-gather); "-" without context parallelism
  std::string out = strprintf("%4s %5s %3s %3s %3s %3s %2s %3s %4s %9s %3s %4s %10s %12s %8s %6s %6s %8s\n", "rank",
                              "dp", "tp", "pp", "cp", "cpx", "v", "mb", "zero", "recompute", "sp", "tpov", "step_s",
                              "tokens/s", "TFLOP/s", "MFU", "HFU", "mem_GiB");
  for (size_t i = 0; i < std::min(k, plans.size()); ++i) {
    const Evaluation& e = plans[i];
    if (!e.feasible()) break;
    const Plan& p = e.plan;
    const char* cpx = p.cp == 1 ? "-" : p.cp_allgather ? "ag" : "p2p";
    // Below 10 TFLOP/s (a CPU "cluster") three significant digits: 0.024 printed as 0.0 beside an MFU of 60 %.
    const std::string tflops =
        e.tflops_per_gpu >= 10 ? strprintf("%.1f", e.tflops_per_gpu) : strprintf("%.3g", e.tflops_per_gpu);
    out += strprintf("%4zu %5d %3d %3d %3d %3s %2d %3d %4d %9s %3s %4s %10.4g %12.0f %8s %5.1f%% %5.1f%% %8.2f\n",
                     i + 1, p.dp, p.tp, p.pp, p.cp, cpx, p.v, p.mb, p.zero, recompute_name(p.recompute),
                     p.sp ? "on" : "off", p.tp_overlap ? "on" : "off", e.step_time_s, e.tokens_per_s, tflops.c_str(),
                     100 * e.mfu, 100 * e.hfu, e.memory_gib);
  }
  return out;
}

json model_json(const ModelSpec& m) {
  const ParamCounts pc = parameter_counts(m);
  const FlopsPerToken fl = flops_per_token(m);
  return {{"architecture", m.arch == Arch::Gpt ? "gpt" : "llama"},
          {"layers", m.layers},
          {"hidden", m.hidden},
          {"heads", m.heads},
          {"kv_heads", m.kv_heads},
          {"ffn_hidden", m.ffn_hidden},
          {"seq_len", m.seq_len},
          {"vocab", m.vocab},
          {"tied_embeddings", m.tied_embeddings},
          {"parameters", pc.total},
          {"model_flops_per_token", fl.model_train},
          {"narayanan_flops_per_token", narayanan_flops_per_token(m)}};
}

json cluster_json(const Cluster& c) {
  return {{"name", c.name},
          {"nodes", c.nodes},
          {"gpus_per_node", c.gpus_per_node},
          {"peak_tflops", c.peak_tflops},
          {"hbm_gib", c.hbm_gib},
          {"hbm_gbps", c.hbm_gbps},
          {"fabric", c.fabric_path}};
}

void write_h5(const std::string& path, const ModelSpec& m, const Cluster& c, int64_t global_batch,
              const SearchResult& r) {
  AtomicFile af(path);
  {
    h5::File f = h5::File::create(af.temp_path());
    h5::write_provenance(f);
    f.set_attr("global_batch", int64_t(global_batch));
    f.set_attr("plans_evaluated", uint64_t(r.size()));
    f.set_attr("plans_feasible", uint64_t(r.feasible));
    f.set_attr("search_seconds", r.elapsed_s);
    f.set_attr("model", json_text(model_json(m)));
    f.set_attr("cluster", json_text(cluster_json(c)));
    h5::Group g = f.create_group("plans");
    g.set_attr("order", "feasible plans fastest first, then rejected plans");
    std::string codes;
    for (int i = 0; i <= int(Reject::kTpOverlap); ++i)  // the enum's last value: every code /plans/reject holds
      codes += strprintf("%s%d=%s", i ? "," : "", i, reject_name(Reject(i)));
    g.set_attr("reject_codes", codes);
    g.set_attr("recompute_codes", "0=none,1=selective,2=full");
    g.set_attr("units", "times in seconds per step, memory in GiB per device");
    // One dataset per column, filled a block of ranked plans at a time: each row is read once, through the ranking
    // (the rows stay in enumeration order), into a small buffer per column that stays in cache.
    struct IntColumn {
      const char* name;
      int32_t (*get)(const PlanRow&);
    };
    struct DoubleColumn {
      const char* name;
      double PlanRow::*field;
    };
    static const IntColumn kInts[] = {
        {"dp", [](const PlanRow& e) { return int32_t(e.plan.dp); }},
        {"tp", [](const PlanRow& e) { return int32_t(e.plan.tp); }},
        {"pp", [](const PlanRow& e) { return int32_t(e.plan.pp); }},
        {"v", [](const PlanRow& e) { return int32_t(e.plan.v); }},
        {"mb", [](const PlanRow& e) { return int32_t(e.plan.mb); }},
        {"zero", [](const PlanRow& e) { return int32_t(e.plan.zero); }},
        {"recompute", [](const PlanRow& e) { return int32_t(int(e.plan.recompute)); }},
        {"sp", [](const PlanRow& e) { return int32_t(int(e.plan.sp)); }},
        {"cp", [](const PlanRow& e) { return int32_t(e.plan.cp); }},
        {"tp_overlap", [](const PlanRow& e) { return int32_t(int(e.plan.tp_overlap)); }},
        {"cp_allgather", [](const PlanRow& e) { return int32_t(int(e.plan.cp_allgather)); }},
        {"feasible", [](const PlanRow& e) { return int32_t(int(e.feasible())); }},
        {"reject", [](const PlanRow& e) { return int32_t(int(e.reject)); }},
        {"microbatches", [](const PlanRow& e) { return int32_t(e.microbatches); }},
    };
    static const DoubleColumn kDoubles[] = {
        {"step_time_s", &PlanRow::step_time_s},
        {"tokens_per_s", &PlanRow::tokens_per_s},
        {"tflops_per_gpu", &PlanRow::tflops_per_gpu},
        {"hw_tflops_per_gpu", &PlanRow::hw_tflops_per_gpu},
        {"mfu", &PlanRow::mfu},
        {"hfu", &PlanRow::hfu},
        {"memory_gib", &PlanRow::memory_gib},
        {"time_gemm", &PlanRow::time_gemm},
        {"time_attention", &PlanRow::time_attention},
        {"time_memory_bound", &PlanRow::time_memory_bound},
        {"time_recompute", &PlanRow::time_recompute},
        {"time_tp_comm", &PlanRow::time_tp_comm},
        {"time_cp_comm", &PlanRow::time_cp_comm},
        {"time_overlap_slowdown", &PlanRow::time_overlap_slowdown},
        {"time_pp_p2p", &PlanRow::time_pp_p2p},
        {"time_bubble", &PlanRow::time_bubble},
        {"time_dp_comm", &PlanRow::time_dp_comm},
        {"time_dp_exposed", &PlanRow::time_dp_exposed},
        {"time_optimizer", &PlanRow::time_optimizer},
        {"time_cross_entropy", &PlanRow::time_cross_entropy},
        {"time_fp8_cast", &PlanRow::time_fp8_cast},
        {"mem_weights", &PlanRow::mem_weights},
        {"mem_grads", &PlanRow::mem_grads},
        {"mem_optimizer", &PlanRow::mem_optimizer},
        {"mem_activations", &PlanRow::mem_activations},
        {"mem_logits", &PlanRow::mem_logits},
        {"mem_buffers", &PlanRow::mem_buffers},
    };
    constexpr size_t kInt = std::size(kInts), kDouble = std::size(kDoubles), kBlock = 8192;
    const size_t n = r.size();
    std::vector<h5::Dataset> int_sets, double_sets;
    for (const IntColumn& col : kInts)
      int_sets.emplace_back(h5::create_dataset_raw(g, col.name, h5::native_type<int32_t>(), {n}),
                            g.path() + "/" + col.name);
    for (const DoubleColumn& col : kDoubles)
      double_sets.emplace_back(h5::create_dataset_raw(g, col.name, h5::native_type<double>(), {n}),
                               g.path() + "/" + col.name);
    std::vector<int32_t> ints(kInt * kBlock);
    std::vector<double> doubles(kDouble * kBlock);
    for (size_t at = 0; at < n; at += kBlock) {
      const size_t count = std::min(kBlock, n - at);
      for (size_t i = 0; i < count; ++i) {
        if (i + 8 < count) __builtin_prefetch(&r.ranked(at + i + 8));  // the rows are read in a random order
        const PlanRow& e = r.ranked(at + i);
        for (size_t c = 0; c < kInt; ++c) ints[c * kBlock + i] = kInts[c].get(e);
        for (size_t c = 0; c < kDouble; ++c) doubles[c * kBlock + i] = e.*kDoubles[c].field;
      }
      for (size_t c = 0; c < kInt; ++c)
        h5::write_range_raw(int_sets[c], h5::native_type<int32_t>(), at, count, &ints[c * kBlock]);
      for (size_t c = 0; c < kDouble; ++c)
        h5::write_range_raw(double_sets[c], h5::native_type<double>(), at, count, &doubles[c * kBlock]);
    }
    f.close();
  }
  af.commit();
}

std::string best_toml(const Config& cfg, const Evaluation& e) {
  const Plan& p = e.plan;
  json t = {{"parallel",
             {{"dp", p.dp},
              {"tp", p.tp},
              {"pp", p.pp},
              {"v", p.v},
              {"mb", p.mb},
              {"zero", p.zero},
              {"recompute", recompute_name(p.recompute)},
              {"sp", p.sp ? "on" : "off"},
              {"cp", p.cp},
              {"cp_comm", p.cp_allgather ? "allgather" : "p2p"},
              {"tp_overlap", p.tp_overlap ? "on" : "off"}}}};
  // An uneven split (layers not divisible by pp*v) is written out: cairn-train runs exactly this one. So is any split
  // when the config sets [parallel] stage_layers: best.toml's then replaces it (one of another pp*v length, which the
  // search priced balanced, would otherwise reach the trainer beside this plan).
  const auto& sl = e.b.stage_layers;
  if (sl.size() > 1 && (std::adjacent_find(sl.begin(), sl.end(), std::not_equal_to<int>()) != sl.end() ||
                        !read_section<ParallelSection>(cfg).stage_layers.empty()))
    t["parallel"]["stage_layers"] = sl;
  // tp does not divide the vocabulary: the plan priced Megatron's padded size, and cairn-train needs it set.
  if (e.b.padded_vocab > 0) t["model"] = {{"vocab", e.b.padded_vocab}};
  std::string head =
      strprintf("# Best parallel plan: predicted %.4g s/step, %.4g tokens/s, MFU %.1f%%, %.2f GiB/device.\n",
                e.step_time_s, e.tokens_per_s, 100 * e.mfu, e.memory_gib) +
      provenance_comment_lines(cfg) +
      "# The effective config and the plans priced: plans.json beside this file.\n"
      "# Layer it after the experiment config: cairn-train --config exp.toml --config best.toml\n";
  if (e.b.padded_vocab > 0)
    head += strprintf("# [model] vocab is padded to %lld for tp = %d, as Megatron pads it (a multiple of 128 x tp); "
                      "the rows past the tokenizer's are never a target.\n",
                      (long long)e.b.padded_vocab, p.tp);
  return head + json_to_toml(t);
}

// The single plan of --explain: [plan] values (first of a list), else [parallel].
// The plan --explain prices: [parallel], overridden by each [plan] key. With `single`, a key listing several values is
// a usage error; without, its first value is taken (an example of the constraints, for messages).
Plan explain_plan(const PlanSection& s, const ParallelSection& parallel, int world, bool single = true) {
  Plan p = plan_from_section(parallel, world);
  // --explain prices one plan: a list (the search's constraint syntax) would be priced at its first value unsaid.
  auto one = [&](const char* key, size_t n, const std::string& values) {
    if (single && n > 1)
      throw UsageError(
          strprintf("--explain prices one plan: [plan] %s lists %zu values (%s); give one", key, n, values.c_str()));
  };
  auto first_int = [&](const char* key, const PlanSection::IntChoice& choice, int& out) {
    if (!choice || choice->empty()) return;
    one(key, choice->size(), json(*choice).dump());
    out = int(choice->front());
  };
  auto first_string = [&](const char* key, const PlanSection::StringChoice& choice) -> const std::string* {
    if (!choice || choice->empty()) return nullptr;
    one(key, choice->size(), json(*choice).dump());
    return &choice->front();
  };
  first_int("dp", s.dp, p.dp);
  first_int("tp", s.tp, p.tp);
  first_int("pp", s.pp, p.pp);
  first_int("v", s.v, p.v);
  first_int("mb", s.mb, p.mb);
  first_int("zero", s.zero, p.zero);
  if (const std::string* r = first_string("recompute", s.recompute)) p.recompute = parse_recompute(*r);
  if (const std::string* v = first_string("sp", s.sp)) p.sp = *v == "on";
  first_int("cp", s.cp, p.cp);
  if (const std::string* v = first_string("tp_overlap", s.tp_overlap)) p.tp_overlap = *v == "on";
  if (const std::string* v = first_string("cp_comm", s.cp_comm)) p.cp_allgather = *v == "allgather";
  if (!s.dp && parallel.dp <= 0) p.dp = std::max(1, world / std::max(1, p.tp * p.pp * p.cp));
  return p;
}

std::string reject_summary(const SearchResult& r) {
  std::map<std::string, size_t> counts;
  for (const auto& e : r.rows) counts[reject_name(e.reject)]++;
  std::string s;
  for (const auto& [k, n] : counts) s += strprintf("%s%s: %zu", s.empty() ? "" : ", ", k.c_str(), n);
  return s;
}

// A plan whose step is mostly attention is priced at the attention kernel's benchmark rate, which published
// long-context runs did not reach (docs/cost-model.md, "Long context": NeMo 24.03 and torchtitan up to 1.6x slower
// from 64k tokens on). Said on stderr unless the cluster's attention rate was learned from this site's runs.
void warn_if_attention_bound(const Cluster& c, const Assumptions& a, const Evaluation& e) {
  if (!a.flash_attention || c.attention_measured || !(e.step_time_s > 0)) return;
  const double share = e.b.attention / e.step_time_s;
  if (share < 0.4) return;
  CAIRN_LOG_WARN("attention is %.0f %% of the step of %s, priced at %.2f of peak, a kernel benchmark's rate; "
                 "published long-context runs were up to 1.6x slower (docs/cost-model.md, \"Long context\"): read "
                 "its speed as an upper bound, or learn the rate from this site's kernel-profiled runs (cairn-plan "
                 "calibrate --from-runs, which sets cluster.attention_measured)",
                 100 * share, plan_string(e.plan).c_str(), attention_efficiency(c, a.attention_kernel));
}

// Model FLOPs count full attention (Megatron's and torchtitan's MFU), while a causal fused kernel computes about half
// the scores: at long context the plan's MFU passes 100 % (Llama 2 7B at 2M tokens on A100: 100.6 %), which reads
// as a bug unless said.
void note_if_mfu_over_one(const Assumptions& a, const Evaluation& e) {
  if (!(e.mfu > 1.0)) return;
  CAIRN_LOG_INFO("MFU of %s is %.1f %%: model FLOPs count full attention (Megatron's and torchtitan's MFU)%s; HFU, "
                 "%.1f %%, counts what runs",
                 plan_string(e.plan).c_str(), 100 * e.mfu,
                 a.flash_attention && a.causal ? ", while the causal attention kernel computes about half the scores"
                                               : "",
                 100 * e.hfu);
}

}  // namespace

namespace {
// A cluster file that leaves out what sets the device (peak, memory and its bandwidth) is priced with the built-in
// defaults, an A100-80GB's: a forgotten hbm_gib in an H100 file would go unnoticed, so it is said.
void warn_cluster_defaults(const Config& cfg) {
  if (cfg.origin("cluster.name").kind == Origin::Default) return;  // no cluster given at all: the defaults are meant
  std::string left;
  // The device's own figures (bandwidths between devices often come from the sweep's fabric.toml instead).
  for (const char* key : {"peak_tflops", "hbm_gib", "hbm_gbps", "gpus_per_node"})
    if (cfg.origin(std::string("cluster.") + key).kind == Origin::Default)
      left += (left.empty() ? "" : ", ") + std::string(key);
  if (!left.empty())
    CAIRN_LOG_WARN("[cluster] %s not set: priced with the built-in defaults (an A100-80GB node's); set them for this "
                   "cluster (cairn-plan --print-config shows every value and where it came from)",
                   left.c_str());
}
}  // namespace

void resolve_model_vocab(Config& cfg) {
  if (read_section<ModelSection>(cfg).vocab != 0) return;
  // A pipeline plans before (or beside) cairn-reshard, so the dataset may not exist yet: its tokenizer, which
  // [data] names for the reshard stage, gives the same count. The planner stopped with "vocab is 0" instead, after a
  // pipeline's sweep had run for minutes.
  const DataSection data = read_section<DataSection>(cfg);
  const std::string dir = data.path.empty() ? join_path(run_dir(cfg), "data") : data.path;
  uint32_t ids = 0;
  std::string from;
  try {
    if (path_exists(join_path(dir, "index.json"))) {
      ids = shards::Dataset::open(dir).vocab_size();
      from = "the dataset \"" + dir + "\"";
    } else {
      ids = tokenizer::load_configured(data)->vocab_size();
      from = "[data] tokenizer = \"" + data.tokenizer + "\"";
    }
  } catch (const Error& e) {
    throw UsageError(std::string("[model] vocab = 0 takes the dataset's vocabulary, which cannot be read: ") +
                     e.what() + " (set model.vocab: the tokenizer's ids rounded up to a multiple of 64)");
  }
  const int64_t padded = (static_cast<int64_t>(ids) + 63) / 64 * 64;
  cfg.set("model.vocab", padded,
          Origin{Origin::Program,
                 strprintf("%s: %u ids, padded to a multiple of 64 as cairn-train pads them", from.c_str(), ids)});
  CAIRN_LOG_INFO("[model] vocab = %lld: %s has %u ids, padded to a multiple of 64 as cairn-train pads them",
                 static_cast<long long>(padded), from.c_str(), ids);
}

int run_plan(const Config& cfg, const RunOptions& opts) {
  warn_cluster_defaults(cfg);
  const auto plan = read_section<PlanSection>(cfg);
  const ModelSpec m = model_from_section(read_section<ModelSection>(cfg));
  const Cluster c = cluster_from_section(read_section<ClusterSection>(cfg));
  const Assumptions a = assumptions_from_section(plan);
  const int64_t global_batch = global_batch_from_sections(plan, read_section<TrainSection>(cfg));
  const ParamCounts pc = parameter_counts(m);
  CAIRN_LOG_INFO("model: %s, %s parameters, %.4g model FLOPs/token; cluster %s: %d x %d devices",
                 m.arch == Arch::Gpt ? "gpt" : "llama", short_param_count(double(pc.total)).c_str(),
                 flops_per_token(m).model_train, c.name.c_str(), c.nodes, c.gpus_per_node);
  const std::string out_dir = run_subdir(run_dir(cfg), "plan");

  if (opts.explain || plan.explain) {
    const Plan p = explain_plan(plan, read_section<ParallelSection>(cfg), c.world());
    const Evaluation e = evaluate(m, c, p, global_batch, a, true);
    (opts.json_path == "-" ? std::cerr : std::cout) << explain(m, c, e, global_batch, a);
    if (e.feasible()) warn_if_attention_bound(c, a, e);
    if (e.feasible()) note_if_mfu_over_one(a, e);
    std::cout.flush();
    json doc = {{"provenance", provenance().to_json()},
                {"model", model_json(m)},
                {"cluster", cluster_json(c)},
                {"global_batch", global_batch},
                {"plans", json::array({to_json(e)})}};
    if (!opts.json_path.empty()) write_json_output(opts.json_path, json_text(doc, 2));
    if (!e.feasible() && e.reject != Reject::kMemory)
      throw UsageError("plan " + plan_string(p) + " is invalid: " + e.reason);
    if (!e.feasible()) throw GateFailure("plan " + plan_string(p) + " does not fit: " + e.reason);
    return 0;
  }

  Constraints k = constraints_from_section(plan);
  k.stage_layers = costmodel::stage_layers_of(read_section<ParallelSection>(cfg));
  // cairn-train runs [train] micro_batch when it is set, whatever best.toml's [parallel] mb says: a plan with
  // another micro-batch would be one the trainer does not run (or refuses), so that size is the only one searched.
  const int64_t train_micro = read_section<TrainSection>(cfg).micro_batch;
  if (train_micro > 0 && k.mb.empty()) {
    k.mb = {train_micro};
    CAIRN_LOG_INFO("micro-batch fixed at %lld by [train] micro_batch (set [plan] mb to search others)",
                   static_cast<long long>(train_micro));
  }
  SearchResult r = search(m, c, global_batch, a, k);
  CAIRN_LOG_INFO("evaluated %zu plans (%zu feasible) in %.3f s", r.size(), r.feasible, r.elapsed_s);
  if (r.rows.empty()) {
    // Name a real reason: the plan the constraints' first values make, priced as --explain would price it.
    std::string example;
    try {
      const Evaluation e = evaluate(m, c, explain_plan(plan, read_section<ParallelSection>(cfg), c.world(), false),
                                    global_batch, a, true);
      if (!e.feasible()) example = "; e.g. " + plan_string(e.plan) + ": " + e.reason;
    } catch (const Error&) {
    }
    throw UsageError(strprintf("no plan is valid for %d devices, global batch %lld and the [plan] constraints "
                               "(dp x tp x pp x cp must equal the device count, TP divide heads = %lld, the global "
                               "batch be a multiple of dp x mb)%s",
                               c.world(), (long long)global_batch, (long long)m.heads, example.c_str()));
  }
  if (r.feasible == 0) {
    // Explain the closest candidate: the smallest-memory plan (rejected plans are sorted by it).
    Evaluation best = evaluate(m, c, r.top.front().plan, global_batch, a, true);
    if (best.reject != Reject::kMemory) {
      throw UsageError(strprintf("none of the %zu candidate plans is valid (%s); e.g. %s: %s", r.size(),
                                 reject_summary(r).c_str(), plan_string(best.plan).c_str(), best.reason.c_str()));
    }
    throw GateFailure(strprintf("no plan fits in memory (%zu evaluated: %s); the smallest, %s, %s", r.size(),
                                reject_summary(r).c_str(), plan_string(best.plan).c_str(), best.reason.c_str()));
  }
  // A ZeRO-3 winner is priced as the stack runs it: say which, since DeepSpeed's stage 3 is several times
  // slower than FSDP across nodes (Narayanan et al. 2021 Table 2; docs/cost-model.md section 3).
  const Evaluation& winner = r.top.front();
  if (winner.plan.zero >= 3 && c.nodes > 1)
    CAIRN_LOG_INFO("the best plan is ZeRO-3, priced as %s (plan.zero3_impl = %s; the others are fsdp, megatron, "
                   "deepspeed)",
                   costmodel::zero3_impl_stack(a.zero3), costmodel::zero3_impl_name(a.zero3));
  warn_if_attention_bound(c, a, winner);
  note_if_mfu_over_one(a, winner);
  // Priced consistently, but a layout few would run: every layer's collectives on the inter-node fabric.
  if (winner.plan.tp > c.gpus_per_node)
    CAIRN_LOG_WARN("the best plan, %s, has tensor parallelism across nodes (tp = %d, %d devices per node): its "
                   "every-layer collectives cross the inter-node fabric, which the model prices but few runs use; "
                   "set [plan] max_tp = %d to keep TP inside a node",
                   plan_string(winner.plan).c_str(), winner.plan.tp, c.gpus_per_node, c.gpus_per_node);
  const size_t top_k = size_t(plan.top_k);
  // With --json - the JSON document is stdout's only content; the table goes to stderr instead.
  FILE* table_out = opts.json_path == "-" ? stderr : stdout;
  const double params = double(pc.total);
  std::fprintf(table_out, "# %s: %s params, global batch %lld x %lld tokens on %s (%d x %d devices)\n",
               m.arch == Arch::Gpt ? "gpt" : "llama", short_param_count(params).c_str(), (long long)global_batch,
               (long long)m.seq_len, c.name.c_str(), c.nodes, c.gpus_per_node);
  std::fprintf(table_out, "# %zu plans evaluated (%zu feasible) in %.3f s\n", r.size(), r.feasible, r.elapsed_s);
  if (!opts.quiet_table) std::fputs(table(r.top, top_k).c_str(), table_out);
  std::fflush(table_out);

  json plans = json::array();
  for (size_t i = 0; i < std::min({top_k, r.feasible, r.top.size()}); ++i) plans.push_back(to_json(r.top[i]));
  json doc = {{"provenance", provenance().to_json()}, {"model", model_json(m)},
              {"cluster", cluster_json(c)},           {"global_batch", global_batch},
              {"plans_evaluated", r.size()},          {"plans_feasible", r.feasible},
              {"search_seconds", r.elapsed_s},        {"plans", plans}};
  const std::string text = json_text(doc, 2) + "\n";
  atomic_write(join_path(out_dir, "plans.json"), text);
  if (!opts.json_path.empty()) write_json_output(opts.json_path, text);
  write_h5(join_path(out_dir, "plans.h5"), m, c, global_batch, r);
  atomic_write(join_path(out_dir, "best.toml"), best_toml(cfg, winner));
  CAIRN_LOG_INFO("wrote %s/{plans.json,plans.h5,best.toml}", out_dir.c_str());
  return 0;
}

}  // namespace cairn::plan
