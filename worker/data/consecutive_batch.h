#pragma once

// The evaluation batches: batch n of (B, T) reads the B·T + 1 tokens that
// start at token n·B·T; row b's inputs are tokens [n·B·T + b·T, + T) and its
// targets the same shifted by one token. This is the one definition both
// the trainer's evaluation and `dslaunch eval` ("the first N consecutive
// (B, T) windows of the file, targets shifted by one") use.

#include <cstdint>

#include "worker/data/token_source.h"

namespace dslaunch::worker::data {

// Batches of (batch, seq_len) that fit in `tokens` tokens:
// (tokens - 1) / (batch·seq_len), 0 when there is not one.
// Precondition: batch >= 1, seq_len >= 1.
int64_t consecutive_batch_count(int64_t tokens, int64_t batch, int64_t seq_len);

// Writes batch n's inputs and targets, each (batch, seq_len) row-major.
// Precondition: 0 <= n < consecutive_batch_count(range.size(), batch, seq_len).
void consecutive_batch(TokenRange range, int64_t n, int64_t batch, int64_t seq_len, int32_t* inputs,
                       int32_t* targets);

}  // namespace dslaunch::worker::data
