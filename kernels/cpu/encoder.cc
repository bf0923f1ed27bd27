#include <algorithm>
#include <vector>

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
  // The slice's positions grouped by row, rows ascending, each row's in
  // (b, t) order.
  const auto row_of = [&](int64_t bt) { return int64_t{tokens[bt]} - vocab.begin; };
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(B * T));
  for (int64_t bt = 0; bt < B * T; ++bt) {
    if (row_of(bt) >= 0 && row_of(bt) < vocab.rows) order.push_back(bt);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return row_of(x) < row_of(y); });
#pragma omp parallel
  {
    // Each position sums its B rows, in batch order.
#pragma omp for schedule(static) nowait
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t b = 0; b < B; ++b) accumulate(dwpe + t * C, dout + (b * T + t) * C, C);
    }
    // A token can repeat, so threads split the columns rather than the
    // tokens: each walks every token's positions in order over its own
    // columns, without races and with the same order of additions whatever
    // the thread count; a token's sum goes to its row in one addition.
#pragma omp for schedule(static)
    for (int64_t block = 0; block < column_blocks; ++block) {
      const int64_t c0 = block * kColumnBlock;
      const int64_t width = std::min(kColumnBlock, C - c0);
      float sum[kColumnBlock];
      for (size_t i = 0; i < order.size();) {
        const int64_t row = row_of(order[i]);
        copy_row(sum, dout + order[i] * C + c0, width);
        size_t j = i + 1;
        for (; j < order.size() && row_of(order[j]) == row; ++j) {
          accumulate(sum, dout + order[j] * C + c0, width);
        }
        accumulate(dwte + row * C + c0, sum, width);
        i = j;
      }
    }
  }
}

}  // namespace dslaunch::kernels::cpu
