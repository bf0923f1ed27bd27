// Multi-host start-up and recovery on test hosts of this machine
// (tools/testhosts.sh; needs root):
//  - start-up: `dslaunch run` to the first training step of a small GPT
//    job on 1, 2 and 4 hosts of 2 ranks each, through the openmpi runner
//    (mpirun over ssh), beside the same ranks on this host through the local
//    runner, measured in the same run;
//  - recovery after the second of 2 hosts is killed mid-run (elasticity: the
//    job goes on on the first host), from the job's events, split into
//    detection, asking the hosts, teardown, backoff and re-plan, and restart
//    to the first step; beside it the same job when only one rank of that
//    host is killed (the host stays).
//
//   bazel build //bench:multihost_bench && bazel-bin/bench/multihost_bench
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/test_hosts.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using dslaunch::bench::cpu_model;
using dslaunch::bench::hosts_up;
using dslaunch::bench::runfile;
using dslaunch::bench::shell;
using dslaunch::bench::testhosts;

constexpr const char* kSubnet = "198.51.100.0/24";

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

fs::path write_spec(const fs::path& dir, const std::string& cluster, int steps) {
  fs::create_directories(dir);
  const fs::path spec = dir / "job.yaml";
  std::ofstream(spec) << fmt::format(R"(name: bench
cluster: {}
model: {{num_layers: 2, hidden_size: 64, num_attention_heads: 4, vocab_size: 256, seq_length: 32,
        make_vocab_size_divisible_by: 64}}
data: {{train: demo}}
training:
  elasticity: {{enabled: true, max_train_batch_size: 16, micro_batch_sizes: [2, 4], max_gpus: 8,
               version: 0.1}}
  steps: {}
  optimizer: {{type: AdamW, params: {{lr: 0.003}}}}
checkpoint: {{interval: 20, keep: 2}}
fault_tolerance: {{heartbeat_interval: 0.5, heartbeat_timeout: 5, max_restarts: 2}}
env: {{DSL_DATA_CACHE: '{}'}}
)",
                                     cluster, steps, dir.string());
  return spec;
}

std::string run_command(const fs::path& spec, const fs::path& job) {
  return fmt::format("DSLAUNCH_WORKER='{}' {} run {} --job-dir '{}' --progress off",
                     runfile("worker/dsworker"), runfile("launcher/dslaunch"), spec.string(),
                     job.string());
}

std::vector<nlohmann::json> json_lines(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);) {
    nlohmann::json json = nlohmann::json::parse(line, nullptr, false);
    if (!json.is_discarded()) out.push_back(std::move(json));
  }
  return out;
}

// Unix times (s) of the training steps the controller received, in order.
std::vector<std::pair<int, double>> step_times(const fs::path& job) {
  std::vector<std::pair<int, double>> out;
  for (const nlohmann::json& line : json_lines(job / "metrics.jsonl")) {
    if (line.contains("what") || !line.contains("loss")) continue;
    out.emplace_back(line["step"].get<int>(), line["time_ms"].get<double>() / 1000);
  }
  return out;
}

// Seconds from `dslaunch run` to the job's first training step.
double start_up(const fs::path& dir, const std::string& cluster) {
  const fs::path spec = write_spec(dir, cluster, 3);
  const double launched = now_s();
  shell(run_command(spec, dir / "job"));
  return step_times(dir / "job").front().second - launched;
}

// The times (s) of the job's events of `kind`.
std::vector<double> event_times(const fs::path& job, const std::string& kind) {
  std::vector<double> out;
  for (const nlohmann::json& event : json_lines(job / "events.jsonl")) {
    if (event["kind"] == kind) out.push_back(event["time"].get<double>());
  }
  return out;
}

struct Recovery {
  double detection = 0, probe = 0, teardown = 0, replan = 0, restart = 0;
  double total() const { return detection + probe + teardown + replan + restart; }
};

