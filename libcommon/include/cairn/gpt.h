// GPT-2 model (llm.c layout): flat parameter/gradient buffers, forward, backward, on a kernel backend.
// CONTRACT used by cairn-train and cairn-eval; implemented by the kernels/model work (libcommon/src/gpt/).
//
// Parameter layout (one flat fp32 buffer, HF GPT-2 names and shapes, Conv1D weights as [in, out]):
//   wte [vocab, hidden], wpe [seq_len, hidden],
//   h.<l>.{ln_1.weight, ln_1.bias, attn.c_attn.weight [C,3C], attn.c_attn.bias, attn.c_proj.weight [C,C],
//          attn.c_proj.bias, ln_2.weight, ln_2.bias, mlp.c_fc.weight [C,4C], mlp.c_fc.bias,
//          mlp.c_proj.weight [4C,C], mlp.c_proj.bias}  for l = 0..layers-1 (each layer contiguous),
//   ln_f.weight, ln_f.bias.
// The lm_head is tied to wte. Rows of wte at ids >= vocab_real are padding (initialised to zero).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cairn/kernels/backend.h"

namespace cairn::gpt {

struct GptConfig {
  int layers = 12;
  int hidden = 768;
  int heads = 12;
  int seq_len = 1024;      // maximum context (wpe rows)
  int vocab = 50304;       // padded vocabulary (rows of wte)
  int vocab_real = 50257;  // ids >= vocab_real never appear; their logits are masked out of the loss
};

// Throws cairn::UsageError naming the offending field when the config cannot build a model
// (non-positive sizes, hidden not divisible by heads, vocab_real > vocab, ...).
void validate(const GptConfig& cfg);
// Number of parameters of the flat buffer (including wte's padding rows).
size_t count_params(const GptConfig& cfg);

// How a tensor of a tensor-parallel model piece relates to the whole tensor (Megatron's split):
//   None: replicated on every TP rank (norms, wpe, biases of row-parallel layers);
//   Rows: a block of the first dimension (vocab-parallel wte, row-parallel attention/MLP output weights);
//   Cols: a block of the last dimension of every row (column-parallel MLP input weight and bias);
//   QkvCols: q, k and v column blocks each split by heads (column-parallel c_attn weight and bias), so a rank's
//            [.., 3C/tp] piece is q|k|v of its own heads, the layout the attention kernel expects.
enum class Split { None, Rows, Cols, QkvCols };

// One named parameter tensor inside the flat buffer (HF GPT-2 names: "wte", "wpe",
// "h.0.ln_1.weight", ..., "ln_f.bias"; a model piece keeps the whole model's names and layer numbers).
struct TensorInfo {
  std::string name;
  size_t offset = 0;  // in floats, into params/grads
  size_t size = 0;
  std::vector<int> shape;       // this piece's shape
  bool weight_decay = false;    // true for matmul weights and embeddings; false for norms and biases
  int layer = -1;               // transformer layer, -1 for embeddings / final norm
  Split split = Split::None;    // how `shape` is cut out of full_shape (tensor parallelism)
  std::vector<int> full_shape;  // the whole tensor's shape (== shape without tensor parallelism)
};

// Where this process's piece of the model sits in a tensor/pipeline-parallel layout (cairn-train). The default
// is the whole model on one rank.
struct ShardSpec {
  int tp = 1, tp_rank = 0;         // tensor parallelism: heads, MLP columns and vocabulary rows split tp ways
  bool sequence_parallel = false;  // tp > 1: LayerNorms and the residual stream hold 1/tp of the rows
  int first_layer = 0;             // pipeline: the transformer layers this piece holds
  int num_layers = -1;             // -1: all layers from first_layer
  bool has_embedding = true;       // first pipeline stage: token + position embedding of the input ids
  bool has_head = true;            // last pipeline stage: final LayerNorm, lm_head (its own copy of wte when the
                                   // embedding is on another stage: tied weights, kept equal by the trainer) and loss
  // Context parallelism: every sequence is cut into 2*cp equal chunks and this rank holds chunks cp_rank and
  // 2cp-1-cp_rank (Megatron's load balancing of causal attention). forward()'s T is then this rank's share,
  // seq / cp tokens per sequence, its rows per sequence being the two chunks in that order. Attention exchanges K/V
  // over the CP group; everything else is per token. Parameters are whole on every CP rank; their gradients are
  // partial sums the trainer adds over the CP group (with the data-parallel ones).
  int cp = 1, cp_rank = 0;
  // How K/V travel (Megatron's --cp-comm-type): false = all_gather (every rank's K/V gathered before attention, dK/dV
  // reduce-scattered back; cp times a rank's K/V in memory), true = p2p (a ring: each step passes one rank's K/V on
  // while the blocks that meet them run, and backward passes their dK/dV accumulators along with them).
  bool cp_ring = false;
  // ZeRO-2/3: the gradients (ZeRO-2 and 3) and the parameters (ZeRO-3) live in unit storage the trainer lends
  // (Model::set_unit_storage) before the first step; the model never allocates a flat buffer for them, so a model
  // that fits a rank only sharded is never held whole, not even while it starts.
  bool lent_grads = false, lent_params = false;
};

// Context parallelism's load balancing (ShardSpec::cp): the chunk, of the 2*cp a sequence is cut into, that CP rank
// `cp_rank` holds as its first (half = 0) or second (half = 1) run of rows. The model and whoever slices its input
// (cairn-train) use this one rule.
inline int cp_chunk(int cp, int cp_rank, int half) { return half == 0 ? cp_rank : 2 * cp - 1 - cp_rank; }

// Collectives over the tensor-parallel group (or, passed as the model's cp_comm, the context-parallel group), on
// backend memory, provided by the trainer (MPI on CPU, NCCL on GPU). Every rank of the group calls them in the same
// order.
struct TpComm {
  std::function<void(float* buf, size_t n)> all_reduce;                               // sum, in place
  std::function<void(float* full, const float* part, size_t part_n)> all_gather;      // full = parts in rank order
  std::function<void(float* part, const float* full, size_t part_n)> reduce_scatter;  // part = sum of full's
                                                                                      // block tp_rank
  // Ring exchange (context parallelism with cp_ring): ring_start sends send[0, n) to the next rank of the group
  // ((rank + 1) % size) and receives the previous rank's n floats into recv, returning at once so compute overlaps
  // it; ring_wait returns when both are done (recv readable, send reusable). One exchange in flight at a time.
  std::function<void(const float* send, float* recv, size_t n)> ring_start;
  std::function<void()> ring_wait;
};

// A run of floats of a model piece's flat buffer and where it lies in the whole model's flat buffer.
struct FlatRun {
  size_t local = 0, full = 0, count = 0;
};
// The tensors of a model piece (shapes, offsets in its own flat buffer, split); the default spec gives the whole
// model's list. Throws cairn::UsageError when the spec does not fit the config (tp not dividing heads or vocab,
// a layer range outside the model, ...).
std::vector<TensorInfo> piece_tensors(const GptConfig& cfg, const ShardSpec& spec);
// Every run of the piece's flat buffer inside the whole model's flat buffer (count_params(cfg) floats), tensor by
// tensor in piece order; replicated tensors included (whoever assembles decides which replica speaks).
std::vector<FlatRun> full_model_runs(const GptConfig& cfg, const ShardSpec& spec);

// A contiguous run of parameters that share one weight-decay flag.
struct DecayRange {
  size_t first = 0;
  size_t count = 0;
  bool weight_decay = false;
};
// Splits [first, first+count) of the flat buffer into maximal runs of equal weight_decay, so an optimizer
// (or a ZeRO-1 shard of it) can call AdamW once per run with wd or 0.
std::vector<DecayRange> decay_ranges(const std::vector<TensorInfo>& tensors, size_t first, size_t count);
// One AdamW step over the parameters covered by `ranges` (from decay_ranges over [first, ...)), with
// `weight_decay` on the decaying runs and none elsewhere. `params` is the whole flat buffer; `grads`,
// `m` and `v` start at element `first` (a ZeRO-1 shard holds only its slice). Backend memory.
void adamw_update_ranges(const kernels::Backend& be, const std::vector<DecayRange>& ranges, size_t first, float* params,
                         const float* grads, float* m, float* v, kernels::AdamWParams hp, float weight_decay);

// Activation recomputation ([train] recompute / [parallel] recompute in cairn-train):
//   None: every layer keeps its activations for backward.
//   Gelu: one GELU output buffer shared by all layers, recomputed from the MLP pre-activation in backward
//         (saves 4C floats per token per layer but one).
//   Full: each layer keeps only its output (the residual stream, the next layer's input); one shared set
//         of per-layer activations is rebuilt in backward by rerunning the layer's forward from its saved
//         input (all but the MLP output projection, whose product backward does not need), layer by layer.
//         The last layer is not rerun: the shared set still holds it after forward.
// Megatron's "selective" (recompute the attention core) has no mode: our attention never stores the
// T x T probabilities (only the row log-sum-exp), its backward always recomputes them.
enum class Recompute { None, Gelu, Full };
const char* recompute_name(Recompute mode);  // "none", "gelu", "full"
// "none" | "gelu" | "full"; throws cairn::UsageError otherwise.
Recompute parse_recompute(const std::string& name);

// Where a model's parameters and gradients live, unit by unit (Model::units(): the embedding, each layer, the final
// norm). Left empty (the default) the model keeps them in its own flat buffers. Set, the caller lends each unit's
// memory only while the model uses it, so no rank holds all of them at once (ZeRO-3 parameters, ZeRO-2/3
// gradients; FSDP's per-layer gather and release):
//   acquire_params(u, next): the unit's parameters (its [first, first + count) of the flat layout), valid until
//                      release_params(u, keep); called before each forward and backward use, released right after.
//                      `next` is the unit the pass acquires after u (-1: none), so the storage can fetch it ahead.
//                      `keep` marks the units a training pass uses at both of its ends (the embedding, whose wte the
//                      head uses again, and the final norm): a storage may keep them gathered while the parameters
//                      stay the same (one optimizer step) instead of gathering them again for every use.
//   acquire_grads(u):  a buffer for the unit's gradient (accumulated with +=, so zeroed as the caller sees fit);
//                      grads_done(u) hands it back once this backward's gradient of the unit is complete (instead
//                      of BackwardOptions::on_grads_ready for that unit).
struct UnitStorage {
  std::function<const float*(int unit, int next)> acquire_params;
  std::function<void(int unit, bool keep)> release_params;
  std::function<float*(int unit)> acquire_grads;
  std::function<void(int unit)> grads_done;
};

// Backend memory for the activation slots of the model pieces of one rank (a pipeline rank's chunks). A slot whose
// micro-batch has finished backward gives its block back (Model::release_activation_slot) and the next slot of any
// piece reuses it, so the rank holds the most micro-batches its schedule keeps in flight at once over all its
// chunks (what Megatron's allocator holds), not the sum of each chunk's own peak. The pieces also share one scratch
// block (one forward or backward runs at a time on a rank): whoever claims it last owns its contents, and a piece
// that finds another one there rebuilds what recomputation had left in it. Blocks are never freed before the
// pool, which outlives the models that share it (they hold a shared_ptr).
class ActivationPool {
 public:
  explicit ActivationPool(const kernels::Backend& backend);
  ~ActivationPool();
  ActivationPool(const ActivationPool&) = delete;
  ActivationPool& operator=(const ActivationPool&) = delete;
  struct Block {
    void* ptr = nullptr;
    size_t bytes = 0;
    const void* last_user = nullptr;  // the layout that used it last: another one gets it zeroed, as a fresh one
  };
  // Slot sizes the pieces sharing the pool will ask for (Model::pooled_slot_bytes): a new block is made as large as
  // the largest of them within 25 % above the request, so slots of similar pieces (a first stage's holds the
  // token ids too) can trade blocks, while a head's slot, logits and all, keeps blocks of its own size.
  void add_slot_size(size_t bytes);
  // The smallest free block of at least `bytes`, or a new one (see add_slot_size).
  Block take(size_t bytes);
  // The shared scratch block, made at the largest size given to add_scratch_size (and at least `bytes`) on first use;
  // a later, larger request is an error (sizes are registered before the first forward: Model::add_pool_sizes).
  void add_scratch_size(size_t bytes);
  void* scratch(size_t bytes);
  // `user` starts a forward or backward: true when another piece used the scratch since its own last claim.
  bool claim_scratch(const void* user);
  void give(Block block);
  size_t allocated_bytes() const;  // every block, free or lent
  size_t blocks() const;

