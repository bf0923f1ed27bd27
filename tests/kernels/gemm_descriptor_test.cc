// The matrix-product descriptor: its column-major form (what cuBLAS and CBLAS
// get) run through OpenBLAS against products written out element by element
// from their row-major definitions, for every product the model uses.

#include "kernels/gemm_descriptor.h"

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/sgemm.h"
#include "kernels/model_gemms.h"
#include "tests/kernels/gemm_testing.h"

namespace dslaunch::kernels {
namespace {

using testing::random_floats;
using testing::relative_error;

TEST_CASE("the column-major form swaps the operands and the output's dimensions") {
  const RowMajorGemm g{.trans_a = Transpose::kYes,
                       .M = 3,
                       .N = 5,
                       .K = 7,
                       .lda = 4,
                       .ldb = 6,
                       .ldc = 8,
                       .alpha = 0.5f,
                       .beta = 1.0f,
                       .batch = 2,
                       .stride_a = 100,
                       .stride_b = 200,
                       .stride_c = 300};
  const ColumnMajorGemm c = to_column_major(g);
  CHECK(c.trans_first == Transpose::kNo);
  CHECK(c.trans_second == Transpose::kYes);
  CHECK((c.m == 5 && c.n == 3 && c.k == 7));
  CHECK((c.ld_first == 6 && c.ld_second == 4 && c.ldc == 8));
  CHECK((c.alpha == 0.5f && c.beta == 1.0f && c.batch == 2));
  CHECK((c.stride_first == 200 && c.stride_second == 100 && c.stride_c == 300));
}

TEST_CASE(
    "every transpose, alpha, beta, padded leading dimension and batch matches the definition") {
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      const int64_t batch = 3;
      const RowMajorGemm g = testing::padded_gemm(ta, tb, 7, 5, 9, 3, batch, 0.75f, -1.5f);
      const auto A = random_floats(batch * g.stride_a, 1);
      const auto B = random_floats(batch * g.stride_b, 2);
      auto C = random_floats(batch * g.stride_c, 3);
      const auto expected = testing::reference_product(g, A, B, C, [](float x) { return x; });
      cpu::sgemm(g, A.data(), B.data(), C.data());
      INFO("transposed A " << (ta == Transpose::kYes) << ", B " << (tb == Transpose::kYes));
      CHECK(relative_error(C, expected) < 1e-6);
    }
  }
}

TEST_CASE("an empty inner dimension scales C by beta") {
  const RowMajorGemm g{.M = 2, .N = 3, .K = 0, .lda = 1, .ldb = 3, .ldc = 3, .beta = 0.5f};
  std::vector<float> C{2, 4, 6, 8, 10, 12};
  cpu::sgemm(g, nullptr, nullptr, C.data());
  CHECK(C == std::vector<float>{1, 2, 3, 4, 5, 6});
}

// One of the model's products: the descriptor, and the product written out
// from what kernels/backend.h says it computes (A and B as the descriptor
// names them, sized here).
struct ModelProduct {
  const char* name;
  RowMajorGemm gemm;
  int64_t a_size, b_size, c_size;
  std::function<double(const std::vector<float>& A, const std::vector<float>& B, int64_t index)>
      element;  // the product's value at C's flat index, without C's start
};

