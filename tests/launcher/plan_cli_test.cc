// `dslaunch plan`, run as a user would run it on the example specs.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"
#include "topology/machine_topology.h"

using dslaunch::testing::run_command;
using dslaunch::testing::runfile;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;

dslaunch::testing::CommandResult dslaunch_cli(const std::string& args) {
  return run_command(runfile("launcher/dslaunch") + " " + args);
}

std::string demo() { return runfile("jobs/demo.yaml"); }
std::string two_hosts() { return runfile("jobs/gpt2-medium-2host.yaml"); }

// A path under $TEST_TMPDIR; `text`, when given, is written there.
std::string temp_file(const std::string& name, const std::string& text = "") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path path = fs::path(tmp != nullptr ? tmp : "/tmp") / name;
  if (!text.empty()) {
    std::ofstream file(path);
    file << text;
    REQUIRE(file.good());
  }
  return path.string();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

json plan_json(const std::string& args) {
  const auto result = dslaunch_cli("plan " + args + " --json");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return json::parse(result.output);
}

using Groups = std::vector<std::vector<int>>;

}  // namespace

TEST_CASE("dslaunch plan --json plans the demo: two CPU ranks on localhost") {
  const json plan = plan_json(demo());

  CHECK(plan["name"] == "demo");
  CHECK(plan["device"] == "cpu");
  CHECK(plan["world_size"] == 2);
  CHECK(plan["hosts"] == json{{"localhost", {0, 1}}});
  CHECK(plan["batch"] == json{{"train_batch_size", 16},
                              {"train_micro_batch_size_per_gpu", 8},
                              {"gradient_accumulation_steps", 1}});
  CHECK(plan["grid"] == json{{"pipeline", 1}, {"data", 2}, {"tensor", 1}});
  CHECK(plan["groups"]["pipeline"].get<Groups>() == Groups{{0}, {1}});
  CHECK(plan["groups"]["data"].get<Groups>() == Groups{{0, 1}});
  CHECK(plan["groups"]["tensor"].get<Groups>() == Groups{{0}, {1}});
  // 4 layers, hidden 256, vocab 256 (a multiple of 64 already), seq 256.
  CHECK(plan["model"] == json{{"parameters", 3'290'624}, {"padded_vocab_size", 256}});
  CHECK(plan["device_memory_bytes"].get<int64_t>() > 0);
  CHECK(plan["warnings"] == json::array());

  const json& ranks = plan["ranks"];
  REQUIRE(ranks.size() == 2);
  const std::set<std::string> fields = {"rank",   "host",      "slot",       "pipeline",
                                        "data",   "tensor",    "local_rank", "local_world_size",
                                        "device", "numa_node", "cpu_cores"};
  std::vector<int> all_cores;
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    const json& rank = ranks[r];
    std::set<std::string> keys;
    for (const auto& item : rank.items()) keys.insert(item.key());
    CHECK(keys == fields);
    CHECK(rank["rank"] == r);
    CHECK(rank["host"] == "localhost");
    CHECK(rank["slot"] == r);
    CHECK(rank["pipeline"] == 0);
    CHECK(rank["data"] == r);
    CHECK(rank["tensor"] == 0);
    CHECK(rank["local_rank"] == r);
    CHECK(rank["local_world_size"] == 2);
    CHECK(rank["device"] == "cpu");
    // Each rank's cores are a non-empty, contiguous run.
    const auto cores = rank["cpu_cores"].get<std::vector<int>>();
    REQUIRE_FALSE(cores.empty());
    CHECK(cores.back() - cores.front() + 1 == static_cast<int>(cores.size()));
    all_cores.insert(all_cores.end(), cores.begin(), cores.end());
  }
  // With at least one core per rank, the two runs are disjoint and cover this machine.
  const int machine_cores = dslaunch::topology::probe_machine_topology().cores;
  if (machine_cores >= 2) {
    std::vector<int> every_core(machine_cores);
    for (int c = 0; c < machine_cores; ++c) every_core[c] = c;
    CHECK(all_cores == every_core);
  }

  // fp32, ZeRO-1 over 2 ranks: 4Ψ + 4Ψ + 8Ψ/2 with Ψ = 3,290,624.
  const json& memory = plan["memory"];
  REQUIRE(memory.size() == 2);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    const json& bytes = memory[r];
    CHECK(bytes["rank"] == r);
    CHECK(bytes["parameters"] == 13'162'496);
    CHECK(bytes["gradients"] == 13'162'496);
    CHECK(bytes["optimizer_states"] == 13'162'496);
    CHECK(bytes["device_total"].get<int64_t>() == bytes["parameters"].get<int64_t>() +
                                                      bytes["gradients"].get<int64_t>() +
                                                      bytes["optimizer_states"].get<int64_t>());
    CHECK(bytes["offloaded_to_host"] == 0);
    CHECK(bytes["offloaded_to_nvme"] == 0);
  }
}

