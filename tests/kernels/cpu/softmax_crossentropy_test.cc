#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/kernels/cpu/kernel_testing.h"

namespace dslaunch::kernels::testing {
namespace {

// N=3 rows over a vocabulary of V=7 padded to Vp=10.
constexpr int64_t N = 3, V = 7, Vp = 10;
const std::vector<int32_t> kTargets = {2, 6, 0};

// Softmax over each row's first V logits; the padded columns get 0.
std::vector<double> reference_softmax(const std::vector<double>& logits) {
  std::vector<double> probs(N * Vp, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double max = logits[n * Vp];
    for (int64_t v = 0; v < V; ++v) max = std::max(max, logits[n * Vp + v]);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[n * Vp + v] - max);
    for (int64_t v = 0; v < V; ++v) probs[n * Vp + v] = std::exp(logits[n * Vp + v] - max) / sum;
  }
  return probs;
}

std::vector<double> reference_losses(const std::vector<double>& logits) {
  const auto probs = reference_softmax(logits);
  std::vector<double> losses(N);
  for (int64_t n = 0; n < N; ++n) losses[n] = -std::log(probs[n * Vp + kTargets[n]]);
  return losses;
}

// Random logits, one row shifted far up (softmax must subtract the row's
// maximum), and huge values in the padding that must not count.
std::vector<float> test_logits() {
  auto logits = random_floats(N * Vp, 1, -3.0f, 3.0f);
  for (int64_t v = 0; v < V; ++v) logits[Vp + v] += 80.0f;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = V; v < Vp; ++v) logits[n * Vp + v] = 1000.0f;
  }
  return logits;
}

TEST_CASE("softmax_forward normalises the real vocabulary and zeroes the padding") {
  const auto logits = test_logits();
  std::vector<float> probs(N * Vp, 99.0f);
  cpu_backend().softmax_forward(probs.data(), logits.data(), N, V, Vp);
  CHECK(relative_error(probs, reference_softmax(to_double(logits))) < 1e-6);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = V; v < Vp; ++v) CHECK(probs[n * Vp + v] == 0.0f);
  }

  SECTION("in place") {
    auto in_place = logits;
    cpu_backend().softmax_forward(in_place.data(), in_place.data(), N, V, Vp);
    CHECK(in_place == probs);
  }
}

TEST_CASE("crossentropy_forward is the negative log-probability of the target") {
  const auto logits = test_logits();
  std::vector<float> probs(N * Vp), losses(N);
  Backend& backend = cpu_backend();
  backend.softmax_forward(probs.data(), logits.data(), N, V, Vp);
  backend.crossentropy_forward(losses.data(), probs.data(), kTargets.data(), N, Vp);
  CHECK(relative_error(losses, reference_losses(to_double(logits))) < 1e-6);
}

TEST_CASE("crossentropy_softmax_backward accumulates the loss gradient over the real vocabulary") {
  const auto logits = test_logits();
  std::vector<float> probs(N * Vp);
  Backend& backend = cpu_backend();
  backend.softmax_forward(probs.data(), logits.data(), N, V, Vp);
  const auto dlosses = random_floats(N, 2);
  const auto dlogits_before = random_floats(N * Vp, 3, -0.25f, 0.25f);
  auto dlogits = dlogits_before;
  backend.crossentropy_softmax_backward(dlogits.data(), dlosses.data(), probs.data(),
                                        kTargets.data(), N, V, Vp);
  CHECK(relative_error(added(dlogits, dlogits_before),
                       numeric_gradient(reference_losses, to_double(logits), to_double(dlosses))) <
        kGradientTolerance);
  // The padding's gradient is left exactly as it was.
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = V; v < Vp; ++v) CHECK(dlogits[n * Vp + v] == dlogits_before[n * Vp + v]);
  }
}

}  // namespace
}  // namespace dslaunch::kernels::testing
