// The vocabulary padded for tensor parallelism, as Megatron-LM pads it: one rule for cairn-plan's pricing and
// best.toml and cairn-train's suggestion, so the plan a planner writes is one the trainer runs.
#pragma once

#include <cstdint>

namespace cairn {

// Megatron's make_vocab_size_divisible_by (128) times tp: embedding rows split evenly over the TP ranks, each
// share a multiple of 128 (GEMM-friendly). Returned as is when tp already divides the vocabulary (cairn trains the
// exact size then; the rows past the tokenizer's are never a target, as in Megatron).
inline int64_t tp_padded_vocab(int64_t vocab, int tp) {
  if (tp <= 1 || vocab <= 0 || vocab % tp == 0) return vocab;
  const int64_t unit = int64_t{128} * tp;
  return (vocab + unit - 1) / unit * unit;
}

}  // namespace cairn
