// float <-> bf16 / fp16 conversions: known values, every 16-bit pattern's
// round trip, and rounding checked against independent references (the
// CPU's F16C instruction for fp16, exact arithmetic for bf16) on a sweep of
// float bit patterns.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/half_precision.h"

namespace dslaunch::kernels {
namespace {

// Every 4099th float bit pattern (a prime stride reaches every exponent and
// a spread of mantissas), plus the patterns around each exponent's edges.
std::vector<uint32_t> float_sweep() {
  std::vector<uint32_t> bits;
  for (uint64_t b = 0; b <= 0xffffffffull; b += 4099) bits.push_back(static_cast<uint32_t>(b));
  for (uint32_t exponent = 0; exponent < 256; ++exponent) {
    for (const uint32_t mantissa : {0u, 1u, 0x1000u, 0x0fffu, 0x1fffu, 0x8000u, 0x7fffu, 0x18000u,
                                    0x7fffffu, 0x400000u}) {
      bits.push_back((exponent << 23) | mantissa);
      bits.push_back(0x80000000u | (exponent << 23) | mantissa);
    }
  }
  return bits;
}

// The bf16 nearest to x, ties to even, by exact comparison in double.
uint16_t reference_bf16(float x) {
  const uint32_t bits = float_bits(x);
  const uint16_t down = static_cast<uint16_t>(bits >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);
  const double below = std::fabs(static_cast<double>(x) - bf16_to_float(down));
  const double above = std::fabs(static_cast<double>(bf16_to_float(up)) - x);
  if (below < above) return down;
  if (above < below) return up;
  return (down & 1) ? up : down;
}

__attribute__((target("f16c"))) uint16_t hardware_fp16(float x) {
  return static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

TEST_CASE("known values convert as IEEE and PyTorch have them") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(-2.0f) == 0xc000);
  CHECK(float_to_bf16(float_from_bits(0x3f808000u)) == 0x3f80);  // tie: to even (down)
  CHECK(float_to_bf16(float_from_bits(0x3f818000u)) == 0x3f82);  // tie: to even (up)
  CHECK(float_to_bf16(float_from_bits(0x3f808001u)) == 0x3f81);
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds past the largest
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(float_from_bits(0x7f800001u)))));  // signalling
  CHECK(float_to_fp16(1.0f) == 0x3c00);
  CHECK(float_to_fp16(-0.0f) == 0x8000);
  CHECK(float_to_fp16(65504.0f) == 0x7bff);
  CHECK(float_to_fp16(65519.0f) == 0x7bff);
  CHECK(float_to_fp16(65520.0f) == 0x7c00);  // the tie past the largest: infinity
  CHECK(float_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(float_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(float_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // its half: a tie, to even
  CHECK(float_to_fp16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(float_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 units: a tie, to even (2)
  CHECK(fp16_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(fp16_to_float(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(fp16_to_float(float_to_fp16(std::nanf("")))));
}

TEST_CASE("every bf16 and fp16 value survives a round trip through float") {
  for (uint32_t u = 0; u <= 0xffff; ++u) {
    const auto value = static_cast<uint16_t>(u);
    const float as_bf16 = bf16_to_float(value);
    const float as_fp16 = fp16_to_float(value);
    if (std::isnan(as_bf16)) {
      CHECK(std::isnan(bf16_to_float(float_to_bf16(as_bf16))));
    } else if (float_to_bf16(as_bf16) != value) {
      FAIL_CHECK("bf16 " << u << " comes back as " << float_to_bf16(as_bf16));
    }
    if (std::isnan(as_fp16)) {
      CHECK(std::isnan(fp16_to_float(float_to_fp16(as_fp16))));
    } else if (float_to_fp16(as_fp16) != value) {
      FAIL_CHECK("fp16 " << u << " comes back as " << float_to_fp16(as_fp16));
    }
  }
}

TEST_CASE("rounding to bf16 matches exact nearest-even on a sweep of floats") {
  int64_t checked = 0;
  for (const uint32_t bits : float_sweep()) {
    const float x = float_from_bits(bits);
    if (std::isnan(x) || std::isinf(x) || std::fabs(x) > 3.38e38f) continue;  // past bf16's largest
    const uint16_t ours = float_to_bf16(x);
    if (ours != reference_bf16(x)) FAIL_CHECK("float bits " << bits << ": " << ours);
    ++checked;
  }
  CHECK(checked > 1'000'000);
}

TEST_CASE("rounding to fp16 matches the CPU's F16C conversion on a sweep of floats") {
  if (!__builtin_cpu_supports("f16c")) {
    WARN("this CPU has no F16C: skipped");
    return;
  }
  int64_t checked = 0;
  for (const uint32_t bits : float_sweep()) {
    const float x = float_from_bits(bits);
    const uint16_t ours = float_to_fp16(x);
    const uint16_t theirs = hardware_fp16(x);
    const bool both_nan = std::isnan(fp16_to_float(ours)) && std::isnan(fp16_to_float(theirs));
    if (ours != theirs && !both_nan) FAIL_CHECK("float bits " << bits << ": " << ours << " vs " << theirs);
    ++checked;
  }
  CHECK(checked > 1'000'000);
}

TEST_CASE("the backend converts arrays between the three types") {
  auto backend = make_cpu_backend(2);
  const int64_t n = 40'000;  // several chunks
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.001f * i) * 1000.0f;
  std::vector<uint16_t> half(n);
  std::vector<float> back(n);
  for (const core::DType dtype : {core::DType::kBF16, core::DType::kF16}) {
    backend->convert(half.data(), dtype, x.data(), core::DType::kF32, n);
    backend->convert(back.data(), core::DType::kF32, half.data(), dtype, n);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t expected = dtype == core::DType::kBF16 ? float_to_bf16(x[i]) : float_to_fp16(x[i]);
      if (half[i] != expected) FAIL_CHECK(core::dtype_name(dtype) << " element " << i);
    }
    CHECK(back[n - 1] == (dtype == core::DType::kBF16 ? bf16_to_float(half[n - 1])
                                                      : fp16_to_float(half[n - 1])));
  }
  std::vector<uint16_t> bf16(n);
  backend->convert(half.data(), core::DType::kF16, x.data(), core::DType::kF32, n);
  backend->convert(bf16.data(), core::DType::kBF16, half.data(), core::DType::kF16, n);
  CHECK(bf16[123] == float_to_bf16(fp16_to_float(half[123])));
  CHECK_THROWS_AS(backend->convert(back.data(), core::DType::kF32, x.data(), core::DType::kI32, n),
                  std::invalid_argument);
}

}  // namespace
}  // namespace dslaunch::kernels
