// cairn-plan: exhaustive search of parallel training plans with the libcommon cost model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cairn/config.h"
#include "cairn/costmodel.h"
#include "cairn/huge_pages.h"
#include "cairn/sections.h"

namespace cairn::plan {

// What the user constrained in [plan] / --plan: empty list = every valid value.
struct Constraints {
  std::vector<int64_t> dp, tp, pp, v, mb, zero, cp;
  std::vector<costmodel::Recompute> recompute;
  std::vector<int> sp;          // 0 off, 1 on
  std::vector<int> tp_overlap;  // 0 off, 1 on
  std::vector<int> cp_comm;     // 0 p2p, 1 allgather
  int64_t max_mb = 16, max_tp = 0, max_v = 0, cp_min_seq = 16384;
  // How many of the ranked plans are kept as whole evaluations, with their per-stage detail (Breakdown::stage_layers
  // and stage_busy: pp*v and pp entries) and tier names ([plan] top_k; at least one, the best).
  size_t detailed = 10;
  std::vector<int> stage_layers;  // [parallel] stage_layers, applied to plans whose pp*v matches
};
// The [plan] search constraints (UsageError for a degree out of range).
Constraints constraints_from_section(const PlanSection& s);
Constraints constraints_from_config(const Config& cfg);  // with [parallel] stage_layers

// One evaluated plan as the ranking and plans.h5 keep it: the layout, its verdict and the figures plans.h5 writes
// (its columns' names), without an Evaluation's per-stage vectors, tier names and reason text. A search holds every
// plan it priced: GPT-1T on 3072 GPUs at 32k tokens is a million, 1.2 GB as Evaluations.
struct PlanRow {
  costmodel::Plan plan;  // stage_layers only where [parallel] stage_layers applies to the plan
  costmodel::Reject reject = costmodel::Reject::kOk;
  int microbatches = 0;
  double step_time_s = 0, tokens_per_s = 0, tflops_per_gpu = 0, hw_tflops_per_gpu = 0, mfu = 0, hfu = 0;
  double memory_gib = 0;
  // Seconds per step (Breakdown's terms)
  double time_gemm = 0, time_attention = 0, time_memory_bound = 0, time_recompute = 0, time_tp_comm = 0;
  double time_cp_comm = 0, time_overlap_slowdown = 0, time_pp_p2p = 0, time_bubble = 0, time_dp_comm = 0;
  double time_dp_exposed = 0, time_optimizer = 0, time_cross_entropy = 0, time_fp8_cast = 0;
  // GiB per device on the pipeline rank that needs the most
  double mem_weights = 0, mem_grads = 0, mem_optimizer = 0, mem_activations = 0, mem_logits = 0, mem_buffers = 0;
  bool feasible() const { return reject == costmodel::Reject::kOk; }
};
PlanRow plan_row(const costmodel::Evaluation& e);

struct SearchResult {
  // Every evaluated plan, in the search's enumeration order (layout by layout).
  HugePageArray<PlanRow> rows;
  // The ranking, as indices into rows: feasible plans fastest first, then the rejected ones, smallest memory first;
  // ties in enumeration order. The rows are not moved into it: 300 MB of random moves cost a million-plan search
  // a fifth of a second, while plans.h5 reads each row once through it anyway.
  std::vector<uint32_t> order;
  const PlanRow& ranked(size_t i) const { return rows[order[i]]; }
  size_t size() const { return rows.size(); }
  // The first max(1, k.detailed) plans of `all`, priced again in full (per-stage detail, tiers): the table,
  // plans.json and best.toml.
  std::vector<costmodel::Evaluation> top;
  size_t feasible = 0;
  double elapsed_s = 0;
};

// Enumerates every divisor-valid (tp, pp, v, mb, zero, recompute, sp) for the cluster's devices
// and evaluates each. Rejected plans keep their reason code (no text, for speed); only the first k.detailed plans of
// the ranking are kept whole (SearchResult::top). A search that runs long reports its progress on stderr.
SearchResult search(const costmodel::ModelSpec& m, const costmodel::Cluster& c, int64_t global_batch,
                    const costmodel::Assumptions& a, const Constraints& k);

// The global batch in sequences: [plan] global_batch, else [train] global_batch.
int64_t global_batch_from_sections(const PlanSection& plan, const TrainSection& train);

// Splits "dp=8,tp=4,recompute=full,tp=[2,4]" into "plan.dp=8" ... (brackets keep their commas).
std::vector<std::string> plan_flag_to_sets(const std::string& text);

struct RunOptions {
  std::string json_path;  // --json
  bool explain = false;
  bool quiet_table = false;
};
// The whole tool: search (or explain one plan), print the table, write plans.json/plans.h5/best.toml.
// Returns the exit code (0, or 3 when nothing fits / the explained plan does not fit).
int run_plan(const Config& cfg, const RunOptions& opts);

// [model] vocab = 0 ("the dataset's", which cairn-train pads to a multiple of 64) resolved for the cost model: from
// the dataset at [data] path (or <run.dir>/data) when it exists, else from the tokenizer [data] configures, as
// cairn-reshard will build it; set in `cfg` with where it came from. A config error when neither can be read.
void resolve_model_vocab(Config& cfg);

// cairn-plan calibrate: measures GEMM efficiency (OpenBLAS sgemm) over the model's shapes and a
// size sweep, and memory bandwidth, and writes a cluster TOML file. Returns the path written.
struct CalibrateOptions {
  std::string output;           // "" = <out>/plan/cluster-calibrated.toml
  double seconds = 0.2;         // time per measured shape
  int max_dim = 2048;           // largest square GEMM of the sweep (CPU)
  std::string device = "auto";  // auto (GPU when built with CUDA and one is present), cpu, gpu
};
std::string run_calibrate(const Config& cfg, const CalibrateOptions& opts);
// "# tool: ... (git ...) on host at time", "# command line: ...", "# input config files: ..." for the TOML files
// cairn-plan writes ([cluster] and [parallel] are closed sections: provenance goes in comments).
std::string provenance_comment_lines(const Config& cfg);

// Measured single-precision GEMM rate (FLOP/s) of m x n x k on this CPU.
double measure_sgemm(int64_t m, int64_t n, int64_t k, double seconds);
// Measured memory bandwidth (GB/s, 1e9) of a streaming triad over `bytes`.
double measure_stream_gbps(size_t bytes, double seconds);

#ifdef CAIRN_PLAN_CUBLAS
// GPU measurements (calibrate_cublas.cpp): bf16 cuBLAS GEMM FLOP/s, FP8 (E4M3) cuBLASLt GEMM FLOP/s and
// device-memory GB/s.
// Whether a CUDA device is usable; else why (the CUDA error and driver/runtime versions), and *broken when a driver
// is there but fails (cairn/kernels/cuda_probe.h).
bool cublas_available(std::string* why, bool* broken);
std::string cuda_device_name();
double measure_gemm_cublas(int64_t m, int64_t n, int64_t k, double seconds);
// Whether the GPU has FP8 tensor cores (compute capability 8.9 and later: Ada, Hopper); why not otherwise.
bool fp8_tensor_cores(std::string* why);
// FP8 E4M3 inputs, bf16 output, fp32 accumulation; m, n, k must be multiples of 16 (cuBLASLt's FP8 kernels).
double measure_gemm_fp8_cublaslt(int64_t m, int64_t n, int64_t k, double seconds);
double measure_hbm_cuda_gbps(size_t bytes, double seconds);
#endif

}  // namespace cairn::plan
