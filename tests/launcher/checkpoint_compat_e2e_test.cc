// Checkpoints written by earlier versions of dslaunch resume exactly:
// testdata/format1_job holds the step-5 checkpoint of a 2-rank ZeRO-1 job
// written in checkpoint format 1, and the losses of steps 6-10 of the run
// that wrote it, uninterrupted.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"

namespace {

namespace fs = std::filesystem;
using dslaunch::testing::run_command;
using dslaunch::testing::runfile;

// Step -> loss of rank 0's step lines in a job's metrics.jsonl.
std::map<int, double> losses_of(const fs::path& metrics) {
  std::map<int, double> losses;
  std::ifstream file(metrics);
  std::string line;
  while (std::getline(file, line)) {
    const nlohmann::json json = nlohmann::json::parse(line);
    if (json.contains("loss") && json.value("rank", 0) == 0) {
      losses[json["step"].get<int>()] = json["loss"].get<double>();
    }
  }
  return losses;
}

TEST_CASE("a format-1 checkpoint resumes and continues as the run that wrote it did") {
  const fs::path fixture =
      fs::path(runfile("tests/launcher/testdata/format1_job/expected_losses.json")).parent_path();
  const fs::path home = fs::path(std::getenv("TEST_TMPDIR")) / "format1";
  const fs::path job = home / "job";
  fs::remove_all(home);
  fs::create_directories(job);
  fs::copy(fixture / "checkpoints", job / "checkpoints", fs::copy_options::recursive);
  for (const auto& entry : fs::recursive_directory_iterator(job)) {
    fs::permissions(entry.path(), fs::perms::owner_write, fs::perm_options::add);
  }
  const fs::path spec = job / "checkpoints" / "step_00000005" / "spec.yaml";

  const auto run = run_command(fmt::format(
      "DSLAUNCH_HOME='{0}' DSL_DATA_CACHE='{0}/data' DSLAUNCH_WORKER='{1}' {2} run {3} --job-dir "
      "{4} --progress off 2>&1",
      home.string(), runfile("worker/dsworker"), runfile("launcher/dslaunch"), spec.string(),
      job.string()));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.output, Catch::Contains("step 5"));

  std::ifstream expected_file(fixture / "expected_losses.json");
  const nlohmann::json expected = nlohmann::json::parse(expected_file)["losses"];
  const std::map<int, double> losses = losses_of(job / "metrics.jsonl");
  REQUIRE(losses.size() == 5);  // steps 6-10: nothing before the checkpoint is redone
  for (const auto& [step, loss] : losses) {
    INFO("step " << step);
    CHECK(loss == expected.at(std::to_string(step)).get<double>());  // bit for bit
  }
}

}  // namespace
