// The GPU path over combined process grids, four ranks: data with tensor
// parallelism, data with pipeline parallelism, and an interleaved pipeline
// with tensor parallelism, each on guarded device memory against host
// memory (tests/worker/engine/emulated_training.h), so that no layout
// reaches a buffer the host cannot touch and every one gives the same bits.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "tests/worker/engine/emulated_training.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"

namespace dslaunch::worker::engine {
namespace {

using testing::GpuPathCase;

TEST_CASE("the GPU path trains combined layouts of four ranks as in host memory") {
  comm::Communicator& world = comm::testing::world_data();
  REQUIRE(world.size() == 4);
  const std::string dir = testing::shared_token_files(world);
  const spec::JobSpec spec = testing::gpu_path_job(dir);
  const std::string nvme = dir + "/nvme-" + std::to_string(world.rank());
  std::filesystem::create_directories(nvme);
  // {pipeline, data, tensor}: two data ranks of two tensor ranks, every
  // state on the GPU (ZeRO 2); two data ranks of two pipeline stages,
  // offloaded and with every state on the GPU (the tied embedding summed
  // between the stages after the data group's mean); and two stages of two
  // model chunks each over two tensor ranks, one data rank, every state on
  // the GPU, in fp16 with one rank overflowing.
  for (const GpuPathCase& c :
       {GpuPathCase{{1, 2, 2}, 2, spec::OffloadDevice::kNone, core::DType::kBF16},
        GpuPathCase{{2, 2, 1}, 1, spec::OffloadDevice::kCpu, core::DType::kF32},
        GpuPathCase{{2, 2, 1}, 1, spec::OffloadDevice::kNone, core::DType::kBF16},
        GpuPathCase{{2, 1, 2}, 1, spec::OffloadDevice::kNone, core::DType::kF16, 2}}) {
    testing::check_gpu_path_matches_host_memory(spec, c, nvme);
  }
  REQUIRE_OK(comm::testing::world_barrier());
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