TEST_CASE("dslaunch plan --json plans the 2-host example: 16 ranks, a stage per host") {
  const json plan = plan_json(two_hosts());

  CHECK(plan["device"] == "cuda");
  CHECK(plan["world_size"] == 16);
  const std::vector<int> eight = {0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(plan["hosts"] == json{{"gpu-node-01", eight}, {"gpu-node-02", eight}});
  // From gpt2-medium-ds_config.json: 256 = 8 x 16 x data 2.
  CHECK(plan["batch"] == json{{"train_batch_size", 256},
                              {"train_micro_batch_size_per_gpu", 8},
                              {"gradient_accumulation_steps", 16}});
  CHECK(plan["grid"] == json{{"pipeline", 2}, {"data", 2}, {"tensor", 4}});
  CHECK(plan["groups"]["tensor"].get<Groups>() ==
        Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
  CHECK(plan["groups"]["pipeline"].get<Groups>() ==
        Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}});
  CHECK(plan["groups"]["data"].get<Groups>() ==
        Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}});
  CHECK(plan["model"] == json{{"parameters", 354'823'168}, {"padded_vocab_size", 50'688}});
  CHECK(plan["device_memory_bytes"] == 80LL << 30);

  const json& ranks = plan["ranks"];
  REQUIRE(ranks.size() == 16);
  for (int r = 0; r < 16; ++r) {
    INFO("rank " << r);
    CHECK(ranks[r]["host"] == (r < 8 ? "gpu-node-01" : "gpu-node-02"));
    CHECK(ranks[r]["slot"] == r % 8);
    CHECK(ranks[r]["device"] == "cuda:" + std::to_string(r % 8));
    CHECK(ranks[r]["pipeline"] == r / 8);
    CHECK(ranks[r]["tensor"] == r % 4);
    // 64 cores on 2 NUMA nodes, GPUs 0-3 on node 0: 8 cores a GPU.
    CHECK(ranks[r]["numa_node"] == r % 8 / 4);
    CHECK(ranks[r]["cpu_cores"].front() == r % 8 * 8);
    CHECK(ranks[r]["cpu_cores"].size() == 8);
  }

  // bf16, ZeRO-1 over 2 replicas: Ψ = 51,868,672 on stage 0, 50,822,144 on
  // stage 1 (halves of whole multiples of 16 floats). The GPU holds every
  // state: the fp32 parameters and gradients (4Ψ + 4Ψ), its half's
  // optimizer (fp32 masters and both moments, 12 bytes a parameter), and the
  // gradient reduction's buffers for one bucket of the whole stage
  // (reduce_bucket_size 5e8) in bf16 (8 bytes a parameter over 2 ranks:
  // the half's fp32 sum, the bucket rounded, both halves received, one
  // widened).
  const int64_t psi0 = 51'868'672;
  const int64_t psi1 = 50'822'144;
  const json& memory = plan["memory"];
  REQUIRE(memory.size() == 16);
  CHECK(memory[0]["parameters"] == 4 * psi0);
  CHECK(memory[0]["optimizer_states"] == 12 * psi0 / 2);
  CHECK(memory[0]["communication_buffers"] == 8 * psi0);
  CHECK(memory[0]["device_total"] == 22 * psi0);
  CHECK(memory[0]["offloaded_to_host"] == 0);
  CHECK(memory[15]["parameters"] == 4 * psi1);
  CHECK(memory[15]["device_total"] == 22 * psi1);

  const auto warnings = plan["warnings"].get<std::vector<std::string>>();
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] ==
        "the control plane is plaintext: the job token and every controller message cross the "
        "network unencrypted between the hosts; set cluster.tls (cert, key, ca) to encrypt them");
}

