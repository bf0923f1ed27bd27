#pragma once

// Matrix products of 16-bit operands with fp32 accumulation, as tensor cores
// compute them in bf16/fp16 training: each operand is rounded to the 16-bit
// format (kernels/half_precision.h), the products and sums are fp32. With
// bf16 on a CPU that has AVX512_BF16 (or AMX), oneDNN multiplies the 16-bit
// operands directly, about twice OpenBLAS's fp32 rate (bench/matmul_bench);
// elsewhere (and for fp16, which oneDNN runs only on AVX512_FP16) the
// rounded operands are multiplied by OpenBLAS's sgemm: the same products,
// exactly, summed in another order.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/layout/range_set.h"
#include "kernels/cpu/sgemm.h"

namespace dslaunch::kernels::cpu {

class RoundedGemm {
 public:
  // dtype: kBF16 or kF16 (std::invalid_argument otherwise). The 16-bit copy
  // of a block of A holds at most about `block_elements` elements (32 MiB by
  // default; at least 64 rows).
  explicit RoundedGemm(core::DType dtype, int64_t block_elements = int64_t{16} << 20);
  ~RoundedGemm();

  core::DType dtype() const { return dtype_; }
  // Which kernel runs the products, for reports: "oneDNN bf16 (AVX512_BF16)"
  // or "OpenBLAS sgemm on bf16-rounded operands".
  std::string kernel_name() const;

  // The weights: floats [begin, begin + n). A product whose B is a dense
  // matrix of them multiplies a 16-bit copy converted at its first use
  // after weights_changed(), so forward and backward (and every micro-batch
  // of a step) convert each weight matrix once. Whoever changes the weights
  // calls weights_changed() first; the optimizer's pass may write the copy
  // of what it writes itself (weight_copy_for(), then copied()). Kept only
  // where oneDNN runs the products (the copy is what it multiplies). n = 0
  // forgets the weights.
  void set_weights(const float* begin, int64_t n);
  void weights_changed() { converted_.clear(); }
  // Where the copy of floats [weights, weights + n) goes, when it is kept:
  // they lie among the weights and the copy holds `dtype`; else nullptr.
  uint16_t* weight_copy_for(const float* weights, int64_t n, core::DType dtype);
  // That copy now holds those floats, converted.
  void copied(const float* weights, int64_t n);
  // The copy's bytes (2 an element of the weights, or 0).
  int64_t weight_copy_bytes() const {
    return static_cast<int64_t>(weight_copy_.size() * sizeof(uint16_t));
  }

  // C = round(op(A)) · round(op(B)) + beta · C for a single product with
  // alpha 1 and beta 0 or 1 (std::invalid_argument otherwise), which is
  // what the model's products are. Works through C's rows in blocks so the
  // 16-bit copy of A stays small; B is rounded once per call.
  void run(const RowMajorGemm& gemm, const float* A, const float* B, float* C);

 private:
  struct Onednn;  // the engine, stream and primitives, when oneDNN runs bf16

  // Rows [row0, row0 + rows) of op(A), rounded, into the 16-bit or fp32
  // scratch: (rows, K) row-major when A is not transposed, (K, rows) when it is.
  void pack_a(Transpose trans_a, int64_t row0, int64_t rows, int64_t K, const float* A,
              int64_t lda);
  void pack_b(Transpose trans_b, int64_t N, int64_t K, const float* B, int64_t ldb);
  // op(B) as oneDNN multiplies it: from the weights' copy (converted now if
  // it is not yet since the last change) when B is a dense matrix of the
  // weights, else packed into b16_.
  const uint16_t* bf16_b(Transpose trans_b, int64_t N, int64_t K, const float* B, int64_t ldb);

  core::DType dtype_;
  int64_t block_elements_;
  std::unique_ptr<Onednn> onednn_;  // null: the sgemm fallback
  std::vector<uint16_t> a16_, b16_;
  std::vector<float> a32_, b32_;
  const float* weights_ = nullptr;
  std::vector<uint16_t> weight_copy_;  // sized as the weights, where kept
  // What the copy holds converted since the last change (offsets into the
  // weights).
  core::RangeSet converted_;
};

}  // namespace dslaunch::kernels::cpu
