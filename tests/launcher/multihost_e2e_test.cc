// Multi-host runs for real, on test hosts of this machine (tools/testhosts.sh:
// network and UTS namespaces on a bridge, each with its own sshd): the
// openmpi runner starts ranks over ssh, the controller listens on the
// address they route to, and what the launcher forwards reaches them. Needs
// root; the test command reports it skipped by name elsewhere.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"

namespace {

namespace fs = std::filesystem;
using dslaunch::testing::CommandResult;
using dslaunch::testing::run_command;
using dslaunch::testing::runfile;

constexpr const char* kSubnet = "198.51.100.0/24";

std::string testhosts(const std::string& args) {
  const CommandResult result = run_command(runfile("tools/testhosts.sh") + " " + args);
  INFO("testhosts.sh " << args << ":\n" << result.output);
  REQUIRE(result.exit_code == 0);
  return result.output;
}

// The test hosts, brought up on first use and removed when the test ends.
class TestHosts {
 public:
  static TestHosts& get() {
    static TestHosts hosts;
    return hosts;
  }
  // `count` hosts of 2 slots; the hostfile naming them.
  std::string up(int count) {
    const std::string output = testhosts(fmt::format("up {}", count));
    std::string last;
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) last = line;
    }
    return last;
  }
  // The pids on `host` that are not its sshd (what a job left behind).
  std::set<std::string> stray_processes(const std::string& host) {
    std::set<std::string> out;
    std::istringstream pids(testhosts("pids " + host));
    for (std::string pid; pids >> pid;) {
      std::ifstream comm("/proc/" + pid + "/comm");
      std::string name;
      std::getline(comm, name);
      if (name != "sshd") out.insert(pid + " " + name);
    }
    return out;
  }
  ~TestHosts() { run_command(runfile("tools/testhosts.sh") + " down"); }
};

// A small GPT over byte-level tokens; `cluster` is the spec's cluster section.
fs::path write_spec(const fs::path& dir, const std::string& name, const std::string& cluster,
                    int steps) {
  const fs::path spec = dir / (name + ".yaml");
  std::ofstream(spec) << fmt::format(R"(name: {}
cluster: {}
model:
  num_layers: 2
  hidden_size: 64
  num_attention_heads: 4
  vocab_size: 256
  seq_length: 32
  make_vocab_size_divisible_by: 64
data: {{train: demo}}
training:
  train_batch_size: 16
  train_micro_batch_size_per_gpu: 4
  steps: {}
  eval_interval: 10
  eval_batches: 2
  gradient_clipping: 1.0
  zero_optimization: {{stage: 2, reduce_bucket_size: 20000}}
  optimizer: {{type: AdamW, params: {{lr: 0.003, weight_decay: 0.1}}}}
checkpoint: {{interval: 10, keep: 2}}
fault_tolerance: {{heartbeat_interval: 0.5, heartbeat_timeout: 5, max_restarts: 2}}
env: {{DSL_DATA_CACHE: '{}'}}
)",
                                     name, cluster, steps, dir.string());
  return spec;
}

// Every step's loss and evaluation loss, from metrics.jsonl.
std::map<int, std::pair<double, double>> losses(const fs::path& job) {
  std::map<int, std::pair<double, double>> out;
  std::ifstream file(job / "metrics.jsonl");
  for (std::string line; std::getline(file, line);) {
    const nlohmann::json json = nlohmann::json::parse(line, nullptr, false);
    if (json.is_discarded() || json.contains("what") || !json.contains("loss")) continue;
    out[json["step"].get<int>()] = {json["loss"].get<double>(), json.value("eval_loss", -1.0)};
  }
  return out;
}

nlohmann::json state_of(const fs::path& job) {
  std::ifstream file(job / "state.json");
  return nlohmann::json::parse(file);
}

