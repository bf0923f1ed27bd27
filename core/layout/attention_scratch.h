#pragma once

#include <algorithm>
#include <cstdint>

namespace dslaunch::core {

// What a backend's attention kernels take as scratch during a pass
// (kernels/backend.h), which the model's layout and the plan size:
// - kHeadProbabilities: one head's probabilities (B,T,T) and their gradient,
//   2·B·T·T floats (the CPU backend, a head at a time through sgemm);
// - kRowBlockProbabilities: one head's probabilities and their gradient for
//   a block of up to kAttentionRowBlock query rows of every sequence,
//   2·B·min(T, kAttentionRowBlock)·T floats (the CUDA backend, a block at a
//   time through cuBLAS: linear in T, never a (T,T) matrix).
enum class AttentionScratch { kHeadProbabilities, kRowBlockProbabilities };

// Query rows per block of the CUDA backend's attention: the products stay
// large (256 rows of each sequence at once) while the causal mask skips
// most of what the block's rows do not see (at T 1024, 37% of the scores).
inline constexpr int64_t kAttentionRowBlock = 256;

// The rows of a block over sequences of T positions.
inline int64_t attention_block_rows(int64_t T) { return std::min(T, kAttentionRowBlock); }

// Floats of scratch for a pass over B sequences of T positions (both
// backends take the heads one at a time).
inline int64_t attention_scratch_floats(AttentionScratch kind, int64_t B, int64_t T) {
  return kind == AttentionScratch::kHeadProbabilities ? 2 * B * T * T
                                                      : 2 * B * attention_block_rows(T) * T;
}

}  // namespace dslaunch::core
