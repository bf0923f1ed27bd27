// Training steps with ZeRO-Infinity's offloads beside the same steps
// without, measured in the same run: GPT-2 124M's shape (T 64, one sequence
// a step) on one rank at ZeRO stage 3, with the parameters, the optimizer's
// moments, or both in swap files in a folder (offload_param and
// offload_optimizer device nvme), and the model-state bytes each leaves in
// memory.
//
//   bazel run //bench:offload_step_bench -- --dir /path/on/nvme [--steps 5] [--bf16]
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "bench/demo_job.h"
#include "core/spec/job_spec.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_setup.h"
#include "topology/machine_topology.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/comm/mpi_runtime.h"
#include "worker/comm/process_groups.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace {

namespace comm = dslaunch::worker::comm;
namespace engine = dslaunch::worker::engine;
namespace spec = dslaunch::spec;
using dslaunch::bench::fail;

struct Offload {
  const char* name;
  bool parameters;
  bool optimizer;
};

}  // namespace

int main(int argc, char** argv) {
  dslaunch::kernels::ensure_fast_blas(argv);
  CLI::App app{"Training steps with offload_param / offload_optimizer nvme beside none"};
  std::string dir = "/tmp";
  int steps = 5;
  int threads = 2;
  bool bf16 = false;
  app.add_option("--dir", dir, "Folder for the swap files (on the NVMe drive)");
  app.add_option("--steps", steps, "Timed steps per configuration (median reported), after 2");
  app.add_option("--threads", threads, "Compute threads");
  app.add_flag("--bf16", bf16, "bf16 mixed precision (the masters stay in memory)");
  CLI11_PARSE(app, argc, argv);
  if (const dslaunch::core::Status started = comm::mpi_init(); !started.ok()) {
    fail("offload_step_bench", started.message());
  }
  auto created = comm::create_mpi_process_groups({1, 1, 1}, comm::CommOptions{});
  if (!created.ok()) fail("offload_step_bench", created.status().message());
  std::unique_ptr<comm::ProcessGroups> groups = std::move(created.value());
  dslaunch::kernels::set_compute_threads(threads);
  auto backend = dslaunch::kernels::make_cpu_backend(threads);

  spec::JobSpec job = dslaunch::bench::demo_training_job();
  job.model = spec::ModelSpec{};  // GPT-2 124M
  job.model.seq_length = 64;
  job.training.steps = steps + 2;
  job.training.batch.micro_batch_per_gpu = 1;
  job.training.batch.gradient_accumulation_steps = 1;
  job.training.bf16 = bf16;
  job.training.zero.stage = 3;
  job.training.zero.param_persistence_threshold = 0;
  job.training.zero.sub_group_size = 10'000'000;
  const std::string corpus_dir =
      (std::filesystem::temp_directory_path() / "dslaunch-offload-step-bench").string();
  const dslaunch::worker::data::TrainingData corpus =
      dslaunch::worker::data::open_training_data(job.data, job.model.seq_length, corpus_dir);
  if (!corpus.error.empty()) fail("offload_step_bench", corpus.error);

  const dslaunch::topology::MachineTopology machine = dslaunch::topology::probe_machine_topology();
  std::cout << fmt::format(
      "{} ({} threads); GPT-2 124M, T {}, 1 sequence a step, {}, ZeRO 3 on one rank; swap files "
      "in {}; median of {} steps after 2\n\n",
      machine.cpu_model.empty() ? "an unnamed CPU" : machine.cpu_model, threads,
      job.model.seq_length, bf16 ? "bf16" : "fp32", dir, steps);
  std::cout << fmt::format("{:<34} {:>10} {:>9} {:>16} {:>16}\n", "offload", "step ms", "vs none",
                           "parameters MB", "optimizer MB");
  double none_ms = 0;
  for (const Offload& offload :
       {Offload{"none", false, false}, Offload{"offload_optimizer nvme", false, true},
        Offload{"offload_param nvme", true, false}, Offload{"both", true, true}}) {
    spec::JobSpec run = job;
    if (offload.parameters) {
      run.training.zero.offload_param.device = spec::OffloadDevice::kNvme;
      run.training.zero.offload_param.nvme_path = dir;
    }
    if (offload.optimizer) {
      run.training.zero.offload_optimizer.device = spec::OffloadDevice::kNvme;
      run.training.zero.offload_optimizer.nvme_path = dir;
    }
    std::vector<double> seconds;
    engine::MemoryReport memory;
    engine::TrainerOptions options;
    options.data_comm = &groups->data();
    options.on_memory = [&memory](const engine::MemoryReport& report) { memory = report; };
    options.on_step = [&seconds](const engine::StepReport& report) {
      if (report.step > 2) seconds.push_back(report.step_seconds);
    };
    const engine::TrainResult trained = engine::train(run, corpus, *backend, options);
    if (!trained.error.empty()) fail("offload_step_bench", trained.error);
    std::sort(seconds.begin(), seconds.end());
    const double ms = seconds[seconds.size() / 2] * 1e3;
    if (!offload.parameters && !offload.optimizer) none_ms = ms;
    std::cout << fmt::format("{:<34} {:>10.1f} {:>8.2f}x {:>16.1f} {:>16.1f}\n", offload.name, ms,
                             ms / none_ms, memory.parameters / 1e6, memory.optimizer_states / 1e6);
  }
  groups.reset();
  comm::mpi_finalize();
  return 0;
}
