#pragma once

// The token and position embeddings as kernels (see elementwise_kernels.h
// for the form). The backward kernels add in the CPU backend's order (over
// the batch for a position, over the tokens in order for a token row), one
// thread per output element: no atomics, the same bits every run.

#include <cstdint>
#include <map>
#include <vector>

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

// The positions of a batch grouped by the token-embedding row they add to,
// for EncoderBackwardTokens: rows[u] is a row of the slice some position
// holds, and its positions (in (b, t) order) are
// positions[offsets[u], offsets[u + 1]). Computed on the host from the
// batch's tokens (a few thousand), so that the kernel needs no atomics.
struct TokenGroups {
  std::vector<int32_t> rows;
  std::vector<int32_t> offsets;  // rows.size() + 1
  std::vector<int32_t> positions;
};

inline TokenGroups group_by_row(const int32_t* tokens, int64_t BT, int64_t vocab_begin,
                                int64_t vocab_rows) {
  std::map<int32_t, std::vector<int32_t>> by_row;
  for (int64_t bt = 0; bt < BT; ++bt) {
    const int64_t row = static_cast<int64_t>(tokens[bt]) - vocab_begin;
    if (row >= 0 && row < vocab_rows) {
      by_row[static_cast<int32_t>(row)].push_back(static_cast<int32_t>(bt));
    }
  }
  TokenGroups groups;
  groups.offsets.push_back(0);
  for (const auto& [row, positions] : by_row) {
    groups.rows.push_back(row);
    groups.positions.insert(groups.positions.end(), positions.begin(), positions.end());
    groups.offsets.push_back(static_cast<int32_t>(groups.positions.size()));
  }
  return groups;
}

// dwte (vocab_rows,C) += the sum of dout at each group's positions, one
// thread per (group, column) summing its positions in order and adding the
// sum to dwte once: the additions, and so the bits, of the CPU backend's
// loop.
struct EncoderBackwardTokens {
  float* dwte;
  const float* dout;
  const int32_t* rows;
  const int32_t* offsets;
  const int32_t* positions;
  int64_t groups;
  int64_t C;

  LaunchShape shape() const { return grid_stride_shape(groups * C); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < groups * C; i += grid_stride(t)) {
      const int64_t group = i / C;
      const int64_t c = i % C;
      float* out = dwte + static_cast<int64_t>(rows[group]) * C + c;
      float sum = dout[static_cast<int64_t>(positions[offsets[group]]) * C + c];
      for (int32_t k = offsets[group] + 1; k < offsets[group + 1]; ++k) {
        sum += dout[static_cast<int64_t>(positions[k]) * C + c];
      }
      *out += sum;
    }
  }
};

}  // namespace dslaunch::kernels::simt
