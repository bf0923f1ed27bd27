#include <algorithm>
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

// logsumexp(row's first V logits) - logit[target], from the logits.
std::vector<double> reference_losses(const std::vector<double>& logits) {
  std::vector<double> losses(N);
  for (int64_t n = 0; n < N; ++n) {
    const double* row = logits.data() + n * Vp;
    const double max = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - max);
    losses[n] = max + std::log(sum) - row[kTargets[n]];
  }
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

TEST_CASE("softmax_crossentropy_forward gives the softmax and the loss of each row") {
  const auto logits = test_logits();
  std::vector<float> probs(N * Vp, 99.0f), losses(N, 99.0f);
  cpu_backend().softmax_crossentropy_forward(probs.data(), losses.data(), logits.data(),
                                             kTargets.data(), N, V, Vp);
  CHECK(relative_error(probs, reference_softmax(to_double(logits))) < 1e-6);
  CHECK(relative_error(losses, reference_losses(to_double(logits))) < 1e-6);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = V; v < Vp; ++v) CHECK(probs[n * Vp + v] == 0.0f);
  }

  SECTION("in place") {
    auto in_place = logits;
    std::vector<float> in_place_losses(N);
    cpu_backend().softmax_crossentropy_forward(in_place.data(), in_place_losses.data(),
                                               in_place.data(), kTargets.data(), N, V, Vp);
    CHECK(in_place == probs);
    CHECK(in_place_losses == losses);
  }
}

TEST_CASE("softmax_crossentropy_forward's loss stays finite when the target's probability is 0") {
  // Row 0: the target 200 below the rest, probability e^-200 (below float's
  // range). Row 1: the target 95 below, e^-95, a denormal that flush-to-zero
  // makes 0. Row 2: the target is the maximum. -log(prob) would be inf for
  // rows 0 and 1; PyTorch's log_softmax gives 200 + log(6) and 95 + log(6).
  std::vector<float> logits(N * Vp, 0.0f);
  logits[0 * Vp + kTargets[0]] = -200.0f;
  logits[1 * Vp + kTargets[1]] = -95.0f;
  for (int64_t v = 0; v < V; ++v) logits[2 * Vp + v] = -200.0f;
  logits[2 * Vp + kTargets[2]] = 0.0f;
  std::vector<float> probs(N * Vp), losses(N);
  cpu_backend().softmax_crossentropy_forward(probs.data(), losses.data(), logits.data(),
                                             kTargets.data(), N, V, Vp);
  const auto expected = reference_losses(to_double(logits));
  for (int64_t n = 0; n < N; ++n) {
    CAPTURE(n);
    CHECK(std::isfinite(losses[n]));
    CHECK(losses[n] == Approx(expected[n]).epsilon(1e-6));
  }
  CHECK(expected[0] == Approx(200.0 + std::log(6.0)));
  CHECK(probs[0 * Vp + kTargets[0]] == 0.0f);
  CHECK(probs[1 * Vp + kTargets[1]] == 0.0f);
  CHECK(probs[2 * Vp + kTargets[2]] == 1.0f);
}

TEST_CASE("crossentropy_softmax_backward accumulates the loss gradient over the real vocabulary") {
  const auto logits = test_logits();
  std::vector<float> probs(N * Vp);
  Backend& backend = cpu_backend();
  std::vector<float> losses(N);
  backend.softmax_crossentropy_forward(probs.data(), losses.data(), logits.data(), kTargets.data(),
                                       N, V, Vp);
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
