// 16-bit matrix products: each operand rounded to bf16 or fp16, products
// and sums in fp32, against a double-precision product of the rounded
// operands; C's rows in several blocks; every transpose the model uses.
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/rounded_gemm.h"
#include "kernels/half_precision.h"
#include "tests/kernels/cpu/kernel_testing.h"

namespace dslaunch::kernels::testing {
namespace {

using cpu::RoundedGemm;

double rounded(core::DType dtype, float x) {
  return dtype == core::DType::kBF16 ? bf16_to_float(float_to_bf16(x))
                                     : fp16_to_float(float_to_fp16(x));
}

// C (M,N) = op(A) · op(B) + c0, from row-major A and B, in double; each
// operand element rounded to dtype unless dtype is kF32.
std::vector<double> reference(core::DType dtype, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                              const std::vector<float>& A, const std::vector<float>& B,
                              const std::vector<float>& c0) {
  const auto value = [dtype](float x) {
    return dtype == core::DType::kF32 ? static_cast<double>(x) : rounded(dtype, x);
  };
  std::vector<double> C(M * N);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double sum = c0[m * N + n];
      for (int64_t k = 0; k < K; ++k) {
        const float a = ta ? A[k * M + m] : A[m * K + k];
        const float b = tb ? B[n * K + k] : B[k * N + n];
        sum += value(a) * value(b);
      }
      C[m * N + n] = sum;
    }
  }
  return C;
}

}  // namespace

TEST_CASE("16-bit products equal the exact product of the rounded operands, to fp32 sums") {
  const int64_t M = 200, N = 70, K = 96;  // 200 rows: four blocks of 64 at most 64 * K elements
  const auto A = random_floats(M * K, 1);
  const auto B = random_floats(K * N, 2);
  const auto c0 = random_floats(M * N, 3);
  for (core::DType dtype : {core::DType::kBF16, core::DType::kF16}) {
    RoundedGemm gemm(dtype, 64 * K);
    INFO(gemm.kernel_name());
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (bool accumulate : {false, true}) {
          INFO("transposed A " << ta << ", transposed B " << tb << ", accumulate " << accumulate);
          std::vector<float> C = c0;
          gemm.run({.trans_a = ta ? Transpose::kYes : Transpose::kNo,
                    .trans_b = tb ? Transpose::kYes : Transpose::kNo,
                    .M = M, .N = N, .K = K, .lda = ta ? M : K, .ldb = tb ? K : N, .ldc = N,
                    .beta = accumulate ? 1.0f : 0.0f},
                   A.data(), B.data(), C.data());
          const std::vector<float> zero(M * N, 0.0f);
          const auto& start = accumulate ? c0 : zero;
          CHECK(relative_error(C, reference(dtype, ta, tb, M, N, K, A, B, start)) < 1e-6);
          // And the rounding is real: the fp32 product is further away.
          CHECK(relative_error(C, reference(core::DType::kF32, ta, tb, M, N, K, A, B, start)) >
                (dtype == core::DType::kBF16 ? 1e-4 : 1e-5));
        }
      }
    }
  }
}

TEST_CASE("the backend rounds the model's products when told to, and only those") {
  auto backend = make_cpu_backend(2);
  CHECK(backend->matmul_kernel() == "OpenBLAS sgemm");
  const int64_t N = 8, C = 16, OC = 12;
  const auto inp = random_floats(N * C, 4);
  const auto weight = random_floats(C * OC, 5);
  std::vector<float> fp32(N * OC), bf16(N * OC);
  backend->matmul_forward(fp32.data(), inp.data(), weight.data(), nullptr, N, C, OC);
  backend->set_matmul_precision(core::DType::kBF16);
  CHECK(backend->matmul_kernel() != "OpenBLAS sgemm");
  backend->matmul_forward(bf16.data(), inp.data(), weight.data(), nullptr, N, C, OC);
  const std::vector<float> zero(N * OC, 0.0f);
  CHECK(relative_error(
            bf16, reference(core::DType::kBF16, false, false, N, OC, C, inp, weight, zero)) < 1e-6);
  backend->set_matmul_precision(core::DType::kF32);
  std::vector<float> again(N * OC);
  backend->matmul_forward(again.data(), inp.data(), weight.data(), nullptr, N, C, OC);
  CHECK(again == fp32);
}

// The model's weights as the trainer lays them out: two linear layers'
// weights and a tied embedding of 3 vocabulary rows, one array.
struct Weights {
  static constexpr int64_t N = 8, C = 16, OC = 12, V = 3;
  std::vector<float> all = random_floats(2 * OC * C + V * C, 11);
  const float* first() const { return all.data(); }
  const float* second() const { return all.data() + OC * C; }
  const float* wte() const { return all.data() + 2 * OC * C; }
};

// The model's products of `inp` with the weights, as `backend` runs them.
std::vector<float> products(Backend& backend, const Weights& w, const std::vector<float>& inp) {
  const int64_t N = Weights::N, C = Weights::C, OC = Weights::OC, V = Weights::V;
  std::vector<float> out(N * OC + N * OC + N * V + N * C, 0.0f);
  float* at = out.data();
  backend.matmul_forward(at, inp.data(), w.first(), nullptr, N, C, OC);
  at += N * OC;
  backend.matmul_forward(at, inp.data(), w.second(), nullptr, N, C, OC);
  at += N * OC;
  backend.logits_forward(at, inp.data(), w.wte(), N, C, V, V);
  at += N * V;
  // Backward's input gradient multiplies the same weights untransposed.
  const auto dout = random_floats(N * OC, 12);
  std::vector<float> dweight(OC * C, 0.0f);
  backend.matmul_backward(at, dweight.data(), nullptr, dout.data(), inp.data(), w.first(), N, C,
                          OC);
  return out;
}

