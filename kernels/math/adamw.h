#pragma once

// One element of PyTorch 1.13's single-tensor Adam / AdamW step
// (torch/optim/adam.py, adamw.py with foreach=False), one float operation
// for each of its tensor operations: the CPU backend's loop and the CUDA
// kernel run this same function. Bits match PyTorch's only where the
// compiler fuses nothing on its own: the CPU build compiles it with
// -ffp-contract=off, the CUDA build with --fmad=false; the multiply-adds
// PyTorch fuses are explicit fmaf.

#include <math.h>

#include "kernels/backend.h"
#include "kernels/simt/host_device.h"

namespace dslaunch::kernels::math {

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

inline AdamScalars adam_scalars(const Backend::AdamWParams& hyper) {
  const auto step = static_cast<double>(hyper.step);
  AdamScalars s{};
  s.decay = static_cast<float>(hyper.decoupled ? 1.0 - hyper.lr * hyper.weight_decay : 1.0);
  s.l2 = static_cast<float>(hyper.decoupled ? 0.0 : hyper.weight_decay);
  s.beta1 = static_cast<float>(hyper.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
  s.beta2 = static_cast<float>(hyper.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
  s.bias2_sqrt = static_cast<float>(sqrt(1.0 - pow(hyper.beta2, step)));
  s.eps = static_cast<float>(hyper.eps);
  s.neg_step_size = static_cast<float>(-(hyper.lr / (1.0 - pow(hyper.beta1, step))));
  return s;
}

// Updates one parameter and its moments in place. Each line is one of
// PyTorch's tensor operations, rounded where it rounds: its vectorised
// add(other, alpha) is fmadd(other, alpha, self), and its addcmul,
// self + value·t1·t2, comes out as fma(value·t1, t2, self) (measured against
// PyTorch's own results).
DSL_HOST_DEVICE inline void adam_element(float& param, float grad, float& m, float& v,
                                         const AdamScalars& s) {
  const float g = fmaf(param, s.l2, grad);
  const float decayed = param * s.decay;
  const float m_new = fmaf(g, s.one_minus_beta1, m * s.beta1);
  const float v_new = fmaf(s.one_minus_beta2 * g, g, v * s.beta2);
  m = m_new;
  v = v_new;
  const float denom = sqrtf(v_new) / s.bias2_sqrt + s.eps;
  param = decayed + s.neg_step_size * m_new / denom;
}

}  // namespace dslaunch::kernels::math