 private:
  const kernels::Backend& be_;
  std::vector<Block> free_;
  std::vector<size_t> slot_sizes_;
  size_t allocated_ = 0, count_ = 0;
  size_t scratch_want_ = 0, scratch_bytes_ = 0;
  void* scratch_ = nullptr;
  const void* scratch_user_ = nullptr;
};

// What one backward pass is asked to do (Model::backward).
struct BackwardOptions {
  // Called as each parameter range's gradient is final (see Model::backward).
  std::function<void(size_t first, size_t count)> on_grads_ready;
  // The backend is synchronised before each on_grads_ready, so the callback may read the range on the host (MPI on
  // host memory). false: the consumer orders itself after the queued kernels on the device (NCCL's stream waits on
  // an event), and a GPU's backward is not drained once per layer.
  bool sync_before_ready = true;
  float grad_scale = 1.0f;
  // The last micro-batch of a step: gradients that tensor parallelism leaves partial per rank (LayerNorms under
  // sequence parallelism) are summed over the TP group now, once, over everything accumulated.
  bool last_micro_batch = true;
  // Pipeline stages without the head: d(output) of this piece, [rows, hidden] in backend memory.
  const float* output_grad = nullptr;
};

class Model {
 public:
  // training=false builds a forward-only model (cairn-eval): no gradient buffers, and activations of a
  // single layer reused across layers. backward() then throws.
  Model(const GptConfig& cfg, const kernels::Backend& backend, bool training = true);
  // A piece of a tensor/pipeline/context-parallel model (ShardSpec); `comm` is used when spec.tp > 1, `cp_comm` (the
  // context-parallel group's all_gather and reduce_scatter) when spec.cp > 1.
  Model(const GptConfig& cfg, const kernels::Backend& backend, bool training, const ShardSpec& spec, TpComm comm = {},
        TpComm cp_comm = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  const GptConfig& config() const;
  const kernels::Backend& backend() const;
  bool training() const;
  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(const std::string& name) const;  // nullptr if no such tensor
  size_t num_params() const;
  // Backend memory (host memory for the CPU backends). grads() is nullptr for forward-only models.
  float* params();
  float* grads();
  const float* params() const;
  const float* grads() const;
  // Host copies whatever the backend's memory (checkpoints, evaluation on a GPU backend).
  void copy_params_from_host(const float* host);  // num_params() floats
  void copy_params_to_host(float* host) const;
  void copy_grads_to_host(float* host) const;  // throws for forward-only models
  // logit_rows() rows of the last forward, each this piece's vocab/tp columns (its block of the vocabulary)
  void copy_logits_to_host(float* host) const;

  // GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2*layers), zeros for biases,
  // ones for norm weights; deterministic in seed.
  void init(uint64_t seed);
  // The values init(seed) gives this piece's flat parameters [first, first + count), written to host memory `out`
  // (count floats): a ZeRO-3 rank initialises its shard without the whole piece.
  void init_values(uint64_t seed, size_t first, size_t count, float* out) const;

  // Forward over B x T tokens (T <= seq_len). With targets, returns the mean cross-entropy over the
  // B*T positions (targets < 0 are ignored) and keeps per-position losses; without, returns 0.
  // Activation buffers grow to the largest B*T seen and are reused. Host pointers; ids are checked
  // (a token outside [0, vocab_real) throws cairn::RuntimeError naming the position).
  // A pipeline piece without the embedding takes its input from stage_input() (filled by the caller before the
  // call; `inputs` may then be null); one without the head ignores `targets` and returns 0, its output is
  // stage_output().
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T);
  const ShardSpec& shard() const;
  // Rows of the residual stream this piece holds per B*T tokens: B*T, or B*T/tp with sequence parallelism.
  size_t stream_rows(int B, int T) const;
  // Pipeline: [stream_rows, hidden] buffers in backend memory of the current activation slot, valid for the
  // B x T of the next forward (input) or the last forward (output). stage_input_grad() after backward():
  // d(input), to send to the previous stage. Each call allocates the slot for B x T if needed.
  float* stage_input(int B, int T);
  const float* stage_output() const;
  const float* stage_input_grad() const;
  // The units parameters and gradients are lent in (UnitStorage), as (first, count) ranges of the flat layout in
  // order: the embedding (wte, wpe; wte alone on a last stage without it), each layer, the final norm.
  std::vector<std::pair<size_t, size_t>> units() const;
  // The unit a forward (backward = false) or a backward acquires first: what a caller that knows the next pass (a
  // pipeline schedule) can have fetched while it waits for that pass's input.
  int first_unit(bool backward) const;
  // Switches parameters and/or gradients to lent storage (the model frees its own buffers for them, if it made
  // any (ShardSpec::lent_params / lent_grads: none): params() or grads() then return nullptr, and init()/copies of
  // them throw). Between steps only; a piece built with lent buffers must get them before its first forward.
  void set_unit_storage(UnitStorage storage);
  // Pipeline schedules keep several micro-batches in flight: each slot is a separate set of activations;
  // forward() and backward() use the current one (slot 0 by default).
  void set_activation_slot(int slot);
  int activation_slot() const;
  // Lays every later slot out in one block of `pool` (shared with the rank's other pieces) instead of buffers of its
  // own; frees the slots it has. Between steps only.
  void set_activation_pool(std::shared_ptr<ActivationPool> pool);
  // The micro-batch of `slot` is done (after its backward): with a pool its block goes back there and the slot
  // is laid out afresh at its next forward; without one the slot keeps its buffers for the next micro-batch.
  void release_activation_slot(int slot);
  // Bytes one slot of B x T tokens takes in a pool (its buffers at their alignment).
  size_t pooled_slot_bytes(int B, int T) const;
  // Tells the pool (set_activation_pool) the slot and scratch sizes of micro-batches of B x T: call for every piece
  // sharing it before the first forward.
  void add_pool_sizes(int B, int T);
  // Called during forward() after the embeddings (layer -1), after each transformer layer (0..L-1) and
  // after the head and loss (layer L), so a trainer can time the forward pass per layer. Empty: none.
  void set_forward_layer_hook(std::function<void(int layer)> hook);
  // logit_rows()*vocab of the last forward (padded columns included). Backend memory. Valid until backward(),
  // which overwrites it with the logits' gradient to save memory.
  const float* logits() const;
  // Rows of logits(): B*T, or with set_head_targets_only the positions with a target (>= 0), in position order.
  int logit_rows() const;
  // Forward-only models without tensor or context parallelism: the head (vocabulary projection, softmax, loss) runs
  // at the positions with a target only; the others get loss 0 and no logits. Evaluation scores a few tokens of each
  // request; the losses of the positions it scores are those of the full head, up to the GEMM's rounding.
  void set_head_targets_only(bool on);
  const float* position_losses() const;  // B*T of the last forward with targets (host memory)
  int valid_targets() const;             // positions with targets >= 0 in the last forward
  // Backward of the last forward (with targets): accumulates into grads(). `on_layer_done(first,
  // count)` is called as each parameter range's gradient is final (last layer first), so data-parallel
  // training can start all-reducing that bucket while backward continues. The ranges, in call order, are
  // grad_ready_ranges(): ln_f, h.<L-1>, ..., h.0, then wte+wpe; together they cover the buffer once.
  // The gradient is that of (mean loss of this forward) * grad_scale: pass 1/micro_steps to average
  // accumulated micro-batches.
  void backward(const std::function<void(size_t first, size_t count)>& on_grads_ready = {}, float grad_scale = 1.0f);
  void backward(const BackwardOptions& options);
  void zero_grad();
  std::vector<std::pair<size_t, size_t>> grad_ready_ranges() const;

