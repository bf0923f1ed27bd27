#include "core/spec/spec_parser.h"

#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <yaml-cpp/yaml.h>

#include "core/spec/diagnostics.h"
#include "core/spec/job_spec.h"
#include "tests/core/spec/spec_fixture.h"

namespace dslaunch::spec {
namespace {

namespace fs = std::filesystem;
using testing::Loaded;
using testing::SpecFolder;
using Severity = Diagnostic::Severity;

// The two keys every spec needs (lines 1-4), so tests can add only what they
// are about.
constexpr std::string_view kMinimal = "training:\n  steps: 10\ndata:\n  train: demo\n";

// kMinimal followed by `more`, whose first line is line 5 of the spec (a
// leading newline, as raw string literals have, is dropped).
std::string minimal_and(std::string_view more) {
  if (!more.empty() && more.front() == '\n') more.remove_prefix(1);
  return std::string(kMinimal) + std::string(more);
}

std::string normal(const fs::path& path) { return path.lexically_normal().string(); }

}  // namespace

// --- Defaults and typed values ----------------------------------------------

TEST_CASE("a minimal spec gets every default from job_spec.h") {
  SpecFolder folder;
  const Loaded loaded = folder.load(kMinimal, {}, "gpt2-small.yaml");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  const JobSpec& spec = loaded.spec;

  CHECK(spec.name == "gpt2-small");  // the spec file's stem
  CHECK(spec.spec_path == loaded.path);
  CHECK(spec.deepspeed_config.empty());
  CHECK(spec.cluster.runner == Runner::kLocal);
  CHECK(spec.cluster.device == Device::kAuto);
  CHECK(spec.cluster.hostfile.empty());
  CHECK(spec.cluster.hosts.empty());
  CHECK(spec.cluster.num_nodes == -1);
  CHECK(spec.cluster.num_gpus == -1);
  CHECK(spec.cluster.ssh_port == 22);
  CHECK(spec.parallelism.tensor == 1);
  CHECK(spec.parallelism.pipeline == 1);

  // GPT-2 small.
  CHECK(spec.model.num_layers == 12);
  CHECK(spec.model.hidden_size == 768);
  CHECK(spec.model.num_attention_heads == 12);
  CHECK(spec.model.vocab_size == 50257);
  CHECK(spec.model.seq_length == 1024);
  CHECK(spec.model.dropout == 0.0);
  CHECK(spec.model.init_seed == 1234);
  CHECK(spec.model.make_vocab_size_divisible_by == 128);

  CHECK(spec.data.demo());
  CHECK(spec.data.valid.empty());
  CHECK(spec.data.format == DataFormat::kAuto);

  const TrainingSpec& training = spec.training;
  CHECK(training.steps == 10);
  CHECK_FALSE(training.batch.train_batch_size.has_value());
  CHECK_FALSE(training.batch.micro_batch_per_gpu.has_value());
  CHECK_FALSE(training.batch.gradient_accumulation_steps.has_value());
  CHECK_FALSE(training.fp16.enabled);
  CHECK(training.fp16.initial_scale_power == 16);
  CHECK_FALSE(training.bf16);
  CHECK(training.zero.stage == 0);
  CHECK(training.zero.reduce_bucket_size == 500'000'000);
  CHECK(training.zero.allgather_bucket_size == 500'000'000);
  CHECK_FALSE(training.zero.overlap_comm);
  CHECK(training.zero.contiguous_gradients);
  CHECK(training.zero.prefetch_bucket_size == 50'000'000);
  CHECK(training.zero.param_persistence_threshold == 100'000);
  CHECK(training.zero.max_live_parameters == 1'000'000'000);
  CHECK(training.zero.offload_optimizer.device == OffloadDevice::kNone);
  CHECK(training.zero.offload_optimizer.buffer_count == 4);
  CHECK(training.zero.offload_optimizer.ratio == 1.0);
  CHECK(training.zero.sub_group_size == 1'000'000'000);
  CHECK(training.zero.offload_param.device == OffloadDevice::kNone);
  CHECK(training.optimizer.type == OptimizerType::kAdamW);
  CHECK(training.optimizer.lr == 1e-3);
  CHECK(training.optimizer.betas == std::array<double, 2>{0.9, 0.999});
  CHECK(training.optimizer.eps == 1e-8);
  CHECK(training.optimizer.weight_decay == 0);
  CHECK(training.optimizer.decoupled_weight_decay);
  CHECK(training.scheduler.type == SchedulerType::kNone);
  CHECK(training.gradient_clipping == 1.0);  // DeepSpeed's default

  CHECK(spec.checkpoint.dir.empty());
  CHECK(spec.checkpoint.interval == 0);
  CHECK(spec.checkpoint.keep == 3);
  CHECK(spec.checkpoint.write_in_place);
  CHECK(spec.fault_tolerance.max_restarts == 0);
  CHECK(spec.fault_tolerance.heartbeat_interval_s == 5);
  CHECK(spec.fault_tolerance.heartbeat_timeout_s == 60);
  CHECK(spec.fault_tolerance.step_timeout_s == 1800);
  CHECK_FALSE(spec.testing.fault);
  CHECK(spec.env.empty());
}

TEST_CASE("a complete spec is read into the typed structs") {
  SpecFolder folder;
  folder.write("tokens.bin", "x");
  const Loaded loaded = folder.load(R"(
name: gpt2-medium_run.1
cluster:
  runner: openmpi
  device: cpu
  hosts:
    - {host: node1, slots: 4}
    - host: node2
      slots: 2
  include: node1:0,1@node2
  exclude: node2:1
  num_nodes: 2
  num_gpus: 2
  ssh_port: 2222
  network_interface: eth0
  controller_address: node1:29500
  topology:
    cores_per_host: 32
    numa_nodes_per_host: 2
    gpu_islands: [[0, 1], [2, 3]]
    device_memory_gb: 80
parallelism:
  tensor: 2
  pipeline: 2
model:
  num_layers: 24
  hidden_size: 1024
  num_attention_heads: 16
  vocab_size: 50304
  seq_length: 2048
  dropout: 0.1
  init_seed: 42
  make_vocab_size_divisible_by: 64
data:
  train: tokens.bin
  format: llmc
training:
  train_batch_size: 64
  train_micro_batch_size_per_gpu: 4
  gradient_accumulation_steps: 8
  steps: 5000
  bf16: {enabled: true}
  zero_optimization:
    stage: 1
    reduce_bucket_size: 200000000
    contiguous_gradients: false
    offload_optimizer: {device: cpu, pin_memory: true, ratio: 0.3}
  optimizer:
    type: Adam
    params: {lr: 0.0003, betas: [0.9, 0.95], eps: 1.0e-6, weight_decay: 0.1}
  scheduler:
    type: WarmupDecayLR
    params:
      warmup_min_lr: 0
      warmup_max_lr: 0.0003
      warmup_num_steps: 100
      warmup_type: linear
      total_num_steps: 5000
  gradient_clipping: 1.0
checkpoint:
  dir: /checkpoints/run1
  interval: 500
  keep: 2
  write_in_place: false
fault_tolerance:
  max_restarts: 3
  heartbeat_interval: 2.5
  heartbeat_timeout: 30
env:
  NCCL_DEBUG: INFO
  OMP_NUM_THREADS: 4
)");
  INFO(loaded.diagnostics.format());
  REQUIRE_FALSE(loaded.diagnostics.has_errors());
  CHECK(loaded.diagnostics.warnings().empty());
  const JobSpec& spec = loaded.spec;

  CHECK(spec.name == "gpt2-medium_run.1");
  CHECK(spec.cluster.runner == Runner::kOpenMpi);
  CHECK(spec.cluster.device == Device::kCpu);
  REQUIRE(spec.cluster.hosts.size() == 2);
  CHECK(spec.cluster.hosts[0].host == "node1");
  CHECK(spec.cluster.hosts[0].slots == 4);
  CHECK(spec.cluster.hosts[0].line == 6);
  CHECK(spec.cluster.hosts[1].host == "node2");
  CHECK(spec.cluster.hosts[1].slots == 2);
  CHECK(spec.cluster.hosts[1].line == 7);
  CHECK(spec.cluster.include == "node1:0,1@node2");
  CHECK(spec.cluster.exclude == "node2:1");
  CHECK(spec.cluster.num_nodes == 2);
  CHECK(spec.cluster.num_gpus == 2);
  CHECK(spec.cluster.ssh_port == 2222);
  CHECK(spec.cluster.network_interface == "eth0");
  CHECK(spec.cluster.controller_address == "node1:29500");
  CHECK(spec.cluster.topology.cores_per_host == 32);
  CHECK(spec.cluster.topology.numa_nodes_per_host == 2);
  CHECK(spec.cluster.topology.gpu_islands == std::vector<std::vector<int>>{{0, 1}, {2, 3}});
  CHECK(spec.cluster.topology.device_memory_gb == 80);

  CHECK(spec.parallelism.tensor == 2);
  CHECK(spec.parallelism.pipeline == 2);
  CHECK(spec.model.num_layers == 24);
  CHECK(spec.model.hidden_size == 1024);
  CHECK(spec.model.num_attention_heads == 16);
  CHECK(spec.model.vocab_size == 50304);
  CHECK(spec.model.seq_length == 2048);
  CHECK(spec.model.dropout == 0.1);
  CHECK(spec.model.init_seed == 42);
  CHECK(spec.model.make_vocab_size_divisible_by == 64);

  CHECK(spec.data.train == std::vector<Dataset>{{1, {normal(folder.dir() / "tokens.bin")}}});
  CHECK(spec.data.format == DataFormat::kLlmc);

  const TrainingSpec& training = spec.training;
  CHECK(training.batch.train_batch_size == 64);
  CHECK(training.batch.micro_batch_per_gpu == 4);
  CHECK(training.batch.gradient_accumulation_steps == 8);
  CHECK(training.steps == 5000);
  CHECK(training.bf16);
  CHECK_FALSE(training.fp16.enabled);
  CHECK(training.zero.stage == 1);
  CHECK(training.zero.reduce_bucket_size == 200'000'000);
  CHECK_FALSE(training.zero.contiguous_gradients);
  CHECK(training.zero.offload_optimizer.device == OffloadDevice::kCpu);
  CHECK(training.zero.offload_optimizer.pin_memory);
  CHECK(training.zero.offload_optimizer.ratio == 0.3);
  CHECK(training.optimizer.type == OptimizerType::kAdam);
  CHECK(training.optimizer.decoupled_weight_decay);
  CHECK(training.optimizer.lr == 0.0003);
  CHECK(training.optimizer.betas == std::array<double, 2>{0.9, 0.95});
  CHECK(training.optimizer.eps == 1.0e-6);
  CHECK(training.optimizer.weight_decay == 0.1);
  CHECK(training.scheduler.type == SchedulerType::kWarmupDecayLR);
  CHECK(training.scheduler.warmup_min_lr == 0);
  CHECK(training.scheduler.warmup_max_lr == 0.0003);
  CHECK(training.scheduler.warmup_num_steps == 100);
  CHECK(training.scheduler.warmup_type == WarmupType::kLinear);
  CHECK(training.scheduler.total_num_steps == 5000);
  CHECK(training.gradient_clipping == 1.0);

  CHECK(spec.checkpoint.dir == "/checkpoints/run1");
  CHECK(spec.checkpoint.interval == 500);
  CHECK(spec.checkpoint.keep == 2);
  CHECK_FALSE(spec.checkpoint.write_in_place);
  CHECK(spec.fault_tolerance.max_restarts == 3);
  CHECK(spec.fault_tolerance.heartbeat_interval_s == 2.5);
  CHECK(spec.fault_tolerance.heartbeat_timeout_s == 30);
  CHECK(spec.env ==
        std::map<std::string, std::string>{{"NCCL_DEBUG", "INFO"}, {"OMP_NUM_THREADS", "4"}});
}

TEST_CASE("the example job in testdata loads without a diagnostic") {
  const Loaded loaded = testing::load_file("tests/core/spec/testdata/gpt2_zero3.yaml");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.name == "gpt2_zero3");
  CHECK(loaded.spec.training.zero.stage == 3);
  CHECK(loaded.spec.training.zero.overlap_comm);
  CHECK(loaded.spec.training.zero.offload_param.device == OffloadDevice::kCpu);
  CHECK(loaded.spec.training.scheduler.type == SchedulerType::kWarmupCosineLR);
  CHECK(loaded.spec.training.scheduler.cos_min_ratio == 0.1);
}

TEST_CASE("the source map records where each value was read") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data:
  train: demo
training:
  steps: 10
  zero_optimization:
    stage: 2
)");
  REQUIRE(loaded.diagnostics.all().empty());
  const Location stage = loaded.locations.find("training.zero_optimization.stage");
  CHECK(stage.file == loaded.path);
  CHECK(stage.line == 6);
  CHECK(stage.column == 12);
  CHECK(loaded.locations.find("training.steps").line == 4);
  // A key that was never given falls back to its nearest recorded parent.
  CHECK(loaded.locations.find("training.zero_optimization.overlap_comm").line == 6);
  CHECK(loaded.locations.find("cluster.hosts").to_string() == loaded.path);
}

// --- Required keys and paths ---------------------------------------------------

TEST_CASE("training.steps and data.train are required") {
  SpecFolder folder;
  const Loaded loaded = folder.load("name: nothing-to-do\n");
  REQUIRE(loaded.errors().size() == 2);
  const Diagnostic& train = loaded.only("data.train is required");
  CHECK(train.location.to_string() == loaded.path);
  CHECK(train.message.find("'demo'") != std::string::npos);
  const Diagnostic& steps = loaded.only("training.steps is required");
  CHECK(steps.location.to_string() == loaded.path);
}

TEST_CASE("a required key missing from its section is reported at the section") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data:
  format: auto
training:
  fp16: {enabled: true}
)");
  REQUIRE(loaded.errors().size() == 2);
  CHECK(loaded.only("data.train is required").location.line == 2);
  CHECK(loaded.only("training.steps is required").location.line == 4);
}

TEST_CASE("training.init_from names a weights file, resolved beside the spec") {
  SpecFolder folder;
  folder.write("weights/model.safetensors", "x");
  const Loaded loaded = folder.load(R"(
training: {steps: 1, init_from: weights/model.safetensors}
data: {train: demo}
)");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.training.init_from == normal(folder.dir() / "weights/model.safetensors"));
  CHECK_THAT(loaded.spec.resolved_yaml,
             Catch::Contains(normal(folder.dir() / "weights/model.safetensors")));

  const Loaded missing = folder.load(R"(
training: {steps: 1, init_from: weights/absent.safetensors}
data: {train: demo}
)");
  const Diagnostic& error = missing.only("training.init_from: no file");
  CHECK(error.location.line == 1);
  CHECK_THAT(error.message, Catch::Contains(normal(folder.dir() / "weights/absent.safetensors")));
}

