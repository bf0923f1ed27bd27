// The row-wise kernels (layer norm, softmax and cross-entropy, embeddings)
// and the whole-tensor sums on the CUDA thread-model emulator against the
// CPU backend, under every schedule (emulator.h): a missing barrier or a
// reduction that drops a lane shows as a wrong value.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/simt/column_sum_kernels.h"
#include "kernels/simt/cross_entropy_kernels.h"
#include "kernels/simt/encoder_kernels.h"
#include "kernels/simt/layernorm_kernels.h"
#include "kernels/simt/reduction_kernels.h"
#include "tests/kernels/cpu/kernel_testing.h"
#include "tests/kernels/simt/simt_testing.h"

namespace dslaunch::kernels::testing {
namespace {

using namespace simt;

// Rows that fill one block of 8 warps and part of another; a row width that
// is not a multiple of the warp.
constexpr int64_t kRows = 11, kC = 72;

TEST_CASE("layer norm forward and backward match the CPU backend") {
  auto inp = random_floats(kRows * kC, 1, -2.0f, 2.0f);
  for (int64_t c = 0; c < kC; ++c) inp[kC + c] += 50.0f;  // a row far from zero
  const auto weight = random_floats(kC, 2), bias = random_floats(kC, 3);
  const auto dout = random_floats(kRows * kC, 4);
  std::vector<float> e_out(kRows * kC), e_mean(kRows), e_rstd(kRows);
  cpu_backend().layernorm_forward(e_out.data(), e_mean.data(), e_rstd.data(), inp.data(),
                                  weight.data(), bias.data(), kRows, kC);
  const auto dinp0 = random_floats(kRows * kC, 5);
  const auto dweight0 = random_floats(kC, 6), dbias0 = random_floats(kC, 7);
  auto e_dinp = dinp0, e_dweight = dweight0, e_dbias = dbias0;
  cpu_backend().layernorm_backward(e_dinp.data(), e_dweight.data(), e_dbias.data(), dout.data(),
                                   inp.data(), weight.data(), e_mean.data(), e_rstd.data(), kRows,
                                   kC);
  for (const Schedule& schedule : standard_schedules()) {
    std::vector<float> out(kRows * kC), mean(kRows), rstd(kRows);
    emulate(LayernormForward{out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                             bias.data(), kRows, kC},
            schedule);
    // fp32 sums here, double on the CPU.
    CHECK(relative_error(out, to_double(e_out)) < 1e-5);
    CHECK(relative_error(mean, to_double(e_mean)) < 1e-6);
    CHECK(relative_error(rstd, to_double(e_rstd)) < 1e-5);

    auto dinp = dinp0, dweight = dweight0, dbias = dbias0;
    emulate(LayernormBackwardInput{dinp.data(), dout.data(), inp.data(), weight.data(),
                                   e_mean.data(), e_rstd.data(), kRows, kC},
            schedule);
    std::vector<double> partials(column_sum_chunks(kRows) * 2 * kC, NAN);
    emulate(PartialColumnSums<LayernormParamTerm>{partials.data(),
                                                  {dout.data(), inp.data(), e_mean.data(),
                                                   e_rstd.data(), kC},
                                                  kRows,
                                                  kC},
            schedule);
    emulate(
        FinishColumnSums<2>{
            partials.data(), column_sum_chunks(kRows), kC, {dweight.data(), dbias.data()}},
        schedule);
    CHECK(relative_error(added(dinp, dinp0), added(e_dinp, dinp0)) < 1e-5);
    CHECK(relative_error(added(dweight, dweight0), added(e_dweight, dweight0)) < 1e-6);
    CHECK(relative_error(added(dbias, dbias0), added(e_dbias, dbias0)) < 1e-6);
  }
}

// A vocabulary wider than a block, padded; one row far above the others.
constexpr int64_t kN = 5, kV = 300, kVp = 320;
const std::vector<int32_t> kTargets{0, 299, 17, 150, 256};

std::vector<float> test_logits() {
  auto logits = random_floats(kN * kVp, 8, -3.0f, 3.0f);
  for (int64_t j = 0; j < kV; ++j) logits[kVp + j] += 80.0f;
  for (int64_t row = 0; row < kN; ++row) {
    for (int64_t j = kV; j < kVp; ++j) logits[row * kVp + j] = 1000.0f;  // padding: ignored
  }
  return logits;
}

TEST_CASE("the fused softmax and cross-entropy match the CPU backend, in place too") {
  const auto logits = test_logits();
  std::vector<float> e_probs(kN * kVp), e_losses(kN);
  cpu_backend().softmax_crossentropy_forward(e_probs.data(), e_losses.data(), logits.data(),
                                             kTargets.data(), kN, kV, kVp);
  for (const Schedule& schedule : standard_schedules()) {
    std::vector<float> probs(kN * kVp), losses(kN);
    emulate(SoftmaxCrossentropyForward{probs.data(), losses.data(), logits.data(), kTargets.data(),
                                       kN, kV, kVp},
            schedule);
    CHECK(relative_error(probs, to_double(e_probs)) < 1e-6);
    CHECK(relative_error(losses, to_double(e_losses)) < 1e-6);
    auto in_place = logits;
    emulate(SoftmaxCrossentropyForward{in_place.data(), losses.data(), in_place.data(),
                                       kTargets.data(), kN, kV, kVp},
            schedule);
    CHECK(relative_error(in_place, to_double(e_probs)) < 1e-6);
    CHECK(relative_error(losses, to_double(e_losses)) < 1e-6);
  }
}

TEST_CASE("the vocabulary-parallel steps over two slices give the whole row's softmax and loss") {
  const auto logits = test_logits();
  std::vector<float> e_probs(kN * kVp), e_losses(kN);
  cpu_backend().softmax_crossentropy_forward(e_probs.data(), e_losses.data(), logits.data(),
                                             kTargets.data(), kN, kV, kVp);
  // Two ranks: columns [0, 160) and [160, 300), each slice padded to 160.
  constexpr int64_t kSlice = 160;
  const int64_t begins[2] = {0, kSlice};
  std::vector<float> slices[2];
  for (int rank = 0; rank < 2; ++rank) {
    slices[rank].assign(kN * kSlice, 1000.0f);
    const int64_t width = std::min(kSlice, kV - begins[rank]);
    for (int64_t row = 0; row < kN; ++row) {
      for (int64_t j = 0; j < width; ++j) {
        slices[rank][row * kSlice + j] = logits[row * kVp + begins[rank] + j];
      }
    }
  }
  const auto width = [&](int rank) { return std::min(kSlice, kV - begins[rank]); };
  // The all-reduces between the steps, done here by hand.
  std::vector<float> row_max(kN, -INFINITY);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<float> part(kN);
    emulate(VocabParallelMax{part.data(), slices[rank].data(), kN, width(rank), kSlice});
    for (int64_t row = 0; row < kN; ++row) row_max[row] = std::max(row_max[row], part[row]);
  }
  std::vector<float> sums(2 * kN, 0.0f);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<float> part(2 * kN);
    emulate(VocabParallelSums{part.data(), slices[rank].data(), row_max.data(), kTargets.data(),
                              begins[rank], kN, width(rank), kSlice});
    for (int64_t i = 0; i < 2 * kN; ++i) sums[i] += part[i];
  }
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<float> probs(kN * kSlice), losses(kN);
    emulate(VocabParallelSoftmaxLoss{probs.data(), losses.data(), slices[rank].data(),
                                     row_max.data(), sums.data(), kN, width(rank), kSlice});
    CHECK(relative_error(losses, to_double(e_losses)) < 1e-6);
    for (int64_t row = 0; row < kN; ++row) {
      for (int64_t j = 0; j < kSlice; ++j) {
        const float expected = j < width(rank) ? e_probs[row * kVp + begins[rank] + j] : 0.0f;
        CHECK(probs[row * kSlice + j] == Approx(expected).epsilon(1e-5).margin(1e-12));
      }
    }
  }
}

