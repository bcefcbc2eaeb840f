// Analytical cost model of transformer training: FLOPs, parameters, memory and step time of a
// parallel plan (DP/TP/PP/v/micro-batch/ZeRO/recompute/SP) on a cluster. Used by cairn-plan to
// search plans and by cairn-train to report MFU and predicted step time. Formulas and sources:
// docs/cost-model.md.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cairn {
class Config;
struct ClusterSection;
struct ModelSection;
struct ParallelSection;
struct PlanSection;
}  // namespace cairn

namespace cairn::costmodel {

// Bytes per GiB (memory figures are in GiB, as nvidia-smi and the planner's reports print them).
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// ------------------------------------------------------------------ model

enum class Arch { Gpt, Llama };

struct ModelSpec {
  Arch arch = Arch::Gpt;
  int64_t layers = 12, hidden = 768, heads = 12, kv_heads = 12, ffn_hidden = 3072;
  int64_t seq_len = 1024, vocab = 50257;
  bool tied_embeddings = true;
  int64_t head_dim() const { return hidden / heads; }
};

// Llama's MLP rule: 2/3 of 4h rounded up to a multiple of 256; GPT: 4h.
int64_t default_ffn_hidden(Arch arch, int64_t hidden);
// The [model] section as a spec (kv_heads 0 -> heads, ffn_hidden 0 -> default). Throws UsageError naming
// the key when the shape is impossible (hidden not divisible by heads, heads by kv_heads, vocab unset).
ModelSpec model_from_section(const ModelSection& s);
// model_from_section of the config's [model].
ModelSpec model_from_config(const Config& cfg);
// Validates a hand-built spec the same way (UsageError).
void validate_model(const ModelSpec& m);

struct ParamCounts {
  int64_t embedding = 0;        // token (+ learned position for gpt) embeddings
  int64_t per_layer = 0;        // one transformer layer (weights, biases, norms)
  int64_t per_layer_norms = 0;  // of which norm weights/biases (replicated under TP)
  int64_t final_norm = 0;
  int64_t head = 0;  // output projection (0 when tied)
  int64_t total = 0;
};
ParamCounts parameter_counts(const ModelSpec& m);
inline int64_t parameter_count(const ModelSpec& m) { return parameter_counts(m).total; }

// FLOPs per token from each GEMM (2 per multiply-add), attention over the full sequence
// (Megatron's accounting). forward = one forward pass; model training = 3x forward.
struct FlopsPerToken {
  double layer_forward = 0;   // one transformer layer, forward
  double attention_core = 0;  // of which QK^T and attention x V (recomputed by selective)
  double head_forward = 0;    // output projection (logits)
  double forward = 0;         // whole model forward
  double model_train = 0;     // 3 x forward: the MFU numerator per token
};
FlopsPerToken flops_per_token(const ModelSpec& m);
// Training FLOPs per token as cairn-train reports MFU with (model FLOPs, no recompute).
inline double model_flops_per_token(const ModelSpec& m) { return flops_per_token(m).model_train; }
// Narayanan et al. 2021 eq. (3) without recompute, per token: 72 l h^2 (1 + s/6h + V/12lh).
double narayanan_flops_per_token(const ModelSpec& m);

// ------------------------------------------------------------------ cluster

enum class Collective { AllReduce = 0, AllGather, ReduceScatter, SendRecv, Count };
// nccl-tests bus-bandwidth factor: allreduce 2(n-1)/n, allgather/reducescatter (n-1)/n, sendrecv 1.
double busbw_factor(Collective c, int n);

// One link tier: nominal bandwidth per GPU per direction or fitted alpha/beta per collective.
struct Tier {
  double bandwidth_gbps = 0;  // GB/s (1e9) per GPU per direction, nominal
  double latency_us = 0;      // per ring step, nominal
  double efficiency = 1.0;    // achievable fraction of nominal bandwidth
  // With a fabric: the fraction of the sweep's speed training's collectives get (their time is the fit's / this)
  double fabric_efficiency = 1.0;
  struct Fit {
    bool valid = false;
    double alpha_us = 0, busbw_gbps = 0;
    int ranks = 0;
  };
  std::array<Fit, static_cast<int>(Collective::Count)> fitted{};
  int fitted_ranks_per_node = 0;  // members per node of the communicator the fit was measured on
};

struct Cluster {
  std::string name = "cluster";
  int nodes = 1, gpus_per_node = 1;
  double peak_tflops = 1;  // dense 16-bit (or the training dtype) peak per device
  // FP8 tensor cores (0: none): peak and the large-GEMM efficiency of FP8 GEMMs (0: gemm_max_efficiency).
  double peak_fp8_tflops = 0, fp8_gemm_max_efficiency = 0;
  double hbm_gib = 80;          // device memory capacity (GiB)
  double hbm_gbps = 2000;       // device memory bandwidth (GB/s)
  double hbm_efficiency = 0.8;  // achievable fraction for streaming kernels
  // GEMM efficiency vs GEMM size (FLOPs), log-linear interpolation; empty: max_efficiency with a
  // fixed per-kernel overhead.
  std::vector<double> gemm_flops, gemm_efficiency;
  double gemm_max_efficiency = 0.8;
  // GEMM shape model (GPUs): tiles spread over `sm_count` SMs in waves, and a per-tile K prologue.
  // sm_count = 0 (CPUs) uses only the FLOP-size curve above.
  int sm_count = 0;
  double gemm_k_half = 64;  // K at which a tile's prologue/epilogue halves its efficiency
  // Measured shapes (cairn-plan calibrate): efficiency at (m, n, k); the shape model is corrected by the
  // measured/modelled ratio of the nearest measured shapes (log space).
  std::vector<double> gemm_table_m, gemm_table_n, gemm_table_k, gemm_table_efficiency;
  // FP8 GEMMs measured at the same shapes (fraction of peak_fp8_tflops); empty: FP8 takes the bf16 correction.
  std::vector<double> gemm_table_fp8_efficiency;
  bool has_fp8_table() const {
    return !gemm_table_m.empty() && gemm_table_fp8_efficiency.size() == gemm_table_m.size();
  }
  // Fused (flash) attention kernel: achieved fraction of peak over its real FLOPs, forward and backward: the
  // device's best (Transformer Engine / cuDNN, FlashAttention-3), and FlashAttention-2 where that is slower (0 = the
  // same; Hopper runs FlashAttention-2 at about 0.6 of the best: it does not use wgmma or TMA).
  double attention_efficiency = 0.6;
  double flash2_efficiency = 0;
  // Its fixed work per query row and call, in keys' worth (a call whose rows see n keys runs at attention_efficiency
  // x n / (n + attention_row_keys)): what makes short blocks (context parallelism's chunks) slower per FLOP.
  double attention_row_keys = 0;
  // attention_efficiency was learned from this site's runs, not taken from a kernel benchmark (cairn-plan warns
  // about attention-bound plans only when false: docs/cost-model.md, "Long context").
  bool attention_measured = false;
  // Keys per score block of that kernel: a causal call computes (1 + 1/ceil(s/tile))/2 of the s^2 scores.
  double attention_tile = 128;
  // Power model: gemm_max_efficiency and attention_efficiency hold at tdp_w; a job capped at power_limit_w
  // runs its compute-bound kernels at the clock that power sustains, (cap / tdp)^(1/3) of it (0: no model).
  double tdp_w = 0, power_limit_w = 0;
  double clock_factor() const;
  // Bytes per second memory-bound kernels move: hbm_gbps at hbm_efficiency.
  double hbm_rate() const { return hbm_gbps * 1e9 * hbm_efficiency; }
  // Compute slows by this fraction while a collective runs beside it (NCCL kernels occupy SMs and HBM).
  double overlap_slowdown = 0.1;
  // Communication progresses beside compute (NCCL on its own stream). False for CPU ranks over MPI: one thread per
  // rank moves the bytes inside the wait, so nothing hides (overlap() exposes it all).
  bool async_comm = true;
  double kernel_overhead_us = 4;               // launch + tail per kernel
  double reserved_gib = 1.0;                   // runtime context, allocator, NCCL buffers
  Tier intra{300, 1, 0.8}, inter{25, 5, 0.9};  // DGX A100-like until configured
  bool has_fabric = false;
  std::string fabric_path;
  int world() const { return nodes * gpus_per_node; }
};

// The [cluster] section as a cluster; with `fabric = "path"` the fitted per-tier alpha/beta replace nominal
// links. Throws UsageError on inconsistent GEMM tables.
Cluster cluster_from_section(const ClusterSection& s);
// cluster_from_section of the config's [cluster].
Cluster cluster_from_config(const Config& cfg);
// Applies a cairn-sweep fabric.toml to the cluster (throws UsageError naming the file/table).
void apply_fabric(Cluster& c, const std::string& path);

// Time (s) of a collective of `bytes` (nccl-tests size convention: total buffer) over `n` ranks
// of which `per_node` share a node. Spanning nodes uses the inter tier shared by the node's NICs.
double collective_time(const Cluster& c, Collective coll, double bytes, int n, int per_node);
// Efficiency of one GEMM of `flops` FLOPs (table or default curve), in (0, 1].
double gemm_efficiency(const Cluster& c, double flops);
// Efficiency of one m x n x k GEMM (`count` of them batched): the FLOP-size curve on CPUs; on GPUs the
// large-GEMM efficiency x wave quantisation over the SMs x the K prologue, corrected by measured shapes.
double gemm_efficiency_shape(const Cluster& c, double m, double n, double k, double count = 1);
// Seconds for a GEMM M x N x K (batch of `count`), roofline of compute and `elem_bytes` traffic.
double gemm_time(const Cluster& c, double m, double n, double k, double count, double elem_bytes);
// The same GEMM with FP8 inputs (bf16 output) on the cluster's FP8 tensor cores: the shape model at
// peak_fp8_tflops and fp8_gemm_max_efficiency, a tile's fixed prologue worth twice the K (twice the MMA rate).
double gemm_time_fp8(const Cluster& c, double m, double n, double k, double count);

// ------------------------------------------------------------------ plan

enum class Recompute { None = 0, Selective, Full };
const char* recompute_name(Recompute r);
Recompute parse_recompute(const std::string& s);  // none|selective|full (gelu -> selective)

struct Plan {
  int dp = 1, tp = 1, pp = 1, v = 1, mb = 1, zero = 0;
  int cp = 1;  // context parallelism: the sequence split over cp ranks (ring attention)
  Recompute recompute = Recompute::None;
  bool sp = false;
  bool tp_overlap = false;  // TP collectives overlapped with the adjacent GEMMs (Megatron-Core tp_comm_overlap)
  // Context parallelism's K/V exchange (Megatron --cp-comm-type, [parallel] cp_comm): false = p2p (ring attention,
  // transfers overlapped with the attention blocks), true = all_gather (K/V all-gathered before attention and again in
  // backward, their gradients reduce-scattered; exposed). Only meaningful at cp > 1.
  bool cp_allgather = false;
  // Layers of each of the pp*v virtual stages (empty: balanced automatically, see stage_split).
  std::vector<int> stage_layers;
};
// "dp=8,tp=4,pp=12,v=1,mb=2,zero=1,recompute=full,sp=off" (+ ",cp=2", ",cp_comm=allgather", ",tp_overlap=on" when set)
std::string plan_string(const Plan& p);

// ZeRO-3 as a stack runs it. Fsdp: PyTorch FSDP/FSDP2, one flat collective per layer, the next layer prefetched
// whole, every NIC of the node, gradients and gathered parameters copied through flat buffers. Megatron:
// Megatron-FSDP, the same collectives from persistent buffers (no copies). DeepSpeed: stage 3, one collective per
// parameter tensor, gathers prefetched only up to its prefetch bucket, cross-node traffic at one NIC per rank.
enum class Zero3Impl { Fsdp, Megatron, DeepSpeed };
const char* zero3_impl_name(Zero3Impl z);   // the plan.zero3_impl value: fsdp | megatron | deepspeed
const char* zero3_impl_stack(Zero3Impl z);  // the stack: PyTorch FSDP | Megatron-FSDP | DeepSpeed stage 3

// The fused attention kernel a stack runs (plan.attention_kernel): the device's best (cluster.attention_efficiency),
// FlashAttention-2 (cluster.flash2_efficiency) or the 2023 Triton FlashAttention (a fixed fraction of
// FlashAttention-2's rate). attention_efficiency() is its fraction of peak on the cluster, forward and backward.
enum class AttentionKernel : uint8_t { Fused, Flash2, Triton2023 };
double attention_efficiency(const Cluster& c, AttentionKernel k);

// How the cross-entropy over the vocabulary runs: separate kernels over an fp32 copy of the logits (Megatron,
// PyTorch), Megatron-Core's jit-fused steps over that copy, or one kernel over the 16-bit logits.
enum class CrossEntropyImpl : uint8_t { Unfused, Native, Fused };
// Bytes and kernels per logit of e-byte (16-bit: 2) logits, forward and backward (docs/cost-model.md).
struct CrossEntropyCost {
  double bytes_f, bytes_b;
  int kernels_f, kernels_b;
};
CrossEntropyCost cross_entropy_cost(CrossEntropyImpl impl, double e);

// Precision and framework assumptions (docs/cost-model.md, "Memory").
struct Assumptions {
  double weight_bytes = 2;       // 16-bit working weights
  double grad_bytes = 2;         // gradient buffer (2: ZeRO paper fp16/bf16; 4: Megatron fp32 main grads)
  double optimizer_bytes = 12;   // fp32 master weights + Adam m and v (ZeRO paper's K = 12)
  double activation_bytes = 2;   // 16-bit activations (Korthikanti's constants assume 2)
  bool flash_attention = false;  // attention scores never stored (no 5as/h term)
  AttentionKernel attention_kernel = AttentionKernel::Fused;  // which one runs it (its efficiency on the cluster)
  bool causal = true;  // causal mask: a fused attention kernel skips the masked half of the scores
  // recompute = selective reruns the attention core (Korthikanti et al. 2022), or with alternate_mm every
  // second matmul of the layer and all its elementwise kernels (torchtitan's op-level policy).
  bool selective_alternate_mm = false;
  // Adam as one fused kernel (Megatron, apex) or as eager PyTorch's separate elementwise kernels (more bytes).
  bool optimizer_fused = true;
  // Bytes the memory-bound kernels move relative to Megatron/Transformer Engine's fused kernels (1): eager
  // PyTorch stacks run norms, activations, rotary and casts as separate kernels and move more.
  double memory_bound_factor = 1.0;
  // The loss over the vocabulary (plan.cross_entropy; docs/cost-model.md counts each one's bytes).
  CrossEntropyImpl cross_entropy = CrossEntropyImpl::Unfused;
  bool dropout = true;  // gpt keeps dropout masks; llama never has dropout
  bool dp_overlap = true;
  // Without SP, the column-parallel layers' backward all-reduce runs beside their weight-gradient GEMM
  // (Megatron-LM's async tensor-parallel all-reduce, default since 2022); false: exposed (Megatron 2021).
  bool tp_async_backward = true;  // gradient reduction overlapped with backward (Megatron overlap_grad_reduce)
  // tp_overlap = on pipelines the backward's collectives with their GEMMs too (Megatron-Core's userbuffers,
  // plan.tp_overlap_impl = "megatron"); false: the forward's only (plan.tp_overlap_impl = "torch", PyTorch's async
  // TP: torch.compile's micro-pipeline pass fuses all-gather -> matmul and matmul -> reduce-scatter as the forward
  // writes them, and the backward's collectives run as without overlap; docs/cost-model.md, "TP overlap").
  bool tp_overlap_backward = true;
  // Batch-first activations under SP (PyTorch DTensor, plan.sp_layout = "bsh"): a gather or scatter along the
  // sequence dimension costs a copy of the whole tensor beside the collective (torch.cat of the chunks).
  bool sp_batch_first = false;
  // Q, K, V (and SwiGLU's gate and up) as one linear each group (Megatron, Transformer Engine), or as separate ones
  // (plan.fused_projections = false: torchtitan, Hugging Face Llama).
  bool fused_projections = true;
  bool pp_scatter_gather = true;  // PP sends T*h/tp per TP rank (Megatron); false: the full T*h (DeepSpeed)
  // Interleaved schedules overlap their point-to-point transfers with compute (Megatron overlap_p2p_comm).
  bool pp_overlap = true;
  // plan.fp8_param_gather: with fp8 and zero >= 1 the layers' weights live and travel in FP8 (1 byte), so their
  // gathers halve, there is no bf16 copy beside the FP8 one, and each gather is followed only by the transpose.
  bool fp8_param_gather = false;
  // How ZeRO-3 moves parameters (plan.zero3_impl; docs/cost-model.md section 3).
  Zero3Impl zero3 = Zero3Impl::Fsdp;
  double zero3_prefetch_params = 5e7;  // DeepSpeed stage3_prefetch_bucket_size (parameters)
  // ZeRO-2/3 as FSDP (zero3 = Fsdp only): gather and reduce-scatter once per step instead of every micro-batch
  // (plan.zero_sync = step: PyTorch pipelining keeps an FSDP2 stage's parameters gathered and its gradients whole).
  bool zero_sync_per_step = false;
  // ZeRO-3 as FSDP per micro-batch: the root unit (embedding, final norm, head) gathered once per step and kept
  // (plan.zero3_root_gather = step, cairn-train) instead of once per micro-batch (PyTorch FSDP).
  bool zero3_root_per_step = false;
  double memory_headroom = 0.0;  // fraction of HBM kept free
  // FP8 linear layers (Transformer Engine): the transformer layers' weight GEMMs run on FP8 tensor cores, their
  // inputs and output gradients are cast (and transposed) by memory-bound kernels, FP8 copies of the weights are
  // kept, and linear-layer inputs are saved for backward in FP8. docs/cost-model.md, "FP8".
  bool fp8 = false;
  bool fp8_current_scaling = false;  // amax of each tensor read before its cast (no fusion into the producer)
};

// Why a plan was rejected (kOk when feasible).
enum class Reject : uint8_t {
  kOk = 0,
  kWorld,
  kHeads,
  kKvHeads,
  kLayers,
  kBatch,
  kMicroBatch,
  kInterleave,
  kSp,
  kZeroPp,
  kMemory,
  kCp,
  kTpOverlap,
};
const char* reject_name(Reject r);

struct Breakdown {
  // Seconds per optimizer step on the critical path.
  double gemm = 0;              // GEMM time of the slowest stage over all its micro-batches (incl. recompute)
  double attention = 0;         // of gemm: the attention core (fused kernel, or the score and context GEMMs)
  double memory_bound = 0;      // norms, activations, softmax, cross-entropy
  double cross_entropy = 0;     // of memory_bound: the loss over the vocabulary, bytes and launches (last stage)
  double recompute = 0;         // of gemm + memory_bound: the part spent recomputing
  double tp_comm = 0;           // exposed tensor-parallel collectives
  double cp_comm = 0;           // exposed context-parallel (ring attention) transfers
  double overlap_slowdown = 0;  // compute lost to collectives running beside it (TP overlap, ZeRO-3, CP)
  double pp_p2p = 0;            // exposed pipeline point-to-point transfers
  double bubble = 0;            // pipeline fill/drain idle time
  double dp_comm = 0;           // total data-parallel (or ZeRO) communication
  double dp_exposed = 0;        // of which not hidden behind backward
  double optimizer = 0;         // optimizer step (memory bound, over the local shard), FP8 weight casts included
  double fp8_cast = 0;          // of memory_bound and optimizer: FP8 cast/transpose kernels (activations, weights)
  double stage_forward = 0, stage_backward = 0;  // one micro-batch on the slowest stage
  // Bytes per GPU on the pipeline rank that needs the most (mem_rank; the first holds the most micro-batches, but
  // with uneven stages another can hold more layers' activations, and the last the logits).
  int mem_rank = 0;
  // The vocabulary priced when tp does not divide [model] vocab: padded as Megatron pads it (tp_padded_vocab),
  // and what best.toml sets for cairn-train; 0 when the model's own size was priced.
  int64_t padded_vocab = 0;
  int64_t mem_params = 0;  // parameters mem_rank holds per TP rank
  double mem_weights = 0, mem_grads = 0, mem_optimizer = 0;
  double mem_activations = 0;  // stored activations of the micro-batches in flight
  double mem_logits = 0;       // last stage: logits and loss buffers
  double mem_buffers = 0;      // recompute working set, ZeRO-3 gathered layers, FP8 weight copies, reserved
  double mem_total = 0;
  double act_per_layer = 0;  // stored activation bytes per layer per micro-batch
  double inflight = 0;       // on mem_rank: micro-batches of its layers' activations held (Korthikanti's factor)
  int microbatches = 0;
  int layers_max_stage = 0;
  std::vector<int> stage_layers;  // layers per virtual stage (pp*v entries) the plan was evaluated with
  // pp > 1: each pipeline rank's busy time over the step (its layers with the TP/CP collectives inside them, the
  // embedding on the first, the head and loss on the last), without its point-to-point transfers; empty otherwise.
  std::vector<double> stage_busy;
  int64_t stage_params = 0;                        // parameters held by the largest stage per TP rank
  std::string tp_tier, dp_tier, pp_tier, cp_tier;  // "intra"/"inter"
};

struct Evaluation {
  Plan plan;
  Reject reject = Reject::kOk;
  std::string reason;  // filled for rejected plans
  double step_time_s = 0, tokens_per_s = 0;
  double tflops_per_gpu = 0;     // model FLOPs (no recompute) per second per GPU
  double hw_tflops_per_gpu = 0;  // hardware FLOPs (with recompute)
  double mfu = 0, hfu = 0;
  double memory_gib = 0;
  Breakdown b;
  bool feasible() const { return reject == Reject::kOk; }
};

// What the plans of one search share, priced once: one transformer layer's times depend on the layout,
// micro-batch, recompute, SP, TP overlap and CP exchange, not on v or the ZeRO stage; the layers each pipeline rank
// holds in flight depend only on the stage split and the micro-batch count, which most neighbouring plans share.
// GPT-1T at 32k tokens prices 1.08M plans. One per thread, for one model, cluster and assumptions. evaluate() with it
// gives the same figures as without, but leaves the per-stage detail (Breakdown::stage_layers, stage_busy) empty: a
// search's rows keep none, and the plans it shows are priced again without a cache.
struct EvaluationCache {
  struct Impl;
  std::unique_ptr<Impl> impl;
  EvaluationCache();
  ~EvaluationCache();
};

// Evaluates one plan. `fill_reason` formats a human explanation for rejected plans (slower); `cache` reuses work
// across the calls of a search.
Evaluation evaluate(const ModelSpec& m, const Cluster& c, const Plan& p, int64_t global_batch, const Assumptions& a,
                    bool fill_reason = true, EvaluationCache* cache = nullptr);

// Activation bytes per layer per micro-batch of b sequences, Korthikanti et al. 2022 generalised
// to GQA / SwiGLU (equal to sbh(34 + 5as/h) for a GPT layer without parallelism).
double activation_bytes_per_layer(const ModelSpec& m, const Assumptions& a, int64_t b, int tp, bool sp, Recompute r);
// Bytes per parameter held per GPU for weights+grads+optimizer at a ZeRO stage over dp ranks.
double state_bytes_per_param(const Assumptions& a, int zero, int dp);

// JSON of one evaluation (the plans.json contract fields + breakdown).
nlohmann::json to_json(const Evaluation& e);
// Multi-line human breakdown (--explain).
std::string explain(const ModelSpec& m, const Cluster& c, const Evaluation& e, int64_t global_batch,
                    const Assumptions& a);

// Layers per virtual stage for pp*v stages: every stage >= 1, the first rank's first chunk and the last
// rank's last chunk lighter by the embedding's and the head's cost in layers (embed_layers, head_layers),
// minimising the busiest rank. Empty when pp*v > layers.
std::vector<int> stage_split(int64_t layers, int pp, int v, double embed_layers, double head_layers);

// The [parallel] section as a Plan for `world` devices (dp 0 -> world/(tp*pp*cp), mb 0 -> 1).
Plan plan_from_section(const ParallelSection& s, int world);
// [parallel] stage_layers as a Plan holds them (the search prices them for the plans whose pp*v they fit).
std::vector<int> stage_layers_of(const ParallelSection& s);
// plan_from_section of the config's [parallel].
Plan plan_from_parallel(const Config& cfg, int world);
// The [plan] precision/memory assumption keys.
Assumptions assumptions_from_section(const PlanSection& s);
// assumptions_from_section of the config's [plan].
Assumptions assumptions_from_config(const Config& cfg);
// plan.fp8_param_gather takes effect where the weights are sharded and gathered: fp8 plans with zero >= 1.
bool fp8_params(const Assumptions& a, const Plan& p);
// PyTorch FSDP's ZeRO-3, per micro-batch, with 16-bit working weights: the fp32 shard is the optimizer's master and
// the root unit stays gathered for the step (memory, docs/cost-model.md section 5).
bool fsdp_mixed_precision(const Assumptions& a, const Plan& p);

// One call for a training tool: evaluates the [parallel] plan of `cfg` for [model] on [cluster]
// with [train] global_batch. `world` > 0 (the MPI world size) resizes the cluster to that many
// devices, so the prediction matches the job actually running. Throws UsageError on bad config.
Evaluation evaluate_config(const Config& cfg, int world = 0);

}  // namespace cairn::costmodel