TEST_CASE("dslaunch plan counts a GPU job as training on GPUs holds it, optimizer on it or not") {
  const json on_gpu = plan_json(two_hosts());
  const json offloaded =
      plan_json(two_hosts() + " --set training.zero_optimization.offload_optimizer.device=cpu");
  CHECK(on_gpu["host_model_states"] == true);
  CHECK(offloaded["host_model_states"] == true);
  // Stage 0's Ψ = 51,868,672: fp32 parameters and whole fp32 gradients on
  // the GPU; offloaded, in host memory the fp32 parameters and whole
  // gradients (stage 1) and this rank's half of the masters and moments.
  const int64_t psi = 51'868'672;
  for (const json* plan : {&on_gpu, &offloaded}) {
    const json& bytes = (*plan)["memory"][0];
    CHECK(bytes["parameters"] == 4 * psi);
    CHECK(bytes["gradients"] == 4 * psi);
    CHECK(bytes["offloaded_to_nvme"] == 0);
  }
  CHECK(offloaded["memory"][0]["optimizer_states"] == 0);
  CHECK(offloaded["memory"][0]["device_total"] == 8 * psi);
  CHECK(offloaded["memory"][0]["offloaded_to_host"] == 4 * psi + 4 * psi + 12 * psi / 2);
  // Without offload everything is on the GPU: the optimizer's half and the
  // gradient reduction's buffers beside the parameters and gradients.
  CHECK(on_gpu["memory"][0]["optimizer_states"] == 12 * psi / 2);
  CHECK(on_gpu["memory"][0]["communication_buffers"] == 8 * psi);
  CHECK(on_gpu["memory"][0]["device_total"] == 8 * psi + 12 * psi / 2 + 8 * psi);
  CHECK(on_gpu["memory"][0]["offloaded_to_host"] == 0);
}

TEST_CASE("dslaunch plan refuses a resolved spec too large for one controller message") {
  // 33 MiB in one env value: the resolved spec cannot be sent to the ranks.
  std::ifstream demo_file(demo());
  std::stringstream text;
  text << demo_file.rdbuf() << "env:\n  BIG: " << std::string(33u << 20, 'x') << "\n";
  const std::string path = temp_file("too_large.yaml", text.str());
  const auto result = dslaunch_cli("plan " + path);
  CHECK(result.exit_code == 2);
  CHECK(result.output.find(path + ": error: the resolved job spec is ") != std::string::npos);
  CHECK(result.output.find("more than the 32 MiB the controller can send its ranks; keep large "
                           "data in files the spec names") != std::string::npos);
}

TEST_CASE("dslaunch plan --include keeps one host of the 2-host example: 8 ranks, data 1") {
  // 8 slots = tensor 4 x pipeline 2, so data 1 and 256 = 8 x 32 x 1.
  const json plan = plan_json(two_hosts() + " --include gpu-node-01");
  CHECK(plan["world_size"] == 8);
  CHECK(plan["hosts"] == json{{"gpu-node-01", {0, 1, 2, 3, 4, 5, 6, 7}}});
  CHECK(plan["grid"] == json{{"pipeline", 2}, {"data", 1}, {"tensor", 4}});
  CHECK(plan["batch"]["gradient_accumulation_steps"] == 32);
  CHECK(plan["groups"]["pipeline"].get<Groups>() == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(plan["ranks"][4]["pipeline"] == 1);
  CHECK(plan["ranks"][4]["slot"] == 4);
  // One data rank keeps every state on the GPU, 20 bytes a parameter in
  // bf16 training: fp32 parameters, gradients and masters, and both
  // moments; none in host memory.
  CHECK(plan["memory"][0]["device_total"] == 20 * 51'868'672LL);
  CHECK(plan["memory"][0]["offloaded_to_host"] == 0);
}

TEST_CASE("dslaunch plan --exclude and --hostfile choose the hosts") {
  const json excluded = plan_json(two_hosts() + " --exclude gpu-node-01");
  CHECK(excluded["hosts"] == json{{"gpu-node-02", {0, 1, 2, 3, 4, 5, 6, 7}}});

  const std::string hostfile = temp_file("one-node.hostfile", "gpu-node-07 slots=8\n");
  const json other = plan_json(two_hosts() + " --hostfile " + hostfile);
  CHECK(other["hosts"] == json{{"gpu-node-07", {0, 1, 2, 3, 4, 5, 6, 7}}});
  CHECK(other["world_size"] == 8);
}

TEST_CASE("dslaunch plan takes DeepSpeed's launcher flags over the spec's keys") {
  const std::string hostfile =
      temp_file("two-nodes.hostfile", "gpu-node-01 slots=8\ngpu-node-02 slots=8\n");
  const json four_each = plan_json(two_hosts() + " -H " + hostfile + " --num_gpus 4");
  CHECK(four_each["world_size"] == 8);
  CHECK(four_each["hosts"] == json{{"gpu-node-01", {0, 1, 2, 3}}, {"gpu-node-02", {0, 1, 2, 3}}});
  const json one_node = plan_json(two_hosts() + " -H " + hostfile + " --num_nodes 1");
  CHECK(one_node["hosts"] == json{{"gpu-node-01", {0, 1, 2, 3, 4, 5, 6, 7}}});
  CHECK(plan_json(two_hosts() + " -i gpu-node-02")["hosts"] ==
        json{{"gpu-node-02", {0, 1, 2, 3, 4, 5, 6, 7}}});
  CHECK(plan_json(two_hosts() + " -e gpu-node-02")["hosts"] ==
        json{{"gpu-node-01", {0, 1, 2, 3, 4, 5, 6, 7}}});
  CHECK(plan_json(two_hosts() + " --master_addr 10.0.0.5 --master_port 29500 --launcher slurm "
                                "--launcher_args '--mpi=pmix'")["world_size"] == 16);

  // A wrong value is reported at the flag that gave it.
  const auto pdsh = dslaunch_cli("plan " + two_hosts() + " --launcher pdsh");
  CHECK(pdsh.exit_code == 2);
  CHECK_THAT(pdsh.output, Catch::Contains("--launcher pdsh") && Catch::Contains("cluster.runner"));
  const auto port = dslaunch_cli("plan " + two_hosts() + " --master_port 70000");
  CHECK(port.exit_code == 2);
  CHECK_THAT(port.output, Catch::Contains("--master_port 70000"));
}

TEST_CASE("dslaunch plan prints the plan as text") {
  const auto result = dslaunch_cli("plan " + demo());
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.rfind("job demo: 2 rank(s) on 1 host(s), device cpu\n", 0) == 0);
  CHECK(result.output.find("\nbatch: train_batch_size 16 = micro 8 x accumulation 1 x data 2\n") !=
        std::string::npos);
  CHECK(result.output.find("\ngrid: pipeline 1 x data 2 x tensor 1\n") != std::string::npos);
  // rank, host, slot, pipeline, data, tensor, local rank, device, cores.
  CHECK(std::regex_search(result.output,
                          std::regex(R"(\n +0  localhost +0 +0 +0 +0 +0  cpu +\d+(-\d+)?\n)")));
  CHECK(std::regex_search(result.output,
                          std::regex(R"(\n +1  localhost +1 +0 +1 +0 +1  cpu +\d+(-\d+)?\n)")));
  CHECK(result.output.find("\n  data     [0,1]\n") != std::string::npos);
  CHECK(result.output.find("memory per rank (fp32, ZeRO stage 1, data-parallel 2)") !=
        std::string::npos);
  // The demo's one stage holds blocks 0 to 3.
  CHECK(std::regex_search(result.output, std::regex(R"(\n +0 +0-3 +)")));
}

