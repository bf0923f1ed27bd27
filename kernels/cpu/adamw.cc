#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vectorize.h"

namespace dslaunch::kernels::cpu {
namespace {

// The step's scalars, computed in double and rounded to float as PyTorch's
// Python-side arithmetic does before it reaches the tensor kernels.
struct AdamScalars {
  float decay;  // params *= decay (decoupled weight decay)
  float l2;     // grad += l2 · param (Adam's L2 penalty)
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float step_size;   // lr / (1 - beta1^step)
  float bias2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
};

AdamScalars adam_scalars(const Backend::AdamWParams& hyper) {
  const double lr = hyper.lr;
  const double step = static_cast<double>(hyper.step);
  AdamScalars s{};
  s.decay = hyper.decoupled ? static_cast<float>(1.0 - lr * hyper.weight_decay) : 1.0f;
  s.l2 = hyper.decoupled ? 0.0f : hyper.weight_decay;
  s.beta1 = hyper.beta1;
  s.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
  s.beta2 = hyper.beta2;
  s.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(double{hyper.beta1}, step)));
  s.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(double{hyper.beta2}, step)));
  s.eps = hyper.eps;
  return s;
}

DSL_VECTOR_CLONES void adam_chunk(float* params, const float* grads, float* m, float* v, int64_t n,
                                  AdamScalars s) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float grad = grads[i] + s.l2 * params[i];
    const float m_i = m[i] * s.beta1 + s.one_minus_beta1 * grad;
    const float v_i = v[i] * s.beta2 + s.one_minus_beta2 * grad * grad;
    m[i] = m_i;
    v[i] = v_i;
    const float denom = std::sqrt(v_i) / s.bias2_sqrt + s.eps;
    params[i] = params[i] * s.decay - s.step_size * (m_i / denom);
  }
}

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                  const Backend::AdamWParams& hyper) {
  const AdamScalars s = adam_scalars(hyper);
  for_each_chunk(n, [&](int64_t begin, int64_t end) {
    adam_chunk(params + begin, grads + begin, m + begin, v + begin, end - begin, s);
  });
}

}  // namespace dslaunch::kernels::cpu
