#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dslaunch::spec {

// The three DeepSpeed batch keys as the user gave them (unset = absent).
struct BatchInput {
  std::optional<int64_t> train_batch_size;
  std::optional<int64_t> micro_batch_per_gpu;  // train_micro_batch_size_per_gpu
  std::optional<int64_t> gradient_accumulation_steps;
};

struct BatchSizes {
  int64_t train_batch_size = 0;
  int64_t micro_batch_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
};

struct BatchResolution {
  std::optional<BatchSizes> sizes;
  std::string error;  // set when sizes is not
};

// Completes the triple exactly as DeepSpeed does, with integer division and
// dp the data-parallel size:
//   (train, micro) -> gas = train / micro / dp
//   (train, gas)   -> micro = train / dp / gas
//   (micro, gas)   -> train = micro * gas * dp
//   train alone    -> gas = 1, micro = train / dp
//   micro alone    -> train = micro * dp, gas = 1
//   gas alone, or none -> error.
// Then all three must be > 0 and train == micro * gas * dp, else an error
// that shows the four numbers. Pure.
BatchResolution resolve_batch_sizes(const BatchInput& input, int64_t data_parallel_size);

}  // namespace dslaunch::spec
