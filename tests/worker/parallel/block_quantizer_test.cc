#include "worker/parallel/block_quantizer.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

using dslaunch::worker::dequantize;
using dslaunch::worker::kQuantizationBlock;
using dslaunch::worker::quantize;
using dslaunch::worker::quantized_bytes;

TEST_CASE("a quantized buffer is a scale per block of 64 and a byte per value") {
  CHECK(kQuantizationBlock == 64);
  CHECK(quantized_bytes(0) == 0);
  CHECK(quantized_bytes(1) == 5);
  CHECK(quantized_bytes(64) == 68);
  CHECK(quantized_bytes(65) == 73);
  CHECK(quantized_bytes(1000) == 16 * 4 + 1000);
  // The largest count one collective moves still counts in an int.
  CHECK(quantized_bytes(dslaunch::worker::kMaxQuantizableCount) <= 2147483647LL);
}

TEST_CASE("values come back within half a step of their block's scale, the largest exactly") {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t count : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{1001}}) {
    CAPTURE(count);
    std::vector<float> x(count);
    for (int64_t i = 0; i < count; ++i) x[i] = normal(random) * (1 + i / kQuantizationBlock);
    std::vector<uint8_t> packed(quantized_bytes(count));
    quantize(x.data(), count, packed.data());
    std::vector<float> back(count);
    dequantize(packed.data(), count, back.data());
    for (int64_t begin = 0; begin < count; begin += kQuantizationBlock) {
      const int64_t end = std::min(count, begin + kQuantizationBlock);
      float largest = 0;
      for (int64_t i = begin; i < end; ++i) largest = std::max(largest, std::abs(x[i]));
      const float step = largest / 127.0f;
      for (int64_t i = begin; i < end; ++i) {
        REQUIRE(std::abs(back[i] - x[i]) <= 0.5001f * step);
        if (std::abs(x[i]) == largest)
          REQUIRE(std::abs(std::abs(back[i]) - largest) <= 1e-6f * largest);
      }
    }
  }
}

TEST_CASE("zeros stay zeros, and a block with inf or NaN comes back NaN, the others intact") {
  std::vector<float> x(200, 0.0f);
  x[70] = std::numeric_limits<float>::infinity();  // block [64, 128)
  x[150] = 2.0f;                                   // block [128, 192)
  std::vector<uint8_t> packed(quantized_bytes(200));
  quantize(x.data(), 200, packed.data());
  std::vector<float> back(200);
  dequantize(packed.data(), 200, back.data());
  for (int i = 0; i < 64; ++i) REQUIRE(back[i] == 0.0f);
  for (int i = 64; i < 128; ++i) REQUIRE(std::isnan(back[i]));
  for (int i = 128; i < 200; ++i) REQUIRE(back[i] == (i == 150 ? 2.0f : 0.0f));
}