  // Activation recomputation; every mode gives bitwise the same results on a deterministic backend (the
  // same kernels run on the same inputs), it only trades memory for backward time. Changing the mode
  // frees the activations (reallocated at the next forward) and needs a new forward before backward().
  void set_recompute(Recompute mode);
  Recompute recompute() const;
  // Compatibility: set_recompute_gelu(true) = Recompute::Gelu, false = None; recompute_gelu() is true when
  // GELU outputs are recomputed (Gelu or Full).
  void set_recompute_gelu(bool on);
  bool recompute_gelu() const;
  // Bytes of activation (and backward scratch) buffers currently allocated, for memory reports; equals
  // planned_activation_bytes(config(), tokens, recompute(), training()) for the largest B*T seen. Blocks of an
  // activation pool are not counted (the pool's allocated_bytes() counts them once for all pieces).
  size_t activation_bytes() const;

 private:
  struct Impl;
  Impl* impl_;
};

// FLOPs of one training step (forward + backward) per token, 6N + attention (for MFU).
double train_flops_per_token(const GptConfig& cfg);
// Extra FLOPs per token that recomputation adds to a training step (hardware FLOPs minus model FLOPs), in
// the same accounting as train_flops_per_token (matmuls and the attention square; element-wise ops are
// free): Full reruns layers-1 layer forwards without the MLP output projection; Gelu and None add none.
double recompute_flops_per_token(const GptConfig& cfg, Recompute mode);
// Bytes Model::activation_bytes() reports once a forward of `tokens` = B*T rows has run, without
// allocating anything (memory planning: the mode's saving for a model and batch).
size_t planned_activation_bytes(const GptConfig& cfg, size_t tokens, Recompute mode, bool training = true);
// The same for one activation slot of a model piece (tensor/sequence/pipeline parallelism).
size_t planned_activation_bytes(const GptConfig& cfg, const ShardSpec& spec, size_t tokens, Recompute mode,
                                bool training = true);

}  // namespace cairn::gpt
