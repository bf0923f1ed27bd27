// Conversions between fp32, bf16 and fp16, element by element.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vectorize.h"
#include "kernels/half_precision.h"

namespace dslaunch::kernels::cpu {
namespace {

bool convertible(core::DType dtype) {
  return dtype == core::DType::kF32 || dtype == core::DType::kBF16 || dtype == core::DType::kF16;
}

// The loop for one (load, store) pair, so the element types are chosen once
// per call, not per element.
template <typename Load, typename Store>
void convert_loop(int64_t n, const Load& load, const Store& store) {
  for_each_chunk(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) store(i, load(i));
  });
}

template <typename Load>
void convert_to(void* out, core::DType out_dtype, int64_t n, const Load& load) {
  switch (out_dtype) {
    case core::DType::kBF16: {
      auto* to = static_cast<uint16_t*>(out);
      convert_loop(n, load, [to](int64_t i, float v) { to[i] = float_to_bf16(v); });
      break;
    }
    case core::DType::kF16: {
      auto* to = static_cast<uint16_t*>(out);
      convert_loop(n, load, [to](int64_t i, float v) { to[i] = float_to_fp16(v); });
      break;
    }
    default: {
      auto* to = static_cast<float*>(out);
      convert_loop(n, load, [to](int64_t i, float v) { to[i] = v; });
    }
  }
}

// One chunk of round_to, compiled per instruction set (16 elements at a
// time on AVX-512).
DSL_VECTOR_CLONES void round_range(float* out, const float* in, int64_t n, core::DType dtype) {
  switch (dtype) {
    case core::DType::kBF16:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(float_to_bf16(in[i]));
      break;
    case core::DType::kF16:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_float(float_to_fp16(in[i]));
      break;
    default:
      if (out != in) std::copy(in, in + n, out);
  }
}

}  // namespace

void convert(void* out, core::DType out_dtype, const void* in, core::DType in_dtype, int64_t n) {
  if (!convertible(out_dtype) || !convertible(in_dtype)) {
    throw std::invalid_argument("convert: " + std::string(core::dtype_name(in_dtype)) + " to " +
                                std::string(core::dtype_name(out_dtype)) +
                                " is not a conversion between fp32, bf16 and fp16");
  }
  switch (in_dtype) {
    case core::DType::kBF16: {
      const auto* from = static_cast<const uint16_t*>(in);
      convert_to(out, out_dtype, n, [from](int64_t i) { return bf16_to_float(from[i]); });
      break;
    }
    case core::DType::kF16: {
      const auto* from = static_cast<const uint16_t*>(in);
      convert_to(out, out_dtype, n, [from](int64_t i) { return fp16_to_float(from[i]); });
      break;
    }
    default: {
      const auto* from = static_cast<const float*>(in);
      convert_to(out, out_dtype, n, [from](int64_t i) { return from[i]; });
    }
  }
}

void round_to(float* out, const float* in, int64_t n, core::DType dtype) {
  if (dtype != core::DType::kF32 && dtype != core::DType::kBF16 && dtype != core::DType::kF16) {
    throw std::invalid_argument("round_to: " + std::string(core::dtype_name(dtype)) +
                                " is not fp32, bf16 or fp16");
  }
  for_each_chunk(n, [=](int64_t begin, int64_t end) {
    round_range(out + begin, in + begin, end - begin, dtype);
  });
}

}  // namespace dslaunch::kernels::cpu
