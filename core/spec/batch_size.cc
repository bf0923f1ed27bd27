#include "core/spec/batch_size.h"

#include <fmt/format.h>

namespace dslaunch::spec {

namespace {

// a * b * c, or nullopt when it does not fit in 64 bits.
std::optional<int64_t> checked_product(int64_t a, int64_t b, int64_t c) {
  int64_t ab = 0, abc = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc)) return std::nullopt;
  return abc;
}

}  // namespace

BatchResolution resolve_batch_sizes(const BatchInput& input, int64_t dp) {
  const auto& train = input.train_batch_size;
  const auto& micro = input.micro_batch_per_gpu;
  const auto& gas = input.gradient_accumulation_steps;
  BatchSizes sizes;
  if (train && micro && gas) {
    sizes = {*train, *micro, *gas};
  } else if (train && micro) {
    sizes = {*train, *micro, *train / *micro / dp};
  } else if (train && gas) {
    sizes = {*train, *train / dp / *gas, *gas};
  } else if (micro && gas) {
    sizes = {checked_product(*micro, *gas, dp).value_or(0), *micro, *gas};
  } else if (train) {
    sizes = {*train, *train / dp, 1};
  } else if (micro) {
    sizes = {checked_product(*micro, 1, dp).value_or(0), *micro, 1};
  } else {
    return {std::nullopt,
            "give training.train_batch_size or training.train_micro_batch_size_per_gpu "
            "(gradient_accumulation_steps alone cannot determine the batch)"};
  }

  const std::optional<int64_t> product =
      checked_product(sizes.micro_batch_per_gpu, sizes.gradient_accumulation_steps, dp);
  if (!product) {
    return {std::nullopt,
            fmt::format("batch sizes are too large: train_micro_batch_size_per_gpu {} x "
                        "gradient_accumulation_steps {} x data-parallel size {} does not fit in "
                        "64 bits",
                        sizes.micro_batch_per_gpu, sizes.gradient_accumulation_steps, dp)};
  }
  if (sizes.train_batch_size > 0 && sizes.micro_batch_per_gpu > 0 &&
      sizes.gradient_accumulation_steps > 0 && sizes.train_batch_size == *product) {
    return {sizes, ""};
  }
  return {std::nullopt,
          fmt::format("batch sizes do not fit together: train_batch_size {} must equal "
                      "train_micro_batch_size_per_gpu {} x gradient_accumulation_steps {} x "
                      "data-parallel size {} (= {}), and all three must be > 0; give two of "
                      "the three keys so the third is derived, or make the product match",
                      sizes.train_batch_size, sizes.micro_batch_per_gpu,
                      sizes.gradient_accumulation_steps, dp, *product)};
}

}  // namespace dslaunch::spec
