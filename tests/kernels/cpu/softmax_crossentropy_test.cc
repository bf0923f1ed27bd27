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
                                        kTargets.data(), 0, N, V, Vp);
  CHECK(relative_error(added(dlogits, dlogits_before),
                       numeric_gradient(reference_losses, to_double(logits), to_double(dlosses))) <
        kGradientTolerance);
  // The padding's gradient is left exactly as it was.
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = V; v < Vp; ++v) CHECK(dlogits[n * Vp + v] == dlogits_before[n * Vp + v]);
  }
}

// The vocabulary-parallel path over two slices of the same rows, the
// group's reductions done here: [0, 5) (real columns 0..4) and [5, 10)
// (real 5..6, padding 7..9), as two tensor ranks of Vp = 10 hold them.
struct SlicedSoftmax {
  std::vector<float> probs = std::vector<float>(N * Vp);  // the slices side by side, per row
  std::vector<float> losses = std::vector<float>(N);
};

SlicedSoftmax vocab_parallel_softmax(const std::vector<float>& logits) {
  constexpr int64_t kSlice = Vp / 2;
  Backend& backend = cpu_backend();
  std::vector<float> slices[2];
  for (int s = 0; s < 2; ++s) {
    slices[s].resize(N * kSlice);
    for (int64_t n = 0; n < N; ++n) {
      std::copy_n(logits.data() + n * Vp + s * kSlice, kSlice, slices[s].data() + n * kSlice);
    }
  }
  const int64_t real[2] = {5, V - 5};
  std::vector<float> max[2] = {std::vector<float>(N), std::vector<float>(N)};
  std::vector<float> sums[2] = {std::vector<float>(2 * N), std::vector<float>(2 * N)};
  for (int s = 0; s < 2; ++s) {
    backend.vocab_parallel_max(max[s].data(), slices[s].data(), N, real[s], kSlice);
  }
  std::vector<float> group_max(N), group_sums(2 * N);
  for (int64_t n = 0; n < N; ++n) group_max[n] = std::max(max[0][n], max[1][n]);
  for (int s = 0; s < 2; ++s) {
    backend.vocab_parallel_sums(sums[s].data(), slices[s].data(), group_max.data(),
                                kTargets.data(), s * kSlice, N, real[s], kSlice);
  }
  for (int64_t i = 0; i < 2 * N; ++i) group_sums[i] = sums[0][i] + sums[1][i];
  SlicedSoftmax out;
  for (int s = 0; s < 2; ++s) {
    std::vector<float> probs(N * kSlice);
    backend.vocab_parallel_softmax_loss(probs.data(), out.losses.data(), slices[s].data(),
                                        group_max.data(), group_sums.data(), N, real[s], kSlice);
    for (int64_t n = 0; n < N; ++n) {
      std::copy_n(probs.data() + n * kSlice, kSlice, out.probs.data() + n * Vp + s * kSlice);
    }
  }
  return out;
}

TEST_CASE("the vocabulary-parallel softmax and loss equal the whole row's") {
  const auto logits = test_logits();
  const SlicedSoftmax sliced = vocab_parallel_softmax(logits);
  CHECK(relative_error(sliced.probs, reference_softmax(to_double(logits))) < 1e-6);
  CHECK(relative_error(sliced.losses, reference_losses(to_double(logits))) < 1e-6);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = V; v < Vp; ++v) CHECK(sliced.probs[n * Vp + v] == 0.0f);
  }
}

TEST_CASE("a vocabulary slice with no real columns contributes nothing") {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f};  // 2 rows of 2 padded columns
  std::vector<float> max(2), sums(4);
  const std::vector<int32_t> targets = {0, 1};
  Backend& backend = cpu_backend();
  backend.vocab_parallel_max(max.data(), logits.data(), 2, 0, 2);
  CHECK(max[0] == -INFINITY);
  const std::vector<float> group_max = {5.0f, 6.0f};
  backend.vocab_parallel_sums(sums.data(), logits.data(), group_max.data(), targets.data(), 8, 2,
                              0, 2);
  CHECK(sums == std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f});
}

TEST_CASE("crossentropy_softmax_backward over a vocabulary slice puts the one-hot on its own") {
  const auto logits = test_logits();
  const SlicedSoftmax sliced = vocab_parallel_softmax(logits);
  const auto dlosses = random_floats(N, 2);
  // The whole rows' gradient, and the second slice's (columns 5..9) alone.
  std::vector<float> whole(N * Vp, 0.0f), second(N * (Vp / 2), 0.0f);
  std::vector<float> second_probs(N * (Vp / 2));
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(sliced.probs.data() + n * Vp + Vp / 2, Vp / 2, second_probs.data() + n * (Vp / 2));
  }
  Backend& backend = cpu_backend();
  backend.crossentropy_softmax_backward(whole.data(), dlosses.data(), sliced.probs.data(),
                                        kTargets.data(), 0, N, V, Vp);
  backend.crossentropy_softmax_backward(second.data(), dlosses.data(), second_probs.data(),
                                        kTargets.data(), Vp / 2, N, V - Vp / 2, Vp / 2);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < Vp / 2; ++j) {
      REQUIRE(second[n * (Vp / 2) + j] == whole[n * Vp + Vp / 2 + j]);
    }
  }
  // Row 1's target (6) lies in the second slice, which adds its one-hot term.
  CHECK(second[1 * (Vp / 2) + 1] ==
        Approx((sliced.probs[1 * Vp + 6] - 1.0f) * dlosses[1]).epsilon(1e-6));
}

}  // namespace
}  // namespace dslaunch::kernels::testing
