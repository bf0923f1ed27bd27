// The CUDA backend's tiled attention — FlashAttention's online softmax in
// tiles of 32 positions, no (T,T) matrix — on the CUDA thread-model
// emulator, against the CPU backend's attention, forward and backward, under
// every thread order the emulator knows.

#include "kernels/simt/tiled_attention_kernels.h"

#include <catch2/catch.hpp>

#include <vector>

#include "tests/kernels/cpu/kernel_testing.h"
#include "tests/kernels/simt/simt_testing.h"

namespace dslaunch::kernels::testing {
namespace {

using namespace simt;

struct Shape {
  int64_t B, T, C, NH;
};

// The three kernels on the emulator: out = attention(qkv); dqkv += its
// gradient for dout.
void tiled_attention(const AttentionGrid& grid, const std::vector<float>& qkv,
                     const std::vector<float>& dout, std::vector<float>& out,
                     std::vector<float>& dqkv, const Schedule& schedule) {
  std::vector<float> lse(grid.B * grid.NH * grid.T), dsum(grid.B * grid.NH * grid.T);
  emulate(TiledAttentionForward{out.data(), qkv.data(), grid}, schedule);
  emulate(TiledAttentionBackwardQuery{dqkv.data(), lse.data(), dsum.data(), dout.data(), qkv.data(),
                                      grid},
          schedule);
  emulate(TiledAttentionBackwardKeyValue{dqkv.data(), lse.data(), dsum.data(), dout.data(),
                                         qkv.data(), grid},
          schedule);
}

TEST_CASE("tiled attention matches the CPU backend, forward and backward") {
  // Head sizes 8, 32, 128 (the largest) and 16, read 16 bytes at a time
  // from rows hs + 4 apart; 12, from rows hs + 8 apart; 10, a float at a
  // time. T past several tiles, under a block's eight rows, and ending a
  // tile exactly.
  for (const Shape& s : {Shape{2, 70, 16, 2}, Shape{1, 5, 96, 3}, Shape{1, 33, 256, 2},
                         Shape{2, 64, 64, 4}, Shape{1, 41, 36, 3}, Shape{2, 19, 30, 3}}) {
    INFO("B " << s.B << ", T " << s.T << ", C " << s.C << ", NH " << s.NH);
    const auto qkv = random_floats(s.B * s.T * 3 * s.C, 1);
    const auto dout = random_floats(s.B * s.T * s.C, 2);
    const auto dqkv0 = random_floats(s.B * s.T * 3 * s.C, 3);
    std::vector<float> e_out(s.B * s.T * s.C), cpu_scratch(2 * s.B * s.T * s.T);
    cpu_backend().attention_forward(e_out.data(), cpu_scratch.data(), qkv.data(), s.B, s.T, s.C,
                                    s.NH);
    auto e_dqkv = dqkv0;
    cpu_backend().attention_backward(e_dqkv.data(), cpu_scratch.data(), dout.data(), qkv.data(),
                                     s.B, s.T, s.C, s.NH);
    const AttentionGrid grid{s.B, s.T, s.C, s.NH};
    for (const Schedule& schedule : standard_schedules()) {
      std::vector<float> out(s.B * s.T * s.C, -1.0f);
      auto dqkv = dqkv0;
      tiled_attention(grid, qkv, dout, out, dqkv, schedule);
      CHECK(relative_error(out, to_double(e_out)) < 1e-5);
      CHECK(relative_error(added(dqkv, dqkv0), added(e_dqkv, dqkv0)) < 1e-5);
    }
  }
}

TEST_CASE("tiled attention gives the same bits whatever order the threads run in") {
  const AttentionGrid grid{2, 45, 64, 2};
  const auto qkv = random_floats(2 * 45 * 3 * 64, 5);
  const auto dout = random_floats(2 * 45 * 64, 6);
  std::vector<std::vector<float>> outs, grads;
  for (const Schedule& schedule : standard_schedules()) {
    std::vector<float> out(2 * 45 * 64), dqkv(2 * 45 * 3 * 64, 0.0f);
    tiled_attention(grid, qkv, dout, out, dqkv, schedule);
    outs.push_back(out);
    grads.push_back(dqkv);
  }
  for (size_t i = 1; i < outs.size(); ++i) {
    CHECK(outs[i] == outs[0]);
    CHECK(grads[i] == grads[0]);
  }
}

}  // namespace
}  // namespace dslaunch::kernels::testing
