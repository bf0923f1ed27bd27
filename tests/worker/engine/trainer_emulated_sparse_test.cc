// ZeRO stage 3 on the GPU path, and resuming it, run on the CPU emulator of
// CUDA's thread model with guarded memory (a read of what was not gathered
// faults): stage 3 with every state on the GPU trains as stage 2 there,
// bit for bit; a GPU without room to gather, or for backward's sparse
// gradients, stops the run with a message; a run resumed from a
// checkpoint continues bit for bit. Split from
// trainer_emulated_backend_test.cc so that each runs within its timeout.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <new>
#include <vector>

#include "core/dtype.h"
#include "core/layout/parameter_table.h"
#include "core/layout/zero3_regions.h"
#include "kernels/backend.h"
#include "kernels/simt/emulated_backend.h"
#include "tests/worker/engine/emulated_training.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "tests/worker/selftest/forwarding_backend.h"
#include "worker/comm/communicator.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker::engine {
namespace {

using testing::Layout;
using testing::OffloadRun;
using testing::train_offloaded;

TEST_CASE("ZeRO stage 3 on the GPU gathers around each use and trains as stage 2 there") {
  comm::Communicator& world = comm::testing::world_data();
  const std::string dir = testing::shared_token_files(world);
  const spec::JobSpec spec = testing::gpu_path_job(dir);
  const int n = world.size();
  for (const core::DType precision : {core::DType::kF32, core::DType::kBF16, core::DType::kF16}) {
    testing::check_stage3_matches_stage2_on_device(spec, {1, n, 1}, precision);
  }
  // One data rank: its partition is the whole model, gathered by copies.
  if (n == 2) testing::check_stage3_matches_stage2_on_device(spec, {1, 1, 2}, core::DType::kBF16);
  REQUIRE_OK(comm::testing::world_barrier());
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

// Sparse memory that refuses to hold more than `limit` bytes at once, on
// top of another backend's (whose pages it commits as its own are mapped).
class LimitedSparseMemory final : public kernels::SparseMemory {
 public:
  LimitedSparseMemory(std::unique_ptr<kernels::SparseMemory> inner, kernels::AllocationTally& tally,
                      int64_t& held, int64_t limit)
      : SparseMemory(inner->data(), inner->bytes(), inner->page_bytes(), tally),
        inner_(std::move(inner)),
        held_(held),
        limit_(limit) {}
  ~LimitedSparseMemory() override {
    for_mapped_runs([this](int64_t first, int64_t count) { unmap(first, count); });
  }

 private:
  void map(int64_t first, int64_t count) override {
    if (held_ + count * page_bytes() > limit_) throw std::bad_alloc();
    inner_->commit(first * page_bytes(), end_of(first + count));
    held_ += count * page_bytes();
  }
  void unmap(int64_t first, int64_t count) override {
    inner_->release(first * page_bytes(), end_of(first + count));
    held_ -= count * page_bytes();
  }

  int64_t end_of(int64_t page) const { return std::min(page * page_bytes(), bytes()); }

  std::unique_ptr<kernels::SparseMemory> inner_;
  int64_t& held_;
  const int64_t limit_;
};

// A GPU whose sparse memory holds at most `limit` bytes in all.
class SparseLimitedBackend final : public dslaunch::testing::ForwardingBackend {
 public:
  explicit SparseLimitedBackend(int64_t limit)
      : ForwardingBackend(
            kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded)),
        limit_(limit) {}
  std::unique_ptr<kernels::SparseMemory> reserve_sparse(int64_t bytes) override {
    return std::make_unique<LimitedSparseMemory>(inner().reserve_sparse(bytes), tally_, held_,
                                                 limit_);
  }

 private:
  kernels::AllocationTally tally_;  // the inner backend counts the pages
  int64_t held_ = 0;
  const int64_t limit_;
};

// Bytes of the distinct pages `ranges` (floats, in increasing order) touch.
int64_t distinct_page_bytes(const std::vector<core::Zero3Regions::Range>& ranges, int64_t page) {
  int64_t pages = 0, covered = 0;
  for (const auto& [begin, end] : ranges) {
    const int64_t last = (end * 4 + page - 1) / page;
    pages += std::max<int64_t>(0, last - std::max(begin * 4 / page, covered));
    covered = std::max(covered, last);
  }
  return pages * page;
}

// With room for the partition and the persistent tensors but not for a
// block, the first gather stops the run with a message, not a read of
// memory that was never mapped.
TEST_CASE("ZeRO stage 3 on a GPU with no room to gather a block says so") {
  const std::string dir = testing::shared_token_files(comm::testing::solo_data_comm());
  spec::JobSpec spec = testing::gpu_path_job(dir);
  spec.training.zero.stage = 3;
  spec.training.zero.param_persistence_threshold = 1000;
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 1;
  spec.training.batch.train_batch_size = 2;
  const int64_t page = sysconf(_SC_PAGESIZE);
  const core::ParameterTable table = plan::stage_parameter_table(spec.model, spec.parallelism, 0);
  const core::Zero3Regions regions(table, spec.training.zero.param_persistence_threshold);
  REQUIRE(regions.region_size(1) > 0);
  const ZeroPartition whole = make_zero_partition(table.total(), 1, kZeroPartitionAlignment);
  const int64_t partition = (whole.padded_total() * 4 + page - 1) / page * page;
  SparseLimitedBackend device(partition + distinct_page_bytes(regions.persistent, page));
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  TrainerOptions options;
  options.data_comm = &comm::testing::solo_data_comm();
  CHECK_THROWS_WITH(
      train(spec, data, device, options),
      Catch::StartsWith("the GPU has no room for ZeRO stage 3's gathered parameters"));
  std::filesystem::remove_all(dir);
}

// Over several data ranks, stage 2 maps backward's gradient pages as it
// writes them: a GPU with no room for them stops every rank at the first
// with a message (they all fail before any collective).
TEST_CASE("ZeRO stage 2 on GPUs with no room for backward's gradients says so") {
  comm::Communicator& world = comm::testing::world_data();
  if (world.size() == 1) return;  // one data rank keeps whole gradients
  const std::string dir = testing::shared_token_files(world);
  spec::JobSpec spec = testing::gpu_path_job(dir);
  spec.training.zero.stage = 2;
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 1;
  spec.training.batch.train_batch_size = 2 * world.size();
  SparseLimitedBackend device(0);
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  TrainerOptions options;
  options.data_comm = &world;
  CHECK_THROWS_WITH(train(spec, data, device, options),
                    Catch::StartsWith("the GPU has no room for backward's gradients"));
  REQUIRE_OK(comm::testing::world_barrier());
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("a GPU-path run resumed from its checkpoint continues bit for bit") {
  comm::Communicator& world = comm::testing::world_data();
  const std::string dir = testing::shared_token_files(world);
  spec::JobSpec spec = testing::gpu_path_job(dir);
  spec.training.eval_interval = 0;
  spec.checkpoint.interval = 3;
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 2;
  spec.training.batch.train_batch_size = 4 * world.size();
  spec.training.zero.param_persistence_threshold = 1000;  // stage 3 gathers the blocks
  auto host = kernels::make_cpu_backend(1);
  auto guarded = kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
  const Layout data_parallel{1, world.size(), 1};
  // The optimizer's states in host memory, and every state on the device
  // (read back for the checkpoint, written there again to resume), in fp32
  // the weights being the masters; with two data ranks the optimizer of a
  // partition, or at stage 0 of the whole model, of which each rank's
  // checkpoint takes its partition; at stage 3 the weights are gathered
  // from the partitions again after the resume. Partial offload: the
  // checkpoint and the resume cross the split between the host's share
  // (its own fp32 masters, in fp32 training too) and the GPU's.
  struct Case {
    spec::OffloadDevice offload;
    int stage;
    bool bf16;
    double ratio = 1;
  };
  for (const Case& c :
       {Case{spec::OffloadDevice::kCpu, 2, true}, Case{spec::OffloadDevice::kNone, 2, true},
        Case{spec::OffloadDevice::kNone, 0, false}, Case{spec::OffloadDevice::kNone, 3, true},
        Case{spec::OffloadDevice::kCpu, 3, false}, Case{spec::OffloadDevice::kCpu, 2, false, 0.5},
        Case{spec::OffloadDevice::kCpu, 3, true, 0.4}}) {
    INFO("offload " << static_cast<int>(c.offload) << " (ratio " << c.ratio << "), ZeRO stage "
                    << c.stage << (c.bf16 ? ", bf16" : ", fp32"));
    spec.training.zero.offload_optimizer.device = c.offload;
    spec.training.zero.offload_optimizer.ratio = c.ratio;
    spec.training.zero.stage = c.stage;
    spec.training.bf16 = c.bf16;
    const std::string run = dir + "/" + std::to_string(c.stage) + "-" +
                            std::to_string(static_cast<int>(c.offload)) + "-" +
                            std::to_string(c.ratio);
    const OffloadRun whole =
        train_offloaded(*guarded, spec, data_parallel, host.get(), false, run + "/whole");
    REQUIRE_OK(comm::testing::world_barrier());  // every shard is written
    const OffloadRun resumed =
        train_offloaded(*guarded, spec, data_parallel, host.get(), false, run + "/resumed",
                        testing::resume_point(run + "/whole", 3, spec.model, 4 * world.size()));
    REQUIRE(whole.reports.size() == 6);
    REQUIRE(resumed.reports.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      INFO("step " << resumed.reports[i].step);
      CHECK(resumed.reports[i].step == whole.reports[3 + i].step);
      CHECK(resumed.reports[i].loss == whole.reports[3 + i].loss);
      CHECK(resumed.reports[i].grad_norm == whole.reports[3 + i].grad_norm);
    }
    CHECK(resumed.params == whole.params);
  }
  REQUIRE_OK(comm::testing::world_barrier());
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
