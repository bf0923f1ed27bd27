#include "worker/selftest_command.h"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "kernels/make_backend.h"
#include "kernels/simt/emulated_backend.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/comm/mpi_runtime.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/rank_environment.h"
#include "worker/selftest/engine_check.h"
#include "worker/selftest/kernel_checks.h"
#include "worker/selftest/nccl_check.h"
#include "worker/selftest/training_check.h"

namespace dslaunch::worker {
namespace {

constexpr int kFailed = 1;
constexpr int kCannotRun = 2;

// One line of the report.
struct Row {
  std::string check;
  std::string precision;
  double error = 0;
  double tolerance = 0;
  std::string result;  // "pass", "FAIL", or why it was skipped
};

// `gpu`: the GPU a CUDA device is (the rank's local index under mpirun).
core::StatusOr<std::unique_ptr<kernels::Backend>> device_backend(const std::string& device,
                                                                 int threads, int gpu) {
  if (device == "cuda") return kernels::make_backend(kernels::DeviceKind::kCuda, threads, gpu);
  // Guarded: the host cannot touch the emulated device's memory between its
  // calls, as on a GPU.
  if (device == "emulated") {
    return kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
  }
  return core::Status(core::StatusCode::kInvalidArgument,
                      "--device must be cuda or emulated, not \"" + device + "\"");
}

std::vector<Row> training_rows(kernels::Backend& device, kernels::Backend& reference, int steps) {
  std::vector<Row> rows;
  for (const selftest::TrainingCheck& check : selftest::check_training(device, reference, steps)) {
    rows.push_back(
        {fmt::format("training, {} steps", check.steps), check.precision, check.error,
         check.tolerance,
         fmt::format("{} (final loss {:.4f}, CPU {:.4f})", check.passed() ? "pass" : "FAIL",
                     check.device_final_loss, check.reference_final_loss)});
  }
  return rows;
}

std::vector<Row> engine_rows(kernels::Backend& device, kernels::Backend& cpu,
                             const SelftestOptions& options, comm::Communicator& data) {
  std::vector<Row> rows;
  // On GPUs several data ranks average through NCCL, as training does.
  const bool nccl = comm::nccl_built() && options.device == "cuda";
  for (const selftest::EngineCheck& check :
       selftest::check_engine(device, cpu, data, options.steps, nccl)) {
    const std::string name = fmt::format("engine, {}, {} steps", check.optimizer, check.steps);
    if (!check.failure.empty()) {
      rows.push_back({name, check.precision, 0, check.tolerance, "FAIL: " + check.failure});
      continue;
    }
    rows.push_back({name + ", losses", check.precision, check.error, check.tolerance,
                    fmt::format("{} (evaluation loss {:.4f}, CPU {:.4f})",
                                check.losses_passed() ? "pass" : "FAIL", check.device_eval_loss,
                                check.reference_eval_loss)});
    rows.push_back({name + ", weights", check.precision, check.parameter_error,
                    check.parameter_tolerance, check.parameters_passed() ? "pass" : "FAIL"});
  }
  return rows;
}

constexpr const char* kNcclRow = "NCCL collectives against MPI";

std::vector<Row> nccl_rows(kernels::Backend& device, const SelftestOptions& options,
                           comm::Communicator& world) {
  if (!comm::nccl_built()) {
    return {{kNcclRow, "-", 0, 0, "skipped: this build has no NCCL communicator (--config=cuda)"}};
  }
  if (options.device != "cuda") {
    return {{kNcclRow, "-", 0, 0, "skipped: NCCL runs on GPUs (--device cuda)"}};
  }
  std::vector<Row> rows;
  for (const selftest::NcclCheck& check : selftest::check_nccl(device, world, options.seed)) {
    rows.push_back(
        {fmt::format("NCCL {} against MPI", check.collective), "fp32", check.error, check.tolerance,
         check.failure.empty() ? (check.passed() ? "pass" : "FAIL") : "FAIL: " + check.failure});
  }
  return rows;
}

int failed_in(const std::vector<Row>& rows) {
  int failed = 0;
  for (const Row& row : rows) failed += row.result.rfind("FAIL", 0) == 0;
  return failed;
}

// What needs MPI: the engine's run on the device and NCCL against MPI, over
// every rank mpirun started (one data group; each rank on its own GPU), or
// this process alone (MPI started as a singleton). Appends them to `rows`
// and returns every rank's count of failed rows, by rank: what each found
// on its own device is its own.
std::vector<int64_t> add_mpi_rows(kernels::Backend& device, kernels::Backend& cpu,
                                  const SelftestOptions& options, int world_size,
                                  std::vector<Row>& rows) {
  const std::string engine = fmt::format("engine, {} steps", options.steps);
  if (core::Status started = comm::mpi_init(); !started.ok()) {
    const std::string skipped = "skipped: MPI did not start: " + started.message();
    rows.push_back({engine, "-", 0, 0, skipped});
    rows.push_back({kNcclRow, "-", 0, 0, skipped});
    return {failed_in(rows)};
  }
  std::vector<int64_t> failed_by_rank = {0};
  {
    // A rank that stops answering fails the others' checks instead of
    // hanging them.
    comm::CommOptions comm_options;
    comm_options.wait.timeout = std::chrono::minutes(5);
    auto groups = comm::create_mpi_process_groups({1, world_size, 1}, comm_options);
    if (!groups.ok()) {
      const std::string skipped = "skipped: " + groups.status().message();
      rows.push_back({engine, "-", 0, 0, skipped});
      rows.push_back({kNcclRow, "-", 0, 0, skipped});
      failed_by_rank = {failed_in(rows)};
    } else {
      comm::Communicator& world = (*groups)->world();
      for (Row& row : engine_rows(device, cpu, options, (*groups)->data())) rows.push_back(row);
      for (Row& row : nccl_rows(device, options, world)) rows.push_back(row);
      int64_t mine = failed_in(rows);
      failed_by_rank.assign(world.size(), 0);
      const core::Status gathered =
          world
              .all_gather(comm::buffer_of(&mine, 1),
                          comm::buffer_of(failed_by_rank.data(), world.size()),
                          comm::Blocks::consecutive(std::vector<int64_t>(world.size(), 1)))
              ->wait();
      if (!gathered.ok()) {
        rows.push_back({"failed checks by rank", "-", 0, 0, "FAIL: " + gathered.message()});
        failed_by_rank.assign(world.size(), 0);
        failed_by_rank[world.rank()] = failed_in(rows);
      }
    }
  }
  comm::mpi_finalize();
  return failed_by_rank;
}

void print_table(const std::string& device_name, const std::vector<Row>& rows) {
  std::cout << fmt::format(
      "{} against the CPU backend (errors: largest difference over the "
      "largest reference value)\n\n",
      device_name);
  std::cout << fmt::format("{:<44} {:<14} {:>10} {:>10}  {}\n", "check", "precision", "error",
                           "tolerance", "result");
  for (const Row& row : rows) {
    const bool skipped = row.result.rfind("skipped", 0) == 0;
    std::cout << fmt::format("{:<44} {:<14} {:>10} {:>10}  {}\n", row.check, row.precision,
                             skipped ? "-" : fmt::format("{:.2e}", row.error),
                             skipped ? "-" : fmt::format("{:.0e}", row.tolerance), row.result);
  }
}

}  // namespace

int run_selftest_command(const SelftestOptions& options) {
  // Under mpirun (or srun, torchrun) every rank checks its own GPU, the
  // engine and NCCL checks run over all of them, and rank 0 prints.
  const auto getenv = [](const char* name) { return std::getenv(name); };
  std::string not_launched;
  const RankEnvironment where =
      read_rank_environment(getenv, not_launched).value_or(RankEnvironment{});
  const int threads =
      options.threads > 0
          ? options.threads
          : compute_threads(getenv, 0, static_cast<int>(std::thread::hardware_concurrency()),
                            where.local_world_size);
  auto device = device_backend(options.device, threads, where.local_rank);
  if (!device.ok()) {
    std::cerr << "dslaunch selftest: --device " << options.device << ": "
              << device.status().message()
              << "\n(--device emulated runs the CUDA kernels' code on this CPU instead)\n";
    return kCannotRun;
  }
  auto reference = kernels::make_cpu_backend(threads);

  std::vector<Row> rows;
  for (const selftest::KernelCheck& check :
       selftest::check_kernels(**device, *reference, options.seed)) {
    rows.push_back({check.kernel, check.precision, check.error, check.tolerance,
                    check.passed() ? "pass" : "FAIL"});
  }
  for (Row& row : training_rows(**device, *reference, options.steps)) rows.push_back(row);
  const std::vector<int64_t> failed_by_rank =
      add_mpi_rows(**device, *reference, options, where.world_size, rows);

  int64_t failed_anywhere = 0;
  for (const int64_t failed : failed_by_rank) failed_anywhere += failed;
  const int exit_code = failed_anywhere == 0 ? 0 : kFailed;
  if (where.rank != 0) return exit_code;
  int failed = 0, passed = 0;
  for (const Row& row : rows) {
    if (row.result.rfind("pass", 0) == 0) ++passed;
    if (row.result.rfind("FAIL", 0) == 0) ++failed;
  }
  if (options.json) {
    nlohmann::json checks = nlohmann::json::array();
    for (const Row& row : rows) {
      checks.push_back({{"check", row.check},
                        {"precision", row.precision},
                        {"error", row.error},
                        {"tolerance", row.tolerance},
                        {"result", row.result}});
    }
    std::cout << nlohmann::json{{"device", (*device)->name()},
                                {"passed", passed},
                                {"failed", failed},
                                {"ranks", failed_by_rank.size()},
                                {"failed_by_rank", failed_by_rank},
                                {"checks", checks}}
                     .dump(2)
              << "\n";
  } else {
    print_table((*device)->name(), rows);
    std::cout << fmt::format("\n{} passed, {} failed\n", passed, failed);
    if (failed_by_rank.size() > 1) {
      std::cout << fmt::format(
          "{} ranks, each checking its own device (this table is rank 0's); failed checks by "
          "rank: {}\n",
          failed_by_rank.size(), fmt::join(failed_by_rank, ", "));
    }
  }
  return exit_code;
}

}  // namespace dslaunch::worker
