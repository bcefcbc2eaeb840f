// The kernel backend interface: a table of GPT-2 training operations (CPU reference, CPU fast, later CUDA).
//
// Layout conventions (all row-major, fp32):
//   activations  [N, C] with N = B*T rows (token-major, as llm.c)
//   qkv          [B, T, 3C]: q | k | v along the last dimension, head h owning columns h*hd..(h+1)*hd-1
//   weights      WeightLayout::InOut  = [C, OC] (HF GPT-2 Conv1D: out = inp @ W)
//                WeightLayout::OutIn  = [OC, C] (nn.Linear / tied lm_head: out = inp @ W^T)
//
// Gradient semantics (chosen so the model needs no extra zeroing passes):
//   parameter gradients (dweight, dbias, dwte, dwpe) are always ACCUMULATED (+=), so micro-batches add up;
//   input gradients are OVERWRITTEN, except layernorm_backward's dinp which is ACCUMULATED because it
//   feeds the residual stream that already holds the pass-through gradient.
// Pointers are device pointers of the backend (host memory for the CPU backends). Functions are
// asynchronous with respect to the host on device backends; `synchronize` waits.
#pragma once
#include <cstddef>  // offsetof
#include <cstdint>

namespace cairn::kernels {

enum class WeightLayout { InOut, OutIn };

// Hyperparameters of one AdamW step (decoupled weight decay, PyTorch's AdamW semantics).
struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  long step = 1;            // 1-based step count for bias correction
  float grad_scale = 1.0f;  // gradients are multiplied by this first (clipping, accumulation averaging)
};

struct Backend {
  const char* name;
  bool device_memory;  // false: pointers are plain host memory

  // ---- memory ----
  void* (*alloc)(size_t bytes);  // zero-initialised
  void (*free)(void* ptr);
  void (*copy_to_device)(void* dst, const void* host_src, size_t bytes);
  void (*copy_to_host)(void* host_dst, const void* src, size_t bytes);
  void (*copy_device)(void* dst, const void* src, size_t bytes);
  // `rows` rows of `row_bytes` each, row i from src + i*src_pitch to dst + i*dst_pitch (cudaMemcpy2D): columns of
  // a row-major matrix, e.g. the k|v part of qkv rows. Regions must not overlap.
  void (*copy_rows)(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows);
  void (*fill_zero)(void* ptr, size_t bytes);
  void (*synchronize)();

  // ---- embedding: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:] ----
  // Vocab-parallel: an id < 0 means the wte row lives on another rank, its term is 0 (forward) and it adds nothing to
  // dwte (backward); wpe == nullptr (forward) / dwpe == nullptr (backward) drops the positional term / its gradient.
  void (*embedding_forward)(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C);
  void (*embedding_backward)(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C);

  // ---- layernorm over the last dim (eps 1e-5); mean/rstd [N] saved for backward ----
  void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int N, int C);
  void (*layernorm_backward)(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int N, int C);

  // ---- matmul: out[N,OC] = inp[N,C] @ W (+ bias[OC] when bias != nullptr) ----
  void (*matmul_forward)(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                         WeightLayout layout);
  // dinp (overwritten, skipped when nullptr), dweight += , dbias += (skipped when nullptr)
  void (*matmul_backward)(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int N, int C, int OC, WeightLayout layout);

  // ---- causal multi-head self-attention, scale 1/sqrt(head_dim) ----
  // out [B,T,C]; lse [B,NH,T] (log-sum-exp of each score row) is all backward needs besides qkv/out.
  void (*attention_forward)(float* out, float* lse, const float* qkv, int B, int T, int C, int NH);
  // dqkv [B,T,3C] overwritten.
  void (*attention_backward)(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             int B, int T, int C, int NH);

  // ---- causal attention of a block of queries against a block of keys (context parallelism) ----
  // Queries: the q third of q_qkv [B, Tq, 3C], at positions q_pos .. q_pos + Tq - 1 counted from the first key (q_pos
  // >= 0); keys and values: the k and v thirds of kv_qkv [B, Tk, 3C], at positions 0 .. Tk - 1. Query i attends keys
  // 0 .. min(q_pos + i, Tk - 1) (keys past that are never read): q_pos + Tq <= Tk is a prefix that ends with the
  // queries (all-gather CP), q_pos >= Tk an earlier block every query sees whole (ring CP). attention_forward(qkv, T)
  // is the case q_qkv = kv_qkv, Tq = Tk = T, q_pos = 0. out [B, Tq, C]; lse [B, NH, Tq] (softmax over these keys only).
  void (*attention_forward_block)(float* out, float* lse, const float* q_qkv, const float* kv_qkv, int B, int Tq,
                                  int Tk, int q_pos, int C, int NH);
  // dq_qkv [B, Tq, 3C]: its q third OVERWRITTEN, its k and v thirds untouched; dkv_qkv [B, Tk, 3C]: its k and v
  // thirds ACCUMULATED (+=; every query block of a sequence adds to the same keys), its q third untouched. The two may
  // be different buffers or, for a block that is its own key range, the same one.
  void (*attention_backward_block)(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv,
                                   const float* kv_qkv, const float* out, const float* lse, int B, int Tq, int Tk,
                                   int q_pos, int C, int NH);

  // ---- merge of two attention results over disjoint key sets (ring CP) ----
  // (out, lse) <- softmax over the union: lse' = log(e^lse + e^part_lse), out' = (e^lse out + e^part_lse part_out) /
  // e^lse'. out, part_out [B, T, C]; lse, part_lse [B, NH, T].
  void (*attention_merge)(float* out, float* lse, const float* part_out, const float* part_lse, int B, int T, int C,
                          int NH);

  // ---- GELU, tanh approximation (GPT-2) ----
  void (*gelu_forward)(float* out, const float* inp, size_t n);
  void (*gelu_backward)(float* dinp, const float* inp, const float* dout, size_t n);  // dinp may alias dout

  // ---- residual: out = a + b (out may alias a or b) ----
  void (*residual_forward)(float* out, const float* a, const float* b, size_t n);

  // ---- fused softmax + cross-entropy over logits [N, Vp]; only columns < V are real ----
  // losses[i] = logsumexp(logits[i,:V]) - logits[i,targets[i]]; 0 where targets[i] < 0; where targets[i] >= V (the
  // target column is on another rank, vocab-parallel) losses[i] = lse[i] and logits[i,targets[i]] is never read.
  // lse[i] = logsumexp(logits[i,:V]) [N] is written for every row (ignored ones too) and saved for backward.
  void (*crossentropy_forward)(float* losses, float* lse, const float* logits, const int32_t* targets, int N, int V,
                               int Vp);
  // dlogits[i,j] = (softmax_j - [j == target]) * dloss for j < V, 0 for j >= V and for rows with
  // targets < 0; targets >= V gives softmax_j * dloss (no -1). softmax_j = exp(logits[i,j] - lse[i]) with the lse
  // given (a global one over all ranks' columns under vocab parallelism), never recomputed. Overwritten; may alias
  // logits (the CPU/GPU model does this to save memory).
  void (*crossentropy_backward)(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                                float dloss, int N, int V, int Vp);

  // ---- argmax over the columns < V of each row of x [N, Vp]: the first maximum, a NaN counting as the largest
  // (torch.argmax's rule). Evaluation's accuracy reads N ints back instead of N*Vp logits. ----
  void (*argmax_rows)(int32_t* out, const float* x, int N, int V, int Vp);

  // ---- optimizer ----
  // One AdamW step over n contiguous elements (params, grads, m, v all n long).
  void (*adamw_update)(float* params, const float* grads, float* m, float* v, size_t n, const AdamWParams& hp);
  // Sum of squares of x[0..n) accumulated in double; result returned on the host.
  double (*squared_norm)(const float* x, size_t n);
  // x *= s
  void (*scale)(float* x, float s, size_t n);
};

