#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vectorize.h"

namespace dslaunch::kernels::cpu {
namespace {

// Columns per piece of encoder_backward's token-embedding gradient.
constexpr int64_t kColumnBlock = 64;

DSL_VECTOR_CLONES void add_rows(float* out, const float* a, const float* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

DSL_VECTOR_CLONES void copy_row(float* out, const float* a, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[i];
}

DSL_VECTOR_CLONES void accumulate(float* dst, const float* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

void encoder_forward(float* out, const int32_t* tokens, const float* wte, Backend::VocabSlice vocab,
                     const float* wpe, int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t row = int64_t{tokens[bt]} - vocab.begin;
    const bool held = row >= 0 && row < vocab.rows;
    float* o = out + bt * C;
    if (held && wpe != nullptr) {
      add_rows(o, wte + row * C, wpe + (bt % T) * C, C);
    } else if (held) {
      copy_row(o, wte + row * C, C);
    } else if (wpe != nullptr) {
      copy_row(o, wpe + (bt % T) * C, C);
    } else {
      std::fill(o, o + C, 0.0f);
    }
  }
}

void encoder_backward(float* dwte, Backend::VocabSlice vocab, float* dwpe, const float* dout,
                      const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
  const int64_t column_blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel
  {
    // Each position sums its B rows, in batch order.
#pragma omp for schedule(static) nowait
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t b = 0; b < B; ++b) accumulate(dwpe + t * C, dout + (b * T + t) * C, C);
    }
    // A token can repeat, so threads split the columns rather than the
    // tokens: each walks every token in order over its own columns, without
    // races and with the same order of additions whatever the thread count.
#pragma omp for schedule(static)
    for (int64_t block = 0; block < column_blocks; ++block) {
      const int64_t c0 = block * kColumnBlock;
      const int64_t width = std::min(kColumnBlock, C - c0);
      for (int64_t bt = 0; bt < B * T; ++bt) {
        const int64_t row = int64_t{tokens[bt]} - vocab.begin;
        if (row < 0 || row >= vocab.rows) continue;
        accumulate(dwte + row * C + c0, dout + bt * C + c0, width);
      }
    }
  }
}

}  // namespace dslaunch::kernels::cpu
