#include "kernels/gemm_descriptor.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dslaunch::kernels {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("matrix product: " + what);
}

// A stored (rows, cols) row-major matrix needs ld >= cols (and >= 1, as BLAS
// asks even of empty matrices).
void check_leading_dimension(const char* name, int64_t ld, int64_t cols) {
  require(ld >= std::max<int64_t>(cols, 1), std::string(name) + " " + std::to_string(ld) +
                                                " is smaller than the stored row width " +
                                                std::to_string(cols));
}

}  // namespace

void check_gemm(const RowMajorGemm& g) {
  require(g.M >= 0 && g.N >= 0 && g.K >= 0, "negative size M " + std::to_string(g.M) + ", N " +
                                                std::to_string(g.N) + ", K " + std::to_string(g.K));
  require(g.batch >= 1, "batch " + std::to_string(g.batch) + " is below 1");
  check_leading_dimension("lda", g.lda, g.trans_a == Transpose::kYes ? g.M : g.K);
  check_leading_dimension("ldb", g.ldb, g.trans_b == Transpose::kYes ? g.K : g.N);
  check_leading_dimension("ldc", g.ldc, g.N);
}

ColumnMajorGemm to_column_major(const RowMajorGemm& g) {
  check_gemm(g);
  return ColumnMajorGemm{
      .trans_first = g.trans_b,
      .trans_second = g.trans_a,
      .m = g.N,
      .n = g.M,
      .k = g.K,
      .ld_first = g.ldb,
      .ld_second = g.lda,
      .ldc = g.ldc,
      .alpha = g.alpha,
      .beta = g.beta,
      .batch = g.batch,
      .stride_first = g.stride_b,
      .stride_second = g.stride_a,
      .stride_c = g.stride_c,
  };
}

}  // namespace dslaunch::kernels