TEST_CASE("model.max_position_embeddings defaults to seq_length and may not be below it") {
  SpecFolder folder;
  const Loaded plain =
      folder.load("training: {steps: 1}\ndata: {train: demo}\nmodel: {seq_length: 64}\n");
  CHECK(plain.spec.model.max_position_embeddings == 0);
  const Loaded longer = folder.load(
      "training: {steps: 1}\ndata: {train: demo}\nmodel: {seq_length: 64, max_position_embeddings: "
      "1024}\n");
  INFO(longer.diagnostics.format());
  CHECK(longer.diagnostics.all().empty());
  CHECK(longer.spec.model.max_position_embeddings == 1024);
  const Loaded shorter = folder.load(
      "training: {steps: 1}\ndata: {train: demo}\nmodel: {seq_length: 64, max_position_embeddings: "
      "32}\n");
  CHECK_THAT(shorter.only("max_position_embeddings").message,
             Catch::Contains("model.max_position_embeddings 32 is below model.seq_length 64"));
}

TEST_CASE("data.train takes a list, glob patterns and Megatron's weighted blend") {
  SpecFolder folder;
  folder.write("data/shard_000.bin", "x");
  folder.write("data/shard_001.bin", "x");
  folder.write("data/web.bin", "x");
  folder.write("data/books_text_document.bin", "x");
  folder.write("data/books_text_document.idx", "x");
  const std::string dir = normal(folder.dir() / "data");

  SECTION("a list and a pattern make one dataset, resolved beside the spec") {
    const Loaded loaded = folder.load(R"(
training: {steps: 1}
data: {train: [data/shard_*.bin, data/web.bin], valid: [data/web.bin, data/shard_000.bin]}
)");
    INFO(loaded.diagnostics.format());
    CHECK(loaded.diagnostics.all().empty());
    CHECK(loaded.spec.data.train ==
          std::vector<Dataset>{{1, {dir + "/shard_*.bin", dir + "/web.bin"}}});
    CHECK(loaded.spec.data.valid ==
          std::vector<std::string>{dir + "/web.bin", dir + "/shard_000.bin"});
    // The ranks read the same, with absolute paths.
    const YAML::Node resolved = YAML::Load(loaded.spec.resolved_yaml);
    CHECK(resolved["data"]["train"][0].as<std::string>() == dir + "/shard_*.bin");
    CHECK(resolved["data"]["valid"][1].as<std::string>() == dir + "/shard_000.bin");
  }
  SECTION("a blend: weights and paths in turn") {
    const Loaded loaded = folder.load(R"(
training: {steps: 1}
data: {train: [0.3, data/books_text_document, 0.7, data/web.bin]}
)");
    INFO(loaded.diagnostics.format());
    CHECK(loaded.diagnostics.all().empty());
    CHECK(loaded.spec.data.train == std::vector<Dataset>{{0.3, {dir + "/books_text_document"}},
                                                         {0.7, {dir + "/web.bin"}}});
    const YAML::Node resolved = YAML::Load(loaded.spec.resolved_yaml);
    CHECK(resolved["data"]["train"][0].as<double>() == 0.3);
    CHECK(resolved["data"]["train"][3].as<std::string>() == dir + "/web.bin");
  }
  SECTION("what is wrong with a list is said, at the key") {
    const auto error_for = [&](const std::string& train) {
      const Loaded loaded =
          folder.load("training: {steps: 1}\ndata: {train: " + train + "}\n");
      REQUIRE(loaded.errors().size() == 1);
      CHECK(loaded.errors()[0].location.line == 2);
      return loaded.errors()[0].message;
    };
    CHECK_THAT(error_for("[0.3, data/web.bin, 0.7]"), Catch::Contains("item 4 is not a path"));
    CHECK_THAT(error_for("[0.3, data/web.bin, data/web.bin]"),
               Catch::Contains("item 3 is not a weight"));
    CHECK_THAT(error_for("[0, data/web.bin]"),
               Catch::Contains("blend weight 0 must be a positive number"));
    CHECK_THAT(error_for("[data/nothing_*.bin]"),
               Catch::Contains("no files match '" + dir + "/nothing_*.bin'"));
    CHECK_THAT(error_for("[demo, data/web.bin]"), Catch::Contains("only under data.train, alone"));
    CHECK_THAT(error_for("[data/web.bin, [a, b]]"),
               Catch::Contains("must be a list of single values"));
  }
}

TEST_CASE("data paths must exist: a file, or a Megatron prefix with .bin and .idx") {
  SpecFolder folder;
  folder.write("data/tokens.bin", "x");
  folder.write("data/corpus_text_document.bin", "x");
  folder.write("data/corpus_text_document.idx", "x");
  folder.write("data/half.bin", "x");  // no half.idx

  SECTION("an llm.c token file") {
    const Loaded loaded = folder.load(R"(
training: {steps: 1}
data: {train: data/tokens.bin, valid: data/corpus_text_document}
)");
    INFO(loaded.diagnostics.format());
    CHECK(loaded.diagnostics.all().empty());
    CHECK(loaded.spec.data.train == std::vector<Dataset>{{1, {normal(folder.dir() / "data/tokens.bin")}}});
    CHECK(loaded.spec.data.valid == std::vector<std::string>{normal(folder.dir() / "data/corpus_text_document")});
  }
  SECTION("a missing file is an error at the value, naming the resolved path") {
    const Loaded loaded = folder.load(R"(
training: {steps: 1}
data:
  train: data/missing.bin
  valid: data/half
)");
    REQUIRE(loaded.errors().size() == 2);
    const std::string missing = normal(folder.dir() / "data/missing.bin");
    const Diagnostic& train = loaded.only("data.train: no data at");
    CHECK(train.location.line == 3);
    CHECK(train.location.column == 10);
    CHECK(train.message.find("'" + missing + "'") != std::string::npos);
    CHECK(train.message.find(missing + ".bin with " + missing + ".idx") != std::string::npos);
    CHECK(loaded.only("data.valid: no data at").location.line == 4);
  }
  SECTION("format: megatron needs .bin and .idx, not a plain file") {
    const Loaded loaded = folder.load(R"(
training: {steps: 1}
data: {train: data/tokens.bin, format: megatron}
)");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("data.train: no data at").location.line == 2);
  }
  SECTION("format: llmc needs a plain file, not a Megatron prefix") {
    const Loaded loaded = folder.load(R"(
training: {steps: 1}
data: {train: data/corpus_text_document, format: LLMC}
)");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("data.train: no data at").location.line == 2);
  }
}

TEST_CASE("relative paths resolve against the spec's folder, absolute ones stay") {
  SpecFolder folder;
  folder.write("data/tokens.bin", "x");
  folder.write("ds_config.json", "{}");
  const Loaded loaded = folder.load(R"(
deepspeed_config: ../ds_config.json
cluster:
  hostfile: hostfile.txt
data:
  train: ../data/tokens.bin
training:
  steps: 1
  zero_optimization:
    stage: 3
    offload_param: {device: nvme, nvme_path: nvme}
    offload_optimizer: {device: nvme, nvme_path: /local_nvme, buffer_count: 2}
    sub_group_size: 1000000
checkpoint:
  dir: ./ckpt/../checkpoints
)",
                                    {}, "jobs/spec.yaml");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  const JobSpec& spec = loaded.spec;
  CHECK(spec.deepspeed_config == normal(folder.dir() / "ds_config.json"));
  CHECK(spec.cluster.hostfile == normal(folder.dir() / "jobs/hostfile.txt"));
  CHECK(spec.data.train == std::vector<Dataset>{{1, {normal(folder.dir() / "data/tokens.bin")}}});
  CHECK(spec.training.zero.offload_param.nvme_path == normal(folder.dir() / "jobs/nvme"));
  CHECK(spec.training.zero.offload_optimizer.nvme_path == "/local_nvme");
  CHECK(spec.training.zero.offload_optimizer.buffer_count == 2);
  CHECK(spec.training.zero.sub_group_size == 1'000'000);
  CHECK(spec.checkpoint.dir == normal(folder.dir() / "jobs/checkpoints"));
}

TEST_CASE("the job name defaults to the spec's stem and must be safe as a folder name") {
  SpecFolder folder;
  SECTION("a valid name") {
    std::string text(kMinimal);
    const Loaded loaded = folder.load("name: run_7.a-b\n" + text);
    CHECK(loaded.diagnostics.all().empty());
    CHECK(loaded.spec.name == "run_7.a-b");
  }
  SECTION("a name with a slash is an error at the name") {
    std::string text(kMinimal);
    const Loaded loaded = folder.load("name: runs/7\n" + text);
    REQUIRE(loaded.errors().size() == 1);
    const Diagnostic& name = loaded.only("name 'runs/7' may hold only letters, digits");
    CHECK(name.location.line == 1);
    CHECK(name.location.column == 7);
  }
  SECTION("a file stem that is not a valid name is an error too") {
    const Loaded loaded = folder.load(kMinimal, {}, "my job.yaml");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("name 'my job' may hold only").location.file == loaded.path);
  }
}

// --- Unknown and duplicate keys ------------------------------------------------

TEST_CASE("an unknown key is reported at its line and column with the nearest valid key") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data:
  train: demo
training:
  steps: 10
  zero_optimization: {stage: 1}
  trian_batch_size: 32
)");
  REQUIRE(loaded.diagnostics.all().size() == 1);
  CHECK(loaded.diagnostics.format() ==
        loaded.path +
            ":6:3: error: unknown key 'trian_batch_size' in training; did you mean "
            "'train_batch_size'?\n");
}

TEST_CASE("unknown keys in nested sections name the section") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 10
  zero_optimization:
    stage: 2
    overlap_com: true
  optimizer:
    type: AdamW
    params: {lr: 0.001, weight_decy: 0.1}
cluster:
  topology: {cores_per_hots: 8}
)");
  REQUIRE(loaded.errors().size() == 3);
  const Diagnostic& overlap = loaded.only("unknown key 'overlap_com'");
  CHECK(overlap.message ==
        "unknown key 'overlap_com' in training.zero_optimization; did you mean 'overlap_comm'?");
  CHECK(overlap.location.line == 6);
  CHECK(overlap.location.column == 5);
  const Diagnostic& decay = loaded.only("unknown key 'weight_decy'");
  CHECK(decay.message ==
        "unknown key 'weight_decy' in training.optimizer.params; did you mean 'weight_decay'?");
  CHECK(decay.location.line == 9);
  CHECK(decay.location.column == 25);
  CHECK(loaded.only("unknown key 'cores_per_hots'").message ==
        "unknown key 'cores_per_hots' in cluster.topology; did you mean 'cores_per_host'?");
}

TEST_CASE("an unknown key far from every valid key lists the valid keys") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 10
  learning_rate: 0.1
)");
  const Diagnostic& unknown = loaded.only("unknown key 'learning_rate'");
  CHECK(unknown.message ==
        "unknown key 'learning_rate' in training; valid keys: train_batch_size, "
        "train_micro_batch_size_per_gpu, gradient_accumulation_steps, steps, fp16, bf16, "
        "zero_optimization, aio, optimizer, scheduler, gradient_clipping, seed, eval_interval, "
        "eval_batches, tensorboard, csv_monitor, comms_logger, steps_per_print, "
        "wall_clock_breakdown, init_from, activation_checkpointing, elasticity");
  CHECK(unknown.location.line == 4);
  CHECK(unknown.location.column == 3);
}

TEST_CASE("an unknown top-level key lists the job spec's sections") {
  SpecFolder folder;
  const Loaded loaded = folder.load(std::string(kMinimal) + "resources: {gpus: 8}\n");
  const Diagnostic& unknown = loaded.only("unknown key 'resources'");
  CHECK(unknown.message ==
        "unknown key 'resources' in the job spec; valid keys: kind, name, deepspeed_config, "
        "cluster, model, parallelism, data, training, commbench, checkpoint, fault_tolerance, "
        "testing, env");
  CHECK(unknown.location.line == 5);
  CHECK(unknown.location.column == 1);
}

TEST_CASE("a key given twice is an error that names the first location") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 10
  gradient_clipping: 1.0
  steps: 20
)");
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& twice = loaded.only("given twice");
  CHECK(twice.message ==
        "training.steps is given twice (first at " + loaded.path + ":3:3); keep one");
  CHECK(twice.location.line == 5);
  CHECK(twice.location.column == 3);
  CHECK(loaded.spec.training.steps == 10);  // the first one is read
}

TEST_CASE("every problem in a spec is reported at once, formatted in line order") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
cluster:
  runner: mpi
  ssh_port: 70000
model:
  dropout: 1
data:
  train: demo
training:
  steps: ten
  trian_batch_size: 32
  zero_optimization:
    stage: 4
)");
  std::string expected;
  for (const char* line : {
           ":2:11: error: cluster.runner must be one of local, openmpi, slurm, got 'mpi'",
           ":3:13: error: cluster.ssh_port must be between 1 and 65535, got 70000",
           ":5:12: error: model.dropout must be below 1",
           ":9:10: error: training.steps must be an integer, got 'ten'",
           ":10:3: error: unknown key 'trian_batch_size' in training; did you mean "
           "'train_batch_size'?",
           ":12:12: error: training.zero_optimization.stage must be between 0 and 3, got 4",
       }) {
    expected += loaded.path + line + "\n";
  }
  CHECK(loaded.diagnostics.format() == expected);
  // all() keeps the order the checks ran in: a section's unknown keys are
  // reported when the section is done, after its nested sections.
  REQUIRE(loaded.diagnostics.all().size() == 6);
  CHECK(loaded.diagnostics.all()[4].location.line == 12);
  CHECK(loaded.diagnostics.all()[5].location.line == 10);
  // Wrong values leave the defaults in place.
  CHECK(loaded.spec.cluster.runner == Runner::kLocal);
  CHECK(loaded.spec.cluster.ssh_port == 22);
  CHECK(loaded.spec.training.steps == 0);
  CHECK(loaded.spec.training.zero.stage == 0);
}

// --- Types, ranges and choices --------------------------------------------------

TEST_CASE("a value of the wrong type names the expected type and what was given") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
cluster: 5
parallelism:
  tensor: [1]
  pipeline: {stages: 2}
data:
  train: demo
  format: [llmc]
training:
  steps: ten
  fp16:
    enabled: maybe
  optimizer:
    params:
      betas: [0.9, high]
checkpoint: [every, 100]
)");
  REQUIRE(loaded.errors().size() == 8);
  const Diagnostic& cluster = loaded.only("cluster must be a mapping");
  CHECK(cluster.message == "cluster must be a mapping of keys to values, got '5'");
  CHECK(cluster.location.line == 1);
  CHECK(cluster.location.column == 10);
  const Diagnostic& tensor = loaded.only("parallelism.tensor");
  CHECK(tensor.message == "parallelism.tensor must be an integer, got a list");
  CHECK(tensor.location.line == 3);
  CHECK(tensor.location.column == 11);
  CHECK(loaded.only("parallelism.pipeline").message ==
        "parallelism.pipeline must be an integer, got a mapping");
  CHECK(loaded.only("data.format").message == "data.format must be a string, got a list");
  const Diagnostic& steps = loaded.only("training.steps");
  CHECK(steps.message == "training.steps must be an integer, got 'ten'");
  CHECK(steps.location.line == 9);
  CHECK(steps.location.column == 10);
  CHECK(loaded.only("fp16.enabled").message ==
        "training.fp16.enabled must be true or false, got 'maybe'");
  CHECK(loaded.only("betas").message ==
        "training.optimizer.params.betas must be a list of numbers, got 'high'");
  CHECK(loaded.only("checkpoint must be").message ==
        "checkpoint must be a mapping of keys to values, got a list");
}

