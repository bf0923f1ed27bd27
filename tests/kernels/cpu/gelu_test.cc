#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/kernels/cpu/kernel_testing.h"

namespace dslaunch::kernels::testing {
namespace {

double reference_gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Two full chunks of the elementwise kernels and a ragged tail.
constexpr int64_t kCount = 2 * 16384 + 37;

TEST_CASE("gelu_forward is GELU's tanh form") {
  const auto inp = random_floats(kCount, 1, -6.0f, 6.0f);
  std::vector<float> out(kCount);
  cpu_backend().gelu_forward(out.data(), inp.data(), kCount);
  std::vector<double> expected(kCount);
  for (int64_t i = 0; i < kCount; ++i) expected[i] = reference_gelu(inp[i]);
  CHECK(relative_error(out, expected) < 1e-6);
  // Spot values: GELU(0) = 0, and GELU(x) -> x for large x.
  const std::vector<float> spots = {0.0f, 10.0f};
  std::vector<float> spot_out(2);
  cpu_backend().gelu_forward(spot_out.data(), spots.data(), 2);
  CHECK(spot_out[0] == 0.0f);
  CHECK(spot_out[1] == Approx(10.0f));
}

TEST_CASE("gelu_backward accumulates dout times GELU's derivative") {
  const auto inp = random_floats(kCount, 1, -6.0f, 6.0f);
  const auto dout = random_floats(kCount, 2);
  const auto dinp_before = random_floats(kCount, 3, -0.25f, 0.25f);
  auto dinp = dinp_before;
  cpu_backend().gelu_backward(dinp.data(), inp.data(), dout.data(), kCount);
  // Elementwise, so each element's central difference stands alone.
  std::vector<double> expected(kCount);
  const double h = 1e-5;
  for (int64_t i = 0; i < kCount; ++i) {
    expected[i] = dout[i] * (reference_gelu(inp[i] + h) - reference_gelu(inp[i] - h)) / (2 * h);
  }
  CHECK(relative_error(added(dinp, dinp_before), expected) < kGradientTolerance);
}

}  // namespace
}  // namespace dslaunch::kernels::testing
