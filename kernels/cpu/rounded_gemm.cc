#include "kernels/cpu/rounded_gemm.h"

#include <algorithm>
#include <stdexcept>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/vectorize.h"
#include "kernels/half_precision.h"

namespace dslaunch::kernels::cpu {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

bool has_native_bf16() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_bf16:
    case dnnl::cpu_isa::avx512_core_amx:
      return true;
    default:
      return false;
  }
}

// out[i] = the value of in[i] rounded to dtype, as 16 bits or widened back;
// compiled per instruction set, so AVX-512 converts 16 elements at a time.
DSL_VECTOR_CLONES void round_row(core::DType dtype, const float* in, uint16_t* out, int64_t n) {
  if (dtype == core::DType::kBF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_fp16(in[i]);
  }
}
DSL_VECTOR_CLONES void round_row(core::DType dtype, const float* in, float* out, int64_t n) {
  if (dtype == core::DType::kBF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(float_to_bf16(in[i]));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_float(float_to_fp16(in[i]));
  }
}

// rows x cols of a row-major matrix with leading dimension ld, from
// (row0, col0), into a packed rows x cols array.
template <typename Out>
void pack(core::DType dtype, const float* in, int64_t ld, int64_t row0, int64_t col0, int64_t rows,
          int64_t cols, Out* to) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    round_row(dtype, in + (row0 + r) * ld + col0, to + r * cols, cols);
  }
}
template <typename Out>
void pack(core::DType dtype, const float* in, int64_t ld, int64_t row0, int64_t col0, int64_t rows,
          int64_t cols, std::vector<Out>& out) {
  if (static_cast<int64_t>(out.size()) < rows * cols) out.resize(static_cast<size_t>(rows * cols));
  pack(dtype, in, ld, row0, col0, rows, cols, out.data());
}

}  // namespace

struct RoundedGemm::Onednn {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // (rows, N, K, A transposed, B transposed, accumulate, ldc) -> primitive.
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool, bool, int64_t>, dnnl::matmul>
      primitives;

  dnnl::memory::desc a_desc(int64_t rows, int64_t K, bool trans_a) const {
    return dnnl::memory::desc({rows, K}, dt::bf16, trans_a ? tag::ba : tag::ab);
  }
  dnnl::memory::desc b_desc(int64_t N, int64_t K, bool trans_b) const {
    return dnnl::memory::desc({K, N}, dt::bf16, trans_b ? tag::ba : tag::ab);
  }

  dnnl::matmul& primitive(int64_t rows, int64_t N, int64_t K, bool trans_a, bool trans_b,
                          bool accumulate, int64_t ldc) {
    const auto key = std::make_tuple(rows, N, K, trans_a, trans_b, accumulate, ldc);
    auto found = primitives.find(key);
    if (found != primitives.end()) return found->second;
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.0f);
      attr.set_post_ops(sum);
    }
    const dnnl::memory::desc c_desc({rows, N}, dt::f32, dnnl::memory::dims{ldc, 1});
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(a_desc(rows, K, trans_a), b_desc(N, K, trans_b), c_desc), attr, engine);
    return primitives.insert_or_assign(key, dnnl::matmul(pd)).first->second;
  }
};

RoundedGemm::RoundedGemm(core::DType dtype, int64_t block_elements)
    : dtype_(dtype), block_elements_(block_elements) {
  if (dtype != core::DType::kBF16 && dtype != core::DType::kF16) {
    throw std::invalid_argument("RoundedGemm: the operands' format must be bf16 or fp16, not " +
                                std::string(core::dtype_name(dtype)));
  }
  if (dtype == core::DType::kBF16 && has_native_bf16()) onednn_ = std::make_unique<Onednn>();
}

RoundedGemm::~RoundedGemm() = default;

std::string RoundedGemm::kernel_name() const {
  if (onednn_) {
    return std::string("oneDNN bf16 (") +
           (dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx ? "AMX"
                                                                            : "AVX512_BF16") +
           ")";
  }
  return "OpenBLAS sgemm on " + std::string(core::dtype_name(dtype_)) + "-rounded operands";
}

void RoundedGemm::pack_a(Transpose trans_a, int64_t row0, int64_t rows, int64_t K, const float* A,
                         int64_t lda) {
  // op(A) rows [row0, row0 + rows): stored rows of A, or stored columns of
  // a transposed A (kept transposed: K rows of `rows` elements).
  const bool t = trans_a == Transpose::kYes;
  const int64_t r0 = t ? 0 : row0;
  const int64_t c0 = t ? row0 : 0;
  const int64_t packed_rows = t ? K : rows;
  const int64_t packed_cols = t ? rows : K;
  if (onednn_) {
    pack(dtype_, A, lda, r0, c0, packed_rows, packed_cols, a16_);
  } else {
    pack(dtype_, A, lda, r0, c0, packed_rows, packed_cols, a32_);
  }
}

