// dsworker's command line, including `probe` on a real mpirun world.
#include <set>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"
#include "tools/build_info/build_info.h"

using dslaunch::testing::run_command;
using dslaunch::testing::runfile;

namespace {

std::string dsworker() { return runfile("worker/dsworker"); }

}  // namespace

TEST_CASE("dsworker --version prints the version and commit") {
  const auto result = run_command(dsworker() + " --version");
  CHECK(result.exit_code == 0);
  CHECK(result.output == dslaunch::version_line("dsworker") + "\n");
}

TEST_CASE("dsworker --help lists its subcommands") {
  const auto result = run_command(dsworker() + " --help");
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("Subcommands:") != std::string::npos);
  CHECK(result.output.find("probe") != std::string::npos);
}

TEST_CASE("dsworker with no subcommand exits 2 and says why") {
  const auto result = run_command(dsworker());
  CHECK(result.exit_code == 2);
  CHECK(result.output.find("a subcommand is required") != std::string::npos);
}

TEST_CASE("dsworker probe under mpirun reports every rank") {
  const auto result =
      run_command(runfile("tools/mpirun_local.sh") + " 3 " + dsworker() + " probe --json");
  REQUIRE(result.exit_code == 0);
  // Only rank 0 prints, so the whole output is one JSON document.
  const auto json = nlohmann::json::parse(result.output);
  CHECK(json["world_size"] == 3);
  CHECK(json["allreduce_ok"] == true);
  CHECK(json["mpi_library"].get<std::string>().find("Open MPI") != std::string::npos);
  REQUIRE(json["ranks"].size() == 3);
  std::set<long long> pids;
  for (int r = 0; r < 3; ++r) {
    const auto& rank = json["ranks"][r];
    CHECK(rank["rank"] == r);
    CHECK(rank["local_rank"] == r);  // one host: node-local numbering is the world's
    CHECK(rank["local_world_size"] == 3);
    pids.insert(rank["pid"].get<long long>());
  }
  CHECK(pids.size() == 3);
}
