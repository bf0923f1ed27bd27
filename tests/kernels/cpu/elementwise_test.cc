#include <vector>

#include <catch2/catch.hpp>

#include "tests/kernels/cpu/kernel_testing.h"

namespace dslaunch::kernels::testing {
namespace {

// Two full chunks of the elementwise kernels and a ragged tail.
constexpr int64_t kCount = 2 * 16384 + 37;

TEST_CASE("residual_forward adds") {
  const auto a = random_floats(kCount, 1);
  const auto b = random_floats(kCount, 2);
  std::vector<float> out(kCount);
  cpu_backend().residual_forward(out.data(), a.data(), b.data(), kCount);
  std::vector<double> expected(kCount);
  for (int64_t i = 0; i < kCount; ++i) expected[i] = double{a[i]} + b[i];
  CHECK(relative_error(out, expected) < 1e-7);
}

TEST_CASE("residual_backward accumulates dout into both inputs' gradients") {
  // d(a + b)/da = d(a + b)/db = 1, so both gradients gain exactly dout.
  const auto dout = random_floats(kCount, 1);
  const auto da_before = random_floats(kCount, 2, -0.25f, 0.25f);
  const auto db_before = random_floats(kCount, 3, -0.25f, 0.25f);
  auto da = da_before;
  auto db = db_before;
  cpu_backend().residual_backward(da.data(), db.data(), dout.data(), kCount);
  CHECK(relative_error(added(da, da_before), to_double(dout)) < 1e-6);
  CHECK(relative_error(added(db, db_before), to_double(dout)) < 1e-6);
}

TEST_CASE("sum_of_squares sums in double, however the buffer is split") {
  const auto x = random_floats(kCount, 1, -3.0f, 3.0f);
  double expected = 0;
  for (const float value : x) expected += double{value} * value;
  Backend& backend = cpu_backend();
  const double whole = backend.sum_of_squares(x.data(), kCount);
  CHECK(whole == Approx(expected).epsilon(1e-12));
  const int64_t split = 12345;
  const double parts = backend.sum_of_squares(x.data(), split) +
                       backend.sum_of_squares(x.data() + split, kCount - split);
  CHECK(parts == Approx(whole).epsilon(1e-12));
}

TEST_CASE("scale multiplies in place") {
  const auto x = random_floats(kCount, 1);
  auto scaled = x;
  cpu_backend().scale(scaled.data(), kCount, 0.25f);
  // A power of two scales exactly.
  for (int64_t i = 0; i < kCount; ++i) REQUIRE(scaled[i] == x[i] * 0.25f);
}

TEST_CASE("divide divides in place, unlike a product with the reciprocal") {
  const auto x = random_floats(kCount, 2);
  auto divided = x;
  cpu_backend().divide(divided.data(), kCount, 3.0f);
  int64_t unlike_product = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    REQUIRE(divided[i] == x[i] / 3.0f);
    if (divided[i] != x[i] * (1.0f / 3.0f)) ++unlike_product;
  }
  // One in three or so quotients differs from the product in its last bit.
  CHECK(unlike_product > kCount / 10);
}

}  // namespace
}  // namespace dslaunch::kernels::testing
