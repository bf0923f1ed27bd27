#include "worker/selftest_command.h"

#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/make_backend.h"
#include "kernels/simt/emulated_backend.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/comm/mpi_runtime.h"
#include "worker/comm/nccl_communicator.h"
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

core::StatusOr<std::unique_ptr<kernels::Backend>> device_backend(const std::string& device,
                                                                 int threads) {
  if (device == "cuda") return kernels::make_backend(kernels::DeviceKind::kCuda, threads);
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
                             comm::Communicator& solo, int steps) {
  std::vector<Row> rows;
  for (const selftest::EngineCheck& check : selftest::check_engine(device, cpu, solo, steps)) {
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
                           comm::Communicator& solo) {
  if (!comm::nccl_built()) {
    return {{kNcclRow, "-", 0, 0, "skipped: this build has no NCCL communicator (--config=cuda)"}};
  }
  if (options.device != "cuda") {
    return {{kNcclRow, "-", 0, 0, "skipped: NCCL runs on GPUs (--device cuda)"}};
  }
  std::vector<Row> rows;
  for (const selftest::NcclCheck& check : selftest::check_nccl(device, solo, options.seed)) {
    rows.push_back(
        {fmt::format("NCCL {} against MPI", check.collective), "fp32", check.error, check.tolerance,
         check.failure.empty() ? (check.passed() ? "pass" : "FAIL") : "FAIL: " + check.failure});
  }
  return rows;
}

// What needs MPI: the engine's run on the device and NCCL against MPI, in
// a group of this process alone (MPI started as a singleton, without
// mpirun).
std::vector<Row> mpi_rows(kernels::Backend& device, kernels::Backend& cpu,
                          const SelftestOptions& options) {
  const std::string engine = fmt::format("engine, {} steps", options.steps);
  if (core::Status started = comm::mpi_init(); !started.ok()) {
    const std::string skipped = "skipped: MPI did not start: " + started.message();
    return {{engine, "-", 0, 0, skipped}, {kNcclRow, "-", 0, 0, skipped}};
  }
  std::vector<Row> rows;
  {
    auto groups = comm::create_mpi_process_groups({1, 1, 1}, comm::CommOptions{});
    if (!groups.ok()) {
      const std::string skipped = "skipped: " + groups.status().message();
      rows = {{engine, "-", 0, 0, skipped}, {kNcclRow, "-", 0, 0, skipped}};
    } else {
      rows = engine_rows(device, cpu, (*groups)->data(), options.steps);
      for (Row& row : nccl_rows(device, options, (*groups)->world())) rows.push_back(row);
    }
  }
  comm::mpi_finalize();
  return rows;
}

void print_table(const std::string& device_name, const std::vector<Row>& rows) {
  std::cout << fmt::format(
      "{} against the CPU backend (errors: largest difference over the "
      "largest reference value)\n\n",
      device_name);
  std::cout << fmt::format("{:<42} {:<14} {:>10} {:>10}  {}\n", "check", "precision", "error",
                           "tolerance", "result");
  for (const Row& row : rows) {
    const bool skipped = row.result.rfind("skipped", 0) == 0;
    std::cout << fmt::format("{:<42} {:<14} {:>10} {:>10}  {}\n", row.check, row.precision,
                             skipped ? "-" : fmt::format("{:.2e}", row.error),
                             skipped ? "-" : fmt::format("{:.0e}", row.tolerance), row.result);
  }
}

}  // namespace

int run_selftest_command(const SelftestOptions& options) {
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  auto device = device_backend(options.device, threads);
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
  for (Row& row : mpi_rows(**device, *reference, options)) rows.push_back(row);

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
                                {"checks", checks}}
                     .dump(2)
              << "\n";
  } else {
    print_table((*device)->name(), rows);
    std::cout << fmt::format("\n{} passed, {} failed\n", passed, failed);
  }
  return failed == 0 ? 0 : kFailed;
}

}  // namespace dslaunch::worker
