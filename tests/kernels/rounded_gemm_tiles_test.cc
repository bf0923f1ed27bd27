// The tiles of a 16-bit product on a GPU (kernels/rounded_gemm_tiles.h), run
// here as the CUDA backend runs them: each tile's blocks rounded to bf16 and
// packed into one staging buffer, then the tile's product through OpenBLAS
// in the column-major form cuBLAS gets, against the product of the rounded
// operands written out element by element: every transpose, padded leading
// dimensions, a batch, and staging buffers from roomy to smaller than K.

#include "kernels/rounded_gemm_tiles.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/cpu/sgemm.h"
#include "kernels/half_precision.h"
#include "kernels/model_gemms.h"
#include "tests/kernels/gemm_testing.h"

namespace dslaunch::kernels {
namespace {

using testing::random_floats;
using testing::relative_error;

float bf16(float value) { return bf16_to_float(float_to_bf16(value)); }

// The CUDA backend's run of the tiles (run_staged_tiles), on the CPU:
// returns the staged elements it wrote.
int64_t run_tiles(const std::vector<GemmTile>& tiles, const std::vector<float>& A,
                  const std::vector<float>& B, std::vector<float>& C) {
  const StagingLayout layout = staging_layout(tiles);
  std::vector<float> staging(layout.elements, NAN);
  int64_t staged = 0;
  run_staged_tiles(
      tiles, layout,
      [&](const MatrixBlock& block, bool is_a, int64_t at) {
        const std::vector<float>& from = is_a ? A : B;
        for (int64_t r = 0; r < block.rows; ++r) {
          for (int64_t c = 0; c < block.cols; ++c) {
            staging[at + r * block.cols + c] = bf16(from.at(block.offset + r * block.ld + c));
          }
        }
        staged += block.elements();
      },
      [&](const GemmTile& tile) {
        cpu::sgemm(tile.product, staging.data(), staging.data() + layout.b_offset,
                   C.data() + tile.c_offset);
      });
  return staged;
}

TEST_CASE("16-bit products cut into staged tiles match the rounded operands' product") {
  const int64_t K = 19, pad = 3, batch = 2;
  for (const auto& [M, N] : {std::pair<int64_t, int64_t>{37, 23}, {23, 37}}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        const RowMajorGemm g = testing::padded_gemm(ta, tb, M, N, K, pad, batch, 0.75f, -1.5f);
        const auto A = random_floats(batch * g.stride_a, 1);
        const auto B = random_floats(batch * g.stride_b, 2);
        const auto C0 = random_floats(batch * g.stride_c, 3);
        const auto expected = testing::reference_product(g, A, B, C0, bf16);
        // Roomy; the smaller operand whole and the other cut; both cut;
        // less than 2·K.
        const int64_t one_whole = std::min(M, N) * K + 12 * K;
        for (const int64_t staging : {int64_t{1} << 20, one_whole, 7 * K + 3, K + 1}) {
          INFO(M << "x" << N << ", transposed A " << (ta == Transpose::kYes) << ", B "
                 << (tb == Transpose::kYes) << "; staging " << staging);
          const std::vector<GemmTile> tiles = rounded_gemm_tiles(g, staging);
          CHECK(staging_layout(tiles).elements <= std::max(staging, 2 * K));
          auto C = C0;
          const int64_t staged = run_tiles(tiles, A, B, C);
          CHECK(relative_error(C, expected) < 1e-6);
          if (staging == int64_t{1} << 20) {
            CHECK(tiles.size() == static_cast<size_t>(batch));
          } else {
            CHECK(tiles.size() > static_cast<size_t>(batch));
          }
          // With one operand whole, each is staged once an item.
          if (staging == one_whole) CHECK(staged == batch * (M + N) * K);
        }
      }
    }
  }
}

TEST_CASE("16-bit product tiles: the smaller operand stays whole where it leaves room") {
  // The logits' weight gradient: dwte (Vp,C) = dlogitsᵀ (Vp,N) · x (N,C).
  const int64_t N = 8192, C = 768, Vp = 50304;
  const RowMajorGemm g = model_gemms::logits_backward_weight(N, C, Vp, Vp);
  const int64_t staging = int64_t{64} << 20;
  const std::vector<GemmTile> tiles = rounded_gemm_tiles(g, staging);
  // x takes 768 of the buffer's 8192 columns of N floats: 7424 rows of
  // dlogitsᵀ a tile.
  REQUIRE(tiles.size() == static_cast<size_t>((Vp + 7423) / 7424));
  for (const GemmTile& tile : tiles) {
    CHECK(tile.b == MatrixBlock{0, N, C, C});  // x, whole
    CHECK(tile.a.rows == N);
    CHECK(tile.a.elements() + tile.b.elements() <= staging);
    CHECK(tile.product.beta == 1.0f);
  }
  CHECK(tiles.back().c_offset == static_cast<int64_t>(tiles.size() - 1) * 7424 * C);
}

TEST_CASE("16-bit product tiles: an empty product has none, a malformed one is refused") {
  CHECK(rounded_gemm_tiles({.M = 0, .N = 3, .K = 2, .lda = 2, .ldb = 3, .ldc = 3}, 100).empty());
  CHECK_THROWS_AS(rounded_gemm_tiles({.M = 2, .N = 3, .K = 4, .lda = 2, .ldb = 3, .ldc = 3}, 100),
                  std::invalid_argument);
}

}  // namespace
}  // namespace dslaunch::kernels
