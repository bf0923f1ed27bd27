// dslaunch's command line, run as a user would run it.
#include <regex>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"
#include "tools/build_info/build_info.h"

using dslaunch::testing::run_command;
using dslaunch::testing::runfile;

namespace {

dslaunch::testing::CommandResult dslaunch_cli(const std::string& args) {
  return run_command(runfile("launcher/dslaunch") + " " + args);
}

}  // namespace

TEST_CASE("dslaunch --version prints the version and commit") {
  const auto result = dslaunch_cli("--version");
  CHECK(result.exit_code == 0);
  CHECK(result.output == dslaunch::version_line("dslaunch") + "\n");
}

TEST_CASE("dslaunch --help lists the subcommands and options") {
  const auto result = dslaunch_cli("--help");
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("Subcommands:") != std::string::npos);
  CHECK(std::regex_search(result.output, std::regex(R"(\n\s+report\s+Print this machine)")));
  CHECK(result.output.find("--version") != std::string::npos);
}

TEST_CASE("dslaunch with no subcommand, or a wrong one, exits 2 and says why") {
  const auto none = dslaunch_cli("");
  CHECK(none.exit_code == 2);
  CHECK(none.output.find("a subcommand is required") != std::string::npos);

  const auto wrong = dslaunch_cli("lunch");
  CHECK(wrong.exit_code == 2);
  CHECK(wrong.output.find("not expected: lunch") != std::string::npos);

  const auto bad_flag = dslaunch_cli("report --jsn");
  CHECK(bad_flag.exit_code == 2);
  CHECK(bad_flag.output.find("--jsn") != std::string::npos);
}

TEST_CASE("dslaunch report --json prints one JSON object about this machine") {
  const auto result = dslaunch_cli("report --json");
  REQUIRE(result.exit_code == 0);
  const auto json = nlohmann::json::parse(result.output);
  CHECK(json["dslaunch"] == dslaunch::version_line("dslaunch"));
  CHECK(json["host"]["cores"].get<int>() >= 1);
  CHECK(json["cuda"]["backend_built"] == false);
}

TEST_CASE("dslaunch report prints a readable table") {
  const auto result = dslaunch_cli("report");
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.rfind(dslaunch::version_line("dslaunch") + "\n", 0) == 0);
  CHECK(std::regex_search(result.output, std::regex(R"(\nopenblas\s+\S+ kernels, \d+ threads)")));
  CHECK(std::regex_search(result.output, std::regex(R"(\nmpirun\s+/\S*/mpirun \(.*Open MPI)")));
}

TEST_CASE("dslaunch run refuses an empty --job-dir, or the root folder, before reading the spec") {
  const auto empty = dslaunch_cli("run no-such-spec.yaml --job-dir ''");
  CHECK(empty.exit_code == 2);
  CHECK(empty.output.find("dslaunch run: --job-dir: the job directory is empty") !=
        std::string::npos);
  const auto root = dslaunch_cli("run no-such-spec.yaml --job-dir //");
  CHECK(root.exit_code == 2);
  CHECK(root.output.find("dslaunch run: --job-dir: '//' is the root folder") != std::string::npos);
}
