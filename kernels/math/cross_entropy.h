#pragma once

// The softmax cross-entropy's per-row and per-element math, shared by the CPU
// backend and the CUDA kernels, whole-vocabulary or vocabulary-parallel.

#include <math.h>

#include "kernels/simt/host_device.h"

namespace dslaunch::kernels::math {

// A row's loss, logsumexp(row) - row[target], from its maximum, the target's
// logit and sum = Σ exp(x - max) >= 1: the target's gap below the maximum,
// exact in double, plus a small positive term, finite however far the target
// lies below.
DSL_HOST_DEVICE inline float crossentropy_loss(float max, float target_logit, double sum) {
  return static_cast<float>((static_cast<double>(max) - static_cast<double>(target_logit)) +
                            log(sum));
}

// The gradient one logit receives: (p - onehot) · dloss.
DSL_HOST_DEVICE inline float crossentropy_logit_gradient(float p, bool is_target, float dloss) {
  return (is_target ? p - 1.0f : p) * dloss;
}

}  // namespace dslaunch::kernels::math
