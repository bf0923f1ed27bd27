// The element-wise kernels on the CUDA thread-model emulator against the CPU
// backend: the same results, to the last bit where both run the same
// per-element math with the same rounding.

#include "kernels/simt/elementwise_kernels.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "kernels/cpu/sgemm.h"
#include "kernels/model_gemms.h"
#include "kernels/simt/column_sum_kernels.h"
#include "tests/kernels/cpu/kernel_testing.h"
#include "tests/kernels/simt/simt_testing.h"

namespace dslaunch::kernels::testing {
namespace {

using namespace simt;

// More than one grid-stride pass would take with a small grid, and a ragged
// last block.
constexpr int64_t kN = 2 * 256 + 77;

TEST_CASE("GELU forward and backward match the CPU backend") {
  const auto x = random_floats(kN, 1, -4.0f, 4.0f);
  const auto dout = random_floats(kN, 2);
  const auto dinp0 = random_floats(kN, 3);
  std::vector<float> expected(kN), out(kN);
  cpu_backend().gelu_forward(expected.data(), x.data(), kN);
  emulate(GeluForward{out.data(), x.data(), kN});
  // The CPU backend's vector tanhf (libmvec) and the scalar one differ in
  // the last bits.
  CHECK(relative_error(out, to_double(expected)) < 1e-6);

  auto expected_d = dinp0, dinp = dinp0;
  cpu_backend().gelu_backward(expected_d.data(), x.data(), dout.data(), kN);
  emulate(GeluBackward{dinp.data(), x.data(), dout.data(), kN});
  CHECK(relative_error(added(dinp, dinp0), added(expected_d, dinp0)) < 1e-6);
}

TEST_CASE("residual, scale, divide and fill match the CPU backend bit for bit") {
  const auto a = random_floats(kN, 4), b = random_floats(kN, 5), dout = random_floats(kN, 6);
  std::vector<float> expected(kN), out(kN);
  cpu_backend().residual_forward(expected.data(), a.data(), b.data(), kN);
  emulate(ResidualForward{out.data(), a.data(), b.data(), kN});
  CHECK(out == expected);

  auto da = a, db = b, expected_da = a, expected_db = b;
  cpu_backend().residual_backward(expected_da.data(), expected_db.data(), dout.data(), kN);
  emulate(ResidualBackward{da.data(), db.data(), dout.data(), kN});
  CHECK(da == expected_da);
  CHECK(db == expected_db);

  auto x = a, expected_x = a;
  cpu_backend().scale(expected_x.data(), kN, 0.37f);
  emulate(Scale{x.data(), kN, 0.37f});
  CHECK(x == expected_x);

  cpu_backend().divide(expected_x.data(), kN, 3.0f);
  emulate(Divide{x.data(), kN, 3.0f});
  CHECK(x == expected_x);

  emulate(Fill{x.data(), kN, -2.5f});
  CHECK(x == std::vector<float>(kN, -2.5f));
}

// The CUDA backend's linear layer: the bias broadcast, the shared
// descriptors (here through CBLAS) and the bias gradient's column sums.
TEST_CASE("the linear layer built from kernels and descriptors matches the CPU backend") {
  const int64_t N = 37, C = 24, OC = 40;
  const auto inp = random_floats(N * C, 7), weight = random_floats(C * OC, 8);
  const auto bias = random_floats(OC, 9), dout = random_floats(N * OC, 10);
  std::vector<float> expected(N * OC), out(N * OC);
  cpu_backend().matmul_forward(expected.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  emulate(BroadcastRows{out.data(), bias.data(), N, OC});
  cpu::sgemm(model_gemms::linear_forward(N, C, OC, true), inp.data(), weight.data(), out.data());
  CHECK(relative_error(out, to_double(expected)) < 1e-6);

  const auto dinp0 = random_floats(N * C, 11), dweight0 = random_floats(C * OC, 12);
  const auto dbias0 = random_floats(OC, 13);
  auto e_dinp = dinp0, e_dweight = dweight0, e_dbias = dbias0;
  cpu_backend().matmul_backward(e_dinp.data(), e_dweight.data(), e_dbias.data(), dout.data(),
                                inp.data(), weight.data(), N, C, OC);
  auto dinp = dinp0, dweight = dweight0, dbias = dbias0;
  cpu::sgemm(model_gemms::linear_backward_input(N, C, OC), dout.data(), weight.data(), dinp.data());
  cpu::sgemm(model_gemms::linear_backward_weight(N, C, OC), inp.data(), dout.data(),
             dweight.data());
  std::vector<double> partials(column_sum_chunks(N) * OC, NAN);
  emulate(PartialColumnSums<PlainTerm>{partials.data(), {dout.data(), OC}, N, OC});
  emulate(FinishColumnSums<1>{partials.data(), column_sum_chunks(N), OC, {dbias.data()}});
  CHECK(relative_error(added(dinp, dinp0), added(e_dinp, dinp0)) < 1e-6);
  CHECK(relative_error(added(dweight, dweight0), added(e_dweight, dweight0)) < 1e-6);
  // Both sum in double, in other orders.
  CHECK(relative_error(added(dbias, dbias0), added(e_dbias, dbias0)) < 1e-12);
}

TEST_CASE("column sums over several chunks of rows and a ragged column tile match double sums") {
  // 600 rows: chunks of 256, 256 and 88; 70 columns: tiles of 32, 32 and 6.
  const int64_t rows = 600, width = 70;
  const auto x = random_floats(rows * width, 20);
  const auto start = random_floats(width, 21);
  std::vector<double> expected(width);
  for (int64_t c = 0; c < width; ++c) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += x[r * width + c];
    expected[c] = start[c] + sum;
  }
  REQUIRE(column_sum_chunks(rows) == 3);
  for (const Schedule& schedule : standard_schedules()) {
    INFO(describe(schedule));
    std::vector<double> partials(column_sum_chunks(rows) * width, NAN);
    auto out = start;
    emulate(PartialColumnSums<PlainTerm>{partials.data(), {x.data(), width}, rows, width},
            schedule);
    emulate(FinishColumnSums<1>{partials.data(), column_sum_chunks(rows), width, {out.data()}},
            schedule);
    CHECK(relative_error(out, expected) < 1e-7);
  }
}

TEST_CASE("the cross-entropy gradient matches the CPU backend, split vocabulary included") {
  const int64_t N = 6, V = 50, Vp = 64;
  auto probs = random_floats(N * Vp, 14, 0.0f, 0.05f);
  const auto dlosses = random_floats(N, 15);
  const std::vector<int32_t> targets{0, 49, 70, 3, 25, 110};  // 70, 110: outside [0, V)
  const auto dlogits0 = random_floats(N * Vp, 16);
  for (const int64_t vocab_begin : {int64_t{0}, int64_t{60}}) {
    INFO("vocabulary slice from " << vocab_begin);
    auto expected = dlogits0, dlogits = dlogits0;
    cpu_backend().crossentropy_softmax_backward(expected.data(), dlosses.data(), probs.data(),
                                                targets.data(), vocab_begin, N, V, Vp);
    emulate(CrossentropySoftmaxBackward{dlogits.data(), dlosses.data(), probs.data(),
                                        targets.data(), vocab_begin, N, V, Vp});
    // The CPU loop may fuse p·dloss + d into one rounding, the kernel here
    // does not.
    CHECK(relative_error(added(dlogits, dlogits0), added(expected, dlogits0)) < 1e-6);
    for (int64_t row = 0; row < N; ++row) {
      for (int64_t j = V; j < Vp; ++j) CHECK(dlogits[row * Vp + j] == dlogits0[row * Vp + j]);
    }
  }
}

TEST_CASE("every schedule gives the same bits") {
  const auto x = random_floats(kN, 17);
  std::vector<float> first(kN);
  emulate(GeluForward{first.data(), x.data(), kN});
  for (const Schedule& schedule : standard_schedules()) {
    std::vector<float> out(kN);
    emulate(GeluForward{out.data(), x.data(), kN}, schedule);
    CHECK(out == first);
  }
}

}  // namespace
}  // namespace dslaunch::kernels::testing
