// Compressed communication on test hosts of this machine (tools/testhosts.sh;
// needs root), their links shaped with tc (a token bucket). The test hosts
// share this machine's cores, so each rank computes on one thread
// (OMP_NUM_THREADS 1): with a thread per core on every rank, one rank's
// compute and the other's polling in MPI fight over the cores, and step times
// measure that fight, not the network.
//  - data parallelism across 2 hosts (1 rank each) on links of 1 Gbit/s and
//    100 Mbit/s: step time and bytes per step of AdamW, 1-bit Adam, 0/1 Adam
//    and 1-bit LAMB after their warm-up, on a GPT of 9.5M parameters small
//    enough in compute (one sequence of 64 tokens per rank) that the
//    gradients' exchange dominates a step, side by side with Lamb's;
//  - ZeRO++ on 2 hosts x 2 ranks (ZeRO 3, DP 4): the bytes that cross
//    between hosts per step, read from the hosts' links, for plain ZeRO 3,
//    hpZ (zero_hpz_partition_size 2: the backward gathers stay on the host),
//    quantized weights and gradients, and both.
//
//   bazel build //bench:compression_bench && bazel-bin/bench/compression_bench
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
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
using dslaunch::bench::cpu_model;
using dslaunch::bench::hosts_up;
using dslaunch::bench::runfile;
using dslaunch::bench::shell;
using dslaunch::bench::testhosts;

constexpr const char* kSubnet = "198.51.100.0/24";

// Bytes test host i has sent over its link so far (its veth's far end receives them).
int64_t host_sent_bytes(int i) {
  std::ifstream file(fmt::format("/sys/class/net/dslv{}/statistics/rx_bytes", i));
  int64_t bytes = 0;
  file >> bytes;
  return bytes;
}

struct Result {
  double step_seconds = 0;  // median over the measured steps
  double comm_bytes = 0;    // data group's, mean over them
  double cross_host_bytes_per_step = 0;
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Runs one job of `steps` steps; the medians over the steps after `skip`.
Result run_job(const fs::path& dir, const std::string& hostfile, const std::string& training,
               const std::string& model, int steps, int skip, int hosts) {
  fs::create_directories(dir);
  const fs::path spec = dir / "job.yaml";
  std::ofstream(spec) << fmt::format(R"(name: bench
cluster: {{device: cpu, runner: openmpi, hostfile: {}, network_interface: '{}'}}
model: {}
data: {{train: demo}}
training:
  steps: {}
  eval_batches: 1
  eval_interval: 1000
{}
fault_tolerance: {{heartbeat_interval: 1, heartbeat_timeout: 60}}
env: {{DSL_DATA_CACHE: '{}', OMP_NUM_THREADS: '1'}}
)",
                                     hostfile, kSubnet, model, steps, training,
                                     dir.parent_path().string());
  std::vector<int64_t> before;
  for (int i = 1; i <= hosts; ++i) before.push_back(host_sent_bytes(i));
  shell(fmt::format("DSLAUNCH_WORKER='{}' {} run {} --job-dir '{}' --progress off",
                    runfile("worker/dsworker"), runfile("launcher/dslaunch"), spec.string(),
                    (dir / "job").string()));
  int64_t sent = 0;
  for (int i = 1; i <= hosts; ++i) sent += host_sent_bytes(i) - before[i - 1];
  std::vector<double> times, bytes;
  std::ifstream metrics(dir / "job" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json json = nlohmann::json::parse(line);
    if (json.contains("what") || json["rank"] != 0 || json["step"].get<int>() <= skip) continue;
    times.push_back(json["step_time_s"].get<double>());
    bytes.push_back(json["data_comm_bytes"].get<double>());
  }
  double total = 0;
  for (const double b : bytes) total += b;
  return {median(times), bytes.empty() ? 0 : total / bytes.size(),
          static_cast<double>(sent) / steps};
}

std::string mib(double bytes) { return fmt::format("{:.2f} MiB", bytes / 1048576); }

}  // namespace