void RoundedGemm::pack_b(Transpose trans_b, int64_t N, int64_t K, const float* B, int64_t ldb) {
  const bool t = trans_b == Transpose::kYes;
  if (onednn_) {
    pack(dtype_, B, ldb, 0, 0, t ? N : K, t ? K : N, b16_);
  } else {
    pack(dtype_, B, ldb, 0, 0, t ? N : K, t ? K : N, b32_);
  }
}

void RoundedGemm::set_weights(const float* begin, int64_t n) {
  weights_ = n > 0 ? begin : nullptr;
  converted_.clear();
  weight_copy_ = std::vector<uint16_t>();
  if (onednn_ && n > 0) weight_copy_.resize(static_cast<size_t>(n));
}

uint16_t* RoundedGemm::weight_copy_for(const float* weights, int64_t n, core::DType dtype) {
  const int64_t size = static_cast<int64_t>(weight_copy_.size());
  if (weights_ == nullptr || dtype != dtype_ || weights < weights_ ||
      weights + n > weights_ + size) {
    return nullptr;
  }
  return weight_copy_.data() + (weights - weights_);
}

void RoundedGemm::copied(const float* weights, int64_t n) {
  converted_.add(weights - weights_, weights - weights_ + n);
}

const uint16_t* RoundedGemm::bf16_b(Transpose trans_b, int64_t N, int64_t K, const float* B,
                                    int64_t ldb) {
  const bool t = trans_b == Transpose::kYes;
  const int64_t stored_rows = t ? N : K;
  const int64_t stored_cols = t ? K : N;
  if (ldb == stored_cols) {
    if (uint16_t* copy = weight_copy_for(B, stored_rows * ldb, dtype_)) {
      const int64_t begin = B - weights_;
      if (!converted_.covers(begin, begin + stored_rows * ldb)) {
        pack(dtype_, B, ldb, 0, 0, stored_rows, stored_cols, copy);
        copied(B, stored_rows * ldb);
      }
      return copy;
    }
  }
  pack_b(trans_b, N, K, B, ldb);
  return b16_.data();
}

void RoundedGemm::run(const RowMajorGemm& gemm, const float* A, const float* B, float* C) {
  check_gemm(gemm);
  if (gemm.alpha != 1.0f || (gemm.beta != 0.0f && gemm.beta != 1.0f) || gemm.batch != 1) {
    throw std::invalid_argument("16-bit matrix product: only alpha 1, beta 0 or 1, batch 1");
  }
  const Transpose trans_a = gemm.trans_a;
  const Transpose trans_b = gemm.trans_b;
  const int64_t M = gemm.M, N = gemm.N, K = gemm.K;
  const bool accumulate = gemm.beta != 0.0f;
  if (M == 0 || N == 0) return;
  const uint16_t* b16 = nullptr;
  if (onednn_) {
    b16 = bf16_b(trans_b, N, K, B, gemm.ldb);
  } else {
    pack_b(trans_b, N, K, B, gemm.ldb);
  }
  const bool ta = trans_a == Transpose::kYes;
  const bool tb = trans_b == Transpose::kYes;
  const int64_t block = std::max<int64_t>(64, block_elements_ / std::max<int64_t>(K, 1)) / 64 * 64;
  for (int64_t row0 = 0; row0 < M; row0 += block) {
    const int64_t rows = std::min(block, M - row0);
    pack_a(trans_a, row0, rows, K, A, gemm.lda);
    float* c = C + row0 * gemm.ldc;
    if (onednn_) {
      dnnl::matmul& product = onednn_->primitive(rows, N, K, ta, tb, accumulate, gemm.ldc);
      const dnnl::memory a(onednn_->a_desc(rows, K, ta), onednn_->engine, a16_.data());
      const dnnl::memory b(onednn_->b_desc(N, K, tb), onednn_->engine,
                           const_cast<uint16_t*>(b16));
      const dnnl::memory out(dnnl::memory::desc({rows, N}, dt::f32, dnnl::memory::dims{gemm.ldc, 1}),
                             onednn_->engine, c);
      product.execute(onednn_->stream,
                      {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, out}});
      onednn_->stream.wait();
    } else {
      sgemm({.trans_a = trans_a, .trans_b = trans_b, .M = rows, .N = N, .K = K,
             .lda = ta ? rows : K, .ldb = tb ? K : N, .ldc = gemm.ldc, .beta = gemm.beta},
            a32_.data(), b32_.data(), c);
    }
  }
}

}  // namespace dslaunch::kernels::cpu
