#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/kernels/cpu/kernel_testing.h"

namespace dslaunch::kernels::testing {
namespace {

struct LayerNormOutput {
  std::vector<double> out, mean, rstd;
};

LayerNormOutput reference_layernorm(const std::vector<double>& inp,
                                    const std::vector<double>& weight,
                                    const std::vector<double>& bias, int64_t N, int64_t C) {
  LayerNormOutput result{std::vector<double>(N * C), std::vector<double>(N),
                         std::vector<double>(N)};
  for (int64_t n = 0; n < N; ++n) {
    const double* x = &inp[n * C];
    double mean = 0;
    for (int64_t c = 0; c < C; ++c) mean += x[c];
    mean /= C;
    double variance = 0;
    for (int64_t c = 0; c < C; ++c) variance += (x[c] - mean) * (x[c] - mean);
    variance /= C;
    const double rstd = 1.0 / std::sqrt(variance + 1e-5);
    for (int64_t c = 0; c < C; ++c) {
      result.out[n * C + c] = (x[c] - mean) * rstd * weight[c] + bias[c];
    }
    result.mean[n] = mean;
    result.rstd[n] = rstd;
  }
  return result;
}

TEST_CASE("layernorm_forward normalises each row and saves its mean and rstd") {
  const int64_t N = 5, C = 37;
  // An offset of 3 makes a single-pass float variance lose digits.
  const auto inp = random_floats(N * C, 1, 2.0f, 4.0f);
  const auto weight = random_floats(C, 2);
  const auto bias = random_floats(C, 3);
  std::vector<float> out(N * C), mean(N), rstd(N);
  cpu_backend().layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                                  bias.data(), N, C);
  const auto expected =
      reference_layernorm(to_double(inp), to_double(weight), to_double(bias), N, C);
  CHECK(relative_error(out, expected.out) < 1e-6);
  CHECK(relative_error(mean, expected.mean) < 1e-7);
  CHECK(relative_error(rstd, expected.rstd) < 1e-6);
}

TEST_CASE("layernorm_backward accumulates the gradients of input, weight and bias") {
  // 70 rows: three of the backward pass's row blocks, the last one partial.
  const int64_t N = 70, C = 37;
  const auto inp = random_floats(N * C, 1, -2.0f, 3.0f);
  const auto weight = random_floats(C, 2);
  const auto bias = random_floats(C, 3);
  const auto dout = random_floats(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  Backend& backend = cpu_backend();
  backend.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                            bias.data(), N, C);
  const auto dinp_before = random_floats(N * C, 5, -0.25f, 0.25f);
  const auto dweight_before = random_floats(C, 6, -0.25f, 0.25f);
  const auto dbias_before = random_floats(C, 7, -0.25f, 0.25f);
  auto dinp = dinp_before;
  auto dweight = dweight_before;
  auto dbias = dbias_before;
  backend.layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                             weight.data(), mean.data(), rstd.data(), N, C);

  const auto x = to_double(inp), w = to_double(weight), b = to_double(bias);
  const auto weights = to_double(dout);
  const auto expected_dinp = numeric_gradient(
      [&](const std::vector<double>& at) { return reference_layernorm(at, w, b, N, C).out; }, x,
      weights);
  const auto expected_dweight = numeric_gradient(
      [&](const std::vector<double>& at) { return reference_layernorm(x, at, b, N, C).out; }, w,
      weights);
  const auto expected_dbias = numeric_gradient(
      [&](const std::vector<double>& at) { return reference_layernorm(x, w, at, N, C).out; }, b,
      weights);
  CHECK(relative_error(added(dinp, dinp_before), expected_dinp) < kGradientTolerance);
  CHECK(relative_error(added(dweight, dweight_before), expected_dweight) < kGradientTolerance);
  CHECK(relative_error(added(dbias, dbias_before), expected_dbias) < kGradientTolerance);
}

}  // namespace
}  // namespace dslaunch::kernels::testing
