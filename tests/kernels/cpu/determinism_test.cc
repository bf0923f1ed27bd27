// Every kernel that backend.h promises to be independent of the thread count
// gives bitwise identical results on 1 and 2 threads.
#include <cstring>
#include <functional>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/kernels/cpu/kernel_testing.h"

namespace dslaunch::kernels::testing {
namespace {

// Large enough for several chunks, row blocks and column blocks per kernel.
constexpr int64_t B = 2, T = 96, C = 96, NH = 4, N = B * T, OC = 384, V = 500, Vp = 512;
constexpr int64_t kCount = 2 * 16384 + 37;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs `kernel` on copies of `outputs` with 1 and with 2 threads.
void check_same_on_1_and_2_threads(
    const std::vector<float>& outputs,
    const std::function<void(Backend&, std::vector<float>&)>& kernel) {
  auto one = outputs;
  auto two = outputs;
  kernel(cpu_backend(1), one);
  kernel(cpu_backend(2), two);
  CHECK(same_bits(one, two));
}

TEST_CASE("kernels give the same bits on 1 and 2 threads") {
  const auto x = random_floats(kCount, 1, -3.0f, 3.0f);
  const auto y = random_floats(kCount, 2);
  const auto prior = random_floats(kCount, 3, -0.25f, 0.25f);

  SECTION("encoder") {
    std::vector<int32_t> tokens(N);
    for (int64_t i = 0; i < N; ++i) tokens[i] = static_cast<int32_t>((i * 7) % 11);
    const auto wte = random_floats(11 * C, 4);
    const auto wpe = random_floats(T * C, 5);
    check_same_on_1_and_2_threads(std::vector<float>(N * C), [&](Backend& b, auto& out) {
      b.encoder_forward(out.data(), tokens.data(), wte.data(), {0, 11}, wpe.data(), B, T, C);
    });
    // dwte (11 rows) then dwpe (T rows), one buffer.
    check_same_on_1_and_2_threads(random_floats((11 + T) * C, 6), [&](Backend& b, auto& grads) {
      b.encoder_backward(grads.data(), {0, 11}, grads.data() + 11 * C, y.data(), tokens.data(), B,
                         T, C);
    });
  }
  SECTION("layernorm") {
    const auto weight = random_floats(C, 4);
    const auto bias = random_floats(C, 5);
    // out (N,C), mean (N), rstd (N).
    check_same_on_1_and_2_threads(std::vector<float>(N * C + 2 * N), [&](Backend& b, auto& out) {
      b.layernorm_forward(out.data(), out.data() + N * C, out.data() + N * C + N, x.data(),
                          weight.data(), bias.data(), N, C);
    });
    std::vector<float> stats(N * C + 2 * N);
    cpu_backend().layernorm_forward(stats.data(), stats.data() + N * C, stats.data() + N * C + N,
                                    x.data(), weight.data(), bias.data(), N, C);
    // dinp (N,C), dweight (C), dbias (C).
    check_same_on_1_and_2_threads(random_floats(N * C + 2 * C, 6), [&](Backend& b, auto& grads) {
      b.layernorm_backward(grads.data(), grads.data() + N * C, grads.data() + N * C + C, y.data(),
                           x.data(), weight.data(), stats.data() + N * C, stats.data() + N * C + N,
                           N, C);
    });
  }
  SECTION("matmul bias gradient") {
    // The bias gradient's column sums are promised; the products are
    // OpenBLAS's, so only dbias is compared.
    const auto inp = random_floats(N * C, 4);
    const auto weight = random_floats(C * OC, 5);
    const auto dout = random_floats(N * OC, 6);
    const auto dweight_before = random_floats(C * OC, 7);
    check_same_on_1_and_2_threads(random_floats(OC, 8), [&](Backend& b, auto& dbias) {
      auto dweight = dweight_before;
      b.matmul_backward(nullptr, dweight.data(), dbias.data(), dout.data(), inp.data(),
                        weight.data(), N, C, OC);
    });
  }
  SECTION("attention") {
    const auto qkv = random_floats(B * T * 3 * C, 4, -2.0f, 2.0f);
    std::vector<float> scratch(2 * B * T * T);
    check_same_on_1_and_2_threads(std::vector<float>(N * C), [&](Backend& b, auto& out) {
      b.attention_forward(out.data(), scratch.data(), qkv.data(), B, T, C, NH);
    });
    check_same_on_1_and_2_threads(random_floats(B * T * 3 * C, 5), [&](Backend& b, auto& dqkv) {
      b.attention_backward(dqkv.data(), scratch.data(), y.data(), qkv.data(), B, T, C, NH);
    });
  }
  SECTION("gelu") {
    check_same_on_1_and_2_threads(std::vector<float>(kCount), [&](Backend& b, auto& out) {
      b.gelu_forward(out.data(), x.data(), kCount);
    });
    check_same_on_1_and_2_threads(prior, [&](Backend& b, auto& dinp) {
      b.gelu_backward(dinp.data(), x.data(), y.data(), kCount);
    });
  }
  SECTION("residual, scale") {
    check_same_on_1_and_2_threads(std::vector<float>(kCount), [&](Backend& b, auto& out) {
      b.residual_forward(out.data(), x.data(), y.data(), kCount);
    });
    check_same_on_1_and_2_threads(std::vector<float>(2 * kCount), [&](Backend& b, auto& grads) {
      b.residual_backward(grads.data(), grads.data() + kCount, y.data(), kCount);
    });
    check_same_on_1_and_2_threads(
        x, [&](Backend& b, auto& values) { b.scale(values.data(), kCount, 0.3f); });
  }
  SECTION("softmax, cross-entropy") {
    const auto logits = random_floats(N * Vp, 4, -5.0f, 5.0f);
    std::vector<int32_t> targets(N);
    for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 37) % V);
    // probs (N,Vp) then losses (N), one buffer.
    check_same_on_1_and_2_threads(std::vector<float>(N * Vp + N), [&](Backend& b, auto& out) {
      b.softmax_crossentropy_forward(out.data(), out.data() + N * Vp, logits.data(), targets.data(),
                                     N, V, Vp);
    });
    std::vector<float> probs(N * Vp), losses(N);
    cpu_backend().softmax_crossentropy_forward(probs.data(), losses.data(), logits.data(),
                                               targets.data(), N, V, Vp);
    check_same_on_1_and_2_threads(random_floats(N * Vp, 5), [&](Backend& b, auto& dlogits) {
      b.crossentropy_softmax_backward(dlogits.data(), y.data(), probs.data(), targets.data(), 0, N,
                                      V, Vp);
    });
  }
  SECTION("adamw") {
    // params, m, v in one buffer.
    std::vector<float> state(3 * kCount, 0.0f);
    std::copy(x.begin(), x.end(), state.begin());
    Backend::AdamWParams hyper;
    hyper.weight_decay = 0.1;
    check_same_on_1_and_2_threads(state, [&](Backend& b, auto& s) {
      b.adamw_update(s.data(), y.data(), s.data() + kCount, s.data() + 2 * kCount, kCount, hyper,
                     nullptr);
    });
  }
  SECTION("sum_of_squares") {
    const double one = cpu_backend(1).sum_of_squares(x.data(), kCount);
    const double two = cpu_backend(2).sum_of_squares(x.data(), kCount);
    CHECK(std::memcmp(&one, &two, sizeof(double)) == 0);
  }
}

}  // namespace
}  // namespace dslaunch::kernels::testing
