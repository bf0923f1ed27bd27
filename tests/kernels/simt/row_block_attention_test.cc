// The CUDA backend's attention — products over blocks of query rows
// (kernels/attention_gemms.h), cuBLAS on a GPU, with the row softmaxes as
// kernels (attention_softmax_kernels.h) — on the emulated backend, the same
// code with the products through OpenBLAS in the same descriptors, against
// the CPU backend's attention, forward and backward, under every thread
// order the emulator knows.

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/layout/attention_scratch.h"
#include "kernels/backend.h"
#include "kernels/simt/emulated_backend.h"
#include "tests/kernels/cpu/kernel_testing.h"

namespace dslaunch::kernels::testing {
namespace {

struct Shape {
  int64_t B, T, C, NH;
};

struct Passes {
  std::vector<float> out;
  std::vector<float> dqkv;
};

// Forward then backward on `backend`, the gradient added to dqkv0.
Passes attention(Backend& backend, const Shape& s, const std::vector<float>& qkv,
                 const std::vector<float>& dout, const std::vector<float>& dqkv0) {
  std::vector<float> scratch(core::attention_scratch_floats(backend.attention_scratch(), s.B, s.T),
                             -1.0f);
  Passes passes{std::vector<float>(s.B * s.T * s.C, -1.0f), dqkv0};
  backend.attention_forward(passes.out.data(), scratch.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  backend.attention_backward(passes.dqkv.data(), scratch.data(), dout.data(), qkv.data(), s.B, s.T,
                             s.C, s.NH);
  return passes;
}

TEST_CASE("attention through row-block products matches the CPU backend, forward and backward") {
  static_assert(core::kAttentionRowBlock == 256);
  // One block, shorter than the row block (T 5, 33, 70); heads of 8 to 256
  // channels; past one block (T 300: 256 rows and 44) and two (T 513: the
  // last block one row), whose products and key gradients span the blocks.
  for (const Shape& s : {Shape{2, 70, 16, 2}, Shape{1, 5, 96, 3}, Shape{1, 33, 512, 2},
                         Shape{2, 300, 16, 2}, Shape{1, 513, 8, 1}}) {
    INFO("B " << s.B << ", T " << s.T << ", C " << s.C << ", NH " << s.NH);
    const auto qkv = random_floats(s.B * s.T * 3 * s.C, 1);
    const auto dout = random_floats(s.B * s.T * s.C, 2);
    const auto dqkv0 = random_floats(s.B * s.T * 3 * s.C, 3);
    const Passes expected = attention(cpu_backend(), s, qkv, dout, dqkv0);
    for (const simt::Schedule& schedule : simt::standard_schedules()) {
      const auto emulated = simt::make_emulated_backend(schedule);
      const Passes got = attention(*emulated, s, qkv, dout, dqkv0);
      CHECK(relative_error(got.out, to_double(expected.out)) < 1e-5);
      CHECK(relative_error(added(got.dqkv, dqkv0), added(expected.dqkv, dqkv0)) < 1e-5);
    }
  }
}

TEST_CASE("row-block attention gives the same bits whatever order the threads run in") {
  const Shape s{2, 45, 64, 2};
  const auto qkv = random_floats(s.B * s.T * 3 * s.C, 5);
  const auto dout = random_floats(s.B * s.T * s.C, 6);
  const std::vector<float> dqkv0(s.B * s.T * 3 * s.C, 0.0f);
  std::vector<Passes> runs;
  for (const simt::Schedule& schedule : simt::standard_schedules()) {
    runs.push_back(attention(*simt::make_emulated_backend(schedule), s, qkv, dout, dqkv0));
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    CHECK(runs[i].out == runs[0].out);
    CHECK(runs[i].dqkv == runs[0].dqkv);
  }
}

}  // namespace
}  // namespace dslaunch::kernels::testing
