#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/half_precision.h"
#include "tests/kernels/cpu/kernel_testing.h"

namespace dslaunch::kernels::testing {
namespace {

using AdamWParams = Backend::AdamWParams;

struct AdamState {
  std::vector<double> params, m, v;
};

// torch.optim.AdamW's step (decoupled) or torch.optim.Adam's with an L2
// penalty, as PyTorch 1.13 writes them, in double.
void reference_adam_step(AdamState& s, const std::vector<float>& grads, const AdamWParams& h) {
  const auto step = static_cast<double>(h.step);
  const double bias1 = 1 - std::pow(h.beta1, step);
  const double bias2 = 1 - std::pow(h.beta2, step);
  for (size_t i = 0; i < s.params.size(); ++i) {
    double grad = grads[i];
    if (h.decoupled) {
      s.params[i] *= 1 - h.lr * h.weight_decay;
    } else {
      grad += h.weight_decay * s.params[i];
    }
    s.m[i] = h.beta1 * s.m[i] + (1 - h.beta1) * grad;
    s.v[i] = h.beta2 * s.v[i] + (1 - h.beta2) * grad * grad;
    const double denom = std::sqrt(s.v[i]) / std::sqrt(bias2) + h.eps;
    s.params[i] -= h.lr / bias1 * s.m[i] / denom;
  }
}

TEST_CASE("adamw_update takes the step worked by hand") {
  // m = 0.1·0.5 = 0.05 and v = 0.001·0.25 = 0.00025, whose bias-corrected
  // values are 0.5 and 0.25; the step is lr·0.5/(sqrt(0.25) + eps) ≈ 0.1,
  // after the decay 1 - lr·wd = 0.999.
  std::vector<float> params = {1.0f}, m = {0.0f}, v = {0.0f};
  const std::vector<float> grads = {0.5f};
  AdamWParams hyper;
  hyper.lr = 0.1;
  hyper.weight_decay = 0.01;
  cpu_backend().adamw_update(params.data(), grads.data(), m.data(), v.data(), 1, hyper, nullptr);
  CHECK(params[0] == Approx(0.899).epsilon(1e-6));
  CHECK(m[0] == Approx(0.05).epsilon(1e-6));
  // 1 - beta2 is taken in double, as Python does: 0.001 rounded to float,
  // not 1 - 0.999f = 0.000999987.
  CHECK(v[0] == 0.001f * 0.25f);
}

// Three steps of PyTorch 1.13 (Debian's python3-torch, foreach=False) on 4
// parameters [0.5, -1.25, 2, 0] with gradients [0.1, -0.2, 0.3, 1e-3],
// [-0.05, 0.4, 0, 2], [0.2, 0.2, -0.6, -1]; lr 0.01, betas (0.9, 0.95), eps
// 1e-8, weight decay 0.1. Printed by opt.step() and opt.state[p] at %.9e,
// enough digits to give each float exactly: the kernel rounds where
// PyTorch's CPU kernels round, so the bits are the same.
TEST_CASE("adamw_update gives PyTorch's AdamW and Adam bit for bit over three steps") {
  const std::vector<std::vector<float>> grads = {
      {0.1f, -0.2f, 0.3f, 1e-3f}, {-0.05f, 0.4f, 0.0f, 2.0f}, {0.2f, 0.2f, -0.6f, -1.0f}};
  struct Expected {
    bool decoupled;
    std::vector<float> params, m, v;
  };
  const Expected expected =
      GENERATE(Expected{true,
                        {4.793530405e-01f, -1.245097518e+00f, 1.980595946e+00f, -1.960345730e-02f},
                        {2.360000089e-02f, 3.979999945e-02f, -3.570000455e-02f, 8.008099347e-02f},
                        {2.570000244e-03f, 1.140500139e-02f, 2.206125110e-02f, 2.400000393e-01f}},
               Expected{false,
                        {4.752333760e-01f, -1.240626812e+00f, 1.979196548e+00f, -1.962338202e-02f},
                        {3.689264134e-02f, 6.117884535e-03f, 1.821938157e-02f, 7.981745899e-02f},
                        {4.098660313e-03f, 8.673707955e-03f, 2.123872377e-02f, 2.399837673e-01f}});
  std::vector<float> params = {0.5f, -1.25f, 2.0f, 0.0f}, m(4, 0.0f), v(4, 0.0f);
  AdamWParams hyper;
  hyper.lr = 0.01;
  hyper.beta1 = 0.9;
  hyper.beta2 = 0.95;
  hyper.weight_decay = 0.1;
  hyper.decoupled = expected.decoupled;
  for (const auto& g : grads) {
    cpu_backend().adamw_update(params.data(), g.data(), m.data(), v.data(), 4, hyper, nullptr);
    ++hyper.step;
  }
  CAPTURE(expected.decoupled);
  CHECK(params == expected.params);
  CHECK(m == expected.m);
  CHECK(v == expected.v);
}

TEST_CASE("adamw_update matches PyTorch's formula on a large tensor over several steps") {
  // Two full chunks and a ragged tail.
  const int64_t n = 2 * 16384 + 37;
  const bool decoupled = GENERATE(true, false);
  auto params = random_floats(n, 1);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  AdamState reference{to_double(params), std::vector<double>(n), std::vector<double>(n)};
  AdamWParams hyper;
  hyper.lr = 3e-3;
  hyper.weight_decay = 0.05;
  hyper.decoupled = decoupled;
  for (hyper.step = 1; hyper.step <= 5; ++hyper.step) {
    const auto grads = random_floats(n, 100 + static_cast<uint32_t>(hyper.step));
    cpu_backend().adamw_update(params.data(), grads.data(), m.data(), v.data(), n, hyper, nullptr);
    reference_adam_step(reference, grads, hyper);
  }
  CAPTURE(decoupled);
  CHECK(relative_error(params, reference.params) < 1e-6);
  CHECK(relative_error(m, reference.m) < 1e-6);
  CHECK(relative_error(v, reference.v) < 1e-6);
}

TEST_CASE("adamw_update writes the 16-bit copy of the new parameters in the same pass") {
  const int64_t n = 2 * 16384 + 37;
  for (const core::DType dtype : {core::DType::kBF16, core::DType::kF16}) {
    auto params = random_floats(n, 1);
    auto plain = params;
    const auto grads = random_floats(n, 2);
    std::vector<float> m(n, 0.0f), v(n, 0.0f), m2(n, 0.0f), v2(n, 0.0f), rounded(n, -7.0f);
    AdamWParams hyper;
    hyper.lr = 1e-2;
    hyper.weight_decay = 0.1;
    hyper.rounded_dtype = dtype;
    cpu_backend().adamw_update(params.data(), grads.data(), m.data(), v.data(), n, hyper,
                               rounded.data());
    cpu_backend().adamw_update(plain.data(), grads.data(), m2.data(), v2.data(), n, hyper,
                               nullptr);
    // The update itself is the same bits, and the copy is its rounding.
    CHECK(params == plain);
    CHECK(m == m2);
    CHECK(v == v2);
    for (int64_t i = 0; i < n; ++i) {
      const float expected = dtype == core::DType::kBF16 ? bf16_to_float(float_to_bf16(params[i]))
                                                         : fp16_to_float(float_to_fp16(params[i]));
      REQUIRE(rounded[i] == expected);
    }
  }
}

}  // namespace
}  // namespace dslaunch::kernels::testing
