// ZeRO's memory and speed at each stage: model-state bytes per rank,
// measured by the engine, beside the ZeRO paper's formula for fp32 training
// (4Ψ parameters + 4Ψ gradients + 8Ψ Adam states, the gradients divided by
// N from stage 2 and the Adam states from stage 1), and the step time beside
// stage 0's, all in the same run. At stage 2 the last column is the peak of
// the full-size gradient workspace the backward pass writes into, measured
// with mincore: transient memory outside the model states, released bucket
// by bucket as they are reduce-scattered.
//
//   bazel build //bench:zero_bench
//   tools/mpirun_local.sh 2 bazel-bin/bench/zero_bench   (and 4)
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "bench/demo_job.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_setup.h"
#include "core/spec/job_spec.h"
#include "worker/comm/communicator.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/comm/mpi_runtime.h"
#include "worker/comm/mpi_world_probe.h"
#include "worker/comm/process_groups.h"
#include "worker/data/demo_corpus.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"
#include "core/spec/training_support.h"

namespace {

using namespace dslaunch;
namespace engine = dslaunch::worker::engine;
namespace data = dslaunch::worker::data;
namespace comm = dslaunch::worker::comm;

[[noreturn]] void fail(std::string_view message) { bench::fail("zero_bench", message); }

// The demo job's model, trained for a few steps on the demo corpus.
spec::JobSpec bench_job(int stage) {
  spec::JobSpec spec = bench::demo_training_job();
  spec.training.steps = 12;
  spec.training.batch.micro_batch_per_gpu = 4;
  spec.training.batch.gradient_accumulation_steps = 1;
  spec.training.optimizer.weight_decay = 0.1;
  spec.training.zero.stage = stage;
  spec.training.zero.reduce_bucket_size = 1'000'000;
  // Stage 3 keeps the biases and LayerNorms (at most 4C elements) whole;
  // DeepSpeed's default (1e5) would also keep this small model's 256x256
  // attention projections whole, which the formula does not count.
  spec.training.zero.param_persistence_threshold = 4 * 256 + 1;
  return spec;
}

struct StageResult {
  engine::MemoryReport memory;  // this rank's
  double median_step_seconds = 0;
};

}  // namespace

int main(int /*argc*/, char** argv) {
  kernels::ensure_fast_blas(argv);
  if (const core::Status started = comm::mpi_init(); !started.ok()) fail(started.message());
  // The world's size, as MPI sees it (collective, before any groups exist).
  const comm::WorldProbe world = comm::probe_mpi_world();
  if (!world.error.empty()) fail(world.error);
  const int size = world.self.world_size;
  // Every rank data-parallel: the world is one data group.
  auto created = comm::create_mpi_process_groups({1, size, 1}, comm::CommOptions{});
  if (!created.ok()) fail(created.status().message());
  std::unique_ptr<comm::ProcessGroups> groups = std::move(created.value());
  comm::Communicator& data_comm = groups->data();
  const int rank = data_comm.rank();

  const std::string demo_dir =
      (std::filesystem::temp_directory_path() / "dslaunch-zero-bench").string();
  const data::TrainingData corpus =
      data::open_training_data(bench_job(0).data, bench_job(0).model.seq_length, demo_dir);
  if (!corpus.error.empty()) fail(corpus.error);
  // One core per rank, as the demo runs.
  auto backend = kernels::make_cpu_backend(1);

  if (rank == 0) {
    std::cout << fmt::format(
        "{} data-parallel ranks; model-state bytes per rank (measured / formula) and median step "
        "time\n\n",
        size);
    std::cout << fmt::format(
        "{:<6} {:>14} {:>14} {:>14} {:>14} {:>14} {:>7} {:>10} {:>9} {:>16} {:>16}\n", "stage",
        "parameters", "gradients", "optimizer", "measured", "formula", "ratio", "step ms",
        "vs stage 0", "grad workspace", "param workspace");
  }
  double stage0_seconds = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    const spec::JobSpec spec = bench_job(stage);
    if (const std::string problem = spec::training_support_problem(spec); !problem.empty()) {
      if (rank == 0) std::cout << fmt::format("{:<6} skipped: {}\n", stage, problem);
      continue;
    }
    StageResult result;
    std::vector<double> step_seconds;
    engine::TrainerOptions options;
    options.data_comm = &data_comm;
    options.on_memory = [&](const engine::MemoryReport& memory) { result.memory = memory; };
    options.on_step = [&](const engine::StepReport& report) {
      if (report.step > 2) step_seconds.push_back(report.step_seconds);
    };
    const engine::TrainResult trained = engine::train(spec, corpus, *backend, options);
    if (!trained.error.empty()) fail(fmt::format("stage {}: {}", stage, trained.error));
    std::sort(step_seconds.begin(), step_seconds.end());
    result.median_step_seconds = step_seconds[step_seconds.size() / 2];
    // The largest partition is what a rank must hold.
    int64_t most[5] = {result.memory.parameters, result.memory.gradients,
                       result.memory.optimizer_states, result.memory.gradient_workspace_peak,
                       result.memory.parameter_workspace_peak};
    const core::Status reduced =
        groups->world().all_reduce(comm::buffer_of(most, 5), comm::ReduceOp::kMax)->wait();
    if (!reduced.ok()) fail(reduced.message());
    if (rank != 0) continue;
    const double psi = static_cast<double>(trained.params.size());
    const double n = size;
    const double formula = 4 * psi / (stage >= 3 ? n : 1) + 4 * psi / (stage >= 2 ? n : 1) +
                           8 * psi / (stage >= 1 ? n : 1);
    const double measured = static_cast<double>(most[0] + most[1] + most[2]);
    if (stage == 0) stage0_seconds = result.median_step_seconds;
    std::cout << fmt::format(
        "{:<6} {:>14} {:>14} {:>14} {:>14} {:>14.0f} {:>7.3f} {:>10.1f} {:>8.2f}x {:>16} {:>16}\n",
        stage, most[0], most[1], most[2], most[0] + most[1] + most[2], formula, measured / formula,
        result.median_step_seconds * 1e3, result.median_step_seconds / stage0_seconds,
        most[3] > 0 ? fmt::format("{}", most[3]) : "-",
        most[4] > 0 ? fmt::format("{}", most[4]) : "-");
  }
  if (rank == 0) {
    std::cout << "\nTargets: measured within 5% of the formula; stages 2 and 3 within 15% of "
                 "stage 0's step time at 2 ranks.\n";
  }
  // Every rank alike, before MPI ends.
  groups.reset();
  comm::mpi_finalize();
  return 0;
}
