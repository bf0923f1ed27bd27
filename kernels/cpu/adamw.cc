// PyTorch 1.13's single-tensor Adam and AdamW step (torch/optim/adam.py,
// adamw.py with foreach=False), one float operation for each of its tensor
// operations. Compiled with -ffp-contract=off: every multiply-add that
// PyTorch fuses is an explicit std::fma here, and the compiler fuses nothing
// else.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vectorize.h"
#include "kernels/half_precision.h"

namespace dslaunch::kernels::cpu {
namespace {

// The step's scalars, computed in double as Python computes them and rounded
// to float once, as a float tensor operation rounds a Python scalar.
struct AdamScalars {
  float decay;  // param.mul_(1 - lr·weight_decay) (AdamW)
  float l2;     // grad.add(param, alpha=weight_decay) (Adam)
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float bias2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^step)
};

AdamScalars adam_scalars(const Backend::AdamWParams& hyper) {
  const auto step = static_cast<double>(hyper.step);
  AdamScalars s{};
  s.decay = static_cast<float>(hyper.decoupled ? 1.0 - hyper.lr * hyper.weight_decay : 1.0);
  s.l2 = static_cast<float>(hyper.decoupled ? 0.0 : hyper.weight_decay);
  s.beta1 = static_cast<float>(hyper.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
  s.beta2 = static_cast<float>(hyper.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
  s.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(hyper.beta2, step)));
  s.eps = static_cast<float>(hyper.eps);
  s.neg_step_size = static_cast<float>(-(hyper.lr / (1.0 - std::pow(hyper.beta1, step))));
  return s;
}

// Each line is one of PyTorch's tensor operations, rounded where it rounds:
// its vectorised add(other, alpha) is fmadd(other, alpha, self), and its
// addcmul, self + value·t1·t2, comes out as fma(value·t1, t2, self) (GCC
// fuses it in Debian's build; measured against PyTorch's own results).
// `Round` writes the 16-bit copy of each new parameter, in the same pass.
template <typename Round>
inline void adam_loop(float* params, const float* grads, float* m, float* v, int64_t n,
                      const AdamScalars& s, const Round& round) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float grad = std::fma(params[i], s.l2, grads[i]);
    const float param = params[i] * s.decay;
    const float m_i = std::fma(grad, s.one_minus_beta1, m[i] * s.beta1);
    const float v_i = std::fma(s.one_minus_beta2 * grad, grad, v[i] * s.beta2);
    m[i] = m_i;
    v[i] = v_i;
    const float denom = std::sqrt(v_i) / s.bias2_sqrt + s.eps;
    params[i] = param + s.neg_step_size * m_i / denom;
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
DSL_VECTOR_CLONES void adam_chunk_fp16(float* params, const float* grads, float* m, float* v,
                                       int64_t n, AdamScalars s, float* rounded) {
  adam_loop(params, grads, m, v, n, s,
            [rounded](int64_t i, float p) { rounded[i] = fp16_to_float(float_to_fp16(p)); });
}

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float* rounded,
                  const Backend::AdamWParams& hyper) {
  const AdamScalars s = adam_scalars(hyper);
  const bool fp16 = hyper.rounded_dtype == core::DType::kF16;
  for_each_chunk(n, [&](int64_t begin, int64_t end) {
    float* p = params + begin;
    if (rounded == nullptr) {
      adam_chunk(p, grads + begin, m + begin, v + begin, end - begin, s);
    } else if (fp16) {
      adam_chunk_fp16(p, grads + begin, m + begin, v + begin, end - begin, s, rounded + begin);
    } else {
      adam_chunk_bf16(p, grads + begin, m + begin, v + begin, end - begin, s, rounded + begin);
    }
  });
}

}  // namespace dslaunch::kernels::cpu
