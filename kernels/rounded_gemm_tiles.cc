#include "kernels/rounded_gemm_tiles.h"

#include <algorithm>

namespace dslaunch::kernels {
namespace {

// Rows [m0, m0 + m) of op(A) for batch item `item`.
MatrixBlock a_rows(const RowMajorGemm& g, int64_t item, int64_t m0, int64_t m) {
  const int64_t base = item * g.stride_a;
  if (g.trans_a == Transpose::kNo) return {base + m0 * g.lda, m, g.K, g.lda};
  return {base + m0, g.K, m, g.lda};  // A stored (K, M): a column block
}

// Columns [n0, n0 + n) of op(B) for batch item `item`.
MatrixBlock b_columns(const RowMajorGemm& g, int64_t item, int64_t n0, int64_t n) {
  const int64_t base = item * g.stride_b;
  if (g.trans_b == Transpose::kNo) return {base + n0, g.K, n, g.ldb};  // a column block
  return {base + n0 * g.ldb, n, g.K, g.ldb};  // B stored (N, K): a row block
}

// Rows of op(A) and columns of op(B) a tile takes: everything when both
// operands fit; else the smaller operand whole where it leaves a quarter of
// the buffer, and the other cut to the rest; else both cut alike.
void tile_sizes(const RowMajorGemm& g, int64_t staging, int64_t& rows, int64_t& cols) {
  rows = g.M;
  cols = g.N;
  if (g.K == 0 || (g.M + g.N) * g.K <= staging) return;
  const int64_t a_whole = g.M * g.K, b_whole = g.N * g.K;
  if (std::min(a_whole, b_whole) <= staging / 4 * 3) {
    if (a_whole <= b_whole) {
      cols = std::clamp<int64_t>((staging - a_whole) / g.K, 1, g.N);
    } else {
      rows = std::clamp<int64_t>((staging - b_whole) / g.K, 1, g.M);
    }
    return;
  }
  rows = std::clamp<int64_t>(staging / (2 * g.K), 1, g.M);
  cols = std::clamp<int64_t>(staging / (2 * g.K), 1, g.N);
}

}  // namespace

std::vector<GemmTile> rounded_gemm_tiles(const RowMajorGemm& gemm, int64_t staging_elements) {
  check_gemm(gemm);
  std::vector<GemmTile> tiles;
  if (gemm.M == 0 || gemm.N == 0) return tiles;
  int64_t rows = 0, cols = 0;
  tile_sizes(gemm, staging_elements, rows, cols);
  for (int64_t item = 0; item < gemm.batch; ++item) {
    for (int64_t n0 = 0; n0 < gemm.N; n0 += cols) {
      const int64_t n = std::min(cols, gemm.N - n0);
      for (int64_t m0 = 0; m0 < gemm.M; m0 += rows) {
        const int64_t m = std::min(rows, gemm.M - m0);
        GemmTile tile;
        tile.a = a_rows(gemm, item, m0, m);
        tile.b = b_columns(gemm, item, n0, n);
        RowMajorGemm& p = tile.product;
        p.trans_a = gemm.trans_a;
        p.trans_b = gemm.trans_b;
        p.M = m;
        p.N = n;
        p.K = gemm.K;
        // Packed blocks; BLAS wants a leading dimension of at least 1.
        p.lda = std::max<int64_t>(tile.a.cols, 1);
        p.ldb = std::max<int64_t>(tile.b.cols, 1);
        p.ldc = gemm.ldc;
        p.alpha = gemm.alpha;
        p.beta = gemm.beta;
        tile.c_offset = item * gemm.stride_c + m0 * gemm.ldc + n0;
        tiles.push_back(tile);
      }
    }
  }
  return tiles;
}

StagingLayout staging_layout(const std::vector<GemmTile>& tiles) {
  int64_t a_most = 0, b_most = 0;
  for (const GemmTile& tile : tiles) {
    a_most = std::max(a_most, tile.a.elements());
    b_most = std::max(b_most, tile.b.elements());
  }
  return {a_most, a_most + b_most};
}

}  // namespace dslaunch::kernels
