#include <vector>

#include <catch2/catch.hpp>

#include "tests/kernels/cpu/kernel_testing.h"

namespace dslaunch::kernels::testing {
namespace {

// B=2, T=3 over a vocabulary of Vp=5 and maxT=4 positions; C=70 spans two of
// the backward pass's column blocks. Token 3 repeats, token 4 never occurs.
constexpr int64_t B = 2, T = 3, C = 70, Vp = 5, maxT = 4;
const std::vector<int32_t> kTokens = {3, 0, 3, 1, 3, 2};

std::vector<double> reference_encoder(const std::vector<double>& wte,
                                      const std::vector<double>& wpe) {
  std::vector<double> out(B * T * C);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        out[(b * T + t) * C + c] = wte[kTokens[b * T + t] * C + c] + wpe[t * C + c];
      }
    }
  }
  return out;
}

TEST_CASE("encoder_forward adds the token and position embeddings") {
  const auto wte = random_floats(Vp * C, 1);
  const auto wpe = random_floats(maxT * C, 2);
  std::vector<float> out(B * T * C);
  cpu_backend().encoder_forward(out.data(), kTokens.data(), wte.data(), {0, Vp}, wpe.data(), B, T,
                                C);
  CHECK(relative_error(out, reference_encoder(to_double(wte), to_double(wpe))) < 1e-7);
}

TEST_CASE("encoder_backward accumulates the gradients of both embeddings") {
  const auto wte = to_double(random_floats(Vp * C, 1));
  const auto wpe = to_double(random_floats(maxT * C, 2));
  const auto dout = random_floats(B * T * C, 3);
  const auto dwte_before = random_floats(Vp * C, 4, -0.25f, 0.25f);
  const auto dwpe_before = random_floats(maxT * C, 5, -0.25f, 0.25f);
  auto dwte = dwte_before;
  auto dwpe = dwpe_before;
  cpu_backend().encoder_backward(dwte.data(), {0, Vp}, dwpe.data(), dout.data(), kTokens.data(), B,
                                 T, C);

  const auto weights = to_double(dout);
  const auto expected_dwte = numeric_gradient(
      [&](const std::vector<double>& x) { return reference_encoder(x, wpe); }, wte, weights);
  const auto expected_dwpe = numeric_gradient(
      [&](const std::vector<double>& x) { return reference_encoder(wte, x); }, wpe, weights);
  CHECK(relative_error(added(dwte, dwte_before), expected_dwte) < kGradientTolerance);
  CHECK(relative_error(added(dwpe, dwpe_before), expected_dwpe) < kGradientTolerance);
  // Rows no token or position reached are untouched.
  for (int64_t c = 0; c < C; ++c) {
    CHECK(dwte[4 * C + c] == dwte_before[4 * C + c]);
    CHECK(dwpe[3 * C + c] == dwpe_before[3 * C + c]);
  }
}

// The vocabulary-parallel embedding: slices of wte rows [0, 2) and [2, 5),
// the position embedding on the first only; the slices' outputs sum to the
// whole embedding's exactly (one nonzero token term per position).
TEST_CASE("encoder_forward over vocabulary slices sums to the whole embedding") {
  const auto wte = random_floats(Vp * C, 1);
  const auto wpe = random_floats(maxT * C, 2);
  std::vector<float> whole(B * T * C), first(B * T * C), second(B * T * C);
  Backend& backend = cpu_backend();
  backend.encoder_forward(whole.data(), kTokens.data(), wte.data(), {0, Vp}, wpe.data(), B, T, C);
  backend.encoder_forward(first.data(), kTokens.data(), wte.data(), {0, 2}, wpe.data(), B, T, C);
  backend.encoder_forward(second.data(), kTokens.data(), wte.data() + 2 * C, {2, 3}, nullptr, B, T,
                          C);
  for (int64_t i = 0; i < B * T * C; ++i) REQUIRE(first[i] + second[i] == whole[i]);
  // Token 3 (position 0) lies in the second slice: the first holds wpe only.
  for (int64_t c = 0; c < C; ++c) {
    CHECK(first[c] == wpe[c]);
    CHECK(second[c] == wte[3 * C + c]);
  }
}

TEST_CASE("encoder_backward over a vocabulary slice scatters only its own tokens") {
  const auto dout = random_floats(B * T * C, 3);
  std::vector<float> whole_dwte(Vp * C, 0.0f), whole_dwpe(maxT * C, 0.0f);
  std::vector<float> slice_dwte(3 * C, 0.0f), slice_dwpe(maxT * C, 0.0f);
  Backend& backend = cpu_backend();
  backend.encoder_backward(whole_dwte.data(), {0, Vp}, whole_dwpe.data(), dout.data(),
                           kTokens.data(), B, T, C);
  backend.encoder_backward(slice_dwte.data(), {2, 3}, slice_dwpe.data(), dout.data(),
                           kTokens.data(), B, T, C);
  for (int64_t i = 0; i < 3 * C; ++i) REQUIRE(slice_dwte[i] == whole_dwte[2 * C + i]);
  CHECK(slice_dwpe == whole_dwpe);
}

TEST_CASE("encoder_backward sums a token's positions before adding them to its row") {
  // Token 3 sits at positions 0, 2 and 4: its row gets before + ((d0 + d2) +
  // d4), so starting from zero and adding `before` afterwards, as ZeRO stage
  // 3 does with the output layer's part, gives the same bits.
  const auto dout = random_floats(B * T * C, 3);
  const auto before = random_floats(Vp * C, 4, -0.25f, 0.25f);
  auto from_before = before;
  std::vector<float> from_zero(Vp * C, 0.0f), dwpe(maxT * C, 0.0f);
  cpu_backend().encoder_backward(from_before.data(), {0, Vp}, dwpe.data(), dout.data(),
                                 kTokens.data(), B, T, C);
  cpu_backend().encoder_backward(from_zero.data(), {0, Vp}, dwpe.data(), dout.data(),
                                 kTokens.data(), B, T, C);
  for (int64_t c = 0; c < C; ++c) {
    const float sum = (dout[0 * C + c] + dout[2 * C + c]) + dout[4 * C + c];
    CHECK(from_before[3 * C + c] == before[3 * C + c] + sum);
  }
  for (size_t i = 0; i < before.size(); ++i) from_zero[i] = before[i] + from_zero[i];
  CHECK(from_zero == from_before);
}

}  // namespace
}  // namespace dslaunch::kernels::testing
