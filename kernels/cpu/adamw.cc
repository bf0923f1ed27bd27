// PyTorch 1.13's single-tensor Adam and AdamW step over a tensor
// (kernels/math/adamw.h has the per-element math). Compiled with
// -ffp-contract=off: the multiply-adds PyTorch fuses are explicit fmaf, and
// the compiler fuses nothing else.
#include <stdexcept>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vectorize.h"
#include "kernels/half_precision.h"
#include "kernels/math/adamw.h"

namespace dslaunch::kernels::cpu {
namespace {

using math::adam_element;
using math::AdamScalars;

// `Round` writes the 16-bit copy of each new parameter, in the same pass.
template <typename Round>
inline void adam_loop(float* params, const float* grads, float* m, float* v, int64_t n,
                      const AdamScalars& s, const Round& round) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    adam_element(params[i], grads[i], m[i], v[i], s);
    round(i, params[i]);
  }
}

DSL_VECTOR_CLONES void adam_chunk(float* params, const float* grads, float* m, float* v, int64_t n,
                                  AdamScalars s) {
  adam_loop(params, grads, m, v, n, s, [](int64_t, float) {});
}
DSL_VECTOR_CLONES void adam_chunk_bf16(float* params, const float* grads, float* m, float* v,
                                       int64_t n, AdamScalars s, float* rounded) {
  adam_loop(params, grads, m, v, n, s,
            [rounded](int64_t i, float p) { rounded[i] = bf16_to_float(float_to_bf16(p)); });
}
DSL_VECTOR_CLONES void adam_chunk_bf16_copy(float* params, const float* grads, float* m, float* v,
                                            int64_t n, AdamScalars s, float* rounded,
                                            uint16_t* rounded16) {
  adam_loop(params, grads, m, v, n, s, [rounded, rounded16](int64_t i, float p) {
    const uint16_t bits = float_to_bf16(p);
    rounded16[i] = bits;
    rounded[i] = bf16_to_float(bits);
  });
}
DSL_VECTOR_CLONES void adam_chunk_fp16(float* params, const float* grads, float* m, float* v,
                                       int64_t n, AdamScalars s, float* rounded) {
  adam_loop(params, grads, m, v, n, s,
            [rounded](int64_t i, float p) { rounded[i] = fp16_to_float(float_to_fp16(p)); });
}

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float* rounded,
                  uint16_t* rounded16, const Backend::AdamWParams& hyper) {
  if (rounded16 != nullptr && (rounded == nullptr || hyper.rounded_dtype != core::DType::kBF16)) {
    throw std::invalid_argument("adamw_update: a 16-bit copy is written in bf16, with `rounded`");
  }
  const AdamScalars s = math::adam_scalars(hyper);
  const bool fp16 = hyper.rounded_dtype == core::DType::kF16;
  for_each_chunk(n, [&](int64_t begin, int64_t end) {
    float* p = params + begin;
    if (rounded == nullptr) {
      adam_chunk(p, grads + begin, m + begin, v + begin, end - begin, s);
    } else if (rounded16 != nullptr) {
      adam_chunk_bf16_copy(p, grads + begin, m + begin, v + begin, end - begin, s, rounded + begin,
                           rounded16 + begin);
    } else if (fp16) {
      adam_chunk_fp16(p, grads + begin, m + begin, v + begin, end - begin, s, rounded + begin);
    } else {
      adam_chunk_bf16(p, grads + begin, m + begin, v + begin, end - begin, s, rounded + begin);
    }
  });
}

}  // namespace dslaunch::kernels::cpu
