#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/spec/batch_size.h"
#include "core/spec/job_spec.h"

namespace dslaunch::spec {

struct ElasticBatchResult {
  // The global batch and the data-parallel sizes it suits, ascending. Set
  // whenever the batch could be computed, also when the job's size is not
  // among them, so a caller can show them.
  int64_t final_batch = 0;
  std::vector<int64_t> valid_data_parallel_sizes;
  std::optional<BatchSizes> sizes;  // for the job's data-parallel size
  std::string error;                // set when sizes is not
};

// DeepSpeed's elastic batch (deepspeed/elasticity, versions 0.1 and 0.2),
// for a job of `world_size` ranks in model-parallel groups of
// `model_parallel_size` (tensor x pipeline): its data-parallel size is
// world_size / model_parallel_size.
//
// Version 0.1 picks, among multiples of each micro batch size and of their
// least common multiple by highly composite numbers (one candidate each,
// the largest within max_train_batch_size, or the base itself when it is
// not below it — which can exceed max_train_batch_size, as in DeepSpeed),
// the batch divisible into the most data-parallel sizes in
// [min_gpus, max_gpus]; ties go to the larger batch, or the smaller with
// prefer_larger_batch false. The job's size must be one of them; its micro
// batch is the largest size that divides its share of the batch.
//
// Version 0.2 does the same in whole nodes of num_gpus_per_node ranks,
// each holding num_gpus_per_node / model_parallel_size replicas. When the
// job's data-parallel size is not among the results, it falls back to the
// multiple of micro batch x data-parallel size nearest below
// max_train_batch_size (the largest over the micro sizes, or the smallest
// with prefer_larger_batch false), which suits this size only. The micro
// batch is the largest size that divides a replica's share, or the first
// in the list with prefer_larger_batch false.
//
// Precondition: `spec` passed the job-spec checks (spec_parser.h), and
// elasticity.model_parallel_size, when set, is model_parallel_size. Pure.
ElasticBatchResult elastic_batch(const ElasticitySpec& spec, int world_size,
                                 int model_parallel_size);

// The batch sizes a training job of `world_size` ranks uses: elasticity's
// when training.elasticity is enabled, else the spec's batch keys resolved
// for the data-parallel size (resolve_batch_sizes).
BatchResolution training_batch_sizes(const TrainingSpec& training, int world_size,
                                     int model_parallel_size);

}  // namespace dslaunch::spec