TEST_CASE("dslaunch plan shows each stage's model chunks under the interleaved schedule") {
  const std::string interleaved =
      demo() + " --set parallelism.pipeline=2 --set parallelism.virtual_stages=2";
  const auto result = dslaunch_cli("plan " + interleaved);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  // The demo's 4 blocks as 4 virtual stages: stage 0 runs blocks 0 and 2.
  CHECK(std::regex_search(result.output, std::regex(R"(\n +0 +0-0,2-2 +)")));
  CHECK(std::regex_search(result.output, std::regex(R"(\n +1 +1-1,3-3 +)")));
  const json plan = plan_json(interleaved);
  CHECK(plan["stages"][0]["chunks"] == json{{0, 1}, {2, 3}});
  CHECK(plan["stages"][1]["chunks"] == json{{1, 2}, {3, 4}});
  CHECK_FALSE(plan["stages"][0].contains("layer_begin"));
  const json plain = plan_json(demo() + " --set parallelism.pipeline=2");
  CHECK(plain["stages"][0]["layer_begin"] == 0);
  CHECK(plain["stages"][0]["chunks"] == json{{0, 2}});
}

TEST_CASE("dslaunch plan --rankfile writes the Open MPI rankfile") {
  const std::string rankfile = temp_file("demo.rankfile");
  const auto result = dslaunch_cli("plan " + demo() + " --json --rankfile " + rankfile);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  std::ifstream file(rankfile);
  REQUIRE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  CHECK(std::regex_match(text.str(), std::regex("rank 0=localhost slot=\\d+(-\\d+)?\n"
                                                "rank 1=localhost slot=\\d+(-\\d+)?\n")));

  const auto unwritable = dslaunch_cli("plan " + demo() + " --rankfile /nonexistent/demo.rankfile");
  CHECK(unwritable.exit_code == 2);
  CHECK(unwritable.output ==
        "/nonexistent/demo.rankfile: cannot write the rankfile: No such file "
        "or directory\n");
}

