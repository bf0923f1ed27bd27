#include <vector>

#include <catch2/catch.hpp>

#include "tests/kernels/cpu/kernel_testing.h"

namespace dslaunch::kernels::testing {
namespace {

// out (N,OC) = inp (N,C) · weight (C,OC) + bias (OC); bias may be empty.
std::vector<double> reference_matmul(const std::vector<double>& inp,
                                     const std::vector<double>& weight,
                                     const std::vector<double>& bias, int64_t N, int64_t C,
                                     int64_t OC) {
  std::vector<double> out(N * OC);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < OC; ++o) {
      double sum = bias.empty() ? 0.0 : bias[o];
      for (int64_t c = 0; c < C; ++c) sum += inp[n * C + c] * weight[c * OC + o];
      out[n * OC + o] = sum;
    }
  }
  return out;
}

// logits (N,Vp) = inp (N,C) · wteᵀ, wte (Vp,C).
std::vector<double> reference_logits(const std::vector<double>& inp, const std::vector<double>& wte,
                                     int64_t N, int64_t C, int64_t Vp) {
  std::vector<double> logits(N * Vp);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < Vp; ++v) {
      double sum = 0;
      for (int64_t c = 0; c < C; ++c) sum += inp[n * C + c] * wte[v * C + c];
      logits[n * Vp + v] = sum;
    }
  }
  return logits;
}

TEST_CASE("matmul_forward multiplies by the weight and adds the bias") {
  const int64_t N = 6, C = 5, OC = 7;
  const auto inp = random_floats(N * C, 1);
  const auto weight = random_floats(C * OC, 2);
  const auto bias = random_floats(OC, 3);
  std::vector<float> out(N * OC, 99.0f);
  cpu_backend().matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  CHECK(relative_error(out, reference_matmul(to_double(inp), to_double(weight), to_double(bias), N,
                                             C, OC)) < 1e-6);

  SECTION("without a bias, the output's old contents do not leak in") {
    std::vector<float> unbiased(N * OC, 99.0f);
    cpu_backend().matmul_forward(unbiased.data(), inp.data(), weight.data(), nullptr, N, C, OC);
    CHECK(relative_error(unbiased,
                         reference_matmul(to_double(inp), to_double(weight), {}, N, C, OC)) < 1e-6);
  }
}

TEST_CASE("matmul_backward accumulates the gradients of input, weight and bias") {
  // 260 output columns: two of the bias gradient's column blocks.
  const int64_t N = 4, C = 3, OC = 260;
  const auto inp = random_floats(N * C, 1);
  const auto weight = random_floats(C * OC, 2);
  const auto bias = random_floats(OC, 3);
  const auto dout = random_floats(N * OC, 4);
  const auto dinp_before = random_floats(N * C, 5, -0.25f, 0.25f);
  const auto dweight_before = random_floats(C * OC, 6, -0.25f, 0.25f);
  const auto dbias_before = random_floats(OC, 7, -0.25f, 0.25f);

  const auto x = to_double(inp), w = to_double(weight), b = to_double(bias);
  const auto weights = to_double(dout);
  const auto expected_dinp = numeric_gradient(
      [&](const std::vector<double>& at) { return reference_matmul(at, w, b, N, C, OC); }, x,
      weights);
  const auto expected_dweight = numeric_gradient(
      [&](const std::vector<double>& at) { return reference_matmul(x, at, b, N, C, OC); }, w,
      weights);
  const auto expected_dbias = numeric_gradient(
      [&](const std::vector<double>& at) { return reference_matmul(x, w, at, N, C, OC); }, b,
      weights);

  auto dinp = dinp_before;
  auto dweight = dweight_before;
  auto dbias = dbias_before;
  SECTION("all three") {
    cpu_backend().matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(),
                                  inp.data(), weight.data(), N, C, OC);
    CHECK(relative_error(added(dinp, dinp_before), expected_dinp) < kGradientTolerance);
    CHECK(relative_error(added(dweight, dweight_before), expected_dweight) < kGradientTolerance);
    CHECK(relative_error(added(dbias, dbias_before), expected_dbias) < kGradientTolerance);
  }
  SECTION("the weight's alone, when input and bias need none") {
    cpu_backend().matmul_backward(nullptr, dweight.data(), nullptr, dout.data(), inp.data(),
                                  weight.data(), N, C, OC);
    CHECK(relative_error(added(dweight, dweight_before), expected_dweight) < kGradientTolerance);
  }
}