// Every compute op of Backend, once. The profiler wraps each, the "missing ops" test checks each backend has
// each, and the static_assert below fails the build when an op field is added to Backend but not here.
// clang-format off
#define CAIRN_KERNEL_OPS(X) \
  X(embedding_forward) X(embedding_backward) X(layernorm_forward) X(layernorm_backward) \
  X(matmul_forward) X(matmul_backward) X(attention_forward) X(attention_backward) \
  X(attention_forward_block) X(attention_backward_block) X(attention_merge) \
  X(gelu_forward) X(gelu_backward) X(residual_forward) X(crossentropy_forward) \
  X(crossentropy_backward) X(argmax_rows) X(adamw_update) X(squared_norm) \
  X(scale)
// clang-format on

// Expands to "+1" per op (a sum, so it cannot be parenthesised).
#define CAIRN_KERNEL_OP_COUNT_ONE(op) +1  // NOLINT(bugprone-macro-parentheses)
inline constexpr int kKernelOpCount = 0 CAIRN_KERNEL_OPS(CAIRN_KERNEL_OP_COUNT_ONE);
#undef CAIRN_KERNEL_OP_COUNT_ONE
static_assert(sizeof(Backend) == offsetof(Backend, embedding_forward) + kKernelOpCount * sizeof(void (*)()),
              "CAIRN_KERNEL_OPS must list every compute op of Backend (after the memory hooks), in any order");

// Threads of the CPU backends in this process: OpenMP's count and OpenBLAS's (the pthread build ignores OpenMP's
// and would start one thread per core in every rank, oversubscribing the cores under MPI).
void set_cpu_threads(int threads);

// Plain readable loops (the llm.c-style reference every other backend is tested against).
const Backend& cpu_reference_backend();
// Fast CPU backend: OpenBLAS sgemm for matmuls, OpenMP across batch/heads/rows, SIMD-friendly loops.
const Backend& cpu_backend();
// "cpu", "cpu-ref" (and "cuda" when built with CUDA); nullptr if unknown or unavailable.
const Backend* find_backend(const char* name);
// Comma-separated names find_backend accepts in this build, for error messages.
const char* backend_names();
// Why find_backend(name) returns nullptr, as one sentence for an error message (unknown name, or built with CUDA
// but no usable device: then the CUDA error and the driver/runtime versions, cairn/kernels/cuda_probe.h); nullptr
// when the backend is available.
const char* backend_unavailable_reason(const char* name);
// True when backend_unavailable_reason(name) is a failure of this machine, not an absence: a GPU driver that is there
// but fails (too old for the CUDA runtime, ...). Tools exit 1 (runtime failure) for it and 2 (usage: this machine has
// no such backend) otherwise, so GPU checks skip only where there is no GPU.
bool backend_unavailable_is_failure(const char* name);

}  // namespace cairn::kernels
