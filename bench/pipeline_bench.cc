// Model parallelism's cost on the demo model (deepened to 8 blocks, so that 4
// stages can interleave 2 chunks each): step time with the model split over
// a tensor-parallel group (Megatron's) or into pipeline stages (1F1B, and
// Megatron's interleaved schedule with v virtual stages per rank), beside
// data parallelism on the same ranks with the same global batch; the share
// of the step the tensor group's all-reduces take, and the pipeline's
// measured bubble (the stages' mean time waiting for their neighbours, as a
// share of the step) beside the ideal (p-1)/(v*m+p-1) for p stages and m
// micro-batches (v = 1: 1F1B's). Each row also gives the activation bytes a rank holds,
// measured by the engine, and the reference is run again with activation
// checkpointing (every block recomputed) to show what that saves.
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

constexpr int kGlobalBatch = 16;
constexpr int kMicroBatch = 2;

// The demo job, 8 blocks deep, with a global batch of 16 sequences in
// micro-batches of 2.
spec::JobSpec bench_job(int data_size) {
  spec::JobSpec spec = bench::demo_training_job();
  spec.model.num_layers = 8;
  spec.training.steps = 10;
  spec.training.batch.train_batch_size = kGlobalBatch;
  spec.training.batch.micro_batch_per_gpu = kMicroBatch;
  spec.training.batch.gradient_accumulation_steps = kGlobalBatch / (kMicroBatch * data_size);
  return spec;
}

struct Layout {
  int pipeline, data, tensor;
  int virtual_stages = 1;
  bool checkpoint_activations = false;
};

struct Measured {
  double step_seconds = 0;         // median over the steps after the first two
  double tensor_comm_seconds = 0;  // of that step's kind, the slowest rank's median
  double stage_wait_seconds = 0;   // the stages' mean wait, median over the steps
  double activation_bytes = 0;     // the largest rank's
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

Measured run_layout(const comm::ProcessGroups& groups, const Layout& layout,
                    const data::TrainingData& corpus, kernels::Backend& backend) {
  std::vector<double> steps, comm_seconds, waits;
  double activation_bytes = 0;
  engine::TrainerOptions options;
  options.data_comm = &groups.data();
  options.tensor_comm = &groups.tensor();
  options.pipeline_comm = &groups.pipeline();
  options.on_memory = [&](const engine::MemoryReport& memory) {
    activation_bytes = static_cast<double>(memory.activations);
  };
  options.on_step = [&](const engine::StepReport& report) {
    if (report.step <= 2) return;
    steps.push_back(report.step_seconds);
    comm_seconds.push_back(report.tensor_comm_seconds);
    double wait = 0;
    for (const double stage : report.stage_wait_seconds) wait += stage;
    waits.push_back(report.stage_wait_seconds.empty()
                        ? 0
                        : wait / static_cast<double>(report.stage_wait_seconds.size()));
  };
  spec::JobSpec spec = bench_job(groups.data().size());
  spec.parallelism.pipeline = groups.pipeline().size();
  spec.parallelism.tensor = groups.tensor().size();
  spec.parallelism.virtual_stages = layout.virtual_stages;
  spec.training.activation_checkpointing.enabled = layout.checkpoint_activations;
  const engine::TrainResult trained = engine::train(spec, corpus, backend, options);
  if (!trained.error.empty()) fail(trained.error);
  double most[4] = {median(steps), median(comm_seconds), median(waits), activation_bytes};
  const core::Status reduced =
      groups.world().all_reduce(comm::buffer_of(most, 4), comm::ReduceOp::kMax)->wait();
  if (!reduced.ok()) fail(reduced.message());
  return {most[0], most[1], most[2], most[3]};
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

  // Layouts of the world: data parallelism first, the reference; then each
  // tensor size that splits the 4 heads, and each pipeline of up to 4
  // stages, 1F1B and interleaved with 2 and 4 virtual stages (as many as
  // the 8 blocks allow).
  std::vector<Layout> layouts = {{1, size, 1}, {1, size, 1, 1, true}};
  for (int tensor = 2; tensor <= size && tensor <= 4; tensor *= 2) {
    if (size % tensor == 0) layouts.push_back({1, size / tensor, tensor});
  }
  for (int pipeline = 2; pipeline <= size && pipeline <= 4; pipeline *= 2) {
    if (size % pipeline != 0) continue;
    for (int virtual_stages = 1; pipeline * virtual_stages <= 8; virtual_stages *= 2) {
      layouts.push_back({pipeline, size / pipeline, 1, virtual_stages});
    }
  }
  std::vector<std::unique_ptr<comm::ProcessGroups>> groups;
  for (const Layout& layout : layouts) {
    auto created = comm::create_mpi_process_groups({layout.pipeline, layout.data, layout.tensor},
                                                   comm::CommOptions{});
    if (!created.ok()) fail(created.status().message());
    groups.push_back(std::move(created.value()));
  }
  const bool reporter = groups.front()->rank() == 0;
  if (reporter) {
    const topology::MachineTopology machine = topology::probe_machine_topology();
    std::cout << fmt::format(
        "{} ranks, 1 thread each, on {} (OpenBLAS {} kernels); demo model with 8 blocks, global "
        "batch {} x 256 tokens in micro-batches of {}\n\n",
        size, machine.cpu_model.empty() ? "an unnamed CPU" : machine.cpu_model,
        kernels::query_blas_info().core_name, kGlobalBatch, kMicroBatch);
    std::cout << fmt::format(
        "{:>8} {:>7} {:>5} {:>7} {:>10} {:>9} {:>13} {:>15} {:>11} {:>8} {:>8} {:>15}\n",
        "pipeline", "virtual", "data", "tensor", "recompute", "step ms", "vs data only",
        "tensor comm ms", "comm share", "bubble", "ideal", "activations MB");
  }
  double reference = 0;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const Measured m = run_layout(*groups[i], layouts[i], corpus, *backend);
    if (i == 0) reference = m.step_seconds;
    if (!reporter) continue;
    const Layout& layout = layouts[i];
    const double micro_batches = static_cast<double>(kGlobalBatch) / (kMicroBatch * layout.data);
    const double ideal = (layout.pipeline - 1) /
                         (layout.virtual_stages * micro_batches + layout.pipeline - 1);
    std::cout << fmt::format(
        "{:>8} {:>7} {:>5} {:>7} {:>10} {:>9.1f} {:>12.2f}x {:>15.1f} {:>10.1f}% {:>7.1f}% "
        "{:>7.1f}% {:>15.1f}\n",
        layout.pipeline, layout.virtual_stages, layout.data, layout.tensor,
        layout.checkpoint_activations ? "yes" : "no",
        m.step_seconds * 1e3, m.step_seconds / reference, m.tensor_comm_seconds * 1e3,
        100 * m.tensor_comm_seconds / m.step_seconds,
        100 * m.stage_wait_seconds / m.step_seconds, 100 * ideal, m.activation_bytes / 1e6);
  }
  if (reporter) {
    std::cout << "\nTensor parallelism all-reduces every layer's activations (4 per block and "
                 "micro-batch, forward and backward), and a pipeline idles in its bubble, where "
                 "data parallelism reduces the gradients once per step: both pay off when the "
                 "model does not fit one device, not on a CPU box's cores. The measured bubble "
                 "includes the transfers between stages and, oversubscribed, the waits for a "
                 "descheduled neighbour. The interleaved schedule shrinks the bubble by sending "
                 "each micro-batch round the stages once per chunk, and keeps more micro-batches' "
                 "activations in flight.\n";
  }
  groups.clear();
  comm::mpi_finalize();
  return 0;
}
