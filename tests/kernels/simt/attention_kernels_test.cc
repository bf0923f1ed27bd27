// Attention as the CUDA backend computes it — model_gemms.h's per-head
// batched products (here through CBLAS) around the causal softmax kernels
// (here on the CUDA thread-model emulator) — against the CPU backend's
// blocked attention.

#include "kernels/simt/attention_kernels.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "kernels/cpu/sgemm.h"
#include "kernels/model_gemms.h"
#include "tests/kernels/cpu/kernel_testing.h"
#include "tests/kernels/simt/simt_testing.h"

namespace dslaunch::kernels::testing {
namespace {

using namespace simt;

TEST_CASE("attention from per-head products and row kernels matches the CPU backend") {
  // T above the CPU backend's 64-row blocks; head size 8.
  const int64_t B = 2, T = 70, C = 16, NH = 2;
  const model_gemms::AttentionShape shape{B, T, C, NH};
  const int64_t hs = shape.hs();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const auto qkv = random_floats(B * T * 3 * C, 1);
  const auto dout = random_floats(B * T * C, 2);

  std::vector<float> e_out(B * T * C), scratch(2 * B * T * T);
  cpu_backend().attention_forward(e_out.data(), scratch.data(), qkv.data(), B, T, C, NH);
  const auto dqkv0 = random_floats(B * T * 3 * C, 3);
  auto e_dqkv = dqkv0;
  cpu_backend().attention_backward(e_dqkv.data(), scratch.data(), dout.data(), qkv.data(), B, T,
                                   C, NH);

  // A head at a time, its probabilities and their gradient in (B,T,T)
  // buffers, as the CUDA backend runs it.
  std::vector<float> out(B * T * C), att(B * T * T), datt(B * T * T);
  auto dqkv = dqkv0;
  for (int64_t h = 0; h < NH; ++h) {
    const float* q = qkv.data() + h * hs;
    const float* v = q + 2 * C;
    cpu::sgemm(model_gemms::attention_scores(shape, scale), q, q + C, att.data());
    emulate(CausalSoftmax{att.data(), B * T, T});
    cpu::sgemm(model_gemms::attention_values(shape), att.data(), v, out.data() + h * hs);
    cpu::sgemm(model_gemms::attention_backward_probs(shape), dout.data() + h * hs, v,
               datt.data());
    emulate(SoftmaxBackwardRows{datt.data(), att.data(), B * T, T});
    float* dq = dqkv.data() + h * hs;
    cpu::sgemm(model_gemms::attention_backward_query(shape, scale), datt.data(), q + C, dq);
    cpu::sgemm(model_gemms::attention_backward_key(shape, scale), datt.data(), q, dq + C);
    cpu::sgemm(model_gemms::attention_backward_value(shape), att.data(), dout.data() + h * hs,
               dq + 2 * C);
  }
  CHECK(relative_error(out, to_double(e_out)) < 1e-6);
  CHECK(relative_error(added(dqkv, dqkv0), added(e_dqkv, dqkv0)) < 1e-5);
}

TEST_CASE("the causal softmax leaves zeros above the diagonal and rows that sum to one") {
  const int64_t rows = 2 * 40, T = 40;  // B·NH = 2
  auto att = random_floats(rows * T, 4, -5.0f, 5.0f);
  for (const Schedule& schedule : standard_schedules()) {
    auto a = att;
    emulate(CausalSoftmax{a.data(), rows, T}, schedule);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) {
        if (j > r % T) CHECK(a[r * T + j] == 0.0f);
        sum += a[r * T + j];
      }
      CHECK(sum == Approx(1.0).epsilon(1e-6));
    }
  }
}

}  // namespace
}  // namespace dslaunch::kernels::testing
