#pragma once

#include <cstdint>

#include "worker/data/token_source.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch::worker::engine {

// The sum of the mean cross-entropies of the consecutive (B, T) batches
// `first`, `first + stride`, ... below `batches` of `tokens` (batch n: rows
// of T tokens from n*B*T on, targets shifted by one). With first 0 and
// stride 1 this is batches times the loss `dslaunch eval` reports; data
// parallel ranks take first = rank, stride = ranks and add up their sums.
// B is the model's max_batch, T its seq_len; the range must hold `batches`
// such batches.
double sum_of_batch_losses(model::Gpt2Model& model, const float* params,
                           const data::TokenRange& tokens, int64_t batch, int64_t batches,
                           int64_t first, int64_t stride);

}  // namespace dslaunch::worker::engine
