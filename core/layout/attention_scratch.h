#pragma once

#include <cstdint>

namespace dslaunch::core {

// What a backend's attention kernels take as scratch during a pass
// (kernels/backend.h), which the model's layout and the plan size:
// - kHeadProbabilities: one head's probabilities (B,T,T) and their gradient,
//   2·B·T·T floats (the CPU backend, a head at a time through sgemm);
// - kRowStatistics: each row's log-sum-exp and softmax-gradient correction
//   for every head, 2·B·NH·T floats (the CUDA backend's tiled kernels,
//   which never hold a (T,T) matrix).
enum class AttentionScratch { kHeadProbabilities, kRowStatistics };

// The widest head the tiled kernels take (kernels/simt's
// tiled_attention_kernels.h: four channels a lane).
inline constexpr int64_t kMaxTiledHeadSize = 128;

// Floats of scratch for a pass over B sequences of T positions with NH heads.
inline int64_t attention_scratch_floats(AttentionScratch kind, int64_t B, int64_t T, int64_t NH) {
  return kind == AttentionScratch::kHeadProbabilities ? 2 * B * T * T : 2 * B * NH * T;
}

}  // namespace dslaunch::core