int main() {
  if (geteuid() != 0) {
    std::cerr << "compression_bench: needs root (tools/testhosts.sh makes network namespaces)\n";
    return 2;
  }
  // Not under /tmp, which each test host has its own of: the job directory
  // (checkpoints included) must be on a filesystem every host shares.
  const fs::path root = fmt::format("/var/tmp/compression_bench.{}", getpid());
  try {
    fmt::print("compressed communication on test hosts of this machine ({}, {} cores)\n\n",
               cpu_model(), std::thread::hardware_concurrency());
    // 9.5M parameters, one sequence of 64 tokens per rank and step.
    const std::string model =
        "{num_layers: 3, hidden_size: 512, num_attention_heads: 8, vocab_size: 256, "
        "seq_length: 64, make_vocab_size_divisible_by: 64}";
    struct Optimizer {
      const char* name;
      const char* section;
    };
    const std::vector<Optimizer> optimizers = {
        {"AdamW", "{type: AdamW, params: {lr: 0.001}}"},
        {"OneBitAdam", "{type: OneBitAdam, params: {lr: 0.001, freeze_step: 6}}"},
        {"ZeroOneAdam",
         "{type: ZeroOneAdam, params: {lr: 0.001, var_freeze_step: 6, var_update_scaler: 2, "
         "local_step_scaler: 2, local_step_clipper: 4}}"},
        {"Lamb", "{type: Lamb, params: {lr: 0.001}}"},
        {"OneBitLamb", "{type: OneBitLamb, params: {lr: 0.001, freeze_step: 6}}"},
    };
    const int steps = 20;
    const int skip = 8;  // warm-up over
    std::string hostfile = hosts_up(2, 1);
    std::vector<std::vector<Result>> results(optimizers.size());
    for (const char* rate : {"1gbit", "100mbit"}) {
      testhosts(fmt::format("slow dsl-h1 {}", rate));
      testhosts(fmt::format("slow dsl-h2 {}", rate));
      for (size_t k = 0; k < optimizers.size(); ++k) {
        const std::string training =
            fmt::format("  train_batch_size: 2\n  optimizer: {}", optimizers[k].section);
        results[k].push_back(run_job(root / fmt::format("{}-{}", optimizers[k].name, rate),
                                     hostfile, training, model, steps, skip, 2));
      }
    }
    fmt::print(
        "data parallelism over 2 hosts (1 rank each, ZeRO 0, 9.5M parameters, batch 2 x 64 "
        "tokens); steps {}-{}, after every warm-up: median step time, mean bytes\n",
        skip + 1, steps);
    fmt::print("{:<12} {:>16} {:>18} {:>16} {:>16}\n", "optimizer", "step s @ 1 Gbit",
               "step s @ 100 Mbit", "bytes/step", "vs AdamW");
    for (size_t k = 0; k < optimizers.size(); ++k) {
      const Result& fast = results[k][0];
      const Result& slow = results[k][1];
      fmt::print("{:<12} {:>16.3f} {:>18.3f} {:>16} {:>15.1f}x\n", optimizers[k].name,
                 fast.step_seconds, slow.step_seconds, mib(slow.comm_bytes),
                 results[0][1].comm_bytes / slow.comm_bytes);
    }
    fmt::print(
        "(0/1 Adam: local_step_scaler 2, local_step_clipper 4, so by step {} it synchronises "
        "every 4th step and its median step has no communication)\n\n",
        skip + 1);

    hostfile = hosts_up(2, 2);
    testhosts("slow dsl-h1 1gbit");
    testhosts("slow dsl-h2 1gbit");
    struct Zero {
      const char* name;
      const char* keys;
    };
    const std::vector<Zero> zeros = {
        {"ZeRO 3", ""},
        {"+ hpZ 2", ", zero_hpz_partition_size: 2"},
        {"+ qwZ + qgZ", ", zero_quantized_weights: true, zero_quantized_gradients: true"},
        {"+ all three",
         ", zero_hpz_partition_size: 2, zero_quantized_weights: true, "
         "zero_quantized_gradients: true"},
    };
    fmt::print(
        "ZeRO++ over 2 hosts x 2 ranks (ZeRO 3, DP 4, 1 Gbit/s links, every tensor gathered), "
        "{} steps\n",
        steps);
    fmt::print("{:<14} {:>20} {:>22} {:>14}\n", "", "cross-host bytes/step",
               "rank 0's data bytes/step", "step s");
    double plain_cross = 0;
    for (const Zero& zero : zeros) {
      const std::string training = fmt::format(
          "  train_batch_size: 4\n  optimizer: {{type: AdamW}}\n  zero_optimization: {{stage: 3, "
          "stage3_param_persistence_threshold: 0{}}}",
          zero.keys);
      const Result result = run_job(root / fmt::format("zero-{}", &zero - zeros.data()), hostfile,
                                    training, model, steps, skip, 2);
      if (plain_cross == 0) plain_cross = result.cross_host_bytes_per_step;
      fmt::print("{:<14} {:>20} {:>22} {:>14.3f}   ({:.2f} of ZeRO 3's cross-host bytes)\n",
                 zero.name, mib(result.cross_host_bytes_per_step), mib(result.comm_bytes),
                 result.step_seconds, result.cross_host_bytes_per_step / plain_cross);
    }
  } catch (const std::exception& error) {
    std::cerr << "compression_bench: " << error.what() << "\n";
    testhosts("down");
    return 1;
  }
  testhosts("down");
  fs::remove_all(root);
  return 0;
}
