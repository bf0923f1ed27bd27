// Model parallelism's cost on the demo model: step time with the model split
// over a tensor-parallel group (Megatron's), beside data parallelism on the
// same ranks with the same global batch, and the share of the step the
// tensor group's all-reduces take. The pipeline schedules' bubble figures
// join this bench with pipeline parallelism.
//
//   bazel build //bench:pipeline_bench
//   tools/mpirun_local.sh 2 bazel-bin/bench/pipeline_bench   (and 4)
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "bench/demo_job.h"
#include "core/spec/job_spec.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_info.h"
#include "kernels/cpu/blas_setup.h"
#include "topology/machine_topology.h"
#include "worker/comm/communicator.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/comm/mpi_runtime.h"
#include "worker/comm/mpi_world_probe.h"
#include "worker/comm/process_groups.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace {

using namespace dslaunch;
namespace engine = dslaunch::worker::engine;
namespace data = dslaunch::worker::data;
namespace comm = dslaunch::worker::comm;

[[noreturn]] void fail(std::string_view message) { bench::fail("pipeline_bench", message); }

// The demo job with a global batch of 16 sequences.
spec::JobSpec bench_job(int data_size) {
  spec::JobSpec spec = bench::demo_training_job();
  spec.training.steps = 10;
  spec.training.batch.train_batch_size = 16;
  spec.training.batch.micro_batch_per_gpu = 4;
  spec.training.batch.gradient_accumulation_steps = 16 / (4 * data_size);
  return spec;
}

struct Measured {
  double step_seconds = 0;         // median over the steps after the first two
  double tensor_comm_seconds = 0;  // of that step's kind, the slowest rank's median
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

Measured run_layout(const comm::ProcessGroups& groups, const data::TrainingData& corpus,
                    kernels::Backend& backend) {
  std::vector<double> steps, comm_seconds;
  engine::TrainerOptions options;
  options.data_comm = &groups.data();
  options.tensor_comm = &groups.tensor();
  options.on_step = [&](const engine::StepReport& report) {
    if (report.step <= 2) return;
    steps.push_back(report.step_seconds);
    comm_seconds.push_back(report.tensor_comm_seconds);
  };
  const engine::TrainResult trained =
      engine::train(bench_job(groups.data().size()), corpus, backend, options);
  if (!trained.error.empty()) fail(trained.error);
  double most[2] = {median(steps), median(comm_seconds)};
  const core::Status reduced =
      groups.world().all_reduce(comm::buffer_of(most, 2), comm::ReduceOp::kMax)->wait();
  if (!reduced.ok()) fail(reduced.message());
  return {most[0], most[1]};
}

}  // namespace

int main(int /*argc*/, char** argv) {
  kernels::ensure_fast_blas(argv);
  if (const core::Status started = comm::mpi_init(); !started.ok()) fail(started.message());
  const comm::WorldProbe world = comm::probe_mpi_world();
  if (!world.error.empty()) fail(world.error);
  const int size = world.self.world_size;
  const std::string demo_dir =
      (std::filesystem::temp_directory_path() / "dslaunch-pipeline-bench").string();
  const data::TrainingData corpus =
      data::open_training_data(bench_job(1).data, bench_job(1).model.seq_length, demo_dir);
  if (!corpus.error.empty()) fail(corpus.error);
  auto backend = kernels::make_cpu_backend(1);  // one core per rank, as the demo runs

  // (data, tensor) layouts of the world: data parallelism first, the
  // reference; then each tensor size that splits the 4 heads.
  std::vector<std::pair<int, int>> layouts;
  for (int tensor = 1; tensor <= size && tensor <= 4; tensor *= 2) {
    if (size % tensor == 0) layouts.push_back({size / tensor, tensor});
  }
  std::vector<std::unique_ptr<comm::ProcessGroups>> groups;
  for (const auto& [data_size, tensor] : layouts) {
    auto created = comm::create_mpi_process_groups({1, data_size, tensor}, comm::CommOptions{});
    if (!created.ok()) fail(created.status().message());
    groups.push_back(std::move(created.value()));
  }
  const bool reporter = groups.front()->rank() == 0;
  if (reporter) {
    const topology::MachineTopology machine = topology::probe_machine_topology();
    std::cout << fmt::format(
        "{} ranks, 1 thread each, on {} (OpenBLAS {} kernels); demo model, global batch 16 x "
        "256 tokens\n\n",
        size, machine.cpu_model.empty() ? "an unnamed CPU" : machine.cpu_model,
        kernels::query_blas_info().core_name);
    std::cout << fmt::format("{:<8} {:>7} {:>10} {:>14} {:>14} {:>12}\n", "data", "tensor",
                             "step ms", "vs data only", "tensor comm ms", "comm share");
  }
  double reference = 0;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const Measured m = run_layout(*groups[i], corpus, *backend);
    if (i == 0) reference = m.step_seconds;
    if (!reporter) continue;
    std::cout << fmt::format("{:<8} {:>7} {:>10.1f} {:>13.2f}x {:>14.1f} {:>11.1f}%\n",
                             layouts[i].first, layouts[i].second, m.step_seconds * 1e3,
                             m.step_seconds / reference, m.tensor_comm_seconds * 1e3,
                             100 * m.tensor_comm_seconds / m.step_seconds);
  }
  if (reporter) {
    std::cout << "\nTensor parallelism all-reduces every layer's activations (4 per block and "
                 "micro-batch, forward and backward) where data parallelism reduces the "
                 "gradients once per step: it pays off when the model does not fit one device, "
                 "not on a CPU box's cores.\n";
  }
  groups.clear();
  comm::mpi_finalize();
  return 0;
}