TEST_CASE("values out of range are errors that give the range") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
cluster:
  ssh_port: 70000
  num_gpus: 0
parallelism: {tensor: 0, pipeline: -1}
model:
  dropout: 1.5
  num_layers: 3000000000
  init_seed: -1
data: {train: demo}
training:
  steps: 0
  zero_optimization: {stage: 4}
  fp16: {initial_scale_power: 65}
checkpoint: {keep: 0}
fault_tolerance: {heartbeat_interval: 0}
)");
  const auto message = [&](std::string_view needle) { return loaded.only(needle).message; };
  CHECK(message("ssh_port") == "cluster.ssh_port must be between 1 and 65535, got 70000");
  CHECK(message("num_gpus") == "cluster.num_gpus must be -1 (all) or at least 1");
  CHECK(message("tensor") == "parallelism.tensor must be between 1 and 65536, got 0");
  CHECK(message("pipeline") == "parallelism.pipeline must be between 1 and 65536, got -1");
  CHECK(message("dropout") == "model.dropout must be between 0 and 1, got 1.5");
  CHECK(message("num_layers") == "model.num_layers must be between 1 and 4096, got 3000000000");
  CHECK(message("init_seed") == "model.init_seed must be at least 0, got -1");
  CHECK(message("training.steps") == "training.steps must be at least 1, got 0");
  CHECK(message("stage") == "training.zero_optimization.stage must be between 0 and 3, got 4");
  CHECK(message("initial_scale_power") ==
        "training.fp16.initial_scale_power must be between 0 and 64, got 65");
  CHECK(message("keep") == "checkpoint.keep must be between 1 and 2147483647, got 0");
  CHECK(message("heartbeat_interval") ==
        "fault_tolerance.heartbeat_interval must be between 0.01 and 3600, got 0");
  CHECK(loaded.errors().size() == 12);
  CHECK(loaded.only("stage").location.line == 12);
}

TEST_CASE("numbers that size ranks, cores, memory or deadlines are bounded") {
  // Each of these crashed or misbehaved later, in the planner or the controller.
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
cluster:
  num_gpus: 2097152
  num_nodes: 100000000
  topology:
    cores_per_host: 2147483648
    numa_nodes_per_host: 2147483648
    device_memory_gb: 1e10
model: {vocab_size: 100000000000}
data: {train: demo}
training:
  steps: 10
  eval_batches: 4611686018427387904
  zero_optimization: {stage: 3, reduce_bucket_size: 4611686018427387904,
                      stage3_prefetch_bucket_size: 4611686018427387904}
fault_tolerance: {heartbeat_interval: 1e9, heartbeat_timeout: 1e9}
)");
  const auto message = [&](std::string_view needle) { return loaded.only(needle).message; };
  CHECK(message("num_gpus") == "cluster.num_gpus must be between -1 and 1024, got 2097152");
  CHECK(message("num_nodes") == "cluster.num_nodes must be between -1 and 65536, got 100000000");
  CHECK(message("cores_per_host") ==
        "cluster.topology.cores_per_host must be between 1 and 16384, got 2147483648");
  CHECK(message("numa_nodes_per_host") ==
        "cluster.topology.numa_nodes_per_host must be between 1 and 1024, got 2147483648");
  CHECK_THAT(message("device_memory_gb"),
             Catch::StartsWith("cluster.topology.device_memory_gb must be between 0 and 65536"));
  CHECK_THAT(message("vocab_size"),
             Catch::StartsWith("model.vocab_size must be between 1 and 16777216"));
  CHECK_THAT(message("eval_batches"),
             Catch::StartsWith("training.eval_batches must be between 1 and 1048576"));
  CHECK_THAT(message("reduce_bucket_size"), Catch::Contains("must be between 1 and 1099511627776"));
  CHECK_THAT(message("prefetch_bucket_size"),
             Catch::Contains("must be between 0 and 1099511627776"));
  CHECK_THAT(message("heartbeat_interval"),
             Catch::StartsWith("fault_tolerance.heartbeat_interval must be between 0.01 and 3600"));
  CHECK_THAT(
      message("heartbeat_timeout must be between"),
      Catch::StartsWith("fault_tolerance.heartbeat_timeout must be between 0.01 and 604800"));
}

TEST_CASE("deeply nested or alias-expanded YAML is refused before anything walks it") {
  SpecFolder folder;
  SECTION("nesting") {
    std::string nested = "x";
    for (int i = 0; i < 100; ++i) nested = "{a: " + nested + "}";
    const Loaded loaded = folder.load("model: " + nested + "\n");
    CHECK_THAT(loaded.only("too large").message, Catch::Contains("nest deeper than 64 levels"));
  }
  SECTION("a billion laughs") {
    std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
    for (int i = 1; i < 10; ++i) {
      text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
      for (int j = 0; j < 10; ++j) text += (j ? ", *a" : "*a") + std::to_string(i - 1);
      text += "]\n";
    }
    const Loaded loaded = folder.load(text);
    CHECK_THAT(loaded.only("too large").message,
               Catch::Contains("more than 1048576 values (counting each use of an alias)"));
  }
}

TEST_CASE("a dropout of exactly 1 is refused: it would drop everything") {
  SpecFolder folder;
  const Loaded loaded = folder.load(std::string(kMinimal) + "model: {dropout: 1}\n");
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& dropout = loaded.only("model.dropout must be below 1");
  CHECK(dropout.location.line == 5);
  CHECK(dropout.location.column == 18);
}

TEST_CASE("integers written as whole floats are accepted, as DeepSpeed configs do") {
  SpecFolder folder;
  SECTION("5e8 and 2.0e8 are whole numbers") {
    const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 1e3
  zero_optimization:
    reduce_bucket_size: 5e8
    allgather_bucket_size: 2.0e8
    stage3_max_live_parameters: 1e9
)");
    INFO(loaded.diagnostics.format());
    CHECK(loaded.diagnostics.all().empty());
    CHECK(loaded.spec.training.steps == 1000);
    CHECK(loaded.spec.training.zero.reduce_bucket_size == 500'000'000);
    CHECK(loaded.spec.training.zero.allgather_bucket_size == 200'000'000);
    CHECK(loaded.spec.training.zero.max_live_parameters == 1'000'000'000);
  }
  SECTION("2.5 is not an integer") {
    const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 2.5
  zero_optimization: {reduce_bucket_size: 1.5e0}
)");
    REQUIRE(loaded.errors().size() == 2);
    CHECK(loaded.only("training.steps").message == "training.steps must be an integer, got '2.5'");
    CHECK(loaded.only("reduce_bucket_size").message ==
          "training.zero_optimization.reduce_bucket_size must be an integer, got '1.5e0'");
  }
}

TEST_CASE("choices match without regard to case") {
  SpecFolder folder;
  folder.write("tokens.bin", "x");
  const Loaded loaded = folder.load(R"(
cluster: {runner: OpenMPI, device: CPU}
data: {train: tokens.bin, format: LLMC}
training:
  steps: 1
  optimizer: {type: adamw}
  scheduler:
    type: warmuplr
    params: {warmup_type: LINEAR}
  zero_optimization:
    stage: 1
    offload_optimizer: {device: Cpu}
)");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.cluster.runner == Runner::kOpenMpi);
  CHECK(loaded.spec.cluster.device == Device::kCpu);
  CHECK(loaded.spec.data.format == DataFormat::kLlmc);
  CHECK(loaded.spec.training.optimizer.type == OptimizerType::kAdamW);
  CHECK(loaded.spec.training.scheduler.type == SchedulerType::kWarmupLR);
  CHECK(loaded.spec.training.scheduler.warmup_type == WarmupType::kLinear);
  CHECK(loaded.spec.training.zero.offload_optimizer.device == OffloadDevice::kCpu);
}

TEST_CASE("offload_optimizer.ratio is a fraction, below 1 with device cpu only") {
  SpecFolder folder;
  for (const std::string offload : {"{device: nvme, nvme_path: /nvme, ratio: 0.5}",
                                     "{ratio: 0.5}", "{device: cpu, ratio: 1.5}"}) {
    INFO(offload);
    const Loaded loaded = folder.load(
        "training:\n  steps: 10\n  zero_optimization:\n    stage: 1\n    offload_optimizer: " +
        offload +
        "\ndata:\n  train: demo\n");
    REQUIRE(loaded.errors().size() == 1);
    const std::string message = loaded.errors().front().message;
    if (offload.find("1.5") != std::string::npos) {
      CHECK(message ==
            "training.zero_optimization.offload_optimizer.ratio must be between 0 and 1, got 1.5");
    } else {
      CHECK(message ==
            "training.zero_optimization.offload_optimizer.ratio below 1 keeps the rest of the "
            "optimizer states on the GPU beside CPU Adam: it goes with device cpu only");
    }
  }
  // offload_param has no ratio.
  const Loaded param = folder.load(
      "training:\n  steps: 10\n  zero_optimization:\n    stage: 3\n    offload_param: {ratio: "
      "0.5}\ndata:\n"
      "  train: demo\n");
  REQUIRE(param.errors().size() == 1);
  CHECK_THAT(param.errors().front().message, Catch::Contains("ratio"));
}

TEST_CASE("a bad choice lists the choices and suggests the nearest when one is close") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
cluster:
  runner: mpi
  device: gpu
data: {train: demo}
training:
  steps: 1
  optimizer: {type: Adamm}
  scheduler: {type: WarmupCosine}
)");
  REQUIRE(loaded.errors().size() == 4);
  const Diagnostic& runner = loaded.only("cluster.runner");
  CHECK(runner.message == "cluster.runner must be one of local, openmpi, slurm, got 'mpi'");
  CHECK(runner.location.line == 2);
  CHECK(runner.location.column == 11);
  CHECK(loaded.only("cluster.device").message ==
        "cluster.device must be one of cpu, cuda, auto, got 'gpu'; did you mean 'cpu'?");
  CHECK(loaded.only("optimizer.type").message ==
        "training.optimizer.type must be one of Adam, AdamW, Lamb, OneBitAdam, ZeroOneAdam, "
        "OneBitLamb, got 'Adamm'; did you mean "
        "'Adam'?");
  CHECK(loaded.only("scheduler.type").message ==
        "training.scheduler.type must be one of none, WarmupLR, WarmupDecayLR, WarmupCosineLR, "
        "got 'WarmupCosine'; did you mean 'WarmupCosineLR'?");
}

TEST_CASE("an 'auto' value points at the Hugging Face Trainer") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 10
  train_batch_size: auto
  fp16: {enabled: auto}
  gradient_clipping: AUTO
  optimizer:
    params: {lr: auto, betas: auto}
)");
  REQUIRE(loaded.errors().size() == 5);
  const Diagnostic& batch = loaded.only("train_batch_size");
  CHECK(batch.message ==
        "training.train_batch_size is 'auto', which the Hugging Face Trainer fills in; give "
        "dslaunch an integer instead");
  CHECK(batch.location.line == 4);
  CHECK(loaded.only("fp16.enabled").message ==
        "training.fp16.enabled is 'auto', which the Hugging Face Trainer fills in; give "
        "dslaunch true or false instead");
  CHECK(loaded.only("gradient_clipping").message ==
        "training.gradient_clipping is 'auto', which the Hugging Face Trainer fills in; give "
        "dslaunch a number instead");
  CHECK(loaded.only("params.lr").message ==
        "training.optimizer.params.lr is 'auto', which the Hugging Face Trainer fills in; give "
        "dslaunch a number instead");
  CHECK(loaded.only("params.betas").message ==
        "training.optimizer.params.betas is 'auto', which the Hugging Face Trainer fills in; "
        "give dslaunch a list of numbers instead");
}

// --- ZeRO ------------------------------------------------------------------------

TEST_CASE("overlap_comm is on by default only at ZeRO stage 3, and an explicit value wins") {
  SpecFolder folder;
  const auto load_zero = [&](const std::string& zero) {
    const Loaded loaded = folder.load(
        "data: {train: demo}\ntraining:\n  steps: 1\n  zero_optimization: " + zero + "\n");
    INFO(loaded.diagnostics.format());
    CHECK(loaded.diagnostics.all().empty());
    return loaded.spec.training.zero;
  };
  CHECK_FALSE(load_zero("{stage: 0}").overlap_comm);
  CHECK_FALSE(load_zero("{stage: 1}").overlap_comm);
  CHECK_FALSE(load_zero("{stage: 2}").overlap_comm);
  CHECK(load_zero("{stage: 3}").overlap_comm);
  CHECK_FALSE(load_zero("{stage: 3, overlap_comm: false}").overlap_comm);
  CHECK(load_zero("{stage: 2, overlap_comm: true}").overlap_comm);
  CHECK(load_zero("{overlap_comm: true, stage: 1}").overlap_comm);
}

TEST_CASE("stage3_ prefixed and plain bucket keys are the same setting") {
  SpecFolder folder;
  const auto load_zero = [&](const std::string& zero) {
    return folder.load("data: {train: demo}\ntraining:\n  steps: 1\n  zero_optimization:\n" + zero);
  };
  SECTION("either spelling sets the value") {
    const Loaded loaded = load_zero(
        "    stage: 3\n"
        "    stage3_prefetch_bucket_size: 1000\n"
        "    param_persistence_threshold: 2000\n"
        "    stage3_max_live_parameters: 3000\n");
    INFO(loaded.diagnostics.format());
    CHECK(loaded.diagnostics.all().empty());
    CHECK(loaded.spec.training.zero.prefetch_bucket_size == 1000);
    CHECK(loaded.spec.training.zero.param_persistence_threshold == 2000);
    CHECK(loaded.spec.training.zero.max_live_parameters == 3000);
  }
  SECTION("both spellings at once are an error at the plain one") {
    const Loaded loaded = load_zero(
        "    stage: 3\n"
        "    stage3_prefetch_bucket_size: 1000\n"
        "    prefetch_bucket_size: 2000\n");
    REQUIRE(loaded.errors().size() == 1);
    const Diagnostic& both = loaded.only("not both");
    CHECK(both.message ==
          "give training.zero_optimization.stage3_prefetch_bucket_size or "
          "training.zero_optimization.prefetch_bucket_size, not both (they are the same "
          "setting)");
    CHECK(both.location.line == 7);
  }
}

TEST_CASE("offloading the parameters needs ZeRO stage 3") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 1
  zero_optimization:
    stage: 2
    offload_param: {device: cpu}
)");
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& offload = loaded.only("offload_param needs ZeRO stage 3");
  CHECK(offload.message.find("set training.zero_optimization.stage: 3") != std::string::npos);
  CHECK(offload.location.line == 6);
  CHECK(offload.location.column == 20);
}

TEST_CASE("offloading the optimizer needs ZeRO stage 1, 2 or 3") {
  SpecFolder folder;
  const auto load_stage = [&](int stage) {
    return folder.load(
        "data: {train: demo}\ntraining:\n  steps: 1\n  zero_optimization:\n    stage: " +
        std::to_string(stage) + "\n    offload_optimizer: {device: cpu}\n");
  };
  const Loaded stage0 = load_stage(0);
  REQUIRE(stage0.errors().size() == 1);
  CHECK(stage0.only("offload_optimizer needs ZeRO stage 1, 2 or 3").location.line == 6);
  for (int stage : {1, 2, 3}) {
    INFO("stage " << stage);
    CHECK_FALSE(load_stage(stage).diagnostics.has_errors());
  }
}

