#include "worker/engine/optimizer.h"

#include <algorithm>

namespace dslaunch::worker::engine {

AdamW::AdamW(const spec::OptimizerSpec& spec, const core::ParameterTable& table, int64_t begin,
             int64_t end)
    : spec_(spec), begin_(begin), m_(end - begin, 0.0f), v_(end - begin, 0.0f) {
  for (const core::TensorInfo& tensor : table.tensors()) {
    const int64_t from = std::max(begin, tensor.offset);
    const int64_t to = std::min(end, tensor.offset + tensor.numel);
    if (from < to) spans_.push_back({from, to, tensor.weight_decay});
  }
}

void AdamW::step(kernels::Backend& backend, float* params, const float* grads, double lr) {
  update(backend, params, grads + begin_, lr);
}

void AdamW::step_partition(kernels::Backend& backend, float* params, const float* partition_grads,
                           double lr) {
  update(backend, params, partition_grads, lr);
}

void AdamW::update(kernels::Backend& backend, float* params, const float* grads_from_begin,
                   double lr) {
  ++step_;
  kernels::Backend::AdamWParams hyper;
  hyper.lr = lr;
  hyper.beta1 = spec_.betas[0];
  hyper.beta2 = spec_.betas[1];
  hyper.eps = spec_.eps;
  hyper.decoupled = spec_.decoupled_weight_decay;
  hyper.step = step_;
  for (const Span& span : spans_) {
    hyper.weight_decay = span.decay ? spec_.weight_decay : 0.0;
    const int64_t offset = span.begin - begin_;
    backend.adamw_update(params + span.begin, grads_from_begin + offset, m_.data() + offset,
                         v_.data() + offset, span.end - span.begin, hyper);
  }
}

}  // namespace dslaunch::worker::engine