fs::path test_dir(const std::string& name) {
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / name;
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE(
    "2 test hosts x 2 slots through the openmpi runner train the same bits as 4 ranks on "
    "one host, with the launcher's variables on every rank") {
  const std::string hostfile = TestHosts::get().up(2);
  const fs::path dir = test_dir("same_bits");

  // Each rank records where it runs and what it was given, then becomes
  // the worker.
  const fs::path wrapper = dir / "worker.sh";
  std::ofstream(wrapper) << fmt::format(
      "#!/bin/sh\nenv > '{}/env.'$(hostname).$OMPI_COMM_WORLD_RANK\nexec '{}' \"$@\"\n",
      dir.string(), runfile("worker/dsworker"));
  fs::permissions(wrapper, fs::perms::owner_all);
  std::ofstream(dir / "ds_env") << "# forwarded to every rank\nDSL_TEST_FROM_FILE=file value\n";

  const fs::path multi = write_spec(
      dir, "multi",
      fmt::format("{{device: cpu, runner: openmpi, hostfile: {}, network_interface: '{}', "
                  "launcher_args: \"--mca btl self,tcp --mca plm_rsh_agent 'ssh -q'\"}}",
                  hostfile, kSubnet),
      20);
  const CommandResult run = run_command(fmt::format(
      "cd '{}' && DSLAUNCH_WORKER='{}' DS_ENV_FILE='{}' NCCL_TEST_MARK=from-launcher {} run {} "
      "--job-dir '{}' --progress off",
      dir.string(), wrapper.string(), (dir / "ds_env").string(), runfile("launcher/dslaunch"),
      multi.string(), (dir / "multi_job").string()));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);

  const fs::path local = write_spec(dir, "local", "{device: cpu, num_gpus: 4}", 20);
  const CommandResult one_host = run_command(fmt::format(
      "DSLAUNCH_WORKER='{}' {} run {} --job-dir '{}' --progress off", runfile("worker/dsworker"),
      runfile("launcher/dslaunch"), local.string(), (dir / "local_job").string()));
  INFO(one_host.output);
  REQUIRE(one_host.exit_code == 0);

  const auto multi_losses = losses(dir / "multi_job");
  REQUIRE(multi_losses.size() == 20);
  CHECK(multi_losses == losses(dir / "local_job"));  // bit for bit, evaluation too
  CHECK(multi_losses.at(20).second > 0);

  // Ranks 0-1 ran on dsl-h1 and 2-3 on dsl-h2 (their own hostnames), as the
  // plan and state.json say.
  const nlohmann::json state = state_of(dir / "multi_job");
  for (int rank = 0; rank < 4; ++rank) {
    const std::string host = rank < 2 ? "dsl-h1" : "dsl-h2";
    CHECK(state["ranks"][rank]["host"] == host);
    const fs::path env = dir / fmt::format("env.{}.{}", host, rank);
    INFO(env);
    REQUIRE(fs::exists(env));
    std::ifstream file(env);
    std::set<std::string> lines;
    for (std::string line; std::getline(file, line);) lines.insert(line);
    CHECK(lines.count("NCCL_TEST_MARK=from-launcher") == 1);
    CHECK(lines.count("DSL_TEST_FROM_FILE=file value") == 1);
    CHECK(lines.count(fmt::format("DSL_CONTROLLER={}",
                                  state["controller_address"].get<std::string>())) == 1);
  }
  CHECK(state["controller_address"].get<std::string>().rfind("198.51.100.1:", 0) == 0);

  // The launcher_args reached mpirun, after the runner's own.
  std::ifstream events(dir / "multi_job" / "events.jsonl");
  bool launched = false;
  for (std::string line; std::getline(events, line);) {
    const nlohmann::json event = nlohmann::json::parse(line);
    if (event["kind"] != "launching") continue;
    launched = true;
    CHECK_THAT(event["detail"].get<std::string>(),
               Catch::Contains("--mca btl self,tcp --mca plm_rsh_agent ssh -q "));
  }
  CHECK(launched);
  for (const char* host : {"dsl-h1", "dsl-h2"}) {
    CHECK(TestHosts::get().stray_processes(host).empty());
  }
}