TEST_CASE("NVMe offload needs nvme_path") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 1
  zero_optimization:
    stage: 3
    offload_optimizer: {device: nvme}
    offload_param: {device: nvme, nvme_path: /nvme}
)");
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& nvme = loaded.only("give nvme_path");
  CHECK(nvme.message ==
        "training.zero_optimization.offload_optimizer.device is nvme: give nvme_path, a folder "
        "on the NVMe drive");
  CHECK(nvme.location.line == 6);
  CHECK(nvme.location.column == 33);
}

TEST_CASE("pipeline parallelism rules out ZeRO stages 2 and 3") {
  SpecFolder folder;
  const auto load = [&](int stage) {
    return folder.load(
        "parallelism: {pipeline: 2}\ndata: {train: demo}\ntraining:\n  steps: 1\n"
        "  zero_optimization: {stage: " +
        std::to_string(stage) + "}\n");
  };
  CHECK_FALSE(load(0).diagnostics.has_errors());
  CHECK_FALSE(load(1).diagnostics.has_errors());
  const Loaded stage2 = load(2);
  REQUIRE(stage2.errors().size() == 1);
  const Diagnostic& pipeline = stage2.only("cannot be combined with pipeline parallelism");
  CHECK(pipeline.message ==
        "ZeRO stage 2 cannot be combined with pipeline parallelism (pipeline 2), as in "
        "DeepSpeed; use stage 0 or 1");
  CHECK(pipeline.location.line == 5);
  CHECK(load(3).diagnostics.has_errors());
}

// --- Precision, optimizer and scheduler ----------------------------------------

TEST_CASE("fp16 and bf16 cannot both be enabled") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 1
  fp16:
    enabled: true
    loss_scale: 0
    initial_scale_power: 12
  bf16:
    enabled: true
)");
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& both = loaded.only("choose one precision");
  CHECK(both.message == "fp16.enabled and bf16.enabled are both true; choose one precision");
  CHECK(both.location.line == 9);
  CHECK(loaded.spec.training.fp16.initial_scale_power == 12);
}

TEST_CASE("DeepSpeed's Adam decouples weight decay unless adam_w_mode is false") {
  SpecFolder folder;
  const auto load = [&](const std::string& optimizer) {
    return folder.load("data: {train: demo}\ntraining:\n  steps: 1\n  optimizer: " + optimizer +
                       "\n");
  };
  SECTION("Adam alone is AdamW") {
    const Loaded loaded = load("{type: Adam, params: {weight_decay: 0.01}}");
    CHECK_FALSE(loaded.diagnostics.has_errors());
    CHECK(loaded.spec.training.optimizer.type == OptimizerType::kAdam);
    CHECK(loaded.spec.training.optimizer.decoupled_weight_decay);
  }
  SECTION("Adam with adam_w_mode: false couples weight decay (L2)") {
    const Loaded loaded = load("{type: Adam, params: {adam_w_mode: false}}");
    CHECK_FALSE(loaded.diagnostics.has_errors());
    CHECK_FALSE(loaded.spec.training.optimizer.decoupled_weight_decay);
  }
  SECTION("AdamW with adam_w_mode: true is fine") {
    const Loaded loaded = load("{type: AdamW, params: {adam_w_mode: true}}");
    CHECK_FALSE(loaded.diagnostics.has_errors());
    CHECK(loaded.spec.training.optimizer.decoupled_weight_decay);
  }
  SECTION("AdamW with adam_w_mode: false is an error") {
    const Loaded loaded = load("{type: AdamW, params: {adam_w_mode: false}}");
    REQUIRE(loaded.errors().size() == 1);
    const Diagnostic& mode = loaded.only("AdamW always decouples weight decay");
    CHECK(mode.location.line == 4);
    CHECK(mode.location.column == 50);
    CHECK(loaded.spec.training.optimizer.decoupled_weight_decay);
  }
}

TEST_CASE("Lamb and DeepSpeed's 1-bit optimizers take their names and keys, any case") {
  SpecFolder folder;
  const auto load = [&](const std::string& optimizer) {
    return folder.load("data: {train: demo}\ntraining:\n  steps: 1\n  optimizer: " + optimizer +
                       "\n");
  };
  SECTION("OneBitAdam") {
    const Loaded loaded = load(
        "{type: onebitadam, params: {lr: 0.002, freeze_step: 30, cuda_aware: false, "
        "comm_backend_name: mpi}}");
    CHECK_FALSE(loaded.diagnostics.has_errors());
    const OptimizerSpec& optimizer = loaded.spec.training.optimizer;
    CHECK(optimizer.type == OptimizerType::kOneBitAdam);
    CHECK(optimizer.freeze_step == 30);
    CHECK(optimizer.lr == 0.002);
  }
  SECTION("ZeroOneAdam") {
    const Loaded loaded = load(
        "{type: ZeroOneAdam, params: {var_freeze_step: 40, var_update_scaler: 2, "
        "local_step_scaler: 8, local_step_clipper: 4}}");
    CHECK_FALSE(loaded.diagnostics.has_errors());
    const OptimizerSpec& optimizer = loaded.spec.training.optimizer;
    CHECK(optimizer.type == OptimizerType::kZeroOneAdam);
    CHECK(optimizer.var_freeze_step == 40);
    CHECK(optimizer.var_update_scaler == 2);
    CHECK(optimizer.local_step_scaler == 8);
    CHECK(optimizer.local_step_clipper == 4);
  }
  SECTION("OneBitLamb") {
    const Loaded loaded = load(
        "{type: OneBitLamb, params: {freeze_step: 20, max_coeff: 0.3, min_coeff: 0.01, "
        "coeff_beta: 0.8, factor_max: 3, factor_min: 0.4, factor_threshold: 0.2}}");
    CHECK_FALSE(loaded.diagnostics.has_errors());
    const OptimizerSpec& optimizer = loaded.spec.training.optimizer;
    CHECK(optimizer.type == OptimizerType::kOneBitLamb);
    CHECK(optimizer.freeze_step == 20);
    CHECK(optimizer.max_coeff == 0.3);
    CHECK(optimizer.coeff_beta == 0.8);
    CHECK(optimizer.factor_max == 3);
    CHECK(optimizer.factor_min == 0.4);
    CHECK(optimizer.factor_threshold == 0.2);
  }
  SECTION("Lamb") {
    const Loaded loaded =
        load("{type: LAMB, params: {bias_correction: false, eps_inside_sqrt: true}}");
    CHECK_FALSE(loaded.diagnostics.has_errors());
    CHECK(loaded.spec.training.optimizer.type == OptimizerType::kLamb);
    CHECK_FALSE(loaded.spec.training.optimizer.bias_correction);
    CHECK(loaded.spec.training.optimizer.eps_inside_sqrt);
  }
  SECTION("a key of another optimizer is unknown") {
    const Loaded loaded = load("{type: OneBitAdam, params: {var_freeze_step: 3}}");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("var_freeze_step").message.find("unknown key 'var_freeze_step'") == 0);
  }
  SECTION("amsgrad: false is accepted, true refused") {
    CHECK_FALSE(load("{type: OneBitAdam, params: {amsgrad: false}}").diagnostics.has_errors());
    const Loaded loaded = load("{type: ZeroOneAdam, params: {amsgrad: true}}");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("amsgrad").message ==
          "training.optimizer.params.amsgrad: DeepSpeed's Lamb and 1-bit optimizers do not "
          "support the AMSGrad variant; remove it");
  }
  SECTION("min_coeff above max_coeff") {
    const Loaded loaded = load("{type: Lamb, params: {max_coeff: 0.1, min_coeff: 0.5}}");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("min_coeff").message ==
          "training.optimizer.params.min_coeff (0.5) is above max_coeff (0.1)");
  }
}

TEST_CASE("DeepSpeed's refusals around the 1-bit optimizers and Lamb come before any rank") {
  SpecFolder folder;
  const auto load = [&](const std::string& type, const std::string& more) {
    return folder.load("data: {train: demo}\ntraining:\n  steps: 1\n  optimizer: {type: " + type +
                       "}\n" + more);
  };
  for (const std::string type : {"OneBitAdam", "ZeroOneAdam", "OneBitLamb"}) {
    INFO(type);
    const Loaded loaded = load(type, "  zero_optimization: {stage: 2}\n");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("cannot be combined").message ==
          "optimizer " + type +
              " cannot be combined with ZeRO stage 2, as in DeepSpeed: it averages the whole "
              "momentum on every rank itself, compressed; set zero_optimization.stage: 0");
    CHECK_FALSE(load(type, "  zero_optimization: {stage: 0}\n").diagnostics.has_errors());
  }
  const Loaded lamb = load("Lamb", "  zero_optimization: {stage: 1}\n");
  REQUIRE(lamb.errors().size() == 1);
  CHECK(lamb.only("Lamb cannot be combined").message.find("trust ratio is per tensor") !=
        std::string::npos);
  for (const std::string type : {"Lamb", "OneBitLamb"}) {
    const Loaded static_scale = load(type, "  fp16: {enabled: true, loss_scale: 128}\n");
    REQUIRE(static_scale.errors().size() == 1);
    CHECK(static_scale.only("dynamic loss scaling").message ==
          "optimizer " + type +
              " needs dynamic loss scaling, as in DeepSpeed; set fp16.loss_scale: 0");
    CHECK_FALSE(load(type, "  fp16: {enabled: true, loss_scale: 0}\n").diagnostics.has_errors());
  }
}

TEST_CASE("ZeRO++'s keys are read at stage 3 and refused below it") {
  SpecFolder folder;
  const auto load = [&](const std::string& zero) {
    return folder.load("data: {train: demo}\ntraining:\n  steps: 1\n  zero_optimization: " + zero +
                       "\n");
  };
  const Loaded on = load(
      "{stage: 3, zero_quantized_weights: true, zero_quantized_gradients: true, "
      "zero_hpz_partition_size: 4}");
  CHECK_FALSE(on.diagnostics.has_errors());
  CHECK(on.spec.training.zero.quantized_weights);
  CHECK(on.spec.training.zero.quantized_gradients);
  CHECK(on.spec.training.zero.hpz_partition_size == 4);
  const Loaded below = load("{stage: 2, zero_quantized_gradients: true}");
  REQUIRE(below.errors().size() == 1);
  CHECK(below.only("ZeRO++").message ==
        "zero_quantized_gradients (ZeRO++) works at ZeRO stage 3, as in DeepSpeed; set "
        "training.zero_optimization.stage: 3 or remove it");
}

TEST_CASE("communication_data_type takes DeepSpeed's fp32, fp16 and bf16") {
  SpecFolder folder;
  const auto load = [&](const std::string& value) {
    return folder.load(
        "data: {train: demo}\ntraining:\n  steps: 1\n  communication_data_type: " + value + "\n");
  };
  CHECK(folder.load("data: {train: demo}\ntraining: {steps: 1}\n")
            .spec.training.communication_data_type == CommunicationDataType::kDefault);
  CHECK(load("fp32").spec.training.communication_data_type == CommunicationDataType::kFp32);
  CHECK(load("FP16").spec.training.communication_data_type == CommunicationDataType::kFp16);
  CHECK(load("bf16").spec.training.communication_data_type == CommunicationDataType::kBf16);
  const Loaded bad = load("int8");
  REQUIRE(bad.errors().size() == 1);
  CHECK(bad.only("communication_data_type").message ==
        "training.communication_data_type must be one of fp32, fp16, bf16, got 'int8'");
}

TEST_CASE("betas must be two numbers in [0, 1)") {
  SpecFolder folder;
  for (const std::string betas : {"[0.9]", "[0.9, 1.0]", "[-0.1, 0.9]", "[0.9, 0.99, 0.999]"}) {
    INFO("betas: " << betas);
    const Loaded loaded = folder.load(
        "data: {train: demo}\ntraining:\n  steps: 1\n  optimizer:\n    params:\n      betas: " +
        betas + "\n");
    REQUIRE(loaded.errors().size() == 1);
    const Diagnostic& error = loaded.only("betas must be two numbers in [0, 1)");
    CHECK(error.location.line == 6);
    CHECK(error.location.column == 14);
    CHECK(loaded.spec.training.optimizer.betas == std::array<double, 2>{0.9, 0.999});
  }
}

TEST_CASE("WarmupDecayLR and WarmupCosineLR need total_num_steps past the warmup") {
  SpecFolder folder;
  const auto load = [&](const std::string& scheduler) {
    return folder.load("data: {train: demo}\ntraining:\n  steps: 1\n  scheduler:\n" + scheduler);
  };
  for (const std::string type : {"WarmupDecayLR", "WarmupCosineLR"}) {
    INFO(type);
    const Loaded missing = load("    type: " + type + "\n    params: {warmup_num_steps: 10}\n");
    REQUIRE(missing.errors().size() == 1);
    const Diagnostic& total = missing.only("needs params.total_num_steps");
    CHECK(total.message ==
          "training.scheduler needs params.total_num_steps, the step where the decay ends");
    CHECK(total.location.line == 6);

    const Loaded short_decay = load("    type: " + type +
                                    "\n    params:\n      warmup_num_steps: 200\n"
                                    "      total_num_steps: 100\n");
    REQUIRE(short_decay.errors().size() == 1);
    const Diagnostic& past = short_decay.only("is past total_num_steps");
    CHECK(past.message ==
          "training.scheduler.params.warmup_num_steps 200 is past total_num_steps 100");
    CHECK(past.location.line == 7);
    CHECK(past.location.column == 25);
  }
  SECTION("WarmupLR needs no total_num_steps") {
    const Loaded loaded = load("    type: WarmupLR\n    params: {warmup_num_steps: 10}\n");
    CHECK(loaded.diagnostics.all().empty());
    CHECK(loaded.spec.training.scheduler.warmup_num_steps == 10);
  }
}

TEST_CASE("scheduler params are checked against the scheduler's type") {
  SpecFolder folder;
  const auto load = [&](const std::string& scheduler) {
    return folder.load("data: {train: demo}\ntraining:\n  steps: 1\n  scheduler:\n" + scheduler);
  };
  SECTION("cos_min_ratio is unknown for WarmupLR") {
    const Loaded loaded = load("    type: WarmupLR\n    params:\n      cos_min_ratio: 0.1\n");
    REQUIRE(loaded.errors().size() == 1);
    const Diagnostic& unknown = loaded.only("unknown key 'cos_min_ratio'");
    CHECK(unknown.message.find("in training.scheduler.params") != std::string::npos);
    CHECK(unknown.location.line == 7);
    CHECK(unknown.location.column == 7);
  }
  SECTION("warmup_max_lr is unknown for WarmupCosineLR, which takes ratios") {
    const Loaded loaded = load(
        "    type: WarmupCosineLR\n    params:\n      total_num_steps: 100\n"
        "      warmup_num_steps: 10\n      warmup_max_lr: 0.1\n");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("unknown key 'warmup_max_lr' in training.scheduler.params").location.line ==
          9);
  }
  SECTION("WarmupCosineLR reads its ratios") {
    const Loaded loaded = load(
        "    type: WarmupCosineLR\n    params:\n      total_num_steps: 100\n"
        "      warmup_num_steps: 10\n      warmup_min_ratio: 0.05\n      cos_min_ratio: 0.2\n");
    CHECK(loaded.diagnostics.all().empty());
    CHECK(loaded.spec.training.scheduler.total_num_steps == 100);
    CHECK(loaded.spec.training.scheduler.warmup_min_ratio == 0.05);
    CHECK(loaded.spec.training.scheduler.cos_min_ratio == 0.2);
  }
  SECTION("last_batch_iteration is refused: checkpoints carry the scheduler's position") {
    const Loaded loaded = load("    type: WarmupLR\n    params: {last_batch_iteration: 50}\n");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("last_batch_iteration is not needed").location.line == 6);
  }
}