std::vector<ModelProduct> model_products(int64_t N, int64_t C, int64_t OC, int64_t Vp) {
  using namespace model_gemms;
  return {
      {"linear forward: out (N,OC) = inp (N,C) · weight (C,OC)", linear_forward(N, C, OC, false),
       N * C, C * OC, N * OC,
       [=](const auto& inp, const auto& weight, int64_t at) {
         const int64_t n = at / OC, o = at % OC;
         double s = 0;
         for (int64_t c = 0; c < C; ++c) s += double{inp[n * C + c]} * weight[c * OC + o];
         return s;
       }},
      {"linear backward, input: dinp (N,C) += dout (N,OC) · weightᵀ",
       linear_backward_input(N, C, OC), N * OC, C * OC, N * C,
       [=](const auto& dout, const auto& weight, int64_t at) {
         const int64_t n = at / C, c = at % C;
         double s = 0;
         for (int64_t o = 0; o < OC; ++o) s += double{dout[n * OC + o]} * weight[c * OC + o];
         return s;
       }},
      {"linear backward, weight: dweight (C,OC) += inpᵀ · dout", linear_backward_weight(N, C, OC),
       N * C, N * OC, C * OC,
       [=](const auto& inp, const auto& dout, int64_t at) {
         const int64_t c = at / OC, o = at % OC;
         double s = 0;
         for (int64_t n = 0; n < N; ++n) s += double{inp[n * C + c]} * dout[n * OC + o];
         return s;
       }},
      {"logits forward: logits (N,Vp) = inp (N,C) · wteᵀ", logits_forward(N, C, Vp, Vp), N * C, Vp * C,
       N * Vp,
       [=](const auto& inp, const auto& wte, int64_t at) {
         const int64_t n = at / Vp, v = at % Vp;
         double s = 0;
         for (int64_t c = 0; c < C; ++c) s += double{inp[n * C + c]} * wte[v * C + c];
         return s;
       }},
      {"logits backward, input: dinp (N,C) += dlogits (N,Vp) · wte",
       logits_backward_input(N, C, Vp, Vp), N * Vp, Vp * C, N * C,
       [=](const auto& dlogits, const auto& wte, int64_t at) {
         const int64_t n = at / C, c = at % C;
         double s = 0;
         for (int64_t v = 0; v < Vp; ++v) s += double{dlogits[n * Vp + v]} * wte[v * C + c];
         return s;
       }},
      {"logits backward, weight: dwte (Vp,C) += dlogitsᵀ · inp", logits_backward_weight(N, C, Vp, Vp),
       N * Vp, N * C, Vp * C,
       [=](const auto& dlogits, const auto& inp, int64_t at) {
         const int64_t v = at / C, c = at % C;
         double s = 0;
         for (int64_t n = 0; n < N; ++n) s += double{dlogits[n * Vp + v]} * inp[n * C + c];
         return s;
       }},
  };
}

TEST_CASE("each of the model's products computes what the backend interface states") {
  // Distinct, odd sizes, so a swapped dimension or leading dimension shows.
  for (const auto& [N, C, OC, Vp] :
       std::vector<std::array<int64_t, 4>>{{5, 7, 3, 11}, {1, 1, 1, 1}, {33, 24, 72, 50}}) {
    for (const ModelProduct& product : model_products(N, C, OC, Vp)) {
      INFO(product.name << " at N " << N << ", C " << C << ", OC " << OC << ", Vp " << Vp);
      const auto A = random_floats(product.a_size, 11);
      const auto B = random_floats(product.b_size, 12);
      const auto start = random_floats(product.c_size, 13);
      std::vector<double> expected(product.c_size);
      for (int64_t i = 0; i < product.c_size; ++i) {
        expected[i] = product.element(A, B, i) + product.gemm.beta * start[i];
      }
      auto out = start;
      cpu::sgemm(product.gemm, A.data(), B.data(), out.data());
      CHECK(relative_error(out, expected) < 1e-6);
    }
  }
}

TEST_CASE("linear forward onto the bias adds the product to what out holds") {
  const RowMajorGemm onto = model_gemms::linear_forward(4, 3, 2, true);
  const RowMajorGemm fresh = model_gemms::linear_forward(4, 3, 2, false);
  CHECK(onto.beta == 1.0f);
  CHECK(fresh.beta == 0.0f);
}

TEST_CASE("a descriptor BLAS would reject is refused, naming the field") {
  const RowMajorGemm good{.M = 4, .N = 5, .K = 6, .lda = 6, .ldb = 5, .ldc = 5};
  CHECK_NOTHROW(check_gemm(good));
  RowMajorGemm bad = good;
  bad.lda = 5;
  CHECK_THROWS_WITH(check_gemm(bad), Catch::Contains("lda 5") && Catch::Contains("width 6"));
  bad = good;
  bad.trans_b = Transpose::kYes;  // B stored (N,K) = (5,6): ldb 5 is too small
  CHECK_THROWS_WITH(check_gemm(bad), Catch::Contains("ldb 5"));
  bad = good;
  bad.ldc = 4;
  CHECK_THROWS_WITH(to_column_major(bad), Catch::Contains("ldc 4"));
  bad = good;
  bad.K = -1;
  CHECK_THROWS_AS(check_gemm(bad), std::invalid_argument);
  bad = good;
  bad.batch = 0;
  CHECK_THROWS_WITH(check_gemm(bad), Catch::Contains("batch 0"));
}

}  // namespace
}  // namespace dslaunch::kernels
