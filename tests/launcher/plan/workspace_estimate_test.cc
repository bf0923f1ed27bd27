#include "launcher/plan/workspace_estimate.h"

#include <cstdint>

#include <catch2/catch.hpp>

#include "core/spec/job_spec.h"

namespace dslaunch::plan {
namespace {

// GPT-2 124M (the spec's default model) at T 64, one sequence a micro-batch.
spec::ModelSpec gpt2_small() {
  spec::ModelSpec model;
  model.seq_length = 64;
  return model;
}

// Its sizes in floats, by hand: a block's tensors, of which the biases and
// layernorms (under 100K elements each) are persistent at stage 3, as are
// ln_f and the position embedding (64 positions).
constexpr int64_t kBlock = 7'087'872;
constexpr int64_t kBlockGathered = 768 * 2304 + 768 * 768 + 2 * 768 * 3072;  // 7,077,888
constexpr int64_t kWpe = 64 * 768;
constexpr int64_t kPersistent = 12 * (kBlock - kBlockGathered) + 2 * 768 + kWpe;
constexpr int64_t kWte = 50304 * 768;
constexpr int64_t kChunk = 5461 * 768;  // the largest vocabulary chunk: 4M floats at most
// Stage 3 reduces the output layer's gradient a chunk at a time in pieces
// of a bucket: with 1M-element buckets, 5 pieces in each of the 10 chunks,
// and a page left where pieces (and chunks) meet, 6 a chunk.
constexpr int64_t kPieceEdges = 10 * 6 * 1024;
constexpr int64_t kTotal = kWte + kWpe + 12 * kBlock + 2 * 768;

// Gathered parameters are counted in the whole pages they touch: at most
// two more a range (61 runs of persistent tensors at 124M, 4 ranges a
// block, 1 a chunk), far under 1 MiB.
bool in_pages(int64_t bytes, int64_t floats) {
  return bytes >= 4 * floats && bytes <= 4 * floats + 256 * 4096;
}

spec::TrainingSpec zero(int stage, int64_t bucket) {
  spec::TrainingSpec training;
  training.zero.stage = stage;
  training.zero.reduce_bucket_size = bucket;
  return training;
}

TEST_CASE("stages 0 and 1 hold the reducer's share of a bucket, and no workspace") {
  const spec::ParallelismSpec parallel;
  for (const int stage : {0, 1}) {
    const WorkspaceBytes two =
        workspace_bytes_per_rank(gpt2_small(), parallel, zero(stage, 1'000'000), 2, 1, 0);
    CHECK(two.communication == 4 * 1'000'000);
    CHECK(two.gradient_workspace == 0);
    CHECK(two.parameter_workspace == 0);
    // A bucket larger than a rank's half of the model: the half.
    CHECK(workspace_bytes_per_rank(gpt2_small(), parallel, zero(stage, 500'000'000), 2, 1, 0)
              .communication == 4 * ((kTotal + 1) / 2));
    // One rank exchanges nothing.
    CHECK(
        workspace_bytes_per_rank(gpt2_small(), parallel, zero(stage, 1'000'000), 1, 1, 0).total() ==
        0);
  }
  // bf16 training sends bf16 gradients: the bucket, every rank's share of
  // it, this rank's mean and the bucket gathered back, 2 bytes each.
  spec::TrainingSpec bf16 = zero(1, 1'000'000);
  bf16.bf16 = true;
  CHECK(workspace_bytes_per_rank(gpt2_small(), parallel, bf16, 4, 1, 0).communication ==
        4 * 1'000'000 + 2 * (1'000'000 + 4 * 1'000'000 + 1'000'000 + 1'000'000));
  bf16.communication_data_type = spec::CommunicationDataType::kFp32;
  CHECK(workspace_bytes_per_rank(gpt2_small(), parallel, bf16, 4, 1, 0).communication ==
        4 * 1'000'000);
}

TEST_CASE(
    "stage 2's gradient workspace holds the token embedding's gradient, a block and the "
    "buckets that may wait") {
  const spec::ParallelismSpec parallel;
  const WorkspaceBytes two =
      workspace_bytes_per_rank(gpt2_small(), parallel, zero(2, 1'000'000), 2, 1, 0);
  CHECK(two.gradient_workspace == 4 * (kWte + kBlock + 3 * 1'000'000));
  CHECK(two.parameter_workspace == 0);
  CHECK(two.communication == 4 * 1'000'000);
  // DeepSpeed's default bucket (500M elements) is the whole model: all of it.
  CHECK(workspace_bytes_per_rank(gpt2_small(), parallel, zero(2, 500'000'000), 2, 1, 0)
            .gradient_workspace == 4 * kTotal);
  // One rank keeps whole gradients (nothing partitioned)...
  CHECK(workspace_bytes_per_rank(gpt2_small(), parallel, zero(2, 1'000'000), 1, 1, 0).total() == 0);
  // ...unless its parameters go to NVMe; then it reduces each bucket at
  // once, so none waits.
  spec::TrainingSpec offloaded = zero(3, 1'000'000);
  offloaded.zero.offload_param.device = spec::OffloadDevice::kNvme;
  CHECK(workspace_bytes_per_rank(gpt2_small(), parallel, offloaded, 1, 1, 0).gradient_workspace ==
        4 * (kBlock + 1'000'000 + kPieceEdges));
}

TEST_CASE(
    "on a GPU, stages 2-3 over several ranks hold the token embedding's gradient, a block, the "
    "buckets in flight and one not yet complete, in 2 MiB pages") {
  const spec::ParallelismSpec parallel;
  constexpr int64_t kPage = int64_t{2} << 20;
  for (const int stage : {2, 3}) {
    INFO("stage " << stage);
    const int64_t held =
        device_workspace_bytes_per_rank(gpt2_small(), parallel, zero(stage, 1'000'000), 2, 0)
            .gradient_workspace;
    // Two buckets wait for NCCL beside the one backward is completing.
    CHECK(held >= 4 * (kWte + kBlock + 2 * 1'000'000));
    CHECK(held <= 4 * (kWte + kBlock + 3 * 1'000'000) + 3 * kPage);
    // DeepSpeed's default bucket is the whole model: every page of it.
    CHECK(device_workspace_bytes_per_rank(gpt2_small(), parallel, zero(stage, 500'000'000), 2, 0)
              .gradient_workspace == (4 * kTotal + kPage - 1) / kPage * kPage);
    // One rank keeps the whole buffer, a model state.
    CHECK(device_workspace_bytes_per_rank(gpt2_small(), parallel, zero(stage, 1'000'000), 1, 0)
              .gradient_workspace == 0);
  }
  CHECK(device_workspace_bytes_per_rank(gpt2_small(), parallel, zero(1, 1'000'000), 2, 0).total() ==
        0);
}

TEST_CASE("stage 3's memory-bound settings: one block, one vocabulary chunk, small buckets") {
  // What the README's memory-bound run sets: 1M live parameters, below what
  // one step of a pass needs, so nothing is prefetched.
  spec::TrainingSpec training = zero(3, 1'000'000);
  training.zero.max_live_parameters = 1'000'000;
  training.zero.offload_param.device = spec::OffloadDevice::kNvme;
  const WorkspaceBytes bytes =
      workspace_bytes_per_rank(gpt2_small(), spec::ParallelismSpec{}, training, 2, 1, 0);
  CHECK(in_pages(bytes.parameter_workspace, kPersistent + kBlockGathered + kChunk));
  // The block being written and three buckets (two waiting, one not yet
  // complete), and the pages where the output layer's pieces met; the
  // output layer's chunks and the encoder's rows are smaller.
  CHECK(bytes.gradient_workspace == 4 * (kBlock + 3 * 1'000'000 + kPieceEdges));
  // A bucket's share, the persistent tensors' packed copy, and the swap's
  // staging buffer (a piece of 8 MiB).
  CHECK(bytes.communication == 4 * 1'000'000 + 4 * kPersistent + (8 << 20));

  // Without the live limit, DeepSpeed's prefetch bucket (50M) holds the 7
  // blocks after the one in use.
  training.zero.max_live_parameters = 1'000'000'000;
  training.zero.prefetch_bucket_size = 50'000'000;
  CHECK(in_pages(workspace_bytes_per_rank(gpt2_small(), spec::ParallelismSpec{}, training, 2, 1, 0)
                     .parameter_workspace,
                 kPersistent + 8 * kBlockGathered));
  // A prefetch bucket of one block: two blocks at most, but the output
  // layer holds more, the last block with a vocabulary chunk and the next.
  training.zero.prefetch_bucket_size = kBlockGathered;
  CHECK(in_pages(workspace_bytes_per_rank(gpt2_small(), spec::ParallelismSpec{}, training, 2, 1, 0)
                     .parameter_workspace,
                 kPersistent + kBlockGathered + 2 * kChunk));
  // A live limit between the two (20M): each block prefetches the next
  // (14.2M live), not the one after (21.2M); the output layer's last block
  // with two full chunks (15.6M) is the most live, under the limit. (The
  // last chunk, 1,155 rows, with two blocks is less.)
  training.zero.prefetch_bucket_size = 50'000'000;
  training.zero.max_live_parameters = 20'000'000;
  CHECK(in_pages(workspace_bytes_per_rank(gpt2_small(), spec::ParallelismSpec{}, training, 2, 1, 0)
                     .parameter_workspace,
                 kPersistent + kBlockGathered + 2 * kChunk));
  // A limit of one block and a chunk: nothing prefetched past the block in
  // use, as with the memory-bound settings.
  training.zero.max_live_parameters = kBlockGathered + kChunk;
  CHECK(in_pages(workspace_bytes_per_rank(gpt2_small(), spec::ParallelismSpec{}, training, 2, 1, 0)
                     .parameter_workspace,
                 kPersistent + kBlockGathered + kChunk));
}

TEST_CASE("ZeRO++'s secondary partition and quantized gradients are counted") {
  spec::TrainingSpec training = zero(3, 1'000'000);
  training.zero.hpz_partition_size = 2;
  training.zero.quantized_gradients = true;
  const WorkspaceBytes bytes =
      workspace_bytes_per_rank(gpt2_small(), spec::ParallelismSpec{}, training, 4, 1, 0);
  const int64_t share = 1'000'000;
  const auto quantized = [](int64_t floats) { return floats + 4 * ((floats + 63) / 64); };
  CHECK(bytes.communication == 4 * share + 4 * kPersistent + 4 * ((kTotal - kPersistent + 1) / 2) +
                                   quantized(1'000'000) + 4 * 4 + 4 * quantized(share) + 4 * share);
}

}  // namespace
}  // namespace dslaunch::plan
