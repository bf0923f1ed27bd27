#include "launcher/plan/job_plan.h"

#include "core/spec/training_support.h"

#include <unistd.h>
#include <algorithm>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "core/spec/diagnostics.h"
#include "core/spec/job_spec.h"
#include "core/spec/spec_parser.h"
#include "launcher/plan/local_machine.h"
#include "launcher/plan/memory_estimate.h"

namespace dslaunch::plan {
namespace {

namespace fs = std::filesystem;
using spec::Diagnostic;

constexpr int64_t kGiB = int64_t{1} << 30;

// What every plan on more than one host without cluster.tls warns.
constexpr const char* kPlaintextWarning =
    "the control plane is plaintext: the job token and every controller message cross the "
    "network unencrypted between the hosts; set cluster.tls (cert, key, ca) to encrypt them";

// A fresh folder under $TEST_TMPDIR for one test's spec and hostfile.
class Folder {
 public:
  Folder() {
    static std::atomic<int> counter{0};
    const char* tmp = std::getenv("TEST_TMPDIR");
    const fs::path base = tmp != nullptr ? fs::path(tmp) : fs::temp_directory_path();
    dir_ = base / ("plan_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  // Writes `text` to `name` and returns its path. A leading newline is
  // dropped, so that a raw string's first line is line 1 of the file.
  std::string write(const std::string& name, std::string_view text) const {
    if (!text.empty() && text.front() == '\n') text.remove_prefix(1);
    const fs::path path = dir_ / name;
    std::ofstream file(path, std::ios::binary);
    file << text;
    REQUIRE(file.good());
    return path.string();
  }

 private:
  fs::path dir_;
};

// The machine the planner believes it runs on: 8 cores, 1 NUMA node, 32 GiB,
// no GPUs.
LocalMachine laptop() {
  LocalMachine machine;
  machine.cores = 8;
  machine.numa_nodes = 1;
  machine.memory_bytes = 32 * kGiB;
  machine.gpus = 0;
  machine.gpu_memory_bytes = 0;
  return machine;
}

// Planning inputs with `environment` as the only environment variables.
PlanInputs inputs(LocalMachine machine = laptop(),
                  std::map<std::string, std::string> environment = {}) {
  return PlanInputs{machine, [environment](const char* name) -> const char* {
                      const auto found = environment.find(name);
                      return found == environment.end() ? nullptr : found->second.c_str();
                    }};
}

struct Planned {
  std::string path;
  spec::Diagnostics diagnostics;
  std::optional<JobPlan> plan;

  std::vector<Diagnostic> errors() const {
    std::vector<Diagnostic> out;
    for (const Diagnostic& d : diagnostics.all()) {
      if (d.severity == Diagnostic::Severity::kError) out.push_back(d);
    }
    return out;
  }
  // The one error planning reported; fails the test unless there is exactly one.
  Diagnostic only_error() const {
    INFO(diagnostics.format());
    REQUIRE_FALSE(plan.has_value());
    const std::vector<Diagnostic> all = errors();
    REQUIRE(all.size() == 1);
    return all.front();
  }
};

// Loads the spec at `path` (which must load without errors) and plans it.
Planned plan_file(const std::string& path, const PlanInputs& planning = inputs(),
                  const spec::LoadOptions& options = {}) {
  Planned planned;
  planned.path = path;
  spec::SourceMap locations;
  const spec::JobSpec job = spec::load_job_spec(path, options, planned.diagnostics, locations);
  {
    INFO("loading " << path << ":\n" << planned.diagnostics.format());
    REQUIRE_FALSE(planned.diagnostics.has_errors());
  }
  planned.plan = make_plan(job, locations, planning, planned.diagnostics);
  return planned;
}

constexpr std::string_view kTwoHostfile = R"(
gpu-node-01 slots=8
gpu-node-02 slots=8
)";

// GPT-2 small on two 8-GPU hosts: tensor 4 inside a host, 2 pipeline stages.
constexpr std::string_view kTwoHosts = R"(
cluster:
  runner: openmpi
  device: cuda
  hostfile: two.hostfile
  topology:
    cores_per_host: 64
    numa_nodes_per_host: 2
    gpu_islands: [[0, 1, 2, 3, 4, 5, 6, 7]]
    device_memory_gb: 80
parallelism:
  tensor: 4
  pipeline: 2
training:
  train_batch_size: 256
  train_micro_batch_size_per_gpu: 8
  bf16:
    enabled: true
  zero_optimization:
    stage: 1
  steps: 100
data:
  train: demo
)";

// kTwoHosts with `cluster_keys` (indented by two) added to its cluster
// section at line 5.
std::string two_hosts_with(const std::string& cluster_keys) {
  std::string text(kTwoHosts.substr(1));
  const std::string after = "  hostfile: two.hostfile\n";
  text.insert(text.find(after) + after.size(), cluster_keys);
  return text;
}

std::vector<std::string> hosts_of(const JobPlan& plan) {
  std::vector<std::string> names;
  for (const topology::HostSlots& host : plan.hosts) names.push_back(host.host);
  return names;
}

struct ExpectedRank {
  int rank;
  std::string host;
  int slot;
  int pipeline, data, tensor;
  std::vector<int> cores;
  int numa_node;
};

void check_rank(const JobPlan& plan, const ExpectedRank& expected) {
  INFO("rank " << expected.rank);
  REQUIRE(expected.rank < static_cast<int>(plan.placement.ranks.size()));
  const topology::RankPlacement& got = plan.placement.ranks[expected.rank];
  CHECK(got.rank == expected.rank);
  CHECK(got.host == expected.host);
  CHECK(got.slot == expected.slot);
  CHECK(got.coord == topology::GridCoord{expected.pipeline, expected.data, expected.tensor});
  CHECK(got.cpu_cores == expected.cores);
  CHECK(got.numa_node == expected.numa_node);
}

std::vector<int> range(int first, int last) {
  std::vector<int> values;
  for (int v = first; v <= last; ++v) values.push_back(v);
  return values;
}

}  // namespace

// --- This machine -------------------------------------------------------------

TEST_CASE("a local CPU spec with num_gpus 2 runs two data-parallel ranks on this machine") {
  Folder folder;
  const Planned planned = plan_file(folder.write("cpu.yaml", R"(
cluster:
  device: cpu
  num_gpus: 2
training:
  train_batch_size: 16
  train_micro_batch_size_per_gpu: 4
  steps: 10
data:
  train: demo
)"));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(planned.diagnostics.all().empty());
  const JobPlan& plan = *planned.plan;

  CHECK(plan.device == spec::Device::kCpu);
  REQUIRE(plan.hosts.size() == 1);
  CHECK(plan.hosts[0].host == "localhost");
  CHECK(plan.hosts[0].slots == std::vector<int>{0, 1});
  CHECK(plan.grid.shape() == topology::GridShape{1, 2, 1});
  CHECK(plan.world_size() == 2);
  // train 16 / micro 4 / data 2.
  CHECK(plan.batch.train_batch_size == 16);
  CHECK(plan.batch.micro_batch_per_gpu == 4);
  CHECK(plan.batch.gradient_accumulation_steps == 2);

  // 8 cores, 2 ranks: an even, contiguous half each.
  REQUIRE(plan.placement.ranks.size() == 2);
  check_rank(plan, {0, "localhost", 0, 0, 0, 0, {0, 1, 2, 3}, 0});
  check_rank(plan, {1, "localhost", 1, 0, 1, 0, {4, 5, 6, 7}, 0});
  for (const topology::RankPlacement& rank : plan.placement.ranks) {
    CHECK(rank.device == "cpu");
    CHECK(rank.local_rank == rank.rank);
    CHECK(rank.local_world_size == 2);
  }

  // GPT-2 small in fp32 without ZeRO: 16 bytes per parameter, vocabulary padded to 50304.
  CHECK(plan.total_parameters == 124'439'808);
  CHECK(plan.padded_vocab_size == 50'304);
  REQUIRE(plan.memory_by_stage.size() == 1);
  const ModelStateBytes& bytes = plan.memory_of_rank(1);
  CHECK(bytes.parameters == 4 * 124'475'904);
  CHECK(bytes.gradients == 4 * 124'475'904);
  CHECK(bytes.optimizer_states == 8 * 124'475'904);
  // CPU ranks share the host's memory.
  CHECK(plan.device_memory_bytes == 16 * kGiB);
  CHECK(plan.warnings.empty());
}

TEST_CASE("a local CPU spec without num_gpus runs one rank") {
  Folder folder;
  const Planned planned = plan_file(folder.write("one.yaml", R"(
cluster:
  device: cpu
training:
  train_micro_batch_size_per_gpu: 4
  steps: 10
data:
  train: demo
)"));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(planned.plan->world_size() == 1);
  CHECK(planned.plan->hosts[0].slots == std::vector<int>{0});
  CHECK(planned.plan->placement.ranks[0].cpu_cores == range(0, 7));
  CHECK(planned.plan->batch.train_batch_size == 4);
  CHECK(planned.plan->device_memory_bytes == 32 * kGiB);
}

TEST_CASE("testing.fault must name a rank of the job") {
  Folder folder;
  const Planned planned = plan_file(folder.write("fault.yaml", R"(
cluster: {device: cpu, num_gpus: 2}
training: {train_micro_batch_size_per_gpu: 4, steps: 10}
data: {train: demo}
testing: {fault: {kind: exit, rank: 2, step: 3}}
)"));
  CHECK_FALSE(planned.plan.has_value());
  CHECK_THAT(planned.diagnostics.format(),
             Catch::Contains("testing.fault.rank 2 is not a rank of this job: its ranks are 0..1"));
}

TEST_CASE("zero_hpz_partition_size must divide the data-parallel size") {
  Folder folder;
  const Planned planned = plan_file(folder.write("hpz.yaml", R"(
cluster: {device: cpu, num_gpus: 6}
training: {train_micro_batch_size_per_gpu: 1, steps: 10,
           zero_optimization: {stage: 3, zero_hpz_partition_size: 4}}
data: {train: demo}
)"));
  CHECK_FALSE(planned.plan.has_value());
  CHECK_THAT(planned.diagnostics.format(),
             Catch::Contains("zero_hpz_partition_size 4 must divide the data-parallel size 6"));
  const Planned fine = plan_file(folder.write("hpz3.yaml", R"(
cluster: {device: cpu, num_gpus: 6}
training: {train_micro_batch_size_per_gpu: 1, steps: 10,
           zero_optimization: {stage: 3, zero_hpz_partition_size: 3}}
data: {train: demo}
)"));
  CHECK(fine.plan.has_value());
}

TEST_CASE(
    "a pipeline needs as many micro-batches per step as stages, and the plan shows each "
    "stage's blocks") {
  Folder folder;
  const Planned refused = plan_file(folder.write("few.yaml", R"(
cluster: {device: cpu, num_gpus: 4}
parallelism: {pipeline: 4}
training: {train_micro_batch_size_per_gpu: 2, train_batch_size: 6, steps: 10}
data: {train: demo}
)"));
  CHECK_FALSE(refused.plan.has_value());
  CHECK_THAT(refused.diagnostics.format(),
             Catch::Contains("pipeline parallelism over 4 stages needs at least 4 micro-batches "
                             "per step, and gradient_accumulation_steps is 3") &&
                 Catch::Contains("raise train_batch_size"));

  const Planned planned = plan_file(folder.write("enough.yaml", R"(
cluster: {device: cpu, num_gpus: 4}
model: {num_layers: 6}
parallelism: {pipeline: 2, pipeline_partition: [2, 4]}
training: {train_micro_batch_size_per_gpu: 2, train_batch_size: 8, steps: 10}
data: {train: demo}
)"));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(planned.plan->stage_layers ==
        std::vector<std::vector<std::pair<int, int>>>{{{0, 2}}, {{2, 6}}});
}

TEST_CASE(
    "an interleaved pipeline needs micro-batches in multiples of its stages, and the plan "
    "shows each stage's chunks and their activations") {
  Folder folder;
  const Planned refused = plan_file(folder.write("odd.yaml", R"(
cluster: {device: cpu, num_gpus: 2}
model: {num_layers: 4}
parallelism: {pipeline: 2, virtual_stages: 2}
training: {train_micro_batch_size_per_gpu: 1, train_batch_size: 3, steps: 10}
data: {train: demo}
)"));
  CHECK_FALSE(refused.plan.has_value());
  CHECK_THAT(refused.diagnostics.format(),
             Catch::Contains("the interleaved schedule (parallelism.virtual_stages 2) runs "
                             "micro-batches in groups of the 2 stages, and "
                             "gradient_accumulation_steps is 3") &&
                 Catch::Contains("make the accumulation steps a multiple of 2"));

  const std::string spec = R"(
cluster: {device: cpu, num_gpus: 2}
model: {num_layers: 8}
parallelism: {pipeline: 2, virtual_stages: 2, pipeline_partition: uniform}
training: {train_micro_batch_size_per_gpu: 1, train_batch_size: 4, steps: 10}
data: {train: demo}
)";
  const Planned planned = plan_file(folder.write("interleaved.yaml", spec));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  // Virtual stages of 2 blocks each: stage 0 runs 0 and 2, stage 1 runs 1 and 3.
  CHECK(planned.plan->stage_layers ==
        std::vector<std::vector<std::pair<int, int>>>{{{0, 2}, {4, 6}}, {{2, 4}, {6, 8}}});
  // Stage 0 keeps up to 4 micro-batches of each chunk (4 of 8 forwards
  // warm up) where 1F1B keeps 2 of the whole stage: more activation memory
  // for a smaller bubble.
  const Planned plain = plan_file(folder.write("plain.yaml", std::string(R"(
cluster: {device: cpu, num_gpus: 2}
model: {num_layers: 8}
parallelism: {pipeline: 2, pipeline_partition: uniform}
training: {train_micro_batch_size_per_gpu: 1, train_batch_size: 4, steps: 10}
data: {train: demo}
)")));
  REQUIRE(plain.plan.has_value());
  CHECK(planned.plan->activation_bytes_by_stage[0] > plain.plan->activation_bytes_by_stage[0]);
}

TEST_CASE("device cuda on a machine without GPUs needs num_gpus") {
  Folder folder;
  const std::string spec_text = R"(
cluster:
  device: cuda
training:
  train_micro_batch_size_per_gpu: 4
  steps: 10
data:
  train: demo
)";
  const Planned none = plan_file(folder.write("cuda.yaml", spec_text));
  const Diagnostic error = none.only_error();
  CHECK(error.location.file == none.path);
  CHECK(error.location.line == 2);
  CHECK(error.message.find("cluster.device is cuda but this machine shows no GPUs") == 0);

  spec::LoadOptions two_gpus;
  two_gpus.overrides = {"cluster.num_gpus=2"};
  const Planned planned = plan_file(none.path, inputs(), two_gpus);
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(planned.plan->world_size() == 2);
  CHECK(planned.plan->placement.ranks[0].device == "cuda:0");
  CHECK(planned.plan->placement.ranks[1].device == "cuda:1");
}

TEST_CASE("device auto (the default) plans on CPU here, saying why, with or without GPUs") {
  Folder folder;
  const std::string path = folder.write("auto.yaml", R"(
cluster:
  num_gpus: 2
training:
  train_batch_size: 16
  steps: 10
data:
  train: demo
)");
  const Planned laptop_plan = plan_file(path);
  INFO(laptop_plan.diagnostics.format());
  REQUIRE(laptop_plan.plan.has_value());
  CHECK(laptop_plan.plan->device == spec::Device::kCpu);
  CHECK(laptop_plan.plan->device_choice ==
        "cpu: no GPU visible on this machine (nvidia-smi found none)");
  CHECK(laptop_plan.plan->placement.ranks[1].device == "cpu");

  // GPUs visible, but this build trains on CPU only (or, built for CUDA,
  // the job asks what training on GPUs lacks: its optimizer on the GPU):
  // cpu, not a job that passes plan and fails run.
  LocalMachine server = laptop();
  server.gpus = 4;
  server.gpu_memory_bytes = 40 * kGiB;
  const Planned server_plan = plan_file(path, inputs(server));
  REQUIRE(server_plan.plan.has_value());
  CHECK(server_plan.plan->device == spec::Device::kCpu);
  CHECK_THAT(server_plan.plan->device_choice,
             Catch::StartsWith(spec::cuda_training_built()
                                   ? "cpu: 4 GPU(s) visible, but this job needs what training on "
                                     "GPUs does not do yet"
                                   : "cpu: 4 GPU(s) visible, but this build trains on CPU only"));

  // Said explicitly, a device is taken as it is.
  spec::LoadOptions cpu;
  cpu.overrides = {"cluster.device=cpu"};
  const Planned explicit_plan = plan_file(path, inputs(server), cpu);
  REQUIRE(explicit_plan.plan.has_value());
  CHECK(explicit_plan.plan->device_choice.empty());
}

TEST_CASE("device cuda without num_gpus uses every GPU of this machine and its memory") {
  Folder folder;
  LocalMachine server = laptop();
  server.gpus = 4;
  server.gpu_memory_bytes = 40 * kGiB;
  const Planned planned = plan_file(folder.write("cuda.yaml", R"(
cluster:
  device: cuda
training:
  train_micro_batch_size_per_gpu: 4
  steps: 10
data:
  train: demo
)"),
                                    inputs(server));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  const JobPlan& plan = *planned.plan;
  CHECK(plan.hosts[0].slots == std::vector<int>{0, 1, 2, 3});
  CHECK(plan.grid.shape() == topology::GridShape{1, 4, 1});
  CHECK(plan.batch.train_batch_size == 16);
  CHECK(plan.device_memory_bytes == 40 * kGiB);
  CHECK(plan.warnings.empty());
  // 8 cores on one NUMA node shared by 4 GPUs in GPU order.
  check_rank(plan, {2, "localhost", 2, 0, 2, 0, {4, 5}, 0});
}

TEST_CASE("this machine's GPU NUMA nodes are used unless the spec gives a NUMA layout") {
  Folder folder;
  LocalMachine server = laptop();
  server.cores = 16;
  server.numa_nodes = 2;
  server.gpus = 4;
  server.gpu_memory_bytes = 40 * kGiB;
  server.gpu_topology.numa_node = {1, 1, 0, 0};  // as `nvidia-smi topo -m` reports them
  const std::string path = folder.write("cuda.yaml", R"(
cluster:
  device: cuda
training:
  train_micro_batch_size_per_gpu: 4
  steps: 10
data:
  train: demo
)");
  const Planned local = plan_file(path, inputs(server));
  INFO(local.diagnostics.format());
  REQUIRE(local.plan.has_value());
  // Node 0 holds cores 0-7 and GPUs 2 and 3; node 1 cores 8-15 and GPUs 0 and 1.
  check_rank(*local.plan, {0, "localhost", 0, 0, 0, 0, range(8, 11), 1});
  check_rank(*local.plan, {3, "localhost", 3, 0, 3, 0, range(4, 7), 0});

  spec::LoadOptions one_node;
  one_node.overrides = {"cluster.topology.numa_nodes_per_host=1"};
  const Planned hinted = plan_file(path, inputs(server), one_node);
  INFO(hinted.diagnostics.format());
  REQUIRE(hinted.plan.has_value());
  check_rank(*hinted.plan, {0, "localhost", 0, 0, 0, 0, range(0, 3), 0});
  check_rank(*hinted.plan, {3, "localhost", 3, 0, 3, 0, range(12, 15), 0});
}

// --- Hosts from a hostfile ---------------------------------------------------

TEST_CASE("two 8-GPU hosts with tensor 4 and pipeline 2 put each stage on its own host") {
  Folder folder;
  folder.write("two.hostfile", kTwoHostfile);
  const Planned planned = plan_file(folder.write("two.yaml", kTwoHosts));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  const JobPlan& plan = *planned.plan;

  CHECK(plan.device == spec::Device::kCuda);
  CHECK(hosts_of(plan) == std::vector<std::string>{"gpu-node-01", "gpu-node-02"});
  CHECK(plan.hosts[0].slots == range(0, 7));
  CHECK(plan.hosts[1].slots == range(0, 7));
  CHECK(plan.grid.shape() == topology::GridShape{2, 2, 4});
  // train 256 / micro 8 / data 2.
  CHECK(plan.batch.gradient_accumulation_steps == 16);

  // GPUs 0-3 on NUMA node 0 (cores 0-31), 4-7 on node 1 (32-63): 8 cores each.
  REQUIRE(plan.placement.ranks.size() == 16);
  check_rank(plan, {0, "gpu-node-01", 0, 0, 0, 0, range(0, 7), 0});
  check_rank(plan, {3, "gpu-node-01", 3, 0, 0, 3, range(24, 31), 0});
  check_rank(plan, {5, "gpu-node-01", 5, 0, 1, 1, range(40, 47), 1});
  check_rank(plan, {8, "gpu-node-02", 0, 1, 0, 0, range(0, 7), 0});
  check_rank(plan, {10, "gpu-node-02", 2, 1, 0, 2, range(16, 23), 0});
  check_rank(plan, {15, "gpu-node-02", 7, 1, 1, 3, range(56, 63), 1});
  CHECK(plan.placement.ranks[13].device == "cuda:5");
  CHECK(plan.placement.ranks[13].local_rank == 5);
  CHECK(plan.placement.ranks[13].local_world_size == 8);

  using Groups = std::vector<std::vector<int>>;
  CHECK(plan.grid.tensor_groups() ==
        Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
  CHECK(plan.grid.pipeline_groups() ==
        Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}});
  CHECK(plan.grid.data_groups() ==
        Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}});

  // bf16, ZeRO-1 over 2 replicas; Ψ = 21,171,072 on stage 0 and 20,386,176
  // on stage 1 (both halves whole multiples of 16). On the GPU path every
  // state is on the GPU: fp32 parameters and gradients, the optimizer of
  // this rank's half (fp32 masters and both moments, 12 bytes a parameter),
  // and the gradient reduction's buffers for one bucket of the whole model
  // (reduce_bucket_size 5e8) travelling in bf16: the fp32 sum of this
  // rank's half (2Ψ), the bucket rounded (2Ψ), both ranks' halves for this
  // one (2Ψ) and one half widened (2Ψ).
  const int64_t psi0 = 21'171'072;
  const int64_t psi1 = 20'386'176;
  CHECK(plan.padded_vocab_size == 50'688);
  REQUIRE(plan.memory_by_stage.size() == 2);
  CHECK(plan.host_model_states);
  CHECK(plan.memory_by_stage[0].parameters == 4 * psi0);
  CHECK(plan.memory_by_stage[0].gradients == 4 * psi0);
  CHECK(plan.memory_by_stage[0].optimizer_states == 6 * psi0);
  CHECK(plan.memory_by_stage[0].communication_buffers == 8 * psi0);
  CHECK(plan.memory_by_stage[0].offloaded_to_host == 0);
  CHECK(plan.memory_by_stage[1].parameters == 4 * psi1);
  CHECK(plan.memory_by_stage[1].gradients == 4 * psi1);
  CHECK(plan.memory_by_stage[1].optimizer_states == 6 * psi1);
  CHECK(plan.memory_of_rank(7).device_total() == 22 * psi0);
  CHECK(plan.memory_of_rank(8).device_total() == 22 * psi1);
  CHECK(plan.device_memory_bytes == 80 * kGiB);
  CHECK(plan.warnings == std::vector<std::string>{kPlaintextWarning});
}

TEST_CASE("num_nodes keeps the first hosts of the hostfile") {
  Folder folder;
  folder.write("two.hostfile", kTwoHostfile);
  const Planned planned = plan_file(folder.write("two.yaml", two_hosts_with("  num_nodes: 1\n")));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(hosts_of(*planned.plan) == std::vector<std::string>{"gpu-node-01"});
  CHECK(planned.plan->grid.shape() == topology::GridShape{2, 1, 4});
  CHECK(planned.plan->batch.gradient_accumulation_steps == 32);
}

TEST_CASE("include and exclude in the spec shrink the world") {
  Folder folder;
  folder.write("two.hostfile", kTwoHostfile);

  SECTION("exclude a whole host") {
    const Planned planned =
        plan_file(folder.write("two.yaml", two_hosts_with("  exclude: gpu-node-02\n")));
    INFO(planned.diagnostics.format());
    REQUIRE(planned.plan.has_value());
    CHECK(hosts_of(*planned.plan) == std::vector<std::string>{"gpu-node-01"});
    CHECK(planned.plan->world_size() == 8);
    CHECK(planned.plan->grid.shape() == topology::GridShape{2, 1, 4});
    // 256 / 8 / 1.
    CHECK(planned.plan->batch.gradient_accumulation_steps == 32);
    check_rank(*planned.plan, {4, "gpu-node-01", 4, 1, 0, 0, range(32, 39), 1});
  }

  SECTION("include half of each host") {
    const Planned planned = plan_file(folder.write(
        "two.yaml", two_hosts_with("  include: gpu-node-01:0,1,2,3@gpu-node-02:4,5,6,7\n")));
    INFO(planned.diagnostics.format());
    REQUIRE(planned.plan.has_value());
    const JobPlan& plan = *planned.plan;
    CHECK(plan.hosts[0].slots == std::vector<int>{0, 1, 2, 3});
    CHECK(plan.hosts[1].slots == std::vector<int>{4, 5, 6, 7});
    CHECK(plan.grid.shape() == topology::GridShape{2, 1, 4});
    // Stage 0 on the first host, stage 1 on the second, on the GPUs left to it.
    check_rank(plan, {0, "gpu-node-01", 0, 0, 0, 0, range(0, 7), 0});
    check_rank(plan, {4, "gpu-node-02", 4, 1, 0, 0, range(32, 39), 1});
    check_rank(plan, {7, "gpu-node-02", 7, 1, 0, 3, range(56, 63), 1});
  }
}

TEST_CASE("--include on the command line shrinks the world") {
  Folder folder;
  folder.write("two.hostfile", kTwoHostfile);
  spec::LoadOptions options;
  options.include = "gpu-node-02";
  const Planned planned = plan_file(folder.write("two.yaml", kTwoHosts), inputs(), options);
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(hosts_of(*planned.plan) == std::vector<std::string>{"gpu-node-02"});
  CHECK(planned.plan->world_size() == 8);
  CHECK(planned.plan->placement.ranks[0].host == "gpu-node-02");
}

TEST_CASE("an unknown host in include is an error at the include value") {
  Folder folder;
  folder.write("two.hostfile", kTwoHostfile);
  const std::string expected =
      "include: unknown host \"gpu-node-03\"; the hostfile does not list it";

  SECTION("in the spec: at its file and line") {
    const Planned planned =
        plan_file(folder.write("two.yaml", two_hosts_with("  include: gpu-node-03\n")));
    const Diagnostic error = planned.only_error();
    CHECK(error.message == expected);
    CHECK(error.location.file == planned.path);
    CHECK(error.location.line == 5);
    CHECK(error.location.to_string().starts_with(planned.path + ":5"));
  }

  SECTION("on the command line: at the flag") {
    spec::LoadOptions options;
    options.include = "gpu-node-03";
    const Planned planned = plan_file(folder.write("two.yaml", kTwoHosts), inputs(), options);
    const Diagnostic error = planned.only_error();
    CHECK(error.message == expected);
    CHECK(error.location.to_string() == "--include gpu-node-03");
  }
}

TEST_CASE("a resource error is located at the key it is about") {
  Folder folder;
  folder.write("two.hostfile", kTwoHostfile);
  // num_gpus (line 6), not num_nodes (line 5), asks for too much.
  const Planned planned =
      plan_file(folder.write("two.yaml", two_hosts_with("  num_nodes: 1\n  num_gpus: 9\n")));
  const Diagnostic error = planned.only_error();
  CHECK(error.message == "num_gpus is 9 but host \"gpu-node-01\" has only 8 selected slots");
  CHECK(error.location.line == 6);
}

TEST_CASE("a world size not divisible by tensor x pipeline is an error at parallelism.tensor") {
  Folder folder;
  folder.write("two.hostfile", kTwoHostfile);
  std::string text = two_hosts_with("");
  text.replace(text.find("pipeline: 2"), 11, "pipeline: 3");
  const Planned planned = plan_file(folder.write("two.yaml", text));
  const Diagnostic error = planned.only_error();
  CHECK(error.location.file == planned.path);
  CHECK(error.location.line == 11);  // tensor: 4
  CHECK(error.message ==
        "world size 16 (2 host(s)) is not divisible by tensor 4 x pipeline 3 = 12; change the "
        "parallel sizes or the hosts and slots");
}

TEST_CASE("batch sizes that do not fit the data-parallel size are an error at train_batch_size") {
  Folder folder;
  const Planned planned = plan_file(folder.write("batch.yaml", R"(
cluster:
  device: cpu
  num_gpus: 2
training:
  steps: 10
  train_batch_size: 30
  train_micro_batch_size_per_gpu: 8
data:
  train: demo
)"));
  const Diagnostic error = planned.only_error();
  CHECK(error.location.file == planned.path);
  CHECK(error.location.line == 6);
  // 30 / 8 / 2 = 1 step of accumulation, and 8 x 1 x 2 = 16.
  CHECK(error.message.find("train_batch_size 30 must equal train_micro_batch_size_per_gpu 8 x "
                           "gradient_accumulation_steps 1 x data-parallel size 2 (= 16)") !=
        std::string::npos);
}

TEST_CASE("hostfile problems are reported at the hostfile's path and line") {
  Folder folder;
  const std::string hostfile = folder.write("two.hostfile", R"(
gpu-node-01 slots=8
# a comment
gpu-node-02 slots=eight
gpu-node-01 slots=8
)");
  const Planned planned = plan_file(folder.write("two.yaml", kTwoHosts));
  INFO(planned.diagnostics.format());
  REQUIRE_FALSE(planned.plan.has_value());
  const std::vector<Diagnostic> errors = planned.errors();
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].location.file == hostfile);
  CHECK(errors[0].location.line == 3);
  CHECK(errors[0].message.find("\"slots=eight\"") != std::string::npos);
  CHECK(errors[1].location.to_string() == hostfile + ":4");
  CHECK(errors[1].message ==
        "host \"gpu-node-01\" is already declared on line 1; list each host once");
}

TEST_CASE("a missing hostfile is an error at cluster.hostfile") {
  Folder folder;
  const Planned planned = plan_file(folder.write("two.yaml", kTwoHosts));
  const Diagnostic error = planned.only_error();
  CHECK(error.location.file == planned.path);
  CHECK(error.location.line == 4);
  CHECK(error.message.find("cannot read hostfile '" +
                           (fs::path(planned.path).parent_path() / "two.hostfile").string() +
                           "': No such file or directory") == 0);
}

TEST_CASE("inline hosts are used in order") {
  Folder folder;
  const Planned planned = plan_file(folder.write("hosts.yaml", R"(
cluster:
  runner: openmpi
  device: cpu
  hosts:
    - {host: b, slots: 2}
    - {host: a, slots: 1}
training:
  train_micro_batch_size_per_gpu: 4
  steps: 10
data:
  train: demo
)"));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(hosts_of(*planned.plan) == std::vector<std::string>{"b", "a"});
  CHECK(planned.plan->world_size() == 3);
  CHECK(planned.plan->placement.ranks[1].host == "b");
  CHECK(planned.plan->placement.ranks[2].host == "a");
  CHECK(planned.plan->batch.train_batch_size == 12);
}

// --- Runners -----------------------------------------------------------------

TEST_CASE("runner openmpi needs a hostfile or hosts") {
  Folder folder;
  const Planned planned = plan_file(folder.write("mpi.yaml", R"(
cluster:
  runner: openmpi
  device: cpu
training:
  train_micro_batch_size_per_gpu: 4
  steps: 10
data:
  train: demo
)"));
  const Diagnostic error = planned.only_error();
  CHECK(error.location.line == 2);
  CHECK(error.message ==
        "runner openmpi needs the hosts: give cluster.hostfile (or --hostfile) or cluster.hosts");
}

constexpr std::string_view kSlurm = R"(
cluster:
  runner: slurm
  device: cpu
training:
  train_batch_size: 64
  train_micro_batch_size_per_gpu: 8
  steps: 10
data:
  train: demo
)";

TEST_CASE("runner slurm outside an allocation is an error at cluster.runner") {
  Folder folder;
  const Planned planned = plan_file(folder.write("slurm.yaml", kSlurm));
  const Diagnostic error = planned.only_error();
  CHECK(error.location.line == 2);
  CHECK(error.message.find("runner slurm needs a Slurm allocation (SLURM_JOB_NODELIST is not "
                           "set)") == 0);
}

TEST_CASE("runner slurm inside an allocation plans its nodes and tasks") {
  Folder folder;
  const Planned planned = plan_file(
      folder.write("slurm.yaml", kSlurm),
      inputs(laptop(), {{"SLURM_JOB_NODELIST", "node[01-02]"}, {"SLURM_TASKS_PER_NODE", "4(x2)"}}));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  const JobPlan& plan = *planned.plan;
  CHECK(hosts_of(plan) == std::vector<std::string>{"node01", "node02"});
  CHECK(plan.hosts[0].slots == std::vector<int>{0, 1, 2, 3});
  CHECK(plan.hosts[1].slots == std::vector<int>{0, 1, 2, 3});
  CHECK(plan.grid.shape() == topology::GridShape{1, 8, 1});
  CHECK(plan.batch.gradient_accumulation_steps == 1);
  check_rank(plan, {1, "node01", 1, 0, 1, 0, {2, 3}, 0});
  check_rank(plan, {6, "node02", 2, 0, 6, 0, {4, 5}, 0});
  // 32 GiB shared by the 4 ranks of a host.
  CHECK(plan.device_memory_bytes == 8 * kGiB);
}

TEST_CASE("a CUDA job under Slurm runs no more ranks per node than Slurm gave it GPUs") {
  Folder folder;
  std::string cuda(kSlurm);
  cuda.replace(cuda.find("device: cpu"), 11, "device: cuda");
  const std::string spec = folder.write("slurm.yaml", cuda);
  const Planned fits = plan_file(spec, inputs(laptop(), {{"SLURM_JOB_NODELIST", "node[01-02]"},
                                                         {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                                         {"SLURM_GPUS_ON_NODE", "4"}}));
  INFO(fits.diagnostics.format());
  CHECK(fits.plan.has_value());
  const Planned over = plan_file(spec, inputs(laptop(), {{"SLURM_JOB_NODELIST", "node[01-02]"},
                                                         {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                                         {"SLURM_GPUS_ON_NODE", "2"}}));
  const Diagnostic error = over.only_error();
  CHECK(error.location.line == 2);
  CHECK(error.message ==
        "Slurm allocation: node node01 runs 4 tasks but has 2 GPU(s) (SLURM_GPUS_ON_NODE); a "
        "CUDA job runs one rank per GPU, so ask for as many GPUs as tasks per node "
        "(--gpus-per-node)");
}

TEST_CASE("a Slurm allocation without tasks per node is an error at cluster.runner") {
  Folder folder;
  const Planned planned = plan_file(folder.write("slurm.yaml", kSlurm),
                                    inputs(laptop(), {{"SLURM_JOB_NODELIST", "node[01-02]"}}));
  const Diagnostic error = planned.only_error();
  CHECK(error.location.line == 2);
  CHECK(error.message.find("Slurm allocation: SLURM_JOB_NODELIST is set but "
                           "SLURM_TASKS_PER_NODE is not") == 0);
}

TEST_CASE("a local runner plans this machine even inside a Slurm allocation") {
  Folder folder;
  const Planned planned = plan_file(
      folder.write("local.yaml", R"(
cluster:
  device: cpu
  num_gpus: 2
training:
  train_micro_batch_size_per_gpu: 4
  steps: 10
data:
  train: demo
)"),
      inputs(laptop(), {{"SLURM_JOB_NODELIST", "node[01-02]"}, {"SLURM_TASKS_PER_NODE", "4(x2)"}}));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(hosts_of(*planned.plan) == std::vector<std::string>{"localhost"});
  CHECK(planned.plan->world_size() == 2);
}

// --- Placement and memory warnings ---------------------------------------------

TEST_CASE("a tensor group that must cross hosts is warned about") {
  Folder folder;
  const Planned planned = plan_file(folder.write("straddle.yaml", R"(
cluster:
  runner: openmpi
  device: cuda
  hosts:
    - {host: a, slots: 6}
    - {host: b, slots: 6}
  topology: {cores_per_host: 8, numa_nodes_per_host: 1, gpu_islands: [[0, 1, 2, 3, 4, 5]],
             device_memory_gb: 80}
parallelism:
  tensor: 4
training:
  train_micro_batch_size_per_gpu: 1
  steps: 10
data:
  train: demo
)"));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(planned.plan->warnings ==
        std::vector<std::string>{"tensor-parallel group [8, 9, 10, 11] spans hosts a and b: its "
                                 "all-reduces will cross the network",
                                 kPlaintextWarning});
}

TEST_CASE("a GPU job with its model states in host memory is warned about the GPU's part only") {
  Folder folder;
  // GPT-2 small, ZeRO-Offload: 8 bytes a parameter on the GPU, 124.4M
  // parameters (1.0 GB), and the activations.
  const std::string text = R"(
cluster:
  device: cuda
  num_gpus: 1
  topology:
    device_memory_gb: 1
training:
  train_micro_batch_size_per_gpu: 1
  steps: 10
  zero_optimization:
    stage: 2
    offload_optimizer:
      device: cpu
data:
  train: demo
)";
  const Planned planned = plan_file(folder.write("offload.yaml", text));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(planned.plan->host_model_states);
  REQUIRE(planned.plan->warnings.size() == 1);
  CHECK_THAT(planned.plan->warnings[0],
             Catch::StartsWith("pipeline stage 0: the model's fp32 parameters and gradients and "
                               "the activations need ") &&
                 Catch::EndsWith("more than the 1.00 GiB a GPU has; checkpoint activations, or "
                                 "split the model over more tensor or pipeline ranks"));

  // Host memory holds the states: 1.5 GiB of it is too little for 124M
  // parameters' fp32 weights, gradients and moments (16 bytes each, 1.9 GiB).
  LocalMachine small = laptop();
  small.memory_bytes = 3 * kGiB / 2;
  const Planned tight = plan_file(folder.write("offload.yaml", text), inputs(small));
  REQUIRE(tight.plan.has_value());
  REQUIRE(tight.plan->warnings.size() == 2);
  CHECK_THAT(tight.plan->warnings[1],
             Catch::StartsWith("pipeline stage 0: the model states and ZeRO's buffers in host "
                               "memory need ") &&
                 Catch::EndsWith("more than the 1.50 GiB each of a host's 1 ranks has of its "
                                 "memory (this machine's); use offload_optimizer nvme, more "
                                 "hosts, or fewer ranks per host"));
}

TEST_CASE("a GPU job with a share of its optimizer offloaded counts ZeRO's workspace on the GPU") {
  Folder folder;
  const std::string text = R"(
cluster:
  device: cuda
  num_gpus: 2
  topology:
    device_memory_gb: 1
training:
  train_micro_batch_size_per_gpu: 1
  steps: 10
  zero_optimization:
    stage: 3
    offload_optimizer:
      device: cpu
      ratio: 0.5
data:
  train: demo
)";
  const Planned planned = plan_file(folder.write("partial.yaml", text));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  const JobPlan& plan = *planned.plan;
  CHECK(plan.host_model_states);
  CHECK_FALSE(plan.workspace_in_host_memory);
  // Half of each rank's optimizer states in host memory, half on the GPU.
  const ModelStateBytes& bytes = plan.memory_by_stage[0];
  CHECK(bytes.offloaded_to_host > 0);
  CHECK(bytes.optimizer_states > 0);
  // Stage 3's gathered parameters and backward's gradient pages are the
  // GPU's, as without offload.
  CHECK(plan.workspace_by_stage[0].total() > 0);
  CHECK(plan.workspace_on_device(0) == plan.workspace_by_stage[0].total());
  // Too much for a 1 GiB GPU: raising the ratio comes first.
  REQUIRE(plan.warnings.size() == 1);
  CHECK_THAT(plan.warnings[0], Catch::Contains("raise offload_optimizer.ratio (0.5)"));
}

TEST_CASE("memory needs larger than the device memory are warned about per stage") {
  Folder folder;
  // GPT-2 small in fp32, pipeline 2, one data rank: every model state on
  // the GPU, fp32 parameters and gradients and Adam's moments, 1.22 GiB on
  // stage 0 and 1.21 GiB on stage 1; with the activations of the
  // micro-batches each keeps in flight (two on stage 0, one on stage 1,
  // which also holds the logits) and attention's scratch (a head's
  // probabilities and their gradient for 256 query rows, 2 MiB), 1.84 and
  // 1.93 GiB.
  const std::string text = R"(
cluster:
  device: cuda
  num_gpus: 2
  topology:
    device_memory_gb: 1
parallelism:
  pipeline: 2
training:
  train_micro_batch_size_per_gpu: 1
  gradient_accumulation_steps: 2
  steps: 10
data:
  train: demo
)";
  const Planned planned = plan_file(folder.write("big.yaml", text));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(planned.plan->memory_by_stage[0].device_total() == 16 * int64_t{81'947'136});
  CHECK(planned.plan->memory_by_stage[1].device_total() == 16 * int64_t{81'162'240});
  CHECK(planned.plan->memory_by_stage[0].offloaded_to_host == 0);
  CHECK(planned.plan->device_memory_bytes == kGiB);
  const auto warning = [](int stage, const char* need) {
    return fmt::format(
        "pipeline stage {}: the model's fp32 parameters and gradients, the optimizer's states "
        "and the activations need {} GiB per rank, more than the 1.00 GiB a GPU has; offload "
        "the optimizer (offload_optimizer device cpu), checkpoint activations, or split the "
        "model over more tensor or pipeline ranks",
        stage, need);
  };
  CHECK(planned.plan->warnings == std::vector<std::string>{warning(0, "1.84"), warning(1, "1.93")});

  // 1.9 GiB: only stage 1 is too big.
  spec::LoadOptions options;
  options.overrides = {"cluster.topology.device_memory_gb=1.9"};
  const Planned between = plan_file(planned.path, inputs(), options);
  INFO(between.diagnostics.format());
  REQUIRE(between.plan.has_value());
  REQUIRE(between.plan->warnings.size() == 1);
  CHECK(between.plan->warnings[0].starts_with("pipeline stage 1: "));
}

TEST_CASE("CUDA ranks with unknown GPU memory get a warning") {
  Folder folder;
  const Planned planned = plan_file(folder.write("cuda.yaml", R"(
cluster:
  device: cuda
  num_gpus: 2
training:
  train_micro_batch_size_per_gpu: 1
  steps: 10
data:
  train: demo
)"));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(planned.plan->device_memory_bytes == 0);
  CHECK(planned.plan->warnings ==
        std::vector<std::string>{
            "GPU memory is unknown here (no nvidia-smi): set cluster.topology.device_memory_gb "
            "to check that model states fit"});
}

TEST_CASE("CPU ranks with unknown host memory get a warning about host memory") {
  Folder folder;
  LocalMachine unknown = laptop();
  unknown.memory_bytes = 0;
  const Planned planned = plan_file(folder.write("cpu.yaml", R"(
cluster:
  device: cpu
training:
  train_micro_batch_size_per_gpu: 1
  steps: 10
data:
  train: demo
)"),
                                    inputs(unknown));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  CHECK(planned.plan->warnings ==
        std::vector<std::string>{"host memory is unknown here: set "
                                 "cluster.topology.device_memory_gb to check that model states "
                                 "fit"});
}

namespace {

TEST_CASE("a world beyond what dslaunch plans is an error, not an exhausted machine") {
  Folder folder;
  // 33 hosts at the 65,536-slot cap: 2,162,688 ranks, past the 2,097,152 allowed.
  std::string hosts;
  for (int h = 0; h < 33; ++h) hosts += fmt::format("    - {{host: h{}, slots: 65536}}\n", h);
  const Planned planned = plan_file(folder.write("huge.yaml", R"(
cluster:
  runner: openmpi
  device: cpu
  hosts:
)" + hosts + R"(data: {train: demo}
training: {train_micro_batch_size_per_gpu: 1, steps: 1}
)"));
  const Diagnostic error = planned.only_error();
  CHECK(error.message.rfind("2162688 ranks on 33 host(s) is more than dslaunch plans (2097152)",
                            0) == 0);
}

TEST_CASE("a local CUDA job cannot ask for more GPUs than this machine has") {
  Folder folder;
  LocalMachine server = laptop();
  server.gpus = 2;
  const Planned planned = plan_file(folder.write("cuda.yaml", R"(
cluster:
  device: cuda
  num_gpus: 4
training: {train_micro_batch_size_per_gpu: 1, steps: 1}
data: {train: demo}
)"),
                                    inputs(server));
  const Diagnostic error = planned.only_error();
  CHECK(error.location.line == 3);  // the fixture drops the leading newline
  CHECK(error.message ==
        "cluster.num_gpus is 4 but this machine has 2 GPU(s); a local job runs on this machine "
        "only");
}

TEST_CASE("remote hosts described by this machine alone get a warning naming what was assumed") {
  Folder folder;
  folder.write("two.hostfile", "a slots=2\nb slots=2\n");
  const std::string spec_head = R"(
cluster:
  runner: openmpi
  device: cuda
  hostfile: two.hostfile
)";
  const std::string spec_tail = R"(
training: {train_micro_batch_size_per_gpu: 1, steps: 1}
data: {train: demo}
)";
  const Planned assumed = plan_file(folder.write("assumed.yaml", spec_head + spec_tail));
  REQUIRE(assumed.plan.has_value());
  CHECK(std::count(assumed.plan->warnings.begin(), assumed.plan->warnings.end(),
                   "the hosts' insides are assumed to be like this machine's for "
                   "cluster.topology.cores_per_host, cluster.topology.numa_nodes_per_host, "
                   "cluster.topology.gpu_islands, cluster.topology.device_memory_gb; set them in "
                   "the spec if the hosts differ") == 1);

  const Planned described = plan_file(folder.write(
      "described.yaml",
      spec_head + R"(  topology: {cores_per_host: 8, numa_nodes_per_host: 1, device_memory_gb: 80,
             gpu_islands: [[0, 1]]}
)" + spec_tail));
  INFO(described.diagnostics.format());
  REQUIRE(described.plan.has_value());
  CHECK(described.plan->warnings == std::vector<std::string>{kPlaintextWarning});
}

TEST_CASE("a plan on more than one host warns once that its control plane is plaintext") {
  Folder folder;
  folder.write("two.hostfile", "a slots=1\nb slots=1\n");
  folder.write("one.hostfile", "a slots=2\n");
  for (const char* name : {"c.pem", "c.key", "ca.pem"}) folder.write(name, "PEM");
  const std::string spec_tail = R"(
  topology: {cores_per_host: 8, numa_nodes_per_host: 1}
training: {train_micro_batch_size_per_gpu: 1, steps: 1}
data: {train: demo}
)";
  const auto spec = [&](const std::string& cluster) {
    return "cluster:\n  runner: openmpi\n  device: cpu\n" + cluster + spec_tail;
  };
  const Planned plaintext = plan_file(folder.write("two.yaml", spec("  hostfile: two.hostfile")));
  INFO(plaintext.diagnostics.format());
  REQUIRE(plaintext.plan.has_value());
  CHECK(std::count(plaintext.plan->warnings.begin(), plaintext.plan->warnings.end(),
                   kPlaintextWarning) == 1);

  const Planned with_tls = plan_file(folder.write(
      "tls.yaml", spec("  hostfile: two.hostfile\n  tls: {cert: c.pem, key: c.key, ca: ca.pem}")));
  INFO(with_tls.diagnostics.format());
  REQUIRE(with_tls.plan.has_value());
  CHECK(with_tls.plan->warnings.empty());

  const Planned one_host = plan_file(folder.write("one.yaml", spec("  hostfile: one.hostfile")));
  INFO(one_host.diagnostics.format());
  REQUIRE(one_host.plan.has_value());
  CHECK(one_host.plan->warnings.empty());
}

TEST_CASE("a commbench plan places ranks but resolves no batch and estimates no memory") {
  Folder folder;
  const Planned planned = plan_file(folder.write("bench.yaml", R"(
kind: commbench
cluster: {device: cpu, num_gpus: 4}
parallelism: {tensor: 2}
)"));
  INFO(planned.diagnostics.format());
  REQUIRE(planned.plan.has_value());
  const JobPlan& plan = *planned.plan;
  CHECK(plan.grid.shape() == topology::GridShape{1, 2, 2});
  CHECK(plan.batch.train_batch_size == 0);
  CHECK(plan.memory_by_stage.empty());
  CHECK(plan.placement.ranks.size() == 4);
}

}  // namespace
}  // namespace dslaunch::plan
