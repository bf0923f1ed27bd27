#include "launcher/plan/workspace_estimate.h"

#include <algorithm>

#include "core/layout/backward_gradient_pages.h"
#include "core/layout/vocab_chunks.h"
#include "core/layout/zero3_prefetch.h"
#include "core/layout/zero3_regions.h"
#include "launcher/plan/memory_estimate.h"

namespace dslaunch::plan {
namespace {

constexpr int64_t kFloat = 4;
constexpr int64_t kPage = 4096;
// worker/parallel/partition_swap.h's default piece: what its staging buffer holds.
constexpr int64_t kSwapPieceBytes = int64_t{8} << 20;
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// worker/parallel/block_quantizer.h's quantized_bytes(): int8 values and a
// 4-byte scale per block of 64.
int64_t quantized_bytes(int64_t floats) { return floats + 4 * ceil_div(floats, 64); }

// Stages 2 and 3's resident gradient floats at most (GradientReducer's
// buckets and the order backward completes them in).
int64_t unreduced_floats(const core::ParameterTable& table, const spec::ModelSpec& model,
                         const spec::ZeroSpec& zero, int data_parallel, int64_t micro_batch) {
  const int64_t total = table.total();
  const int64_t bucket = std::clamp<int64_t>(zero.reduce_bucket_size, 1, total);
  const int64_t in_flight = data_parallel > 1 ? kGradientBucketsInFlight : 0;
  const int64_t waiting = (in_flight + 1) * bucket;
  int64_t block = 0;
  for (int layer = 0; layer < table.config().num_layers; ++layer) {
    const auto [begin, end] = table.layer_range(layer);
    block = std::max(block, end - begin);
  }
  const core::TensorInfo& wte = table.tensor(core::TensorRole::kWte);
  const int64_t wpe = table.tensor(core::TensorRole::kWpe).numel;
  // Stage 2: the output layer writes the token embedding's gradient whole,
  // and the encoder completes it last, with the position embedding's.
  if (zero.stage < 3) return std::min(total, wte.numel + std::max(block, wpe) + waiting);
  // Stage 3 reduces the output layer's part of the token embedding's
  // gradient a vocabulary chunk at a time, in pieces of a bucket, each
  // zeroing its floats: the page where two pieces (or chunks) meet stays
  // until backward ends. The encoder then adds to the rows of the
  // micro-batch's tokens (each on pages of its own at worst).
  const int64_t channels = table.config().channels;
  const int64_t rows = wte.numel / channels;
  const core::VocabChunks chunks(rows, channels);
  const int64_t chunk = chunks.per_chunk * channels;
  const int64_t page_floats = kPage / kFloat;
  const int64_t piece_edges = chunks.count() * (ceil_div(chunk, bucket) + 1) * page_floats;
  const int64_t row_floats = (ceil_div(channels * kFloat, kPage) + 1) * page_floats;
  const int64_t encoder =
      wpe + std::min(wte.numel, std::min(rows, micro_batch * model.seq_length) * row_floats);
  return std::min(total, std::max({block, chunk, encoder}) + waiting + piece_edges);
}

// The gradient reducer's buffers: the share of a bucket this rank receives,
// and the narrowed or quantized copies its 16-bit or int8 traffic takes.
int64_t reducer_bytes(const spec::TrainingSpec& training, int64_t total, int data_parallel,
                      bool scatter) {
  if (data_parallel == 1 && !scatter) return 0;
  const int64_t bucket = std::clamp<int64_t>(training.zero.reduce_bucket_size, 1, total);
  const int64_t share = std::min(bucket, ceil_div(total, data_parallel));
  int64_t bytes = share * kFloat;
  if (data_parallel == 1) return bytes;
  const spec::CommunicationDataType wire = training.communication_data_type;
  const bool narrow =
      wire == spec::CommunicationDataType::kFp16 || wire == spec::CommunicationDataType::kBf16 ||
      (wire == spec::CommunicationDataType::kDefault && (training.bf16 || training.fp16.enabled));
  if (scatter && training.zero.quantized_gradients) {
    // The bucket's shares quantized (each may end in a block of its own),
    // every rank's quantized share for this one, and one share dequantized.
    bytes += quantized_bytes(bucket) + data_parallel * 4 + data_parallel * quantized_bytes(share) +
             share * kFloat;
  } else if (narrow) {
    // The bucket and every rank's share of it; all-reduce mode also this
    // rank's mean and the bucket gathered back.
    bytes += (bucket + data_parallel * share) * 2;
    if (!scatter) bytes += (share + bucket) * 2;
  }
  return bytes;
}

}  // namespace

WorkspaceBytes workspace_bytes_per_rank(const spec::ModelSpec& model,
                                        const spec::ParallelismSpec& parallel,
                                        const spec::TrainingSpec& training, int data_parallel,
                                        int64_t micro_batch, int stage) {
  const core::ParameterTable table = stage_parameter_table(model, parallel, stage);
  const spec::ZeroSpec& zero = training.zero;
  const int64_t total = table.total();
  const bool param_nvme = zero.offload_param.device == spec::OffloadDevice::kNvme;
  // As the worker's model state chooses (worker/engine/zero_model_state.cc):
  // one rank partitions nothing unless its parameters go to NVMe.
  const bool scatter = zero.stage >= 2 && (data_parallel > 1 || param_nvme);
  WorkspaceBytes bytes;
  bytes.communication = reducer_bytes(training, total, data_parallel, scatter);
  if (!scatter) return bytes;
  bytes.gradient_workspace =
      unreduced_floats(table, model, zero, data_parallel, micro_batch) * kFloat;
  if (zero.stage < 3) return bytes;
  // The host's workspace gathers as the GPU's does (Zero3Parameters and
  // DeviceZero3Parameters follow the same core::Zero3Prefetch), in the
  // host's pages.
  const core::Zero3Regions regions(table, zero.param_persistence_threshold);
  const core::Zero3Prefetch prefetch(regions, zero.prefetch_bucket_size, zero.max_live_parameters);
  bytes.parameter_workspace = core::gathered_peak_bytes(regions, kPage, &prefetch);
  bytes.communication += regions.persistent_floats() * kFloat;
  if (zero.hpz_partition_size > 1) {
    bytes.communication +=
        ceil_div(total - regions.persistent_floats(), zero.hpz_partition_size) * kFloat;
  }
  if (param_nvme) {
    const int64_t partition = ceil_div(total, data_parallel) * kFloat;
    bytes.communication += std::min(kSwapPieceBytes, ceil_div(partition, kPage) * kPage);
  }
  return bytes;
}

WorkspaceBytes device_workspace_bytes_per_rank(const spec::ModelSpec& model,
                                               const spec::ParallelismSpec& parallel,
                                               const spec::TrainingSpec& training,
                                               int data_parallel, int stage) {
  WorkspaceBytes bytes;
  // Over several ranks stages 2-3 give backward's buffer back a bucket at
  // a time (worker/engine/device_gradient_pages.h), NCCL's reducer once
  // kGradientBucketsInFlight more are launched
  // (worker/parallel/device_gradient_reducer.h).
  const bool sparse_gradients = training.zero.stage >= 2 && data_parallel > 1;
  if (!sparse_gradients && training.zero.stage < 3) return bytes;
  const core::ParameterTable table = stage_parameter_table(model, parallel, stage);
  if (sparse_gradients) {
    bytes.gradient_workspace =
        core::backward_gradient_peak_bytes(table, training.zero.reduce_bucket_size,
                                           kGradientBucketsInFlight, kGpuPageBytes);
  }
  if (training.zero.stage < 3) return bytes;
  const core::Zero3Regions regions(table, training.zero.param_persistence_threshold);
  const core::Zero3Prefetch prefetch(regions, training.zero.prefetch_bucket_size,
                                     training.zero.max_live_parameters);
  bytes.parameter_workspace = core::gathered_peak_bytes(regions, kGpuPageBytes, &prefetch);
  // Over several ranks, the persistent tensors' packed copy.
  if (data_parallel > 1) bytes.communication = regions.persistent_floats() * kFloat;
  return bytes;
}

}  // namespace dslaunch::plan
