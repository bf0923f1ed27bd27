#pragma once

// A product with 16-bit operands on a GPU whose matrices are fp32: each
// operand rounded (to nearest even, as the CPU backend rounds them) into a
// packed 16-bit copy, then a 16-bit product with fp32 accumulation. cuBLAS's
// own down-converting compute types (CUBLAS_COMPUTE_32F_FAST_16BF) may run
// TF32 kernels, which keep three more bits of each operand than bf16: the
// products would then differ from the CPU backend's by about 2e-3.
//
// The copies live in a staging buffer of bounded size, so the product is cut
// into tiles of C: rows [m0, m0 + M') of op(A) and columns [n0, n0 + N') of
// op(B), each over the whole of K (so every element of C sums in one
// product, in one order).

#include <cstdint>
#include <vector>

#include "kernels/gemm_descriptor.h"

namespace dslaunch::kernels {

// A block of a row-major fp32 matrix: `rows` x `cols` elements from element
// `offset`, rows `ld` apart. Packed, it is rows x cols with ld = cols.
struct MatrixBlock {
  int64_t offset = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;

  int64_t elements() const { return rows * cols; }
  bool operator==(const MatrixBlock&) const = default;
};

// One tile: stage A's block and B's, packed, where staging_layout() puts
// them, then run `product`, whose A and B are those packed blocks and whose
// C starts at element c_offset of C.
struct GemmTile {
  MatrixBlock a;
  MatrixBlock b;
  RowMajorGemm product;
  int64_t c_offset = 0;
};

// The tiles of `gemm` (any batch: each item's tiles in turn) whose two
// staged blocks together hold at most staging_elements elements, or, where
// K alone is past that, one row and one column at a time (2·K elements).
// Consecutive tiles that stage the same block need not stage it again.
// Throws std::invalid_argument (check_gemm) for a malformed product.
std::vector<GemmTile> rounded_gemm_tiles(const RowMajorGemm& gemm, int64_t staging_elements);

// Where the staged blocks go: A's at the start of the buffer, B's at
// b_offset (the largest A block's elements), so that a tile that stages
// only one of them leaves the other in place; `elements` in all.
struct StagingLayout {
  int64_t b_offset = 0;
  int64_t elements = 0;
};
StagingLayout staging_layout(const std::vector<GemmTile>& tiles);

// Runs `tiles` in order: stage(block, is_a, staging offset) for each block
// the tile before did not stage, then multiply(tile).
template <class Stage, class Multiply>
void run_staged_tiles(const std::vector<GemmTile>& tiles, const StagingLayout& layout,
                      const Stage& stage, const Multiply& multiply) {
  const GemmTile* previous = nullptr;
  for (const GemmTile& tile : tiles) {
    if (previous == nullptr || !(previous->a == tile.a)) stage(tile.a, true, int64_t{0});
    if (previous == nullptr || !(previous->b == tile.b)) stage(tile.b, false, layout.b_offset);
    multiply(tile);
    previous = &tile;
  }
}

}  // namespace dslaunch::kernels