// --- Model and parallelism -------------------------------------------------------

TEST_CASE("tensor parallelism must divide the heads and the hidden size") {
  SpecFolder folder;
  const Loaded loaded = folder.load(minimal_and(R"(
model: {hidden_size: 780, num_attention_heads: 12}
parallelism:
  tensor: 8
)"));
  REQUIRE(loaded.errors().size() == 2);
  const Diagnostic& heads = loaded.only("num_attention_heads 12 is not divisible");
  CHECK(heads.message ==
        "model.num_attention_heads 12 is not divisible by parallelism.tensor 8: each tensor "
        "rank needs whole heads");
  CHECK(heads.location.line == 7);
  CHECK(heads.location.column == 11);
  CHECK(loaded.only("hidden_size 780 is not divisible").message ==
        "model.hidden_size 780 is not divisible by parallelism.tensor 8");
}

TEST_CASE("every pipeline stage needs a block; the partition is a method or the counts") {
  SpecFolder folder;
  Loaded loaded =
      folder.load(std::string(kMinimal) + "model: {num_layers: 3}\nparallelism: {pipeline: 4}\n");
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& layers = loaded.only("num_layers 3 is fewer");
  CHECK(layers.message ==
        "model.num_layers 3 is fewer than parallelism.pipeline 4: every stage needs at least one "
        "transformer block");
  CHECK(layers.location.line == 6);

  // 10 blocks over 4 stages is fine: the partition need not be even.
  loaded =
      folder.load(std::string(kMinimal) + "model: {num_layers: 10}\nparallelism: {pipeline: 4}\n");
  CHECK(loaded.errors().empty());
  CHECK(loaded.spec.parallelism.pipeline_partition == PipelinePartition::kParameters);

  loaded = folder.load(std::string(kMinimal) +
                       "model: {num_layers: 10}\n"
                       "parallelism: {pipeline: 4, pipeline_partition: UNIFORM}\n");
  CHECK(loaded.errors().empty());
  CHECK(loaded.spec.parallelism.pipeline_partition == PipelinePartition::kUniform);

  loaded = folder.load(std::string(kMinimal) +
                       "model: {num_layers: 10}\n"
                       "parallelism: {pipeline: 4, pipeline_partition: [1, 3, 3, 3]}\n");
  CHECK(loaded.errors().empty());
  CHECK(loaded.spec.parallelism.pipeline_partition == PipelinePartition::kExplicit);
  CHECK(loaded.spec.parallelism.stage_layers == std::vector<int>{1, 3, 3, 3});

  loaded = folder.load(std::string(kMinimal) +
                       "model: {num_layers: 10}\n"
                       "parallelism: {pipeline: 4, pipeline_partition: [2, 3, 3]}\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK(loaded.errors()[0].message ==
        "parallelism.pipeline_partition gives 3 stage(s) of 8 block(s) in all; the job has "
        "parallelism.pipeline 4 and model.num_layers 10");

  loaded = folder.load(std::string(kMinimal) +
                       "model: {num_layers: 10}\n"
                       "parallelism: {pipeline: 2, pipeline_partition: [0, 10]}\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK_THAT(loaded.errors()[0].message, Catch::Contains("each a whole number of at least 1"));
}

TEST_CASE("parallelism.virtual_stages interleaves a pipeline's stages, each with a block") {
  SpecFolder folder;
  Loaded loaded =
      folder.load(std::string(kMinimal) +
                  "model: {num_layers: 8}\nparallelism: {pipeline: 2, virtual_stages: 4}\n");
  CHECK(loaded.errors().empty());
  CHECK(loaded.spec.parallelism.virtual_stages == 4);
  CHECK(loaded.spec.parallelism.virtual_stage_count() == 8);
  CHECK(folder.load(std::string(kMinimal)).spec.parallelism.virtual_stages == 1);

  loaded = folder.load(std::string(kMinimal) + "parallelism: {virtual_stages: 2}\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK(loaded.errors()[0].message ==
        "parallelism.virtual_stages 2 interleaves the stages of a pipeline, and "
        "parallelism.pipeline is 1; set pipeline to 2 or more, or remove virtual_stages");

  loaded = folder.load(std::string(kMinimal) +
                       "model: {num_layers: 6}\nparallelism: {pipeline: 2, virtual_stages: 4}\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK(loaded.errors()[0].message ==
        "model.num_layers 6 is fewer than parallelism.pipeline 2 x virtual_stages 4: every "
        "virtual stage needs at least one transformer block");

  // An explicit partition counts the blocks of every virtual stage.
  loaded = folder.load(std::string(kMinimal) +
                       "model: {num_layers: 6}\n"
                       "parallelism: {pipeline: 2, virtual_stages: 2, "
                       "pipeline_partition: [2, 1, 1, 2]}\n");
  CHECK(loaded.errors().empty());
  loaded =
      folder.load(std::string(kMinimal) +
                  "model: {num_layers: 6}\n"
                  "parallelism: {pipeline: 2, virtual_stages: 2, pipeline_partition: [3, 3]}\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK(loaded.errors()[0].message ==
        "parallelism.pipeline_partition gives 2 virtual stage(s) of 6 block(s) in all; the job "
        "has parallelism.pipeline 2 x virtual_stages 2 and model.num_layers 6");
  loaded = folder.load(std::string(kMinimal) + "parallelism: {pipeline: 2, virtual_stages: 0}\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK_THAT(loaded.errors()[0].message, Catch::Contains("virtual_stages"));
}

TEST_CASE("DeepSpeed's activation_checkpointing section turns block recompute on") {
  SpecFolder folder;
  Loaded loaded = folder.load(std::string(kMinimal));
  CHECK_FALSE(loaded.spec.training.activation_checkpointing.enabled);
  loaded = folder.load(
      "data: {train: demo}\ntraining:\n  steps: 10\n  activation_checkpointing:\n"
      "    partition_activations: true\n    number_checkpoints: 2\n    cpu_checkpointing: true\n");
  CHECK(loaded.errors().empty());
  const ActivationCheckpointingSpec& checkpointing = loaded.spec.training.activation_checkpointing;
  CHECK(checkpointing.enabled);
  CHECK(checkpointing.partition_activations);
  CHECK(checkpointing.number_checkpoints == 2);
  CHECK(checkpointing.cpu_checkpointing);
  loaded = folder.load(
      "data: {train: demo}\ntraining: {steps: 10, activation_checkpointing: "
      "{number_checkpoints: 0}}\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK_THAT(loaded.errors()[0].message, Catch::Contains("number_checkpoints"));
  loaded = folder.load(
      "data: {train: demo}\ntraining: {steps: 10, activation_checkpointing: "
      "{number_checkpoints: 5000}}\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK_THAT(loaded.errors()[0].message, Catch::Contains("must be between 1 and 4096, got 5000"));
}

TEST_CASE("the hidden size must be divisible by the number of heads") {
  SpecFolder folder;
  const Loaded loaded = folder.load(std::string(kMinimal) +
                                    "model:\n  hidden_size: 100\n  num_attention_heads: 12\n");
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& hidden = loaded.only("must be divisible by model.num_attention_heads");
  CHECK(hidden.message ==
        "model.hidden_size 100 must be divisible by model.num_attention_heads 12 (each head gets "
        "hidden_size / heads dimensions)");
  CHECK(hidden.location.line == 6);
  CHECK(hidden.location.column == 16);
}

// --- Cluster, fault tolerance, env ------------------------------------------------

TEST_CASE("a hostfile and inline hosts cannot both be given") {
  SpecFolder folder;
  const Loaded loaded = folder.load(minimal_and(R"(
cluster:
  hostfile: hosts.txt
  hosts:
    - {host: a, slots: 1}
)"));
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& both = loaded.only("not both");
  CHECK(both.message == "give cluster.hostfile or cluster.hosts, not both");
  CHECK(both.location.line == 8);
}

TEST_CASE("the planner's choice for device auto goes into the struct and the resolved spec") {
  SpecFolder folder;
  Loaded loaded = folder.load(kMinimal);
  REQUIRE(loaded.spec.cluster.device == Device::kAuto);
  set_planned_device(loaded.spec, Device::kCpu);
  CHECK(loaded.spec.cluster.device == Device::kCpu);
  // What the ranks and the job directory read.
  const Loaded reread = folder.load(loaded.spec.resolved_yaml);
  INFO(reread.diagnostics.format());
  CHECK(reread.diagnostics.all().empty());
  CHECK(reread.spec.cluster.device == Device::kCpu);
  CHECK(reread.spec.training.steps == loaded.spec.training.steps);
}

TEST_CASE("the metrics endpoint's token file resolves against the spec and needs the port") {
  SpecFolder folder;
  const Loaded guarded = folder.load(minimal_and(R"(
cluster:
  metrics_port: 9400
  metrics_token_file: secrets/prometheus.token
)"),
                                     {}, "jobs/spec.yaml");
  INFO(guarded.diagnostics.format());
  CHECK(guarded.diagnostics.all().empty());
  CHECK(guarded.spec.cluster.metrics_port == 9400);
  CHECK(guarded.spec.cluster.metrics_token_file ==
        normal(folder.dir() / "jobs/secrets/prometheus.token"));

  const Loaded alone = folder.load(minimal_and(R"(
cluster:
  metrics_token_file: token
)"));
  REQUIRE(alone.errors().size() == 1);
  CHECK(alone.only("metrics_token_file").message ==
        "cluster.metrics_token_file guards the metrics endpoint; set cluster.metrics_port too");
}

TEST_CASE("inline hosts need a name and slots, and must be mappings") {
  SpecFolder folder;
  const Loaded loaded = folder.load(minimal_and(R"(
cluster:
  hosts:
    - {slots: 2}
    - {host: b}
    - node3
    - {host: d, slots: 1, gpus: 2}
)"));
  REQUIRE(loaded.errors().size() == 4);
  const Diagnostic& name = loaded.only("needs a host name");
  CHECK(name.message == "cluster.hosts[0] needs a host name: host: NAME");
  CHECK(name.location.line == 7);
  CHECK(loaded.only("needs slots").message == "cluster.hosts[1] needs slots: N (N >= 1)");
  const Diagnostic& scalar = loaded.only("must be a mapping");
  CHECK(scalar.message == "cluster.hosts[2] must be a mapping, got 'node3'");
  CHECK(scalar.location.line == 9);
  CHECK(scalar.location.column == 7);
  CHECK(loaded.only("unknown key 'gpus'").message ==
        "unknown key 'gpus' in cluster.hosts[3]; valid keys: host, slots");
  CHECK(loaded.spec.cluster.hosts.size() == 3);
}

TEST_CASE("GPU islands must be lists of integers") {
  SpecFolder folder;
  const Loaded loaded = folder.load(std::string(kMinimal) +
                                    "cluster:\n  topology:\n    gpu_islands: [[0, 1], [two]]\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK(loaded.only("gpu_islands").message ==
        "cluster.topology.gpu_islands must be a list of lists of integers >= 0, got 'two'");
  CHECK(loaded.spec.cluster.topology.gpu_islands.empty());
}

TEST_CASE("the heartbeat timeout must be longer than the interval") {
  SpecFolder folder;
  const Loaded loaded = folder.load(minimal_and(R"(
fault_tolerance:
  heartbeat_interval: 10
  heartbeat_timeout: 10
)"));
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& timeout = loaded.only("must be longer than heartbeat_interval");
  CHECK(timeout.message ==
        "fault_tolerance.heartbeat_timeout (10s) must be longer than heartbeat_interval (10s)");
  CHECK(timeout.location.line == 7);
  CHECK(timeout.location.column == 22);
}

TEST_CASE("the step timeout is 0 (off) or at least 1 s, and longer than the heartbeat interval") {
  SpecFolder folder;
  CHECK(folder.load(minimal_and("fault_tolerance: {step_timeout: 0}\n"))
            .spec.fault_tolerance.step_timeout_s == 0);
  CHECK(folder.load(minimal_and("fault_tolerance: {step_timeout: 90}\n"))
            .spec.fault_tolerance.step_timeout_s == 90);
  CHECK(folder.load(minimal_and("fault_tolerance: {step_timeout: 0.5}\n"))
            .only("step_timeout")
            .message == "fault_tolerance.step_timeout (0.5s) must be 0 (off) or at least 1s");
  CHECK(
      folder.load(minimal_and("fault_tolerance: {heartbeat_interval: 5, step_timeout: 5}\n"))
          .only("step_timeout")
          .message ==
      "fault_tolerance.step_timeout (5s) must be longer than heartbeat_interval (5s), or 0 (off)");
  CHECK_THAT(folder.load(minimal_and("fault_tolerance: {step_timeout: 604801}\n"))
                 .only("step_timeout")
                 .message,
             Catch::StartsWith("fault_tolerance.step_timeout must be between 0 and 604800"));
}

TEST_CASE("testing.fault is read with its defaults: attempt 0, so a restarted job runs clean") {
  SpecFolder folder;
  const Loaded loaded =
      folder.load(minimal_and("testing: {fault: {kind: stall_step, rank: 1, step: 40}}\n"));
  REQUIRE(loaded.errors().empty());
  REQUIRE(loaded.spec.testing.fault);
  const FaultSpec& fault = *loaded.spec.testing.fault;
  CHECK(fault.kind == FaultKind::kStallStep);
  CHECK(fault.rank == 1);
  CHECK(fault.step == 40);
  CHECK(fault.attempt == 0);
  const Loaded slow = folder.load(
      minimal_and("testing: {fault: {kind: slow, rank: 0, step: 3, attempt: 2, seconds: 0.25}}\n"));
  REQUIRE(slow.errors().empty());
  CHECK(slow.spec.testing.fault->kind == FaultKind::kSlow);
  CHECK(slow.spec.testing.fault->attempt == 2);
  CHECK(slow.spec.testing.fault->seconds == 0.25);
}

TEST_CASE("testing.fault needs a kind, a step from 1, and seconds for slow") {
  SpecFolder folder;
  CHECK(folder.load(minimal_and("testing: {fault: {rank: 0, step: 3}}\n")).only("kind").message ==
        "testing.fault.kind is required: exit, abort, hang, stall_step, slow, "
        "stall_collective or nan_gradient");
  CHECK_THAT(
      folder.load(minimal_and("testing: {fault: {kind: exit, step: 0}}\n")).only("step").message,
      Catch::StartsWith("testing.fault.step must be"));
  CHECK_THAT(
      folder.load(minimal_and("testing: {fault: {kind: exit, rank: -1}}\n")).only("rank").message,
      Catch::StartsWith("testing.fault.rank must be"));
  CHECK(folder.load(minimal_and("testing: {fault: {kind: slow, step: 3}}\n"))
            .only("seconds")
            .message ==
        "testing.fault.seconds (the delay before each step) must be given and above 0 for kind "
        "slow");
  CHECK_THAT(folder.load(minimal_and("testing: {fault: {kind: crash}}\n")).only("kind").message,
             Catch::StartsWith("testing.fault.kind must be one of exit, abort"));
}

TEST_CASE("testing.fault nan_gradient is read") {
  SpecFolder folder;
  const Loaded loaded = folder.load(
      minimal_and("testing: {fault: {kind: nan_gradient, rank: 1, step: 4, attempt: 1}}\n"));
  CHECK(loaded.diagnostics.all().empty());
  REQUIRE(loaded.spec.testing.fault.has_value());
  CHECK(loaded.spec.testing.fault->kind == FaultKind::kNanGradient);
  CHECK(loaded.spec.testing.fault->step == 4);
  CHECK(loaded.spec.testing.fault->attempt == 1);
}

TEST_CASE("testing.fault stall_collective is read") {
  SpecFolder folder;
  const Loaded loaded =
      folder.load(minimal_and("testing: {fault: {kind: stall_collective, rank: 1, step: 3}}\n"));
  CHECK(loaded.diagnostics.all().empty());
  REQUIRE(loaded.spec.testing.fault.has_value());
  CHECK(loaded.spec.testing.fault->kind == FaultKind::kStallCollective);
  CHECK(loaded.spec.testing.fault->rank == 1);
  CHECK(loaded.spec.testing.fault->step == 3);
}

TEST_CASE(
    "fault_tolerance.collective_timeout: 600 s by default, 0 turns it off, below 1 s refused") {
  SpecFolder folder;
  CHECK(folder.load(std::string(kMinimal)).spec.fault_tolerance.collective_timeout_s == 600);
  CHECK(folder.load(minimal_and("fault_tolerance: {collective_timeout: 0}\n"))
            .spec.fault_tolerance.collective_timeout_s == 0);
  CHECK(folder.load(minimal_and("fault_tolerance: {collective_timeout: 45}\n"))
            .spec.fault_tolerance.collective_timeout_s == 45);
  CHECK(folder.load(minimal_and("fault_tolerance: {collective_timeout: 0.5}\n"))
            .only("collective_timeout")
            .message == "fault_tolerance.collective_timeout (0.5s) must be 0 (off) or at least 1s");
  CHECK(
      folder.load(minimal_and("fault_tolerance: {heartbeat_interval: 5, collective_timeout: 5}\n"))
          .only("collective_timeout")
          .message ==
      "fault_tolerance.collective_timeout (5s) must be longer than heartbeat_interval (5s), or "
      "0 (off)");
  CHECK_THAT(folder.load(minimal_and("fault_tolerance: {collective_timeout: -1}\n"))
                 .only("collective_timeout")
                 .message,
             Catch::Contains("collective_timeout"));
}

TEST_CASE("env maps names to single values") {
  SpecFolder folder;
  SECTION("values are kept as strings") {
    const Loaded loaded =
        folder.load(std::string(kMinimal) + "env: {A: \"1\", B: two, NCCL_IB_DISABLE: 1}\n");
    CHECK(loaded.diagnostics.all().empty());
    CHECK(loaded.spec.env ==
          std::map<std::string, std::string>{{"A", "1"}, {"B", "two"}, {"NCCL_IB_DISABLE", "1"}});
  }
  SECTION("a nested value is an error at its name; the other names stay") {
    const Loaded loaded = folder.load(minimal_and(R"(
env:
  A: "1"
  B:
    nested: x
  C: [1, 2]
)"));
    REQUIRE(loaded.errors().size() == 2);
    const Diagnostic& nested = loaded.only("'B' maps to");
    CHECK(nested.message == "env must map names to single values; 'B' maps to a mapping");
    CHECK(nested.location.line == 7);
    CHECK(nested.location.column == 3);
    CHECK(loaded.only("'C' maps to").message ==
          "env must map names to single values; 'C' maps to a list");
    CHECK(loaded.spec.env == std::map<std::string, std::string>{{"A", "1"}});
  }
  SECTION("env itself must be a mapping") {
    const Loaded loaded = folder.load(std::string(kMinimal) + "env: [A=1]\n");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("env").message == "env must be a mapping of names to values, got a list");
  }
}

// --- Files and YAML syntax ------------------------------------------------------

TEST_CASE("a YAML syntax error gives yaml-cpp's line and column") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: [1, 2
  fp16: {enabled: true}
)");
  REQUIRE(loaded.diagnostics.all().size() == 1);
  const Diagnostic& syntax = loaded.diagnostics.all()[0];
  CHECK(syntax.severity == Severity::kError);
  CHECK(syntax.message.rfind("YAML syntax error: ", 0) == 0);
  CHECK(syntax.location.file == loaded.path);
  CHECK(syntax.location.line == 4);
  CHECK(syntax.location.column == 7);
}

TEST_CASE("a tab in the indentation is a syntax error, not a crash") {
  SpecFolder folder;
  const Loaded loaded = folder.load("data:\n\ttrain: demo\ntraining:\n  steps: 1\n");
  INFO(loaded.diagnostics.format());
  REQUIRE(loaded.errors().size() == 1);
  CHECK(loaded.errors()[0].message.rfind("YAML syntax error: ", 0) == 0);
  CHECK(loaded.errors()[0].location.line == 2);
}

TEST_CASE("an empty spec and a missing spec are errors that name the file") {
  SpecFolder folder;
  SECTION("empty") {
    const Loaded loaded = folder.load("");
    REQUIRE(loaded.diagnostics.all().size() == 1);
    CHECK(loaded.diagnostics.format() ==
          loaded.path +
              ": error: the job spec is empty; see jobs/demo.yaml for a complete example\n");
  }
  SECTION("only a comment") {
    const Loaded loaded = folder.load("# nothing yet\n");
    REQUIRE(loaded.diagnostics.all().size() == 1);
    CHECK(loaded.only("the job spec is empty").location.to_string() == loaded.path);
  }
  SECTION("missing") {
    const std::string path = (folder.dir() / "absent.yaml").string();
    const Loaded loaded = testing::load_file(path);
    REQUIRE(loaded.diagnostics.all().size() == 1);
    CHECK(loaded.diagnostics.format() ==
          path + ": error: cannot read job spec '" + path + "': No such file or directory\n");
  }
}

TEST_CASE("odd documents are reported, never a crash") {
  SpecFolder folder;
  SECTION("a top-level list") {
    const Loaded loaded = folder.load("- training\n- data\n");
    REQUIRE(loaded.diagnostics.all().size() == 1);
    CHECK(loaded.only("the job spec must be a mapping").message ==
          "the job spec must be a mapping of keys to values, got a list");
    CHECK(loaded.diagnostics.all()[0].location.line == 1);
  }
  SECTION("a scalar") {
    const Loaded loaded = folder.load("just some words\n");
    REQUIRE(loaded.diagnostics.all().size() == 1);
    CHECK(loaded.only("the job spec must be a mapping").message ==
          "the job spec must be a mapping of keys to values, got 'just some words'");
  }
  SECTION("null sections are treated as absent") {
    const Loaded loaded = folder.load("training: null\ndata: ~\ncluster:\nmodel: {}\n");
    REQUIRE(loaded.errors().size() == 2);
    loaded.only("training.steps is required");
    loaded.only("data.train is required");
    CHECK(loaded.spec.model.num_layers == 12);
  }
  SECTION("a very long unknown key") {
    const std::string key(1000, 'k');
    const Loaded loaded = folder.load(std::string(kMinimal) + key + ": 1\n");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("unknown key 'kkkk").location.line == 5);
  }
  SECTION("a key longer than YAML allows for an implicit key") {
    const Loaded loaded = folder.load(std::string(kMinimal) + std::string(5000, 'k') + ": 1\n");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("YAML syntax error").location.line == 5);
  }
  SECTION("a very long data path") {
    const Loaded loaded =
        folder.load("training: {steps: 1}\ndata: {train: " + std::string(5000, 'p') + "}\n");
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.only("data.train: no data at").location.line == 2);
  }
  SECTION("deeply nested mappings under an unknown key") {
    std::string nested = "x";
    for (int i = 0; i < 200; ++i) nested = "{a: " + nested + "}";
    const Loaded loaded = folder.load(std::string(kMinimal) + "deep: " + nested + "\n");
    REQUIRE(loaded.errors().size() == 1);
    CHECK_THAT(loaded.only("too large").message, Catch::Contains("nest deeper than 64 levels"));
  }
  SECTION("mappings nested deeper than yaml-cpp allows") {
    std::string nested = "x";
    for (int i = 0; i < 5000; ++i) nested = "[" + nested + "]";
    const Loaded loaded = folder.load(std::string(kMinimal) + "env: " + nested + "\n");
    CHECK(loaded.diagnostics.has_errors());
  }
  SECTION("non-scalar keys and aliases") {
    const Loaded loaded = folder.load(R"(
defaults: &defaults {steps: 5}
training: *defaults
data: {train: demo}
[a, b]: 1
)");
    CHECK(loaded.spec.training.steps == 5);
    REQUIRE(loaded.errors().size() == 2);
    loaded.only("unknown key 'defaults'");
    loaded.only("unknown key '?'");
  }
}

}  // namespace dslaunch::spec

namespace dslaunch::spec {
namespace {

TEST_CASE("a spec path that is a device or a folder is refused, not read forever") {
  for (const char* path : {"/dev/zero", "/tmp"}) {
    INFO(path);
    const Loaded loaded = testing::load_file(path);
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.diagnostics.format() ==
          fmt::format("{}: error: cannot read job spec '{}': not a regular file\n", path, path));
  }
}

TEST_CASE("a DeepSpeed config that is a device is refused at the deepspeed_config key") {
  SpecFolder folder;
  const Loaded loaded = folder.load(
      "deepspeed_config: /dev/zero\ndata: {train: demo}\n"
      "training: {steps: 1}\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK(loaded.diagnostics.format().find(
            ":1:19: error: cannot read DeepSpeed config '/dev/zero': not a regular file") !=
        std::string::npos);
}

TEST_CASE("parse_job_spec reads text in memory like a file") {
  Diagnostics diagnostics;
  SourceMap locations;
  const JobSpec spec = parse_job_spec("data: {train: demo}\ntraining: {steps: 7}\n",
                                      "/jobs/inline.yaml", {}, diagnostics, locations);
  CHECK_FALSE(diagnostics.has_errors());
  CHECK(spec.name == "inline");
  CHECK(spec.training.steps == 7);
}

}  // namespace
}  // namespace dslaunch::spec

namespace dslaunch::spec {
namespace {

TEST_CASE("controller_address takes host or host:port with a port in range") {
  SpecFolder folder;
  for (const char* good : {"10.0.0.5", "head-node:29500", "[fd00::5]:29500", "[::1]"}) {
    INFO(good);
    const Loaded loaded = folder.load(fmt::format(
        "cluster: {{controller_address: '{}'}}\ndata: {{train: demo}}\ntraining: {{steps: 1}}\n",
        good));
    CHECK(loaded.errors().empty());
    CHECK(loaded.spec.cluster.controller_address == good);
  }
  for (const char* bad : {"host:0", "host:70000", "host:port", "a b:1", "fd00::5:29500"}) {
    INFO(bad);
    const Loaded loaded = folder.load(fmt::format(
        "cluster: {{controller_address: '{}'}}\ndata: {{train: demo}}\ntraining: {{steps: 1}}\n",
        bad));
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.diagnostics.format().find("must be host or host:port") != std::string::npos);
  }
}

}  // namespace
}  // namespace dslaunch::spec

namespace dslaunch::spec {
namespace {

TEST_CASE("network_interface takes an interface name or an IPv4 subnet") {
  SpecFolder folder;
  for (const char* good : {"eth0", "ib0", "enp65s0f1np1", "198.51.100.0/24", "10.0.0.0/8"}) {
    INFO(good);
    const Loaded loaded = folder.load(fmt::format(
        "cluster: {{network_interface: '{}'}}\ndata: {{train: demo}}\ntraining: {{steps: 1}}\n",
        good));
    CHECK(loaded.errors().empty());
    CHECK(loaded.spec.cluster.network_interface == good);
  }
  for (const char* bad :
       {"10.0.0.0/33", "10.0/8", "eth0/1", "an interface", "eth0:1", "a-name-longer-than-15"}) {
    INFO(bad);
    const Loaded loaded = folder.load(fmt::format(
        "cluster: {{network_interface: '{}'}}\ndata: {{train: demo}}\ntraining: {{steps: 1}}\n",
        bad));
    REQUIRE(loaded.errors().size() == 1);
    CHECK_THAT(loaded.diagnostics.format(), Catch::Contains("cluster.network_interface '"));
  }
}

TEST_CASE("launcher_args are split as a shell splits them; a broken quote is an error") {
  SpecFolder folder;
  Loaded loaded = folder.load(
      "cluster: {launcher_args: \"--mca btl self,tcp -x 'A B'\"}\ndata: {train: demo}\n"
      "training: {steps: 1}\n");
  CHECK(loaded.errors().empty());
  CHECK(loaded.spec.cluster.launcher_args ==
        std::vector<std::string>{"--mca", "btl", "self,tcp", "-x", "A B"});
  loaded = folder.load(
      "cluster: {launcher_args: \"--mca 'btl\"}\ndata: {train: demo}\ntraining: {steps: 1}\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK_THAT(loaded.diagnostics.format(),
             Catch::Contains("cluster.launcher_args cannot be split into arguments: a single "
                             "quote at character 7 is never closed"));
}

TEST_CASE("a commbench job needs neither data nor training steps") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(kind: commbench
commbench:
  collectives: [All_Reduce, all_to_all]
  groups: [world, model]
  max_bytes: 65536
)");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.errors().empty());
  CHECK(loaded.spec.kind == JobKind::kCommbench);
  CHECK(loaded.spec.commbench.collectives == std::vector<std::string>{"all_reduce", "all_to_all"});
  CHECK(loaded.spec.commbench.groups == std::vector<std::string>{"world", "model"});
  CHECK(loaded.spec.commbench.min_bytes == 1024);
  CHECK(loaded.spec.commbench.max_bytes == 65536);
}

TEST_CASE("commbench settings are checked") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(kind: commbench
commbench:
  collectives: [all_reduse]
  groups: [world, world]
  min_bytes: 4096
  max_bytes: 1024
)");
  const std::string text = loaded.diagnostics.format();
  CHECK(loaded.errors().size() == 3);
  CHECK(text.find(":3:16: error: commbench.collectives must be a list of all_reduce, all_gather, "
                  "reduce_scatter, all_to_all, got 'all_reduse'; did you mean 'all_reduce'?") !=
        std::string::npos);
  CHECK(text.find(":4:11: error: commbench.groups lists 'world' twice") != std::string::npos);
  CHECK(text.find(":6:14: error: commbench.max_bytes 1024 is below min_bytes 4096") !=
        std::string::npos);
}

TEST_CASE("a commbench section in a training job is an error") {
  SpecFolder folder;
  const Loaded loaded =
      folder.load("data: {train: demo}\ntraining: {steps: 1}\ncommbench: {iterations: 3}\n");
  REQUIRE(loaded.errors().size() == 1);
  CHECK(loaded.diagnostics.format().find(":3:12: error: the commbench section needs kind: "
                                         "commbench") != std::string::npos);
}

}  // namespace
}  // namespace dslaunch::spec

