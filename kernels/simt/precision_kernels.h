#pragma once

// The optimizer step and the 16-bit conversions as kernels (see
// elementwise_kernels.h for the form), on kernels/math's and
// kernels/half_precision.h's per-element functions.

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/half_precision.h"
#include "kernels/math/adamw.h"
#include "kernels/simt/block_reduce.h"
#include "kernels/simt/host_device.h"
#include "kernels/simt/launch_shape.h"

namespace dslaunch::kernels::simt {

// value rounded to bf16 or fp16 and widened back; kF32 (or another dtype)
// leaves it.
DSL_HOST_DEVICE inline float rounded_to(float value, core::DType dtype) {
  if (dtype == core::DType::kBF16) return bf16_to_float(float_to_bf16(value));
  if (dtype == core::DType::kF16) return fp16_to_float(float_to_fp16(value));
  return value;
}

// Backend::adamw_update: the scalars are computed on the host
// (math::adam_scalars), each thread updates its elements.
struct AdamWUpdate {
  float* params;
  const float* grads;
  float* m;
  float* v;
  int64_t n;
  math::AdamScalars scalars;
  float* rounded;  // may be null
  core::DType rounded_dtype;

  LaunchShape shape() const { return grid_stride_shape(n); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < n; i += grid_stride(t)) {
      float param = params[i];
      float m_i = m[i];
      float v_i = v[i];
      math::adam_element(param, grads[i], m_i, v_i, scalars);
      params[i] = param;
      m[i] = m_i;
      v[i] = v_i;
      if (rounded != nullptr) rounded[i] = rounded_to(param, rounded_dtype);
    }
  }
};

struct RoundTo {
  float* out;
  const float* in;
  int64_t n;
  core::DType dtype;

  LaunchShape shape() const { return grid_stride_shape(n); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < n; i += grid_stride(t)) out[i] = rounded_to(in[i], dtype);
  }
};

// A block of a row-major fp32 matrix (rows x cols, rows `ld` apart) rounded
// to bf16 or fp16 and packed as 16-bit values (rows `cols` apart): an
// operand of a 16-bit product on cuBLAS (kernels/rounded_gemm_tiles.h).
struct PackRounded16 {
  uint16_t* out;
  const float* in;
  int64_t rows;
  int64_t cols;
  int64_t ld;
  core::DType dtype;

  // A block a row at a time (no per-element division: a 64-bit one is a
  // long instruction sequence on a GPU).
  LaunchShape shape() const {
    return {static_cast<int>(std::clamp<int64_t>(rows, 1, 8192)), 256, 0};
  }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t r = t.block_index(); r < rows; r += t.grid_size()) {
      const float* from = in + r * ld;
      uint16_t* to = out + r * cols;
      for (int64_t c = t.thread_index(); c < cols; c += t.block_size()) {
        to[c] = dtype == core::DType::kBF16 ? float_to_bf16(from[c]) : float_to_fp16(from[c]);
      }
    }
  }
};

// Backend::convert between fp32, bf16 and fp16 (the caller checks the
// dtypes).
struct Convert {
  void* out;
  core::DType out_dtype;
  const void* in;
  core::DType in_dtype;
  int64_t n;

  LaunchShape shape() const { return grid_stride_shape(n); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < n; i += grid_stride(t)) store(i, load(i));
  }

 private:
  DSL_HOST_DEVICE float load(int64_t i) const {
    if (in_dtype == core::DType::kBF16) return bf16_to_float(static_cast<const uint16_t*>(in)[i]);
    if (in_dtype == core::DType::kF16) return fp16_to_float(static_cast<const uint16_t*>(in)[i]);
    return static_cast<const float*>(in)[i];
  }
  DSL_HOST_DEVICE void store(int64_t i, float value) const {
    if (out_dtype == core::DType::kBF16) {
      static_cast<uint16_t*>(out)[i] = float_to_bf16(value);
    } else if (out_dtype == core::DType::kF16) {
      static_cast<uint16_t*>(out)[i] = float_to_fp16(value);
    } else {
      static_cast<float*>(out)[i] = value;
    }
  }
};

}  // namespace dslaunch::kernels::simt