TEST_CASE("dslaunch plan exits 2 when the batch does not fit, saying why") {
  const auto result = dslaunch_cli("plan " + demo() + " --set training.train_batch_size=30");
  CHECK(result.exit_code == 2);
  const auto lines = lines_of(result.output);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].rfind("--set training.train_batch_size=30: error: batch sizes do not fit "
                       "together: train_batch_size 30 must equal train_micro_batch_size_per_gpu "
                       "8 x gradient_accumulation_steps 1 x data-parallel size 2 (= 16)",
                       0) == 0);
}

TEST_CASE("a spec without cluster.device plans on what auto chose, and says why") {
  const std::string spec = temp_file("no-device.yaml",
                                     "cluster: {num_gpus: 2}\n"
                                     "training: {steps: 3, train_batch_size: 4}\n"
                                     "data: {train: demo}\n");
  const auto text = dslaunch_cli("plan " + spec);
  INFO(text.output);
  REQUIRE(text.exit_code == 0);
  // This machine has no GPU, and no build trains on one yet.
  CHECK(text.output.rfind("job no-device: 2 rank(s) on 1 host(s), device cpu\n"
                          "cluster.device auto: cpu: ",
                          0) == 0);
  const auto json = dslaunch_cli("plan --json " + spec);
  REQUIRE(json.exit_code == 0);
  const auto plan = nlohmann::json::parse(json.output);
  CHECK(plan["device"] == "cpu");
  CHECK_THAT(plan["device_choice"].get<std::string>(), Catch::StartsWith("cpu: "));
}

TEST_CASE("dslaunch plan prints every mistake in a spec and exits 2") {
  const std::string spec = temp_file("three-mistakes.yaml",
                                     "cluster:\n"
                                     "  device: tpu\n"
                                     "model:\n"
                                     "  hidden_sise: 512\n"
                                     "training:\n"
                                     "  steps: -5\n"
                                     "  train_batch_size: 16\n"
                                     "data:\n"
                                     "  train: demo\n");
  const auto result = dslaunch_cli("plan " + spec);
  CHECK(result.exit_code == 2);
  const auto lines = lines_of(result.output);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] ==
        spec +
            ":2:11: error: cluster.device must be one of cpu, cuda, auto, got 'tpu'; did "
            "you mean 'cpu'?");
  CHECK(lines[1] ==
        spec + ":4:3: error: unknown key 'hidden_sise' in model; did you mean 'hidden_size'?");
  CHECK(lines[2] == spec + ":6:10: error: training.steps must be at least 1, got -5");
}

TEST_CASE("dslaunch plan exits 2 on an unknown host in --include") {
  const auto result = dslaunch_cli("plan " + two_hosts() + " --include gpu-node-03");
  CHECK(result.exit_code == 2);
  CHECK(result.output.find("--include gpu-node-03: error: include: unknown host \"gpu-node-03\"; "
                           "the hostfile does not list it\n") == 0);
}

TEST_CASE("dslaunch plan exits 2 on a missing spec file, naming it") {
  const std::string missing = temp_file("no-such-spec.yaml");
  const auto result = dslaunch_cli("plan " + missing);
  CHECK(result.exit_code == 2);
  CHECK(result.output ==
        missing + ": error: cannot read job spec '" + missing + "': No such file or directory\n");
}

TEST_CASE("dslaunch plan without a spec is a usage error") {
  const auto result = dslaunch_cli("plan");
  CHECK(result.exit_code == 2);
  CHECK(result.output.find("spec is required") != std::string::npos);
}

TEST_CASE(
    "dslaunch plan of an elastic job shows DeepSpeed's elastic batch and the sizes it suits") {
  // 4 ranks: batch 16 over micro-batches [2, 4] suits data-parallel 1, 2 and 4.
  const std::string elastic =
      " --set cluster.num_gpus=4 --set training.train_batch_size=null"
      " --set training.train_micro_batch_size_per_gpu=null"
      " --set 'training.elasticity={enabled: true, max_train_batch_size: 16, "
      "micro_batch_sizes: [2, 4], max_gpus: 4, version: 0.1}'";
  auto result = dslaunch_cli("plan " + demo() + elastic);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.find("\nbatch: train_batch_size 16 = micro 4 x accumulation 1 x data 4 "
                           "(elasticity 0.1: data-parallel sizes 1, 2, 4)\n") != std::string::npos);
  // 3 ranks is no size this batch suits.
  result = dslaunch_cli("plan " + demo() + elastic + " --set cluster.num_gpus=3");
  CHECK(result.exit_code == 2);
  CHECK(result.output.find("training.elasticity") != std::string::npos);
}