namespace dslaunch::spec {
namespace {

TEST_CASE("the resolved document carries overrides and the DeepSpeed config, and parses alike") {
  SpecFolder folder;
  folder.write("ds.json", R"({"train_batch_size": 64, "optimizer": {"type": "Adam"}})");
  LoadOptions options;
  options.overrides = {"training.steps=77"};
  const Loaded loaded = folder.load(
      "deepspeed_config: ds.json\ndata: {train: demo}\ntraining: {steps: 1}\n", options);
  REQUIRE(loaded.errors().empty());
  const std::string& resolved = loaded.spec.resolved_yaml;
  CHECK(resolved.find("deepspeed_config") == std::string::npos);
  Diagnostics diagnostics;
  SourceMap locations;
  const JobSpec again = parse_job_spec(resolved, loaded.spec.spec_path, {}, diagnostics, locations);
  INFO(diagnostics.format());
  CHECK_FALSE(diagnostics.has_errors());
  CHECK(again.training.steps == 77);
  CHECK(again.training.batch.train_batch_size == 64);
  CHECK(again.training.optimizer.type == OptimizerType::kAdam);
  CHECK(again.resolved_yaml == resolved);
}

}  // namespace
}  // namespace dslaunch::spec

namespace dslaunch::spec {
namespace {

// --- Long values (std::regex overflowed the stack on them) ----------------------

TEST_CASE("a 50 KB job name is an error, not a crash, and the message stays short") {
  SpecFolder folder;
  const Loaded loaded = folder.load("name: " + std::string(50'000, 'a') + "\n" + minimal_and(""));
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& name = loaded.only("is too long");
  CHECK(name.message ==
        "name '" + std::string(40, 'a') +
            "...' (50000 characters) is too long; a job name has at most 128 characters (it "
            "names the job's folder)");
  CHECK(name.location.line == 1);
  CHECK(name.location.column == 7);
}

TEST_CASE("a job name of 128 characters is accepted, and a 50 KB one with a slash refused") {
  SpecFolder folder;
  const std::string longest(128, 'n');
  const Loaded fits = folder.load("name: " + longest + "\n" + minimal_and(""));
  CHECK(fits.diagnostics.all().empty());
  CHECK(fits.spec.name == longest);
  const Loaded slash = folder.load("name: a/" + std::string(50'000, 'b') + "\n" + minimal_and(""));
  REQUIRE(slash.errors().size() == 1);
  slash.only("is too long");
}

TEST_CASE("a 50 KB controller_address is an error, not a crash") {
  SpecFolder folder;
  const Loaded loaded = folder.load(
      minimal_and("cluster:\n  controller_address: " + std::string(50'000, 'h') + ":29500\n"));
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& address = loaded.only("controller_address");
  CHECK(address.message == "cluster.controller_address '" + std::string(40, 'h') +
                               "...' (50006 characters) is too long; give a host or host:port "
                               "of at most 255 characters");
  CHECK(address.location.line == 6);
  CHECK(address.location.column == 23);
}

TEST_CASE("a controller_address of 255 characters is accepted") {
  SpecFolder folder;
  const std::string address = std::string(249, 'h') + ":29500";
  const Loaded loaded =
      folder.load(minimal_and("cluster: {controller_address: " + address + "}\n"));
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.cluster.controller_address == address);
}

TEST_CASE("controller_address edge cases are checked without a regex") {
  SpecFolder folder;
  for (const char* good : {"h:1", "h:65535", "[fd00::5]", "10.0.0.5:00080"}) {
    INFO(good);
    const Loaded loaded =
        folder.load(minimal_and(fmt::format("cluster: {{controller_address: '{}'}}\n", good)));
    CHECK(loaded.errors().empty());
  }
  for (const char* bad : {"h:", ":1", "[]:1", "[fd00::g]", "[fd00::5]x", "[fd00::5]:", "h:123456",
                          "a\tb", "h]:1", "[fd00::5"}) {
    INFO(bad);
    const Loaded loaded =
        folder.load(minimal_and(fmt::format("cluster: {{controller_address: \"{}\"}}\n", bad)));
    REQUIRE(loaded.errors().size() == 1);
    loaded.only("must be host or host:port");
  }
}

// --- YAML documents, merge keys and x- keys ----------------------------------------

TEST_CASE("a second YAML document is an error at its '---' line, not silently dropped") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training: {steps: 1}
---
# the real settings
training: {steps: 2}
)");
  REQUIRE(loaded.diagnostics.all().size() == 1);
  const Diagnostic& second = loaded.only("a second YAML document");
  CHECK(second.message ==
        "a second YAML document starts here, and a job spec is one document; remove the '---' "
        "line to merge the two, or move this one to a file of its own");
  CHECK(second.location.line == 3);
  CHECK(second.location.column == 1);
  CHECK(loaded.spec.training.steps == 1);
}

TEST_CASE("a leading '---' and a trailing empty document are fine") {
  SpecFolder folder;
  const Loaded loaded = folder.load("---\n" + std::string(kMinimal) + "---\n...\n");
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.training.steps == 10);
}

TEST_CASE("malformed text that yaml-cpp's LoadAll loops on is reported, not a hang") {
  // Found by the spec fuzzer: yaml-cpp reads endless null documents here.
  SpecFolder folder;
  const Loaded loaded = folder.load(
      ", <<: *o}\ndata: {train: demo}\ntraining:\n  <<: [*b&, {gradient_cl]\n"
      "deepspeots: 1}, {host: a, slots: 2}]}\n-\343--\nb:");
  CHECK(loaded.diagnostics.has_errors());
}

TEST_CASE("offload pin_memory warns only at ZeRO stage 3, where it pins nothing yet") {
  SpecFolder folder;
  const auto warnings_for = [&folder](int stage, const std::string& offload) {
    const Loaded loaded = folder.load(fmt::format(R"(
data: {{train: demo}}
training:
  steps: 1
  zero_optimization:
    stage: {}
{}
)",
                                                  stage, offload));
    INFO(loaded.diagnostics.format());
    CHECK_FALSE(loaded.diagnostics.has_errors());
    return loaded.diagnostics.warnings();
  };
  const std::string optimizer = "    offload_optimizer: {device: cpu, pin_memory: true}";
  // Stages 1-2 pin the host arrays the GPU's mirror copies.
  CHECK(warnings_for(1, optimizer).empty());
  CHECK(warnings_for(2, optimizer).empty());
  const std::string stage3 = "has no effect at ZeRO stage 3 yet";
  std::vector<std::string> warnings = warnings_for(3, optimizer);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("offload_optimizer.pin_memory " + stage3));
  CHECK_THAT(warnings[0], Catch::Contains(":6:50: "));  // at its value
  // Partial offload pins its own buffers at any stage.
  CHECK(warnings_for(3, "    offload_optimizer: {device: cpu, pin_memory: true, ratio: 0.5}")
            .empty());
  warnings = warnings_for(3, optimizer + "\n    offload_param: {device: cpu, pin_memory: true}");
  REQUIRE(warnings.size() == 2);
  CHECK_THAT(warnings[1], Catch::Contains("offload_param.pin_memory " + stage3));
  // Said false, or left out, nothing to warn of.
  CHECK(warnings_for(3, "    offload_optimizer: {device: cpu, pin_memory: false}").empty());
}

TEST_CASE("merge keys bring in an anchored mapping, and keys written out win") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
x-offload: &offload
  device: cpu
  pin_memory: true
data: {train: demo}
training:
  steps: 1
  zero_optimization:
    stage: 3
    offload_optimizer:
      <<: *offload
    offload_param:
      <<: *offload
      pin_memory: false
)");
  INFO(loaded.diagnostics.format());
  CHECK_FALSE(loaded.diagnostics.has_errors());
  // pin_memory, merged in true, warns where it stays true only.
  const std::vector<std::string> warnings = loaded.diagnostics.warnings();
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0],
             Catch::Contains("offload_optimizer.pin_memory has no effect at ZeRO stage 3 yet"));
  const ZeroSpec& zero = loaded.spec.training.zero;
  CHECK(zero.offload_optimizer.device == OffloadDevice::kCpu);
  CHECK(zero.offload_optimizer.pin_memory);
  CHECK(zero.offload_param.device == OffloadDevice::kCpu);
  CHECK_FALSE(zero.offload_param.pin_memory);
}

