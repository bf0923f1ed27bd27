// Training steps with ZeRO-Infinity's offloads beside the same steps
// without, measured in the same run: GPT-2 124M's shape (T 64, one sequence
// a step per rank) at ZeRO stage 3, data-parallel over the ranks it is
// started on, with the parameters, the optimizer's moments, or both in swap
// files in a folder (offload_param and offload_optimizer device nvme), the
// model-state bytes each leaves in memory, and the largest peak resident
// memory of a rank over its steps (the kernel's VmHWM, reset before each
// configuration) beside a quarter of a rank's fp32 model-state bytes ZeRO's
// formula gives (16 bytes a parameter over the ranks). The last
// configuration is both offloads with the settings a memory-bound ZeRO-3
// run takes (activation checkpointing, small buckets and swap buffers, and
// a live-parameter limit below one block, so nothing is gathered ahead).
// Beside the peak: what the rank accounts for (model states in memory,
// activations, ZeRO's workspaces and buffers, as MemoryReport measures
// them) and what `dslaunch plan` estimates for the same (launcher/plan);
// the peak's remainder is the process itself.
//
//   bazel run //bench:offload_step_bench -- --dir /path/on/nvme [--steps 5] [--bf16]
//       [--sub-group-size 2000000]
//   tools/mpirun_local.sh 2 bazel-bin/bench/offload_step_bench --threads 1 --dir ...
#include <malloc.h>
#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "bench/demo_job.h"
#include "core/layout/model_config.h"
#include "core/layout/parameter_table.h"
#include "core/spec/job_spec.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_info.h"
#include "kernels/cpu/blas_setup.h"
#include "launcher/plan/memory_estimate.h"
#include "launcher/plan/workspace_estimate.h"
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
  bool memory_bound;  // the memory-bound settings (see the file comment)
};

// What the rank holds by kind, as measured (the ZeRO paper's accounting
// and the workspaces beside it).
int64_t accounted_bytes(const engine::MemoryReport& m) {
  return m.parameters + m.gradients + m.optimizer_states + m.activations + m.communication_buffers +
         m.gradient_workspace_peak + m.parameter_workspace_peak + m.weight_copy;
}

// The same as `dslaunch plan` estimates it for the one stage's ranks.
int64_t planned_bytes(const spec::JobSpec& job, int ranks) {
  namespace plan = dslaunch::plan;
  const int64_t psi = plan::parameters_per_rank(job.model, job.parallelism, 0);
  return plan::model_state_bytes(psi, job.training, ranks, spec::Device::kCpu).device_total() +
         plan::activation_bytes_per_rank(job.model, job.parallelism, job.training,
                                         job.training.batch.micro_batch_per_gpu.value_or(1),
                                         job.training.batch.gradient_accumulation_steps.value_or(1),
                                         0, spec::Device::kCpu) +
         plan::workspace_bytes_per_rank(job.model, job.parallelism, job.training, ranks,
                                        job.training.batch.micro_batch_per_gpu.value_or(1), 0)
             .total();
}

// The kernel's peak resident size of this process since the last reset
// (VmHWM), in bytes; 0 where unreadable. getrusage's ru_maxrss cannot be
// reset: it keeps the peak of threads that have exited.
int64_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

// Sets the peak to the present resident size (Linux 4.0 and later), after
// giving back the heap's free pages, so that what an earlier configuration
// freed does not count towards the next one's peak.
void reset_peak_resident() {
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
}

}  // namespace

