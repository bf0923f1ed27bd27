#include "worker/selftest/training_check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/dtype.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "kernels/device_buffer.h"
#include "worker/model/gpt2_model.h"
#include "worker/selftest/learnable_tokens.h"

namespace dslaunch::worker::selftest {
namespace {

using core::DType;
using kernels::Backend;
using kernels::DeviceBuffer;

constexpr int64_t kVocab = 128, kBatch = 4, kSeq = 32;

core::Gpt2Config small_gpt() {
  core::Gpt2Config config;
  config.num_layers = 2;
  config.channels = 64;
  config.num_heads = 4;
  config.vocab_size = kVocab;
  config.padded_vocab_size = kVocab;
  config.max_seq_len = kSeq;
  return config;
}

// The losses of `steps` steps on `backend`: AdamW (lr 3e-3, betas 0.9 and
// 0.95, weight decay 0.1) after clipping the gradient's global norm to 1; in
// bf16 the products round their operands and AdamW writes the bf16-rounded
// weights the model reads, beside its fp32 masters.
std::vector<double> train(Backend& backend, DType precision, int steps,
                          const std::vector<int32_t>& tokens) {
  const core::ParameterTable table(small_gpt());
  const int64_t n = table.total();
  const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
  const bool mixed = precision != DType::kF32;
  std::vector<float> host(n);
  model::init_gpt2_parameters(table, 1234, host.data());
  DeviceBuffer<float> masters(backend, n), weights(backend, mixed ? n : 0);
  DeviceBuffer<float> grads(backend, n), m(backend, n), v(backend, n);
  backend.copy_host_to_device(masters.data(), host.data(), bytes);
  if (mixed) backend.round_to(weights.data(), masters.data(), n, precision);
  backend.memset_zero(m.data(), bytes);
  backend.memset_zero(v.data(), bytes);
  float* model_weights = mixed ? weights.data() : masters.data();
  backend.set_matmul_precision(precision);
  model::Gpt2Model model(table, backend, kBatch, kSeq);
  Backend::AdamWParams hyper;
  hyper.lr = 3e-3;
  hyper.beta2 = 0.95;
  hyper.weight_decay = 0.1;
  hyper.rounded_dtype = mixed ? precision : DType::kBF16;
  std::vector<double> losses;
  const int64_t window = kBatch * kSeq;
  for (int step = 0; step < steps; ++step) {
    const int64_t at = (step * (window + 1)) % (static_cast<int64_t>(tokens.size()) - window - 1);
    const std::vector<int32_t> inputs(tokens.begin() + at, tokens.begin() + at + window);
    const std::vector<int32_t> targets(tokens.begin() + at + 1, tokens.begin() + at + 1 + window);
    backend.memset_zero(grads.data(), bytes);
    losses.push_back(model.forward(model_weights, inputs.data(), targets.data(), kBatch));
    model.backward(model_weights, grads.data(), 1.0f, {});
    const double norm = std::sqrt(backend.sum_of_squares(grads.data(), n));
    if (norm > 1.0) backend.scale(grads.data(), n, static_cast<float>(1.0 / norm));
    hyper.step = step + 1;
    backend.adamw_update(masters.data(), grads.data(), m.data(), v.data(), n, hyper,
                         mixed ? weights.data() : nullptr);
  }
  backend.set_matmul_precision(DType::kF32);
  return losses;
}

}  // namespace

std::vector<TrainingCheck> check_training(Backend& device, Backend& reference, int steps) {
  const std::vector<int32_t> tokens = learnable_tokens(40000, kVocab, 1);
  std::vector<TrainingCheck> checks;
  for (const DType precision : {DType::kF32, DType::kBF16}) {
    TrainingCheck check;
    check.precision = precision == DType::kF32 ? "fp32" : "bf16";
    check.steps = steps;
    // fp32 sums in other orders drift apart slowly over the steps; bf16
    // rounds the products' operands, where a last-bit difference upstream
    // can round one of them the other way.
    check.tolerance = precision == DType::kF32 ? 1e-4 : 2e-3;
    const std::vector<double> expected = train(reference, precision, steps, tokens);
    const std::vector<double> actual = train(device, precision, steps, tokens);
    for (size_t i = 0; i < actual.size(); ++i) {
      const double e = std::abs(actual[i] - expected[i]) / expected[i];
      check.error =
          std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(check.error, e);
    }
    check.device_final_loss = actual.back();
    check.reference_final_loss = expected.back();
    checks.push_back(check);
  }
  return checks;
}

}  // namespace dslaunch::worker::selftest
