#include "worker/engine/evaluation.h"

#include <vector>

#include "worker/data/consecutive_batch.h"

namespace dslaunch::worker::engine {

double sum_of_batch_losses(model::Gpt2Model& model, const float* params,
                           const data::TokenRange& tokens, int64_t batch, int64_t batches,
                           int64_t first, int64_t stride) {
  const int64_t T = model.seq_len();
  std::vector<int32_t> inputs(batch * T);
  std::vector<int32_t> targets(batch * T);
  double sum = 0;
  for (int64_t n = first; n < batches; n += stride) {
    data::consecutive_batch(tokens, n, batch, T, inputs.data(), targets.data());
    sum += model.forward(params, inputs.data(), targets.data(), batch);
  }
  return sum;
}

}  // namespace dslaunch::worker::engine
