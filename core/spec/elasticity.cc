#include "core/spec/elasticity.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <set>

#include <fmt/format.h>

namespace dslaunch::spec {
namespace {

// DeepSpeed's HCN_LIST, the 38 smallest highly composite numbers: scaling a
// base batch by one gives it many divisors, hence many data-parallel sizes.
constexpr std::array<int64_t, 38> kHighlyComposite = {
    1,      2,      4,      6,      12,     24,     36,     48,    60,    120,
    180,    240,    360,    720,    840,    1260,   1680,   2520,  5040,  7560,
    10080,  15120,  20160,  25200,  27720,  45360,  50400,  55440, 83160, 110880,
    166320, 221760, 277200, 332640, 498960, 554400, 665280, 720720};

// Sizes shown in a message before the rest are only counted.
constexpr size_t kSizesShown = 24;

// The largest highly composite number <= `value` (>= 1). Past the list,
// DeepSpeed's lookup wraps to its last entry, which is this too.
int64_t highly_composite_at_most(int64_t value) {
  return *(std::upper_bound(kHighlyComposite.begin(), kHighlyComposite.end(), value) - 1);
}

std::optional<int64_t> least_common_multiple(const std::vector<int64_t>& values) {
  int64_t lcm = 1;
  for (const int64_t value : values) {
    if (__builtin_mul_overflow(lcm, value / std::gcd(lcm, value), &lcm)) return std::nullopt;
  }
  return lcm;
}

// One candidate per base: the base times the largest highly composite
// number that keeps it within `max_batch`, or the base itself when it is not
// below `max_batch`. Ascending, without repeats.
std::vector<int64_t> candidate_batches(const std::vector<int64_t>& bases, int64_t max_batch) {
  std::set<int64_t> candidates;
  for (const int64_t base : bases) {
    candidates.insert(base >= max_batch ? base : base * highly_composite_at_most(max_batch / base));
  }
  return {candidates.begin(), candidates.end()};
}

// The sizes in [low, high] that split `batch` into whole micro batches of
// one of `micro_sizes`, ascending: DeepSpeed's get_valid_gpus, whose "batch
// / micro and its divisors up to half of it" are all the divisors.
std::vector<int64_t> sizes_suited(int64_t batch, const std::vector<int64_t>& micro_sizes,
                                  int64_t low, int64_t high) {
  std::set<int64_t> sizes;
  for (const int64_t micro : micro_sizes) {
    if (batch % micro != 0) continue;
    const int64_t replicas = batch / micro;
    const int64_t span = std::min(high, replicas) - low + 1;
    if (span <= 0) continue;
    // Whichever is shorter: the range, or the divisor pairs up to the root.
    if (span <= replicas / span) {
      for (int64_t size = low; size < low + span; ++size) {
        if (replicas % size == 0) sizes.insert(size);
      }
      continue;
    }
    for (int64_t divisor = 1; divisor <= replicas / divisor; ++divisor) {
      if (replicas % divisor != 0) continue;
      for (const int64_t size : {divisor, replicas / divisor}) {
        if (size >= low && size <= high) sizes.insert(size);
      }
    }
  }
  return {sizes.begin(), sizes.end()};
}

struct Compatible {
  int64_t batch = 0;
  std::vector<int64_t> sizes;  // empty: no size in range suits any candidate
  std::string error;
};

// DeepSpeed's _get_compatible_gpus_v01: the candidate suiting the most
// sizes in [low, high]; on a tie the larger batch (`prefer_larger`) or the
// smaller, which makes the order candidates are tried in irrelevant. A bound
// of 0 takes DeepSpeed's default: 1, and max_batch / the smallest micro
// batch. Every micro batch size must be <= max_batch.
Compatible compatible_sizes(const std::vector<int64_t>& micro_sizes, int64_t max_batch, int64_t low,
                            int64_t high, bool prefer_larger) {
  const int64_t smallest_micro = *std::min_element(micro_sizes.begin(), micro_sizes.end());
  if (low == 0) low = 1;
  if (high == 0) high = max_batch / smallest_micro;
  const std::optional<int64_t> lcm = least_common_multiple(micro_sizes);
  if (!lcm) {
    return {0,
            {},
            "elasticity: the least common multiple of micro_batch_sizes does not fit in 64 bits; "
            "give fewer or smaller sizes"};
  }
  std::vector<int64_t> bases = micro_sizes;
  bases.push_back(*lcm);
  // DeepSpeed starts from the smallest micro batch, suiting no size.
  Compatible best{smallest_micro, {}, ""};
  for (const int64_t batch : candidate_batches(bases, max_batch)) {
    std::vector<int64_t> sizes = sizes_suited(batch, micro_sizes, low, high);
    const bool tie = sizes.size() == best.sizes.size();
    if (sizes.size() > best.sizes.size() ||
        (tie && (prefer_larger ? batch > best.batch : batch < best.batch))) {
      best = {batch, std::move(sizes), ""};
    }
  }
  return best;
}

// "" when every micro batch size is <= max_batch, which `what` describes.
std::string micro_above(const std::vector<int64_t>& micro_sizes, int64_t max_batch,
                        const std::string& what) {
  const int64_t largest = *std::max_element(micro_sizes.begin(), micro_sizes.end());
  if (largest <= max_batch) return "";
  return fmt::format(
      "elasticity: micro batch size {} is above {}; every micro batch size must fit in the "
      "batch: lower micro_batch_sizes or raise max_train_batch_size",
      largest, what);
}

std::string listed(const std::vector<int64_t>& sizes) {
  if (sizes.size() <= kSizesShown) return fmt::format("{}", fmt::join(sizes, ", "));
  return fmt::format("{}, ... ({} in all)",
                     fmt::join(sizes.begin(), sizes.begin() + kSizesShown, ", "), sizes.size());
}

bool contains(const std::vector<int64_t>& sizes, int64_t size) {
  return std::binary_search(sizes.begin(), sizes.end(), size);
}

BatchSizes batch_of(int64_t batch, int64_t micro, int64_t data_parallel) {
  return {batch, micro, batch / (micro * data_parallel)};
}

ElasticBatchResult elastic_batch_v01(const ElasticitySpec& spec, int64_t data_parallel) {
  ElasticBatchResult result;
  const std::vector<int64_t>& micro_sizes = spec.micro_batch_sizes;
  result.error = micro_above(micro_sizes, spec.max_train_batch_size,
                             fmt::format("max_train_batch_size {}", spec.max_train_batch_size));
  if (!result.error.empty()) return result;
  Compatible compatible = compatible_sizes(micro_sizes, spec.max_train_batch_size, spec.min_gpus,
                                           spec.max_gpus, spec.prefer_larger_batch);
  if (!compatible.error.empty()) {
    result.error = compatible.error;
    return result;
  }
  result.final_batch = compatible.batch;
  result.valid_data_parallel_sizes = std::move(compatible.sizes);
  const std::vector<int64_t>& valid = result.valid_data_parallel_sizes;
  if (valid.empty()) {
    result.error = fmt::format(
        "elasticity: no data-parallel size from min_gpus {} to max_gpus {} splits a batch of "
        "at most max_train_batch_size {} into micro batches of {}; widen the range or change "
        "the sizes",
        spec.min_gpus, spec.max_gpus, spec.max_train_batch_size, fmt::join(micro_sizes, ", "));
    return result;
  }
  if (!contains(valid, data_parallel)) {
    result.error = fmt::format(
        "elasticity: {} data-parallel ranks are not among the sizes this batch supports (train "
        "batch {}: {}); run with one of them, or change elasticity.min_gpus, max_gpus, "
        "micro_batch_sizes or max_train_batch_size",
        data_parallel, result.final_batch, listed(valid));
    return result;
  }
  // The largest micro batch dividing a replica's share; data_parallel is
  // one of the sizes suited, so one does.
  int64_t micro = 0;
  for (const int64_t size : micro_sizes) {
    if ((result.final_batch / data_parallel) % size == 0) micro = std::max(micro, size);
  }
  result.sizes = batch_of(result.final_batch, micro, data_parallel);
  return result;
}

// Version 0.2's micro batch: among the sizes dividing a replica's share of
// `batch`, the largest, or the first listed when !prefer_larger. DeepSpeed
// divides by all GPUs rather than by the replicas; the same when the model
// is not split, and with a split it could pick a size that leaves a
// fractional accumulation.
int64_t micro_v02(const ElasticitySpec& spec, int64_t batch, int64_t data_parallel) {
  int64_t micro = 0;
  for (const int64_t size : spec.micro_batch_sizes) {
    if ((batch / data_parallel) % size != 0) continue;
    if (micro == 0 || (spec.prefer_larger_batch && size > micro)) micro = size;
  }
  return micro;
}

ElasticBatchResult elastic_batch_v02(const ElasticitySpec& spec, int64_t data_parallel,
                                     int model_parallel_size) {
  ElasticBatchResult result;
  const std::vector<int64_t>& micro_sizes = spec.micro_batch_sizes;
  const int64_t replicas_per_node = spec.num_gpus_per_node / model_parallel_size;
  // The search runs per node: the batch one node's replicas share, and the
  // GPU bounds in whole nodes, each truncated as DeepSpeed does.
  const int64_t node_max_batch = spec.max_train_batch_size / replicas_per_node;
  result.error =
      micro_above(micro_sizes, node_max_batch,
                  fmt::format("max_train_batch_size {} / {} data-parallel ranks per node = {}",
                              spec.max_train_batch_size, replicas_per_node, node_max_batch));
  if (!result.error.empty()) return result;
  Compatible nodes =
      compatible_sizes(micro_sizes, node_max_batch, spec.min_gpus / spec.num_gpus_per_node,
                       spec.max_gpus / spec.num_gpus_per_node, spec.prefer_larger_batch);
  if (!nodes.error.empty()) {
    result.error = nodes.error;
    return result;
  }
  int64_t final_batch = 0;
  if (__builtin_mul_overflow(nodes.batch, replicas_per_node, &final_batch)) {
    result.error = fmt::format(
        "elasticity: the batch {} x {} data-parallel ranks per node does not fit in 64 bits; "
        "give smaller micro_batch_sizes",
        nodes.batch, replicas_per_node);
    return result;
  }
  std::vector<int64_t> valid;
  for (const int64_t node_count : nodes.sizes) valid.push_back(node_count * replicas_per_node);
  if (contains(valid, data_parallel)) {
    result.final_batch = final_batch;
    result.valid_data_parallel_sizes = std::move(valid);
    result.sizes =
        batch_of(final_batch, micro_v02(spec, final_batch, data_parallel), data_parallel);
    return result;
  }

  // DeepSpeed's fallback for any other size: for each micro batch, the
  // largest multiple of micro x data_parallel within max_train_batch_size;
  // the largest of those, or the smallest. It suits this size only.
  int64_t batch = -1;
  int64_t batch_micro = 0;
  for (const int64_t micro : micro_sizes) {
    const int64_t candidate =
        spec.max_train_batch_size / micro / data_parallel * micro * data_parallel;
    if (batch < 0 || (spec.prefer_larger_batch ? candidate > batch : candidate < batch)) {
      batch = candidate;
      batch_micro = micro;
    }
  }
  result.final_batch = batch;
  result.valid_data_parallel_sizes = {data_parallel};
  if (batch == 0) {
    result.error = fmt::format(
        "elasticity: {} data-parallel ranks are not among the sizes the elastic batch suits, "
        "and a batch for them alone is empty: micro batch {} x {} ranks is above "
        "max_train_batch_size {}; raise it, or run on fewer ranks",
        data_parallel, batch_micro, data_parallel, spec.max_train_batch_size);
    return result;
  }
  result.sizes = batch_of(batch, micro_v02(spec, batch, data_parallel), data_parallel);
  return result;
}

}  // namespace

ElasticBatchResult elastic_batch(const ElasticitySpec& spec, int world_size,
                                 int model_parallel_size) {
  if (model_parallel_size < 1 || world_size < 1 || world_size % model_parallel_size != 0) {
    ElasticBatchResult result;
    result.error = fmt::format(
        "elasticity: a world of {} ranks cannot be split into model-parallel groups of {}",
        world_size, model_parallel_size);
    return result;
  }
  const int64_t data_parallel = world_size / model_parallel_size;
  if (spec.version == 0.1) return elastic_batch_v01(spec, data_parallel);
  return elastic_batch_v02(spec, data_parallel, model_parallel_size);
}

BatchResolution training_batch_sizes(const TrainingSpec& training, int world_size,
                                     int model_parallel_size) {
  if (!training.elasticity.enabled) {
    return resolve_batch_sizes(training.batch, world_size / model_parallel_size);
  }
  ElasticBatchResult elastic = elastic_batch(training.elasticity, world_size, model_parallel_size);
  return {elastic.sizes, elastic.error};
}

}  // namespace dslaunch::spec
