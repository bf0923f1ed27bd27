#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/kernels/cpu/kernel_testing.h"

namespace dslaunch::kernels::testing {
namespace {

struct AttentionOutput {
  std::vector<double> out;  // (B,T,C)
  std::vector<double> att;  // (B,NH,T,T): what the output is made of
};

// Causal self-attention as written in the GPT-2 paper, one score at a time.
AttentionOutput reference_attention(const std::vector<double>& qkv, int64_t B, int64_t T, int64_t C,
                                    int64_t NH) {
  const int64_t hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  AttentionOutput result{std::vector<double>(B * T * C), std::vector<double>(B * NH * T * T)};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const double* q = &qkv[(b * T + t) * 3 * C + h * hs];
        double* att = &result.att[((b * NH + h) * T + t) * T];
        double max = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          const double* k = &qkv[(b * T + j) * 3 * C + C + h * hs];
          double dot = 0;
          for (int64_t i = 0; i < hs; ++i) dot += q[i] * k[i];
          att[j] = dot * scale;
          max = std::max(max, att[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= t; ++j) sum += att[j] = std::exp(att[j] - max);
        for (int64_t j = 0; j <= t; ++j) att[j] /= sum;
        double* out = &result.out[(b * T + t) * C + h * hs];
        for (int64_t j = 0; j <= t; ++j) {
          const double* v = &qkv[(b * T + j) * 3 * C + 2 * C + h * hs];
          for (int64_t i = 0; i < hs; ++i) out[i] += att[j] * v[i];
        }
      }
    }
  }
  return result;
}

struct Shape {
  int64_t B, T, C, NH;
};

TEST_CASE("attention_forward attends causally, head by head") {
  // T=70 spans two of the kernel's row blocks, the second partial.
  const Shape shape = GENERATE(Shape{2, 5, 8, 2}, Shape{1, 70, 6, 3});
  const auto [B, T, C, NH] = shape;
  const auto qkv = random_floats(B * T * 3 * C, 1, -2.0f, 2.0f);
  // The scratch may hold anything: NaN here.
  std::vector<float> out(B * T * C), scratch(2 * B * T * T, NAN);
  cpu_backend().attention_forward(out.data(), scratch.data(), qkv.data(), B, T, C, NH);
  const auto expected = reference_attention(to_double(qkv), B, T, C, NH);
  CHECK(relative_error(out, expected.out) < 1e-5);
}

TEST_CASE("attention_backward accumulates the gradient of q, k and v, recomputing the "
          "probabilities") {
  const Shape shape = GENERATE(Shape{2, 5, 8, 2}, Shape{1, 70, 4, 2}, Shape{2, 130, 4, 2});
  const auto [B, T, C, NH] = shape;
  const auto qkv = random_floats(B * T * 3 * C, 1, -2.0f, 2.0f);
  const auto dout = random_floats(B * T * C, 2);
  const auto dqkv_before = random_floats(B * T * 3 * C, 3, -0.25f, 0.25f);
  auto dqkv = dqkv_before;
  // Nothing is kept from a forward pass: the backward pass alone, its
  // scratch NaN on entry.
  std::vector<float> scratch(2 * B * T * T, NAN);
  cpu_backend().attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), B, T, C,
                                   NH);
  const auto expected = numeric_gradient(
      [&](const std::vector<double>& at) { return reference_attention(at, B, T, C, NH).out; },
      to_double(qkv), to_double(dout));
  CHECK(relative_error(added(dqkv, dqkv_before), expected) < kGradientTolerance);
}

}  // namespace
}  // namespace dslaunch::kernels::testing