TEST_CASE("the embeddings forward and backward match the CPU backend bit for bit") {
  const int64_t B = 3, T = 5, C = 40, rows = 9;
  // Tokens repeat, and some lie outside the slice [4, 13).
  const std::vector<int32_t> tokens{4, 7, 7, 12, 0, 20, 4, 4, 9, 13, 5, 6, 7, 8, 3};
  const auto wte = random_floats(rows * C, 9), wpe = random_floats(T * C, 10);
  const auto dout = random_floats(B * T * C, 11);
  const Backend::VocabSlice slice{4, rows};
  for (const float* positions : {wpe.data(), static_cast<const float*>(nullptr)}) {
    std::vector<float> out(B * T * C), expected(B * T * C);
    cpu_backend().encoder_forward(expected.data(), tokens.data(), wte.data(), slice, positions, B,
                                  T, C);
    emulate(EncoderForward{out.data(), tokens.data(), wte.data(), slice.begin, slice.rows,
                           positions, B, T, C});
    CHECK(out == expected);
  }
  const auto dwte0 = random_floats(rows * C, 12), dwpe0 = random_floats(T * C, 13);
  auto e_dwte = dwte0, e_dwpe = dwpe0, dwte = dwte0, dwpe = dwpe0;
  cpu_backend().encoder_backward(e_dwte.data(), slice, e_dwpe.data(), dout.data(), tokens.data(), B,
                                 T, C);
  emulate(EncoderBackwardPositions{dwpe.data(), dout.data(), B, T, C});
  const TokenGroups groups = group_by_row(tokens.data(), B * T, slice.begin, slice.rows);
  // Rows 0 (token 4, three times), 3, 5, 8 and more; tokens 0, 20, 13, 3 lie outside.
  CHECK(groups.rows.front() == 0);
  CHECK(groups.offsets[1] == 3);
  CHECK(groups.positions.size() == 11);
  emulate(EncoderBackwardTokens{dwte.data(), dout.data(), groups.rows.data(), groups.offsets.data(),
                                groups.positions.data(), static_cast<int64_t>(groups.rows.size()),
                                C});
  CHECK(dwpe == e_dwpe);
  CHECK(dwte == e_dwte);
}

TEST_CASE("the two-launch sums give the CPU backend's sum of squares and mean") {
  for (const int64_t n : {int64_t{1}, int64_t{255}, int64_t{5000}, int64_t{70001}}) {
    INFO(n << " elements");
    const auto x = random_floats(n, 14);
    std::vector<double> partials(kMaxPartialSums, NAN);
    const PartialSums squares{partials.data(), x.data(), n, true};
    emulate(squares);
    double total = NAN;
    emulate(FinishSum{partials.data(), squares.shape().grid, &total, nullptr, n});
    CHECK(total == Approx(cpu_backend().sum_of_squares(x.data(), n)).epsilon(1e-12));

    const PartialSums values{partials.data(), x.data(), n, false};
    emulate(values);
    float mean = NAN, expected = NAN;
    emulate(FinishSum{partials.data(), values.shape().grid, nullptr, &mean, n});
    cpu_backend().mean(&expected, x.data(), n);
    CHECK(mean == Approx(expected).epsilon(1e-6).margin(1e-9));
  }
}

}  // namespace
}  // namespace dslaunch::kernels::testing
