#include "worker/data/consecutive_batch.h"

namespace dslaunch::worker::data {

int64_t consecutive_batch_count(int64_t tokens, int64_t batch, int64_t seq_len) {
  int64_t per_batch = 0;
  // A batch larger than 64 bits can count holds more tokens than any file.
  if (tokens < 1 || __builtin_mul_overflow(batch, seq_len, &per_batch)) return 0;
  return (tokens - 1) / per_batch;
}

void consecutive_batch(TokenRange range, int64_t n, int64_t batch, int64_t seq_len, int32_t* inputs,
                       int32_t* targets) {
  const int64_t tokens = batch * seq_len;
  range.read(n * tokens, tokens, inputs);
  range.read(n * tokens + 1, tokens, targets);
}

}  // namespace dslaunch::worker::data