TEST_CASE("logits_forward projects onto the token embedding") {
  const int64_t N = 4, C = 6, Vp = 9;
  const auto inp = random_floats(N * C, 1);
  const auto wte = random_floats(Vp * C, 2);
  std::vector<float> logits(N * Vp, 99.0f);
  cpu_backend().logits_forward(logits.data(), inp.data(), wte.data(), N, C, Vp, Vp);
  CHECK(relative_error(logits, reference_logits(to_double(inp), to_double(wte), N, C, Vp)) < 1e-6);
}

TEST_CASE("logits_backward accumulates the gradients of input and token embedding") {
  const int64_t N = 4, C = 6, Vp = 9;
  const auto inp = random_floats(N * C, 1);
  const auto wte = random_floats(Vp * C, 2);
  const auto dlogits = random_floats(N * Vp, 3);
  const auto dinp_before = random_floats(N * C, 4, -0.25f, 0.25f);
  const auto dwte_before = random_floats(Vp * C, 5, -0.25f, 0.25f);
  auto dinp = dinp_before;
  auto dwte = dwte_before;
  cpu_backend().logits_backward(dinp.data(), dwte.data(), dlogits.data(), inp.data(), wte.data(), N,
                                C, Vp, Vp);

  const auto x = to_double(inp), e = to_double(wte);
  const auto weights = to_double(dlogits);
  CHECK(relative_error(added(dinp, dinp_before), numeric_gradient(
                                                     [&](const std::vector<double>& at) {
                                                       return reference_logits(at, e, N, C, Vp);
                                                     },
                                                     x, weights)) < kGradientTolerance);
  CHECK(relative_error(added(dwte, dwte_before), numeric_gradient(
                                                     [&](const std::vector<double>& at) {
                                                       return reference_logits(x, at, N, C, Vp);
                                                     },
                                                     e, weights)) < kGradientTolerance);
}

TEST_CASE("the logits of vocabulary chunks in wider rows add up to the whole product") {
  // Three chunks of the 9 rows, as the model runs the tied output layer:
  // each writes its columns of the (N,Vp) logits and adds its part of the
  // input's gradient and its own rows of the embedding's.
  const int64_t N = 4, C = 6, Vp = 9;
  const auto inp = random_floats(N * C, 1);
  const auto wte = random_floats(Vp * C, 2);
  const auto dlogits = random_floats(N * Vp, 3);
  std::vector<float> whole(N * Vp), chunked(N * Vp, 99.0f);
  std::vector<float> dinp_whole(N * C, 0.0f), dinp_chunked(N * C, 0.0f);
  std::vector<float> dwte_whole(Vp * C, 0.0f), dwte_chunked(Vp * C, 0.0f);
  cpu_backend().logits_forward(whole.data(), inp.data(), wte.data(), N, C, Vp, Vp);
  cpu_backend().logits_backward(dinp_whole.data(), dwte_whole.data(), dlogits.data(), inp.data(),
                                wte.data(), N, C, Vp, Vp);
  for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {4, 8}, {8, 9}}) {
    cpu_backend().logits_forward(chunked.data() + begin, inp.data(), wte.data() + begin * C, N, C,
                                 end - begin, Vp);
    cpu_backend().logits_backward(dinp_chunked.data(), dwte_chunked.data() + begin * C,
                                  dlogits.data() + begin, inp.data(), wte.data() + begin * C, N,
                                  C, end - begin, Vp);
  }
  CHECK(relative_error(chunked, to_double(whole)) < 1e-6);
  CHECK(relative_error(dinp_chunked, to_double(dinp_whole)) < 1e-6);
  CHECK(relative_error(dwte_chunked, to_double(dwte_whole)) < 1e-6);
}

}  // namespace
}  // namespace dslaunch::kernels::testing