// The same products by a backend that keeps no copy: each converts the
// weights as it multiplies them.
std::vector<float> fresh_products(const Weights& w, const std::vector<float>& inp) {
  auto backend = make_cpu_backend(2);
  backend->set_matmul_precision(core::DType::kBF16);
  return products(*backend, w, inp);
}

TEST_CASE("bf16 products multiply a copy of the weights converted once after each change") {
  auto backend = make_cpu_backend(2);
  backend->set_matmul_precision(core::DType::kBF16);
  Weights w;
  const int64_t n = static_cast<int64_t>(w.all.size());
  backend->set_weights(w.all.data(), n);
  // The copy is kept where oneDNN multiplies bf16 (AVX512_BF16 or AMX).
  const bool kept = backend->matmul_kernel().rfind("oneDNN", 0) == 0;
  INFO(backend->matmul_kernel());
  CHECK(backend->weight_copy_bytes() == (kept ? 2 * n : 0));
  const auto inp = random_floats(Weights::N * Weights::C, 13);
  const std::vector<float> before = products(*backend, w, inp);
  CHECK(before == fresh_products(w, inp));

  // Weights changed without saying so: where the copy is kept, the products
  // still multiply it.
  const Weights old = w;
  for (float& x : w.all) x = -x / 2;
  CHECK(products(*backend, w, inp) == (kept ? before : fresh_products(w, inp)));
  // Said: converted again, once.
  backend->weights_changed();
  const std::vector<float> after = products(*backend, w, inp);
  CHECK(after == fresh_products(w, inp));
  CHECK(after != before);

  // Forgotten: every product converts its weights again.
  backend->set_weights(nullptr, 0);
  CHECK(backend->weight_copy_bytes() == 0);
  w = old;
  CHECK(products(*backend, w, inp) == before);
  // fp16 products run on sgemm, which keeps no copy.
  backend->set_matmul_precision(core::DType::kF16);
  backend->set_weights(w.all.data(), n);
  CHECK(backend->weight_copy_bytes() == 0);
}

TEST_CASE("AdamW's pass writes the weights' copy of the parameters it rounds") {
  auto backend = make_cpu_backend(2);
  backend->set_matmul_precision(core::DType::kBF16);
  const bool kept = backend->matmul_kernel().rfind("oneDNN", 0) == 0;
  Weights w;
  const int64_t n = static_cast<int64_t>(w.all.size());
  std::vector<float> masters = w.all, m(n, 0.0f), v(n, 0.0f);
  const auto grads = random_floats(n, 14);
  backend->round_to(w.all.data(), w.all.data(), n, core::DType::kBF16);
  backend->set_weights(w.all.data(), n);
  const auto inp = random_floats(Weights::N * Weights::C, 15);
  products(*backend, w, inp);  // the copy now holds the first weights

  backend->weights_changed();
  Backend::AdamWParams hyper;
  hyper.lr = 0.1;
  // In two calls, as AdamW's spans with and without weight decay come.
  backend->adamw_update(masters.data(), grads.data(), m.data(), v.data(), n / 2, hyper,
                        w.all.data());
  backend->adamw_update(masters.data() + n / 2, grads.data() + n / 2, m.data() + n / 2,
                        v.data() + n / 2, n - n / 2, hyper, w.all.data() + n / 2);
  for (int64_t i = 0; i < n; ++i) {
    REQUIRE(w.all[i] == bf16_to_float(float_to_bf16(masters[i])));
  }
  const std::vector<float> updated = fresh_products(w, inp);
  // Overwritten behind its back, the copy still holds what AdamW wrote
  // (where it is kept): the pass wrote it, nothing converted it since.
  std::fill(w.all.begin(), w.all.end(), 0.0f);
  CHECK(products(*backend, w, inp) == (kept ? updated : fresh_products(w, inp)));
}

TEST_CASE("round_to keeps what a 16-bit copy holds") {
  Backend& backend = cpu_backend();
  std::vector<float> x = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 70000.0f, -1e-9f, 3.14159f};
  std::vector<float> b = x, h = x;
  backend.round_to(b.data(), b.data(), static_cast<int64_t>(b.size()), core::DType::kBF16);
  backend.round_to(h.data(), x.data(), static_cast<int64_t>(h.size()), core::DType::kF16);
  CHECK(b[0] == 1.0f);                                    // a tie, to even
  CHECK(b[1] == 1.0f + 4.0f / 256);                       // a tie, to even (up)
  CHECK(b[2] == 70144.0f);                                // bf16 keeps fp32's range
  CHECK(h[2] == std::numeric_limits<float>::infinity());  // past fp16's 65504
  CHECK(h[3] == -0.0f);
  CHECK(std::signbit(h[3]));
  CHECK(b[4] == 3.140625f);
  CHECK(h[4] == 3.140625f);
  std::vector<float> same(x.size());
  backend.round_to(same.data(), x.data(), static_cast<int64_t>(same.size()), core::DType::kF32);
  CHECK(same == x);
  // Long enough for several chunks and every vector width's tail.
  const std::vector<float> many = random_floats(100'003, 9);
  std::vector<float> rounded(many.size());
  backend.round_to(rounded.data(), many.data(), static_cast<int64_t>(many.size()),
                   core::DType::kBF16);
  for (size_t i = 0; i < many.size(); ++i) {
    REQUIRE(rounded[i] == bf16_to_float(float_to_bf16(many[i])));
  }
}

}  // namespace dslaunch::kernels::testing
