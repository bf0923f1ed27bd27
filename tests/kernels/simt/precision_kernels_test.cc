// The optimizer step and the 16-bit conversions on the CUDA thread-model
// emulator against the CPU backend, bit for bit: both run kernels/math's
// AdamW element and kernels/half_precision.h's conversions, and this test,
// like the CPU backend's AdamW, is compiled without fused multiply-adds.

#include "kernels/simt/precision_kernels.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/kernels/cpu/kernel_testing.h"
#include "tests/kernels/simt/simt_testing.h"

namespace dslaunch::kernels::testing {
namespace {

using namespace simt;
using core::DType;

constexpr int64_t kN = 3 * 256 + 5;

TEST_CASE("AdamW and Adam steps match the CPU backend bit for bit, with 16-bit copies") {
  const auto grads = random_floats(kN, 1);
  for (const bool decoupled : {true, false}) {
    for (const DType rounded_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      INFO("decoupled " << decoupled << ", copy " << core::dtype_name(rounded_dtype));
      Backend::AdamWParams hyper;
      hyper.lr = 3e-3;
      hyper.weight_decay = 0.1;
      hyper.decoupled = decoupled;
      hyper.step = 7;
      hyper.rounded_dtype = rounded_dtype == DType::kF32 ? DType::kBF16 : rounded_dtype;
      auto params = random_floats(kN, 2), m = random_floats(kN, 3, -0.1f, 0.1f);
      auto v = random_floats(kN, 4, 0.0f, 0.01f);
      auto e_params = params, e_m = m, e_v = v;
      const bool with_copy = rounded_dtype != DType::kF32;
      std::vector<float> rounded(kN, 7.0f), e_rounded(kN, 7.0f);
      cpu_backend().adamw_update(e_params.data(), grads.data(), e_m.data(), e_v.data(), kN, hyper,
                                 with_copy ? e_rounded.data() : nullptr);
      emulate(AdamWUpdate{params.data(), grads.data(), m.data(), v.data(), kN,
                          math::adam_scalars(hyper), with_copy ? rounded.data() : nullptr,
                          hyper.rounded_dtype});
      CHECK(params == e_params);
      CHECK(m == e_m);
      CHECK(v == e_v);
      CHECK(rounded == e_rounded);
    }
  }
}

TEST_CASE("round_to and every conversion match the CPU backend bit for bit") {
  // Values across fp16's range and beyond it, and its subnormals.
  auto values = random_floats(kN, 5, -70000.0f, 70000.0f);
  const auto small = random_floats(kN, 6, -1e-6f, 1e-6f);
  for (int64_t i = 0; i < kN; i += 2) values[i] = small[i];
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    INFO("round to " << core::dtype_name(dtype));
    std::vector<float> out(kN), expected(kN);
    cpu_backend().round_to(expected.data(), values.data(), kN, dtype);
    emulate(RoundTo{out.data(), values.data(), kN, dtype});
    CHECK(std::memcmp(out.data(), expected.data(), kN * sizeof(float)) == 0);
  }
  for (const DType from : {DType::kF32, DType::kBF16, DType::kF16}) {
    // The input in `from`'s format, made by the CPU backend.
    std::vector<uint8_t> in(kN * core::dtype_bytes(from));
    cpu_backend().convert(in.data(), from, values.data(), DType::kF32, kN);
    for (const DType to : {DType::kF32, DType::kBF16, DType::kF16}) {
      INFO("convert " << core::dtype_name(from) << " to " << core::dtype_name(to));
      std::vector<uint8_t> out(kN * core::dtype_bytes(to)), expected(out.size());
      cpu_backend().convert(expected.data(), to, in.data(), from, kN);
      emulate(Convert{out.data(), to, in.data(), from, kN});
      CHECK(out == expected);
    }
  }
}

TEST_CASE("a 16-bit product's operand block is packed as the CPU backend converts it") {
  // 37 rows of 29 values from a matrix whose rows are 41 apart, after 3.
  constexpr int64_t kRows = 37, kCols = 29, kLd = 41, kOffset = 3;
  const auto matrix = random_floats(kOffset + kRows * kLd, 7, -300.0f, 300.0f);
  std::vector<float> block(kRows * kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) block[r * kCols + c] = matrix[kOffset + r * kLd + c];
  }
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    INFO("pack as " << core::dtype_name(dtype));
    std::vector<uint16_t> out(kRows * kCols + 1, 0xdead), expected(out.size(), 0xdead);
    cpu_backend().convert(expected.data(), dtype, block.data(), DType::kF32, kRows * kCols);
    emulate(PackRounded16{out.data(), matrix.data() + kOffset, kRows, kCols, kLd, dtype});
    CHECK(out == expected);  // the element past the block too
  }
}

}  // namespace
}  // namespace dslaunch::kernels::testing
