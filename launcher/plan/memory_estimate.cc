#include "launcher/plan/memory_estimate.h"

namespace dslaunch::plan {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t padded_vocab_size(const spec::ModelSpec& model, int tensor) {
  const int64_t multiple = static_cast<int64_t>(model.make_vocab_size_divisible_by) * tensor;
  return ceil_div(model.vocab_size, multiple) * multiple;
}

int64_t parameters_per_rank(const spec::ModelSpec& model, const spec::ParallelismSpec& parallel,
                            int stage) {
  const int64_t h = model.hidden_size;
  const int64_t t = parallel.tensor;
  // Per layer: QKV (h x 3h + 3h) and MLP up (h x 4h + 4h) split with their
  // biases; attention and MLP output weights (h x h, 4h x h) split, their
  // biases (2h) and both layernorms (4h) replicated.
  const int64_t per_layer = (12 * h * h + 7 * h) / t + 6 * h;
  int64_t psi = per_layer * (model.num_layers / parallel.pipeline);
  const int64_t word_embedding = padded_vocab_size(model, parallel.tensor) * h / t;
  if (stage == 0) psi += word_embedding + static_cast<int64_t>(model.seq_length) * h;
  if (stage == parallel.pipeline - 1) {
    psi += 2 * h;                                      // final layernorm
    if (parallel.pipeline > 1) psi += word_embedding;  // tied output layer's copy
  }
  return psi;
}

int64_t total_parameters(const spec::ModelSpec& model) {
  const int64_t h = model.hidden_size;
  return static_cast<int64_t>(model.vocab_size) * h + static_cast<int64_t>(model.seq_length) * h +
         model.num_layers * (12 * h * h + 13 * h) + 2 * h;
}

ModelStateBytes model_state_bytes(int64_t psi, const spec::TrainingSpec& training,
                                  int data_parallel) {
  const bool mixed = training.fp16.enabled || training.bf16;
  const int64_t param_bytes = mixed ? 2 : 4;
  const int64_t grad_bytes = mixed ? 2 : 4;
  const int64_t optimizer_bytes = mixed ? 12 : 8;
  const int stage = training.zero.stage;
  const int64_t partition = ceil_div(psi, data_parallel);

  ModelStateBytes bytes;
  bytes.parameters = (stage >= 3 ? partition : psi) * param_bytes;
  bytes.gradients = (stage >= 2 ? partition : psi) * grad_bytes;
  bytes.optimizer_states = (stage >= 1 ? partition : psi) * optimizer_bytes;

  const auto offload = [&bytes](spec::OffloadDevice device, int64_t& on_device) {
    if (device == spec::OffloadDevice::kCpu) bytes.offloaded_to_host += on_device;
    if (device == spec::OffloadDevice::kNvme) bytes.offloaded_to_nvme += on_device;
    if (device != spec::OffloadDevice::kNone) on_device = 0;
  };
  offload(training.zero.offload_optimizer.device, bytes.optimizer_states);
  offload(training.zero.offload_param.device, bytes.parameters);
  return bytes;
}

}  // namespace dslaunch::plan
