#include "worker/engine/evaluation.h"

#include <vector>

#include "worker/data/consecutive_batch.h"

namespace dslaunch::worker::engine {

double sum_of_batch_losses(const std::vector<model::Gpt2Model*>& chunks, const float* params,
                           const data::TokenRange& tokens, int64_t batch, int64_t batches,
                           int64_t first, int64_t stride,
                           const std::function<void()>& after_forward, StageLinks* links) {
  const int64_t T = chunks.front()->seq_len();
  std::vector<int32_t> inputs(batch * T);
  std::vector<int32_t> targets(batch * T);
  const int64_t passes = after_forward ? (batches + stride - 1) / stride : 0;
  double sum = 0;
  for (int64_t pass = 0, n = first; n < batches || pass < passes; ++pass, n += stride) {
    const bool counted = n < batches;
    data::consecutive_batch(tokens, counted ? n : 0, batch, T, inputs.data(), targets.data());
    float loss = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const int chunk = static_cast<int>(c);
      if (links != nullptr) links->before_forward(chunk, 0);
      loss += chunks[c]->forward(params, inputs.data(), targets.data(), batch);
      if (links != nullptr) links->after_forward(chunk, 0);
    }
    if (after_forward) after_forward();
    if (counted) sum += loss;
  }
  if (links != nullptr) links->finish();
  return sum;
}

}  // namespace dslaunch::worker::engine
