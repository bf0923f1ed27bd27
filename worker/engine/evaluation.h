#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "worker/data/token_source.h"
#include "worker/engine/stage_links.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch::worker::engine {

// The sum of the mean cross-entropies of the consecutive (B, T) batches
// `first`, `first + stride`, ... below `batches` of `tokens` (batch n: rows
// of T tokens from n*B*T on, targets shifted by one). With first 0 and
// stride 1 this is batches times the loss `dslaunch eval` reports; data
// parallel ranks take first = rank, stride = ranks and add up their sums.
// B is the model's max_batch, T its seq_len; the range must hold `batches`
// such batches.
//
// With `after_forward`, every rank runs the same number of forward passes,
// ceil(batches / stride): a rank with fewer batches re-runs batch 0
// and does not count it. after_forward is called after each pass. ZeRO
// stage 3 needs both: it gathers each block in collectives every rank must
// join, and releases what a forward pass leaves gathered.
//
// `chunks`: the model, or a pipeline stage's model chunks in order. On a
// pipeline stage (`links`), each chunk's pass receives its input from the
// previous virtual stage and sends its output on; only the last stage's sum
// is the losses' (the others return 0), and links->status() says whether
// the links held.
double sum_of_batch_losses(const std::vector<model::Gpt2Model*>& chunks, const float* params,
                           const data::TokenRange& tokens, int64_t batch, int64_t batches,
                           int64_t first, int64_t stride,
                           const std::function<void()>& after_forward = {},
                           StageLinks* links = nullptr);

}  // namespace dslaunch::worker::engine
