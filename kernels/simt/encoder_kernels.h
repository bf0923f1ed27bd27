#pragma once

// The token and position embeddings as kernels (see elementwise_kernels.h
// for the form). The backward kernels add in the CPU backend's order (over
// the batch for a position, over the tokens in order for a token row), one
// thread per output element or column: no atomics, the same bits every run.

#include <cstdint>

#include "kernels/simt/block_reduce.h"
#include "kernels/simt/host_device.h"
#include "kernels/simt/launch_shape.h"

namespace dslaunch::kernels::simt {

// out (B,T,C) = wte[token - vocab_begin] (when the slice holds it) + wpe[t]
// (when wpe is not null).
struct EncoderForward {
  float* out;
  const int32_t* tokens;
  const float* wte;
  int64_t vocab_begin;
  int64_t vocab_rows;
  const float* wpe;
  int64_t B;
  int64_t T;
  int64_t C;

  LaunchShape shape() const { return grid_stride_shape(B * T * C); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < B * T * C; i += grid_stride(t)) {
      const int64_t bt = i / C;
      const int64_t c = i % C;
      const int64_t row = static_cast<int64_t>(tokens[bt]) - vocab_begin;
      const bool held = row >= 0 && row < vocab_rows;
      const float* position = wpe != nullptr ? wpe + (bt % T) * C + c : nullptr;
      if (held && position != nullptr) {
        out[i] = wte[row * C + c] + *position;
      } else if (held) {
        out[i] = wte[row * C + c];
      } else {
        out[i] = position != nullptr ? *position : 0.0f;
      }
    }
  }
};

// dwpe (T,C) += dout summed over the batch, one thread per (t, c).
struct EncoderBackwardPositions {
  float* dwpe;
  const float* dout;
  int64_t B;
  int64_t T;
  int64_t C;

  LaunchShape shape() const { return grid_stride_shape(T * C); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < T * C; i += grid_stride(t)) {
      for (int64_t b = 0; b < B; ++b) dwpe[i] += dout[b * T * C + i];
    }
  }
};

// dwte (vocab_rows,C) += dout scattered over the tokens the slice holds, one
// thread per column walking the tokens in order (a token may repeat).
struct EncoderBackwardTokens {
  float* dwte;
  int64_t vocab_begin;
  int64_t vocab_rows;
  const float* dout;
  const int32_t* tokens;
  int64_t BT;
  int64_t C;

  LaunchShape shape() const { return grid_stride_shape(C); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t c = grid_first(t); c < C; c += grid_stride(t)) {
      for (int64_t bt = 0; bt < BT; ++bt) {
        const int64_t row = static_cast<int64_t>(tokens[bt]) - vocab_begin;
        if (row >= 0 && row < vocab_rows) dwte[row * C + c] += dout[bt * C + c];
      }
    }
  }
};

}  // namespace dslaunch::kernels::simt
