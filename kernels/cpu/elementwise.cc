#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vectorize.h"

namespace dslaunch::kernels::cpu {
namespace {

DSL_VECTOR_CLONES void add_chunk(float* out, const float* a, const float* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

DSL_VECTOR_CLONES void accumulate_twice_chunk(float* da, float* db, const float* dout, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

DSL_VECTOR_CLONES double sum_of_squares_chunk(const float* x, int64_t n) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

DSL_VECTOR_CLONES void scale_chunk(float* x, int64_t n, float factor) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

DSL_VECTOR_CLONES void divide_chunk(float* x, int64_t n, float divisor) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] /= divisor;
}

}  // namespace

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  for_each_chunk(n, [&](int64_t begin, int64_t end) {
    add_chunk(out + begin, a + begin, b + begin, end - begin);
  });
}

void residual_backward(float* da, float* db, const float* dout, int64_t n) {
  for_each_chunk(n, [&](int64_t begin, int64_t end) {
    accumulate_twice_chunk(da + begin, db + begin, dout + begin, end - begin);
  });
}

static_assert(kChunk == kSumOfSquaresBlock, "sum_of_squares's blocks are part of its contract");

double sum_of_squares(const float* x, int64_t n) {
  // One partial sum per chunk, added in chunk order: the same total whatever
  // the thread count.
  std::vector<double> partials((n + kChunk - 1) / kChunk);
  for_each_chunk(n, [&](int64_t begin, int64_t end) {
    partials[begin / kChunk] = sum_of_squares_chunk(x + begin, end - begin);
  });
  double total = 0;
  for (const double partial : partials) total += partial;
  return total;
}

void scale(float* x, int64_t n, float factor) {
  for_each_chunk(n,
                 [&](int64_t begin, int64_t end) { scale_chunk(x + begin, end - begin, factor); });
}

void divide(float* x, int64_t n, float divisor) {
  for_each_chunk(
      n, [&](int64_t begin, int64_t end) { divide_chunk(x + begin, end - begin, divisor); });
}

void fill(float* x, int64_t n, float value) {
  for_each_chunk(n, [&](int64_t begin, int64_t end) { std::fill(x + begin, x + end, value); });
}

void mean(float* result, const float* x, int64_t n) {
  // One sum in index order (the losses of a micro-batch: a few thousand).
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  result[0] = static_cast<float>(sum / static_cast<double>(n));
}

}  // namespace dslaunch::kernels::cpu
