#pragma once

// Scalar conversions between float and the two 16-bit formats, rounding to
// nearest even as PyTorch's .to(torch.bfloat16) and .to(torch.float16) and
// CUDA's __float2bfloat16_rn / __float2half_rn do. Plain integer arithmetic
// (DSL_HOST_DEVICE), so the CUDA kernels run the same functions, tested
// here bit for bit. Written by hand because no Debian library offers
// them for C++17/20 (std::bfloat16_t is C++23).

#include <cstdint>
#include <cstring>

#include "kernels/simt/host_device.h"

namespace dslaunch::kernels {

DSL_HOST_DEVICE inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

DSL_HOST_DEVICE inline float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// bf16 is float's upper half: round the lower half away, ties to even. NaNs
// stay NaN (quiet), whatever their payload.
DSL_HOST_DEVICE inline uint16_t float_to_bf16(float value) {
  const uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

DSL_HOST_DEVICE inline float bf16_to_float(uint16_t value) { return float_from_bits(static_cast<uint32_t>(value) << 16); }

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; values
// past 65504 (after rounding) become infinity, values below 2^-24 / 2 zero,
// and subnormals are rounded like the rest.
DSL_HOST_DEVICE inline uint16_t float_to_fp16(float value) {
  const uint32_t bits = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (magnitude < 0x38800000u) {
    // Below fp16's smallest normal (2^-14): a subnormal, counted in units of
    // 2^-24. Shift the full 24-bit significand and round to nearest even.
    if (magnitude < 0x33000000u) return sign;  // below 2^-25: rounds to zero
    const uint32_t exponent = magnitude >> 23;
    const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;  // 14 (2^-14) .. 24 (2^-25)
    const uint32_t kept = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    const uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | rounded);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits.
  const uint32_t rebased = magnitude - (112u << 23);
  const uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rebased + rounding) >> 13));
}

DSL_HOST_DEVICE inline float fp16_to_float(uint16_t value) {
  const uint32_t sign = static_cast<uint32_t>(value & 0x8000u) << 16;
  const uint32_t exponent = (value >> 10) & 0x1fu;
  const uint32_t mantissa = value & 0x3ffu;
  if (exponent == 0x1fu) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return float_from_bits(sign);  // ±0
  // Subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return sign != 0 ? -magnitude : magnitude;
}

}  // namespace dslaunch::kernels
