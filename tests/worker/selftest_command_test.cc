// `dslaunch selftest` end to end: on the emulated CUDA kernels every check
// passes and the report says so; a device this build lacks is refused.
#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"

namespace dslaunch {
namespace {

using testing::run_command;
using testing::runfile;

testing::CommandResult selftest(const std::string& args) {
  return run_command(fmt::format("DSLAUNCH_WORKER='{}' {} selftest --threads 1 {} 2>&1",
                                 runfile("worker/dsworker"), runfile("launcher/dslaunch"), args));
}

TEST_CASE("selftest on the emulated CUDA kernels passes every check and reports each") {
  const auto result = selftest("--device emulated --steps 3 --json");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  const auto report = nlohmann::json::parse(result.output.substr(result.output.find('{')));
  CHECK(report["device"].get<std::string>().find("emulated") != std::string::npos);
  CHECK(report["failed"] == 0);
  CHECK(report["ranks"] == 1);
  int passed = 0, training = 0, engine = 0, skipped = 0;
  for (const auto& check : report["checks"]) {
    const std::string outcome = check["result"];
    if (outcome.rfind("pass", 0) == 0) ++passed;
    if (outcome.rfind("skipped", 0) == 0) ++skipped;
    if (check["check"] == "training, 3 steps") {
      ++training;
      CHECK(check["error"].get<double>() <= check["tolerance"].get<double>());
    }
    const std::string name = check["check"];
    if (name.rfind("engine, GPU Adam, 3 steps, ", 0) == 0 ||
        name.rfind("engine, ZeRO-Offload, 3 steps, ", 0) == 0 ||
        name.rfind("engine, GPU Adam, ZeRO 3, 3 steps, ", 0) == 0) {
      ++engine;
      CHECK(outcome.rfind("pass", 0) == 0);
    }
  }
  CHECK(passed == report["passed"]);
  CHECK(training == 2);  // fp32 and bf16
  // Losses and weights, fp32 and bf16, the optimizer on the GPU (ZeRO 2 and
  // 3) or offloaded.
  CHECK(engine == 12);
  CHECK(skipped == 1);   // NCCL, not built: listed, not counted as passed
  CHECK(passed + skipped == static_cast<int>(report["checks"].size()));
}

// Under mpirun every rank checks its device, the engine trains over both as
// one data group (averaging on the device), and rank 0 reports for all.
TEST_CASE("selftest under mpirun compares the engine over every rank and counts each rank's") {
  const auto result = run_command(fmt::format(
      "DSLAUNCH_WORKER='{}' mpirun --allow-run-as-root --oversubscribe -np 2 {} selftest "
      "--device emulated --steps 2 --threads 1 --json 2>&1",
      runfile("worker/dsworker"), runfile("launcher/dslaunch")));
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  // One report, rank 0's.
  const size_t first = result.output.find('{');
  REQUIRE(first != std::string::npos);
  CHECK(result.output.find("\"checks\"", result.output.find("\"checks\"") + 1) ==
        std::string::npos);
  const auto report = nlohmann::json::parse(result.output.substr(first));
  CHECK(report["ranks"] == 2);
  CHECK(report["failed_by_rank"] == nlohmann::json::array({0, 0}));
  int engine = 0;
  for (const auto& check : report["checks"]) {
    const std::string name = check["check"];
    if (name.rfind("engine, ", 0) != 0) continue;
    ++engine;
    CHECK(check["result"].get<std::string>().rfind("pass", 0) == 0);
  }
  CHECK(engine == 12);
}

TEST_CASE("selftest names what it cannot run on and exits 2") {
  auto result = selftest("");  // --device cuda, which this build has no kernels for
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.output, Catch::Contains("--device cuda") && Catch::Contains("--config=cuda") &&
                                Catch::Contains("--device emulated"));
  result = selftest("--device tpu");
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.output, Catch::Contains("must be cuda or emulated"));
  // Numbers out of their bounds are usage errors, named.
  result = selftest("--device emulated --steps 0");
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.output, Catch::Contains("--steps") && Catch::Contains("not in range"));
  result = selftest("--device emulated --steps 20 --threads 0");
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.output, Catch::Contains("--threads") && Catch::Contains("not in range"));
}

}  // namespace
}  // namespace dslaunch