// Runs a 2-host job, breaks it with `fault` once step 25 is done, and splits
// the time to the first step after the restart.
Recovery recover(const fs::path& dir, const std::string& hostfile,
                 const std::function<void(const fs::path&)>& fault) {
  const fs::path spec = write_spec(
      dir,
      fmt::format("{{device: cpu, runner: openmpi, hostfile: {}, network_interface: '{}'}}",
                  hostfile, kSubnet),
      200);
  const fs::path job = dir / "job";
  if (std::system(fmt::format("({} > '{}/run.out' 2>&1; echo $? > '{}/run.rc') &",
                              run_command(spec, job), dir.string(), dir.string())
                      .c_str()) != 0) {
    throw std::runtime_error("cannot start the job");
  }
  while (step_times(job).empty() || step_times(job).back().first < 25)
    std::this_thread::sleep_for(50ms);
  const double fault_time = now_s();
  fault(job);
  while (!fs::exists(dir / "run.rc")) std::this_thread::sleep_for(200ms);
  const auto detected = event_times(job, "failure_detected");
  const auto probed = event_times(job, "hosts_probed");
  const auto finished = event_times(job, "finished");
  const auto started = event_times(job, "controller_started");
  if (detected.empty() || probed.empty() || finished.size() < 2 || started.size() < 2) {
    throw std::runtime_error("the job did not recover: see " + (dir / "run.out").string());
  }
  double first_step_after = 0;
  for (const auto& [step, time] : step_times(job)) {
    if (time > started[1]) {
      first_step_after = time;
      break;
    }
  }
  return {detected[0] - fault_time, probed[0] - detected[0], finished[0] - probed[0],
          started[1] - finished[0], first_step_after - started[1]};
}

}  // namespace

int main() {
  if (geteuid() != 0) {
    std::cerr << "multihost_bench: needs root (tools/testhosts.sh makes network namespaces)\n";
    return 2;
  }
  const fs::path root = fs::temp_directory_path() / fmt::format("multihost_bench.{}", getpid());
  try {
    fmt::print("multi-host start-up and recovery, test hosts on this machine ({}, {} cores)\n\n",
               cpu_model(), std::thread::hardware_concurrency());
    fmt::print("start-up (dslaunch run -> first step), 2 ranks per host\n");
    fmt::print("{:>6} {:>6} {:>22} {:>26}\n", "hosts", "ranks", "openmpi over ssh (s)",
               "local runner, 1 host (s)");
    for (const int hosts : {1, 2, 4}) {
      const std::string hostfile = hosts_up(hosts);
      const double remote = start_up(
          root / fmt::format("start{}", hosts),
          fmt::format("{{device: cpu, runner: openmpi, hostfile: {}, network_interface: '{}'}}",
                      hostfile, kSubnet));
      const double local = start_up(root / fmt::format("local{}", hosts),
                                    fmt::format("{{device: cpu, num_gpus: {}}}", 2 * hosts));
      fmt::print("{:>6} {:>6} {:>22.2f} {:>26.2f}\n", hosts, 2 * hosts, remote, local);
    }

    const std::string hostfile = hosts_up(2);
    const Recovery host =
        recover(root / "host_lost", hostfile, [](const fs::path&) { testhosts("kill dsl-h2"); });
    hosts_up(2);
    const Recovery rank = recover(root / "rank_lost", hostfile, [](const fs::path& job) {
      std::ifstream state(job / "state.json");
      const nlohmann::json json = nlohmann::json::parse(state);
      shell(fmt::format("kill -9 {}", json["ranks"][3]["pid"].get<int64_t>()));
    });
    fmt::print(
        "\nrecovery to the first step after the restart (2 hosts x 2 ranks, elasticity, "
        "heartbeat timeout 5 s)\n");
    fmt::print("{:<32} {:>9} {:>9} {:>9} {:>12} {:>9} {:>8}\n", "fault", "detect", "ask hosts",
               "teardown", "backoff+plan", "restart", "total");
    for (const auto& [name, r] : {std::pair{"host dsl-h2 killed (goes on, 1 host)", host},
                                  std::pair{"one rank killed (same 2 hosts)", rank}}) {
      fmt::print("{:<32} {:>8.2f}s {:>8.2f}s {:>8.2f}s {:>11.2f}s {:>8.2f}s {:>7.2f}s\n", name,
                 r.detection, r.probe, r.teardown, r.replan, r.restart, r.total());
    }
  } catch (const std::exception& error) {
    std::cerr << "multihost_bench: " << error.what() << "\n";
    testhosts("down");
    return 1;
  }
  testhosts("down");
  fs::remove_all(root);
  return 0;
}
