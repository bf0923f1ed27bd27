#include "worker/parallel/block_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace dslaunch::worker {

int64_t quantized_bytes(int64_t count) {
  const int64_t blocks = (count + kQuantizationBlock - 1) / kQuantizationBlock;
  return blocks * static_cast<int64_t>(sizeof(float)) + count;
}

void quantize(const float* x, int64_t count, uint8_t* out) {
  for (int64_t begin = 0; begin < count; begin += kQuantizationBlock) {
    const int64_t n = std::min(kQuantizationBlock, count - begin);
    const float* block = x + begin;
    float largest = 0;
    bool finite = true;
    for (int64_t i = 0; i < n; ++i) {
      finite = finite && std::isfinite(block[i]);
      largest = std::max(largest, std::abs(block[i]));
    }
    const float scale = finite ? largest / 127.0f : std::numeric_limits<float>::quiet_NaN();
    std::memcpy(out, &scale, sizeof scale);
    out += sizeof scale;
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float q = finite ? std::nearbyint(block[i] * inverse) : 0.0f;
      out[i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
    }
    out += n;
  }
}

void dequantize(const uint8_t* in, int64_t count, float* out) {
  for (int64_t begin = 0; begin < count; begin += kQuantizationBlock) {
    const int64_t n = std::min(kQuantizationBlock, count - begin);
    float scale = 0;
    std::memcpy(&scale, in, sizeof scale);
    in += sizeof scale;
    for (int64_t i = 0; i < n; ++i) out[begin + i] = scale * static_cast<int8_t>(in[i]);
    in += n;
  }
}

}  // namespace dslaunch::worker