TEST_CASE("a merge key takes a list of mappings, the earlier one winning") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
x-small: &small {num_layers: 6, hidden_size: 512}
x-wide: &wide {hidden_size: 1024, num_attention_heads: 16}
data: {train: demo}
training: {steps: 1}
model:
  <<: [*small, *wide]
  seq_length: 256
)");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.model.num_layers == 6);
  CHECK(loaded.spec.model.hidden_size == 512);
  CHECK(loaded.spec.model.num_attention_heads == 16);
  CHECK(loaded.spec.model.seq_length == 256);
}

TEST_CASE("a bad value brought in by a merge key is reported where it was written") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
x-defaults: &defaults
  steps: ten
  gradient_clipping: 1
data: {train: demo}
training:
  <<: *defaults
)");
  REQUIRE(loaded.diagnostics.all().size() == 1);
  const Diagnostic& steps = loaded.only("training.steps must be an integer");
  CHECK(steps.location.line == 2);
  CHECK(steps.location.column == 10);
  CHECK(loaded.spec.training.gradient_clipping == 1);
}

TEST_CASE("a merge key with something else than mappings is one clear error") {
  SpecFolder folder;
  const Loaded loaded = folder.load(minimal_and(R"(
model:
  <<: 12
  num_layers: 4
)"));
  REQUIRE(loaded.diagnostics.all().size() == 1);
  const Diagnostic& merge = loaded.diagnostics.all()[0];
  CHECK(merge.message ==
        "the merge key '<<' takes a mapping or a list of mappings, such as <<: *defaults; got "
        "'12'");
  CHECK(merge.location.line == 6);
  CHECK(merge.location.column == 7);
  CHECK(loaded.spec.model.num_layers == 4);
}

TEST_CASE("a quoted '<<' is an ordinary key, and an alias cycle is refused, not walked forever") {
  SpecFolder folder;
  const Loaded quoted = folder.load(minimal_and("model: {\"<<\": {num_layers: 2}}\n"));
  REQUIRE(quoted.errors().size() == 1);
  quoted.only("unknown key '<<' in model");
  CHECK(quoted.spec.model.num_layers == 12);

  // Every walk of a cyclic document would go on until the node cap stops it.
  const Loaded cycle = folder.load(minimal_and("x-loop: &loop {<<: *loop, a: [*loop]}\n"));
  REQUIRE(cycle.errors().size() == 1);
  CHECK_THAT(cycle.only("too large").message, Catch::Contains("nest deeper than 64 levels"));
}

TEST_CASE("top-level keys starting with x- are ignored without a word") {
  SpecFolder folder;
  const Loaded loaded = folder.load(minimal_and(R"(
x-anything: {whatever: [1, 2]}
x-note: written for the humans
)"));
  CHECK(loaded.diagnostics.all().empty());
  SECTION("but only at the top level, and not offered as suggestions") {
    const Loaded nested = folder.load(minimal_and("model: {x-note: 1}\nresources: 1\n"));
    REQUIRE(nested.errors().size() == 2);
    nested.only("unknown key 'x-note' in model");
    CHECK(nested.only("unknown key 'resources'").message ==
          "unknown key 'resources' in the job spec; valid keys: kind, name, deepspeed_config, "
          "cluster, model, parallelism, data, training, commbench, checkpoint, fault_tolerance, "
          "testing, env");
  }
}

// --- env ------------------------------------------------------------------------------

TEST_CASE("env names must be variable names, each given once") {
  SpecFolder folder;
  const Loaded loaded = folder.load(minimal_and(R"(
env:
  GOOD_1: x
  MY-VAR: y
  1ABC: z
  _ok: w
  GOOD_1: again
)"));
  REQUIRE(loaded.errors().size() == 3);
  const Diagnostic& dash = loaded.only("'MY-VAR'");
  CHECK(dash.message ==
        "env name 'MY-VAR' is not a variable name: use letters, digits and '_', not starting with "
        "a digit, such as 'MY_VAR'");
  CHECK(dash.location.line == 7);
  CHECK(dash.location.column == 3);
  CHECK(loaded.only("'1ABC'").message ==
        "env name '1ABC' is not a variable name: use letters, digits and '_', not starting with "
        "a digit, such as '_1ABC'");
  const Diagnostic& twice = loaded.only("given twice");
  CHECK(twice.message == "env.GOOD_1 is given twice (first at " + loaded.path + ":6:3); keep one");
  CHECK(twice.location.line == 10);
  CHECK(loaded.spec.env == std::map<std::string, std::string>{{"GOOD_1", "x"}, {"_ok", "w"}});
}

// --- One bad value, one error -------------------------------------------------------

TEST_CASE("a value that failed to read does not feed the checks between keys") {
  SpecFolder folder;
  SECTION("heads that are not a number") {
    const Loaded loaded =
        folder.load(minimal_and("model: {hidden_size: 1024, num_attention_heads: x}\n"
                                "parallelism: {tensor: 8}\n"));
    REQUIRE(loaded.diagnostics.all().size() == 1);
    CHECK(loaded.only("num_attention_heads").message ==
          "model.num_attention_heads must be an integer, got 'x'");
  }
  SECTION("a hidden size out of range") {
    const Loaded loaded = folder.load(minimal_and("model: {hidden_size: 0}\n"));
    REQUIRE(loaded.diagnostics.all().size() == 1);
    loaded.only("model.hidden_size must be between 1 and 1048576, got 0");
  }
  SECTION("a tensor size that is not a number") {
    const Loaded loaded =
        folder.load(minimal_and("model: {hidden_size: 100}\nparallelism: {tensor: two}\n"));
    REQUIRE(loaded.diagnostics.all().size() == 2);
    loaded.only("parallelism.tensor must be an integer, got 'two'");
    loaded.only("hidden_size 100 must be divisible by model.num_attention_heads 12");
  }
  SECTION("a ZeRO stage that is not a number, with optimizer offload") {
    const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 1
  zero_optimization: {stage: three, offload_optimizer: {device: cpu}}
)");
    REQUIRE(loaded.diagnostics.all().size() == 1);
    loaded.only("training.zero_optimization.stage must be an integer, got 'three'");
  }
  SECTION("a scheduler type that is misspelled, with its params") {
    const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 1
  scheduler:
    type: WarmupLinear
    params: {warmup_max_lr: 0.001, total_num_steps: 100}
)");
    REQUIRE(loaded.diagnostics.all().size() == 1);
    loaded.only("training.scheduler.type must be one of");
  }
  SECTION("an optimizer type that is misspelled, with adam_w_mode: false") {
    const Loaded own = folder.load(R"(
data: {train: demo}
training:
  steps: 1
  optimizer: {type: Adamm, params: {adam_w_mode: false}}
)");
    REQUIRE(own.diagnostics.all().size() == 1);
    own.only("training.optimizer.type must be one of");
  }
  SECTION("a heartbeat that is not a number") {
    const Loaded loaded = folder.load(
        minimal_and("fault_tolerance: {heartbeat_interval: soon, heartbeat_timeout: 1}\n"));
    REQUIRE(loaded.diagnostics.all().size() == 1);
    loaded.only("fault_tolerance.heartbeat_interval must be a number, got 'soon'");
  }
}

// --- Inline hosts -----------------------------------------------------------------

TEST_CASE("inline hosts need valid, distinct names and at most 65536 slots") {
  SpecFolder folder;
  const Loaded loaded = folder.load(minimal_and(R"(
cluster:
  hosts:
    - {host: a, slots: 1}
    - {host: "bad host", slots: 1}
    - {host: a, slots: 2}
    - {host: c, slots: 100000}
)"));
  REQUIRE(loaded.errors().size() == 3);
  const Diagnostic& bad = loaded.only("bad host");
  CHECK(bad.message.rfind("cluster.hosts[1].host: host name \"bad host\" holds \" \"", 0) == 0);
  CHECK(bad.location.line == 8);
  CHECK(bad.location.column == 14);
  const Diagnostic& twice = loaded.only("already listed");
  CHECK(twice.message == "cluster.hosts[2]: host 'a' is already listed (first at " + loaded.path +
                             ":7:14); list each host once");
  CHECK(twice.location.line == 9);
  CHECK(twice.location.column == 14);
  CHECK(loaded.only("slots").message ==
        "cluster.hosts[3].slots must be between 1 and 65536, got 100000");
  CHECK(loaded.spec.cluster.hosts.size() == 4);
}

TEST_CASE("an inline host name starting with '-' is refused: ssh would read it as an option") {
  SpecFolder folder;
  const Loaded loaded = folder.load(minimal_and("cluster: {hosts: [{host: -oProxy, slots: 1}]}\n"));
  REQUIRE(loaded.errors().size() == 1);
  CHECK(loaded.only("cluster.hosts[0].host: host name").location.line == 5);
}

// --- Scalars ---------------------------------------------------------------------

TEST_CASE("scalars: explicit tags are honoured, hex and blanks are not numbers") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: !!str 4
  train_batch_size: "16"
  train_micro_batch_size_per_gpu: !!int "2"
  gradient_clipping: 0x1p4
  fp16: {enabled: !!str true, initial_scale_power: 0x10, min_loss_scale: +2}
model: {dropout: " 0.5", num_layers: nan}
)");
  INFO(loaded.diagnostics.format());
  const auto message = [&](std::string_view needle) { return loaded.only(needle).message; };
  CHECK(message("training.steps") == "training.steps must be an integer, got !!str '4'");
  CHECK(message("gradient_clipping") == "training.gradient_clipping must be a number, got '0x1p4'");
  CHECK(message("fp16.enabled") == "training.fp16.enabled must be true or false, got !!str 'true'");
  CHECK(message("initial_scale_power") ==
        "training.fp16.initial_scale_power must be an integer, got '0x10'");
  CHECK(message("dropout") == "model.dropout must be a number, got ' 0.5'");
  CHECK(message("num_layers") == "model.num_layers must be an integer, got 'nan'");
  CHECK(loaded.errors().size() == 6);
  // Quoted numbers are numbers: YAML users quote by habit.
  CHECK(loaded.spec.training.batch.train_batch_size == 16);
  CHECK(loaded.spec.training.batch.micro_batch_per_gpu == 2);
  CHECK(loaded.spec.training.fp16.min_loss_scale == 2);
}