int main(int argc, char** argv) {
  dslaunch::kernels::ensure_fast_blas(argv);
  CLI::App app{"Training steps with offload_param / offload_optimizer nvme beside none"};
  std::string dir = "/tmp";
  int steps = 5;
  int threads = 2;
  bool bf16 = false;
  int64_t sub_group_size = 2'000'000;
  app.add_option("--dir", dir, "Folder for the swap files (on the NVMe drive)");
  app.add_option("--sub-group-size", sub_group_size,
                 "zero_optimization.sub_group_size: elements a swap buffer holds (4 buffers)");
  app.add_option("--steps", steps, "Timed steps per configuration (median reported), after 2")
      ->check(CLI::Range(1, 100000));
  app.add_option("--threads", threads, "Compute threads");
  app.add_flag("--bf16", bf16,
               "bf16 mixed precision (with both offloads the masters go to NVMe too)");
  CLI11_PARSE(app, argc, argv);
  if (const dslaunch::core::Status started = comm::mpi_init(); !started.ok()) {
    fail("offload_step_bench", started.message());
  }
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  auto created = comm::create_mpi_process_groups({1, ranks, 1}, comm::CommOptions{});
  if (!created.ok()) fail("offload_step_bench", created.status().message());
  std::unique_ptr<comm::ProcessGroups> groups = std::move(created.value());
  dslaunch::kernels::set_compute_threads(threads);
  auto backend = dslaunch::kernels::make_cpu_backend(threads);

  comm::Communicator& data = groups->data();
  const bool printer = data.rank() == 0;
  spec::JobSpec job = dslaunch::bench::demo_training_job();
  job.model = spec::ModelSpec{};  // GPT-2 124M
  job.model.seq_length = 64;
  job.training.steps = steps + 2;
  job.training.batch.micro_batch_per_gpu = 1;
  job.training.batch.gradient_accumulation_steps = 1;
  job.training.batch.train_batch_size = ranks;
  job.training.bf16 = bf16;
  job.training.zero.stage = 3;
  job.training.zero.param_persistence_threshold = 0;
  job.training.zero.sub_group_size = sub_group_size;
  // Buckets of a few blocks' size for the first four configurations
  // (DeepSpeed's defaults, 5e8 and 5e7 elements, would hold the whole
  // gradient and seven blocks at once); the memory-bound one shrinks them.
  job.training.zero.reduce_bucket_size = 4'000'000;
  job.training.zero.prefetch_bucket_size = 8'000'000;
  const std::string corpus_dir =
      (std::filesystem::temp_directory_path() / "dslaunch-offload-step-bench").string();
  const dslaunch::worker::data::TrainingData corpus =
      dslaunch::worker::data::open_training_data(job.data, job.model.seq_length, corpus_dir);
  if (!corpus.error.empty()) fail("offload_step_bench", corpus.error);

  const dslaunch::topology::MachineTopology machine = dslaunch::topology::probe_machine_topology();
  const int64_t parameters =
      dslaunch::core::ParameterTable(dslaunch::core::model_config(job.model, 1)).total();
  const double rank_states_mb = 16.0 * static_cast<double>(parameters) / ranks / 1e6;
  if (printer) {
    std::cout << fmt::format(
        "{}, OpenBLAS {} kernels ({} threads a rank); GPT-2 124M, T {}, 1 sequence a step per "
        "rank, {}, ZeRO 3 over {} rank(s); swap files in {}; median of {} steps after 2\n\n",
        machine.cpu_model.empty() ? "an unnamed CPU" : machine.cpu_model,
        dslaunch::kernels::query_blas_info().core_name, threads, job.model.seq_length,
        bf16 ? "bf16" : "fp32", ranks, dir, steps);
    std::cout << fmt::format(
        "fp32 model states per rank (16 bytes a parameter, {} parameters, over {} rank(s)): "
        "{:.1f} MB; a quarter: {:.1f} MB\n\n",
        parameters, ranks, rank_states_mb, rank_states_mb / 4);
    std::cout << fmt::format(
        "{:<26} {:>10} {:>9} {:>13} {:>14} {:>13} {:>13} {:>14} {:>11} {:>18}\n", "offload",
        "step ms", "vs none", "optimizer ms", "parameters MB", "gradients MB", "optimizer MB",
        "accounted MB", "planned MB", "max peak RSS MB");
  }
  double none_ms = 0;
  for (const Offload& offload :
       {Offload{"none", false, false, false}, Offload{"offload_optimizer nvme", false, true, false},
        Offload{"offload_param nvme", true, false, false}, Offload{"both", true, true, false},
        Offload{"both, memory-bound", true, true, true}}) {
    spec::JobSpec run = job;
    if (offload.memory_bound) {
      run.training.activation_checkpointing.enabled = true;
      run.training.zero.reduce_bucket_size = 1'000'000;
      run.training.zero.max_live_parameters = 1'000'000;
      run.training.zero.sub_group_size = std::min<int64_t>(sub_group_size, 500'000);
    }
    if (offload.parameters) {
      run.training.zero.offload_param.device = spec::OffloadDevice::kNvme;
      run.training.zero.offload_param.nvme_path = dir;
    }
    if (offload.optimizer) {
      run.training.zero.offload_optimizer.device = spec::OffloadDevice::kNvme;
      run.training.zero.offload_optimizer.nvme_path = dir;
    }
    std::vector<double> seconds;
    std::vector<double> optimizer_seconds;
    engine::MemoryReport memory;
    engine::TrainerOptions options;
    options.data_comm = &data;
    options.on_memory = [&memory](const engine::MemoryReport& report) { memory = report; };
    // The peak over the steps, before the final parameters are gathered whole.
    int64_t peak = 0;
    const int64_t last_step = run.training.steps;
    options.on_step = [&seconds, &optimizer_seconds, &peak,
                       last_step](const engine::StepReport& report) {
      if (report.step > 2) {
        seconds.push_back(report.step_seconds);
        optimizer_seconds.push_back(report.optimizer_seconds);
      }
      if (report.step == last_step) peak = peak_resident_bytes();
    };
    reset_peak_resident();
    const engine::TrainResult trained = engine::train(run, corpus, *backend, options);
    if (!trained.error.empty()) fail("offload_step_bench", trained.error);
    std::sort(seconds.begin(), seconds.end());
    std::sort(optimizer_seconds.begin(), optimizer_seconds.end());
    const double ms = seconds[seconds.size() / 2] * 1e3;
    const double optimizer_ms = optimizer_seconds[optimizer_seconds.size() / 2] * 1e3;
    if (!offload.parameters && !offload.optimizer) none_ms = ms;
    if (const dslaunch::core::Status status =
            data.all_reduce(comm::buffer_of(&peak, 1), comm::ReduceOp::kMax)->wait();
        !status.ok()) {
      fail("offload_step_bench", status.message());
    }
    if (printer) {
      std::cout << fmt::format(
          "{:<26} {:>10.1f} {:>8.2f}x {:>13.1f} {:>14.1f} {:>13.1f} {:>13.1f} {:>14.1f} {:>11.1f} "
          "{:>18.1f}\n",
          offload.name, ms, ms / none_ms, optimizer_ms, memory.parameters / 1e6,
          memory.gradients / 1e6, memory.optimizer_states / 1e6, accounted_bytes(memory) / 1e6,
          planned_bytes(run, ranks) / 1e6, peak / 1e6);
    }
  }
  if (printer) std::cout << "\nMatrix products: " << backend->matmul_kernel() << "\n";
  groups.reset();
  comm::mpi_finalize();
  return 0;
}
