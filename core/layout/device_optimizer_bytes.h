#pragma once

#include <algorithm>
#include <cstdint>

namespace dslaunch::core {

// The optimizer on a GPU (worker/engine/optimizer.h, AdamW::place_on_device):
// each step uploads the gradients and downloads the updated weights through
// staging of at most this many floats (16 MiB), so the staging costs the
// GPU little whatever the partition's size.
inline constexpr int64_t kDeviceOptimizerChunk = int64_t{1} << 22;

// GPU bytes that optimizer holds for `elements` parameters: their fp32
// masters (in fp32 training with the weights on the GPU, the weights
// themselves, counted with them) and Adam's two moments, and where the
// step's gradients and weights are in host memory (`staged`) the staging of
// one chunk's gradients (and in 16-bit training of its rounded weights).
inline int64_t device_optimizer_bytes(int64_t elements, bool mixed, bool staged) {
  const int64_t masters = staged || mixed ? elements : 0;
  const int64_t staging = staged ? std::min(elements, kDeviceOptimizerChunk) * (mixed ? 2 : 1) : 0;
  return (masters + 2 * elements + staging) * 4;
}

}  // namespace dslaunch::core