TEST_CASE("a string tagged !!str is still a string") {
  SpecFolder folder;
  const Loaded loaded = folder.load(minimal_and("name: !!str 2024\nenv: {N: !!str 4}\n"));
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.name == "2024");
  CHECK(loaded.spec.env == std::map<std::string, std::string>{{"N", "4"}});
}

// --- Source map --------------------------------------------------------------------

TEST_CASE("the source map walks up through list items to the list") {
  SpecFolder folder;
  const Loaded loaded = folder.load(minimal_and(R"(
cluster:
  hosts:
    - {host: a, slots: 1}
)"));
  REQUIRE(loaded.diagnostics.all().empty());
  CHECK(loaded.locations.find("cluster.hosts[0].slots").line == 7);
  CHECK(loaded.locations.find("cluster.hosts[0].slots").column == 24);
  // Never recorded: the nearest parent is the list, not the cluster section.
  CHECK(loaded.locations.find("cluster.hosts[4].slots").line == 7);
  CHECK(loaded.locations.find("cluster.hosts[4].slots").column == 5);
}

}  // namespace
}  // namespace dslaunch::spec

namespace dslaunch::spec {

TEST_CASE("the engine's own training keys: seed, eval_interval, eval_batches") {
  testing::SpecFolder folder;
  const testing::Loaded defaults = folder.load("training:\n  steps: 10\ndata:\n  train: demo\n");
  CHECK(defaults.spec.training.seed == 1234);
  CHECK(defaults.spec.training.eval_interval == 0);
  CHECK(defaults.spec.training.eval_batches == 8);
  const testing::Loaded given = folder.load(
      "training:\n  steps: 10\n  seed: 7\n  eval_interval: 5\n  eval_batches: 3\ndata:\n  train: "
      "demo\n");
  INFO(given.diagnostics.format());
  CHECK(given.diagnostics.all().empty());
  CHECK(given.spec.training.seed == 7);
  CHECK(given.spec.training.eval_interval == 5);
  CHECK(given.spec.training.eval_batches == 3);
  const testing::Loaded zero =
      folder.load("training:\n  steps: 10\n  eval_batches: 0\ndata:\n  train: demo\n");
  CHECK(zero.diagnostics.has_errors());
}

TEST_CASE("data paths: a Megatron prefix may be given as its .bin; 'demo' is for train only") {
  testing::SpecFolder folder;
  folder.write("corpus_text_document.bin", "x");
  folder.write("corpus_text_document.idx", "x");
  const testing::Loaded bin = folder.load(
      "training:\n  steps: 10\ndata:\n  train: corpus_text_document.bin\n  format: megatron\n");
  INFO(bin.diagnostics.format());
  CHECK(!bin.diagnostics.has_errors());
  const testing::Loaded valid_demo =
      folder.load("training:\n  steps: 10\ndata:\n  train: demo\n  valid: demo\n");
  CHECK_THAT(valid_demo.only("data.valid").message, Catch::Contains("only under data.train"));
}

}  // namespace dslaunch::spec

namespace dslaunch::spec {

TEST_CASE("training.elasticity: DeepSpeed's keys, defaults and checks") {
  testing::SpecFolder folder;
  const auto load = [&](std::string_view elasticity, std::string_view more = "") {
    return folder.load(fmt::format(
        "training:\n  steps: 10\n{}  elasticity:\n{}data:\n  train: demo\n", more, elasticity));
  };

  const ElasticitySpec defaults = folder.load(kMinimal).spec.training.elasticity;
  CHECK_FALSE(defaults.enabled);
  CHECK(defaults.max_train_batch_size == 2000);
  CHECK(defaults.micro_batch_sizes == std::vector<int64_t>{2, 4, 6});
  CHECK(defaults.min_gpus == 1);
  CHECK(defaults.max_gpus == 10000);
  CHECK(defaults.min_time == 0);
  CHECK(defaults.version == 0.2);
  CHECK(defaults.prefer_larger_batch);
  CHECK_FALSE(defaults.ignore_non_elastic_batch_info);
  CHECK_FALSE(defaults.model_parallel_size);
  CHECK(defaults.num_gpus_per_node == 1);

  const testing::Loaded given = load(
      "    enabled: true\n    max_train_batch_size: 10000\n    micro_batch_sizes: [8, 12, 16, "
      "17]\n    min_gpus: 32\n    max_gpus: 1500\n    min_time: 20\n    version: 0.1\n"
      "    prefer_larger_batch: false\n    ignore_non_elastic_batch_info: true\n"
      "    num_gpus_per_node: 8\n");
  INFO(given.diagnostics.format());
  CHECK(given.diagnostics.all().empty());
  const ElasticitySpec& elasticity = given.spec.training.elasticity;
  CHECK(elasticity.enabled);
  CHECK(elasticity.max_train_batch_size == 10000);
  CHECK(elasticity.micro_batch_sizes == std::vector<int64_t>{8, 12, 16, 17});
  CHECK(elasticity.min_gpus == 32);
  CHECK(elasticity.max_gpus == 1500);
  CHECK(elasticity.min_time == 20);
  CHECK(elasticity.version == 0.1);
  CHECK_FALSE(elasticity.prefer_larger_batch);
  CHECK(elasticity.ignore_non_elastic_batch_info);
  CHECK(elasticity.num_gpus_per_node == 8);

  // DeepSpeed's test_missing_max_batch, test_missing_micro_batch, test_empty_config.
  const testing::Loaded empty = load("    enabled: true\n");
  CHECK(empty.only("max_train_batch_size").message ==
        "training.elasticity.max_train_batch_size is required with elasticity enabled: the "
        "largest global batch to train with");
  CHECK(empty.only("micro_batch_sizes").message ==
        "training.elasticity.micro_batch_sizes is required with elasticity enabled: the micro "
        "batches a rank may run, such as [2, 4, 6]");
  CHECK(empty.errors().size() == 2);
  // Disabled, nothing is required.
  CHECK(load("    enabled: false\n").diagnostics.all().empty());

  constexpr std::string_view kEnabled =
      "    enabled: true\n    max_train_batch_size: 100\n    micro_batch_sizes: [2, 4]\n";
  const auto enabled_and = [&](std::string_view more, std::string_view training = "") {
    return load(std::string(kEnabled) + std::string(more), training);
  };
  // test_future_elastic_version.
  CHECK(enabled_and("    version: 0.3\n").only("version").message ==
        "training.elasticity.version must be 0.1 or 0.2 (DeepSpeed's latest, the default), got "
        "0.3");
  CHECK(enabled_and("    version: '0.1'\n").spec.training.elasticity.version == 0.1);
  // test_invalid_config_values.
  for (const char* micro : {"[1, 4, -1, 2, -10]", "5", "[a, null, 0.5]", "[2, 0.5, 4]", "[]"}) {
    INFO(micro);
    const testing::Loaded bad = load(fmt::format(
        "    enabled: true\n    max_train_batch_size: 100\n    micro_batch_sizes: {}\n", micro));
    CHECK_THAT(bad.only("micro_batch_sizes").message,
               Catch::Contains("training.elasticity.micro_batch_sizes must be"));
  }
  CHECK_THAT(enabled_and("    min_gpus: -1\n").only("min_gpus").message,
             Catch::Contains("must be between 1 and"));
  CHECK_THAT(enabled_and("    max_gpus: -1\n").only("max_gpus").message,
             Catch::Contains("must be between 1 and"));
  CHECK(enabled_and("    min_gpus: 8\n    max_gpus: 4\n").only("max_gpus").message ==
        "training.elasticity.max_gpus 4 is below min_gpus 8");
  CHECK_THAT(enabled_and("    min_time: -1\n").only("min_time").message,
             Catch::Contains("must be at least 0"));

  // Refused beside the batch keys, unless told to ignore them.
  const testing::Loaded batch_keys =
      enabled_and("", "  train_batch_size: 64\n  gradient_accumulation_steps: 2\n");
  CHECK(batch_keys.only("cannot be given").message ==
        "training.train_batch_size, training.gradient_accumulation_steps cannot be given with "
        "training.elasticity enabled, which computes the batch for each data-parallel size; "
        "remove them, or set training.elasticity.ignore_non_elastic_batch_info: true to have "
        "them ignored");
  CHECK(batch_keys.errors().size() == 1);
  const testing::Loaded ignored = enabled_and("    ignore_non_elastic_batch_info: true\n",
                                              "  train_micro_batch_size_per_gpu: 4\n");
  CHECK(ignored.diagnostics.all().empty());

  // The model-parallel size is the job's tensor x pipeline.
  const std::string tensor_2 = "parallelism:\n  tensor: 2\n";
  const auto with_tensor_2 = [&](std::string_view more) {
    return folder.load(
        fmt::format("{}training:\n  steps: 10\n  elasticity:\n{}{}data:\n  train: demo\n", tensor_2,
                    kEnabled, more));
  };
  CHECK(with_tensor_2("    model_parallel_size: 4\n    num_gpus_per_node: 8\n")
            .only("model_parallel_size")
            .message ==
        "training.elasticity.model_parallel_size 4 differs from the job's model-parallel size, "
        "parallelism.tensor x pipeline = 2; remove it (it defaults to that) or make them match");
  const testing::Loaded matching =
      with_tensor_2("    model_parallel_size: 2\n    num_gpus_per_node: 8\n");
  CHECK(matching.diagnostics.all().empty());
  CHECK(matching.spec.training.elasticity.model_parallel_size == 2);
  // DeepSpeed's test_model_parallel_v1_invalid and test_model_parallel_v2_invalid.
  CHECK_THAT(with_tensor_2("    model_parallel_size: 2\n    version: 0.1\n")
                 .only("needs version 0.2")
                 .message,
             Catch::StartsWith("training.elasticity.model_parallel_size above 1 needs version "
                               "0.2"));
  CHECK(with_tensor_2("    num_gpus_per_node: 3\n").only("num_gpus_per_node").message ==
        "training.elasticity.num_gpus_per_node 3 is not divisible by the model-parallel size 2: "
        "version 0.2 places whole model-parallel groups on each node; give the ranks of one "
        "node");
  // Version 0.1 counts replicas only: tensor parallelism needs no node size.
  CHECK(with_tensor_2("    version: 0.1\n").diagnostics.all().empty());

  // From a DeepSpeed config, elasticity lands in training.elasticity, not
  // among the keys ignored with a warning.
  folder.write("ds.json", R"({"elasticity": {"enabled": true, "max_train_batch_size": 4,
      "micro_batch_sizes": [1, 2], "max_gpus": 4, "version": 0.1}})");
  const testing::Loaded json =
      folder.load("deepspeed_config: ds.json\ntraining:\n  steps: 10\ndata:\n  train: demo\n");
  INFO(json.diagnostics.format());
  CHECK(json.diagnostics.all().empty());
  CHECK(json.spec.training.elasticity.enabled);
  CHECK(json.spec.training.elasticity.micro_batch_sizes == std::vector<int64_t>{1, 2});
  CHECK(json.spec.training.elasticity.max_gpus == 4);
}

}  // namespace dslaunch::spec

namespace dslaunch::spec {
namespace {

TEST_CASE("cluster.tls takes its three files, and client certificates unless told not to") {
  SpecFolder folder;
  for (const char* name : {"cert.pem", "key.pem", "ca.pem"}) folder.write(name, "pem");
  Loaded loaded = folder.load(
      "cluster: {tls: {cert: cert.pem, key: key.pem, ca: ca.pem}}\ndata: {train: demo}\n"
      "training: {steps: 1}\n");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.errors().empty());
  CHECK(loaded.spec.cluster.tls.enabled());
  CHECK(loaded.spec.cluster.tls.client_certificates);
  loaded = folder.load(
      "cluster: {tls: {cert: cert.pem, key: key.pem, ca: ca.pem, client_certificates: false}}\n"
      "data: {train: demo}\ntraining: {steps: 1}\n");
  CHECK(loaded.errors().empty());
  CHECK_FALSE(loaded.spec.cluster.tls.client_certificates);
}

}  // namespace
}  // namespace dslaunch::spec
