#include "core/spec/deepspeed_config.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include "core/spec/spec_parser.h"
#include "tests/core/spec/spec_fixture.h"

namespace dslaunch::spec {
namespace {

using testing::Loaded;
using testing::SpecFolder;

// A DeepSpeed tutorial-style config (ZeRO-2, fp16, Adam, WarmupLR), as a
// path relative to the test's working directory (its runfiles).
constexpr const char* kDsConfig = "tests/core/spec/testdata/ds_config.json";
// Hugging Face Trainer's ZeRO-3 template, full of "auto".
constexpr const char* kHfConfig = "tests/core/spec/testdata/hf_auto_ds_config.json";
// The ZeRO-2 and ZeRO-3 configs of Hugging Face transformers'
// tests/deepspeed/, as they are there.
constexpr const char* kHfZero2 = "tests/core/spec/testdata/hf_ds_config_zero2.json";
constexpr const char* kHfZero3 = "tests/core/spec/testdata/hf_ds_config_zero3.json";

// Relative paths in a spec are relative to the spec's folder, so specs
// written under $TEST_TMPDIR name the test data by absolute path.
std::string absolute(const char* path) { return std::filesystem::absolute(path).string(); }

LoadOptions sets(std::vector<std::string> overrides) {
  LoadOptions options;
  options.overrides = std::move(overrides);
  return options;
}

}  // namespace

// --- load_deepspeed_config and merge_training -------------------------------------

TEST_CASE("a DeepSpeed config becomes a training mapping that keeps each value's line and column") {
  const DeepSpeedConfig config = load_deepspeed_config(kDsConfig);
  INFO(config.error);
  REQUIRE(config.error.empty());
  CHECK(config.problems.empty());
  const YAML::Node& training = config.training;
  REQUIRE(training.IsMap());
  // Values as the JSON spells them; the training checks read 5e8 as an integer.
  CHECK(training["train_batch_size"].Scalar() == "256");
  CHECK(training["gradient_clipping"].Scalar() == "1.0");
  CHECK(training["fp16"]["enabled"].Scalar() == "true");
  CHECK(training["zero_optimization"]["reduce_bucket_size"].Scalar() == "5e8");
  CHECK(training["optimizer"]["params"]["lr"].Scalar() == "3e-4");
  REQUIRE(training["optimizer"]["params"]["betas"].IsSequence());
  CHECK(training["optimizer"]["params"]["betas"][0].Scalar() == "0.8");
  // 0-based, as yaml-cpp counts: line 19, column 27 in an editor.
  CHECK(training["zero_optimization"]["reduce_bucket_size"].Mark().line == 18);
  CHECK(training["zero_optimization"]["reduce_bucket_size"].Mark().column == 26);
  // Monitoring keys stay, for the training checks to warn about.
  CHECK(training["steps_per_print"].Scalar() == "100");
}

TEST_CASE("invalid JSON is located at the line and column of the syntax error") {
  SpecFolder folder;
  SECTION("a missing colon") {
    const std::string path = folder.write("ds.json", "{\n  \"stage\": 1,\n  \"b\" 2\n}\n");
    const DeepSpeedConfig config = load_deepspeed_config(path);
    CHECK(config.error ==
          "'" + path + "' is not valid JSON or Hjson: expected ':' after the key \"b\", got '2'");
    CHECK(config.error_location.file == path);
    CHECK(config.error_location.line == 3);
    CHECK(config.error_location.column == 7);
  }
  SECTION("a file that ends too early") {
    const std::string path = folder.write("ds.json", "{\"train_batch_size\": 8");
    const DeepSpeedConfig config = load_deepspeed_config(path);
    CHECK(config.error.find("is not valid JSON or Hjson: expected a key or '}' to close the object "
                            "opened at 1:1, got end of file") != std::string::npos);
    CHECK(config.error_location.line == 1);
    CHECK(config.error_location.column == 23);
  }
}

TEST_CASE("a missing DeepSpeed config or one that is not a JSON object is an error") {
  SpecFolder folder;
  const std::string missing = (folder.dir() / "nope.json").string();
  const DeepSpeedConfig absent = load_deepspeed_config(missing);
  CHECK(absent.error ==
        "cannot read DeepSpeed config '" + missing + "': No such file or directory");
  CHECK(absent.error_location.line == 0);

  const std::string list = folder.write("list.json", "[1, 2]");
  const DeepSpeedConfig not_object = load_deepspeed_config(list);
  CHECK(not_object.error == "'" + list + "' must hold one JSON object of DeepSpeed keys");
  CHECK(not_object.error_location.line == 0);
}

TEST_CASE("merge_training deep-merges, the job spec winning where both give a value") {
  const YAML::Node json = YAML::Load(
      "{train_batch_size: 256, fp16: {enabled: true}, "
      "zero_optimization: {stage: 2, overlap_comm: true}, optimizer: {type: Adam}}");
  const YAML::Node spec = YAML::Load(
      "steps: 10\n"
      "train_batch_size: 64\n"
      "zero_optimization:\n"
      "  stage: 1\n"
      "optimizer: AdamW\n");
  std::vector<std::string> from_json;
  std::vector<std::string> overridden;
  const YAML::Node merged = merge_training(
      json, spec, [&](const std::string& path) { from_json.push_back(path); }, overridden);

  CHECK(merged["steps"].Scalar() == "10");
  CHECK(merged["train_batch_size"].Scalar() == "64");
  CHECK(merged["fp16"]["enabled"].Scalar() == "true");
  CHECK(merged["zero_optimization"]["stage"].Scalar() == "1");
  CHECK(merged["zero_optimization"]["overlap_comm"].Scalar() == "true");
  CHECK(merged["optimizer"].Scalar() == "AdamW");  // a value beats a mapping too
  std::sort(from_json.begin(), from_json.end());
  CHECK(from_json == std::vector<std::string>{"fp16", "zero_optimization.overlap_comm"});
  std::sort(overridden.begin(), overridden.end());
  CHECK(overridden ==
        std::vector<std::string>{"optimizer", "train_batch_size", "zero_optimization.stage"});
  // The spec's values keep their positions in the spec file.
  CHECK(merged["zero_optimization"].Mark().line == 3);
  CHECK(merged["zero_optimization"]["stage"].Mark().line == 3);
}

TEST_CASE("merge_training with no spec section takes the JSON as it is") {
  const YAML::Node json = YAML::Load("{train_batch_size: 8, bf16: {enabled: true}}");
  std::vector<std::string> from_json;
  std::vector<std::string> overridden;
  const YAML::Node merged = merge_training(
      json, YAML::Node(), [&](const std::string& path) { from_json.push_back(path); }, overridden);
  CHECK(merged["train_batch_size"].Scalar() == "8");
  CHECK(merged["bf16"]["enabled"].Scalar() == "true");
  CHECK(from_json.size() == 2);
  CHECK(overridden.empty());
}

// --- deepspeed_config through load_job_spec --------------------------------------

TEST_CASE("a DeepSpeed config supplies training's batch, ZeRO, optimizer, scheduler and fp16") {
  SpecFolder folder;
  const std::string json = folder.write("ds_config.json", R"({
  "train_batch_size": 256,
  "train_micro_batch_size_per_gpu": 8,
  "gradient_clipping": 1.0,
  "fp16": {"enabled": true, "initial_scale_power": 12},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8, "overlap_comm": true,
                        "offload_optimizer": {"device": "cpu", "pin_memory": true}},
  "optimizer": {"type": "Adam", "params": {"lr": 3e-4, "betas": [0.8, 0.999],
                                           "weight_decay": 3e-7}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 3e-4,
                                               "warmup_num_steps": 500}}
})");
  const Loaded loaded = folder.load(R"(
deepspeed_config: ds_config.json
data: {train: demo}
training:
  steps: 1000
)");
  INFO(loaded.diagnostics.format());
  CHECK_FALSE(loaded.diagnostics.has_errors());
  // pin_memory pins ZeRO-2's offloaded arrays: no warning.
  CHECK(loaded.diagnostics.warnings().empty());
  const TrainingSpec& training = loaded.spec.training;
  CHECK(loaded.spec.deepspeed_config == json);
  CHECK(training.steps == 1000);
  CHECK(training.batch.train_batch_size == 256);
  CHECK(training.batch.micro_batch_per_gpu == 8);
  CHECK_FALSE(training.batch.gradient_accumulation_steps.has_value());
  CHECK(training.gradient_clipping == 1.0);
  CHECK(training.fp16.enabled);
  CHECK(training.fp16.initial_scale_power == 12);
  CHECK(training.zero.stage == 2);
  CHECK(training.zero.reduce_bucket_size == 500'000'000);
  CHECK(training.zero.overlap_comm);
  CHECK(training.zero.offload_optimizer.device == OffloadDevice::kCpu);
  CHECK(training.zero.offload_optimizer.pin_memory);
  CHECK(training.optimizer.type == OptimizerType::kAdam);
  CHECK(training.optimizer.decoupled_weight_decay);
  CHECK(training.optimizer.lr == 3e-4);
  CHECK(training.optimizer.betas == std::array<double, 2>{0.8, 0.999});
  CHECK(training.optimizer.weight_decay == 3e-7);
  CHECK(training.scheduler.type == SchedulerType::kWarmupLR);
  CHECK(training.scheduler.warmup_max_lr == 3e-4);
  CHECK(training.scheduler.warmup_num_steps == 500);
}

TEST_CASE("keys in both files take the job spec's value, with a warning at the spec's line") {
  SpecFolder folder;
  const std::string json = absolute(kDsConfig);
  const Loaded loaded = folder.load("deepspeed_config: " + json + R"(
data: {train: demo}
training:
  steps: 10
  train_batch_size: 128
  zero_optimization:
    stage: 1
)");
  INFO(loaded.diagnostics.format());
  CHECK_FALSE(loaded.diagnostics.has_errors());
  CHECK(loaded.spec.training.batch.train_batch_size == 128);
  CHECK(loaded.spec.training.zero.stage == 1);
  CHECK(loaded.spec.training.zero.reduce_bucket_size == 500'000'000);  // from the JSON
  CHECK(loaded.spec.training.zero.offload_optimizer.device == OffloadDevice::kCpu);

  const Diagnostic& batch = loaded.only("training.train_batch_size in the job spec overrides");
  CHECK(batch.severity == Diagnostic::Severity::kWarning);
  CHECK(batch.message ==
        "training.train_batch_size in the job spec overrides the value in " + json);
  CHECK(batch.location.file == loaded.path);
  CHECK(batch.location.line == 5);
  CHECK(batch.location.column == 21);
  const Diagnostic& stage = loaded.only("training.zero_optimization.stage in the job spec");
  CHECK(stage.severity == Diagnostic::Severity::kWarning);
  CHECK(stage.location.line == 7);
}

TEST_CASE("DeepSpeed monitoring keys in the JSON file are read") {
  SpecFolder folder;
  const std::string json = absolute(kDsConfig);
  const Loaded loaded =
      folder.load("deepspeed_config: " + json + "\ndata: {train: demo}\ntraining: {steps: 1}\n");
  CHECK_FALSE(loaded.diagnostics.has_errors());
  CHECK(loaded.diagnostics.warnings().empty());
  CHECK(loaded.spec.training.monitor.steps_per_print == 100);
  CHECK_FALSE(loaded.spec.training.monitor.wall_clock_breakdown);
}

TEST_CASE("a typo or a bad value in the JSON is an error at its line and column in the JSON file") {
  SpecFolder folder;
  const std::string json = folder.write("ds.json", R"({
  "trian_batch_size": 32,
  "zero_optimization": {"stage": 4, "contiguos_gradients": true}
})");
  const Loaded loaded =
      folder.load("deepspeed_config: ds.json\ndata: {train: demo}\ntraining: {steps: 1}\n");
  REQUIRE(loaded.errors().size() == 3);
  const Diagnostic& typo = loaded.only("trian_batch_size");
  CHECK(typo.message ==
        "unknown key 'trian_batch_size' in training; did you mean 'train_batch_size'?");
  CHECK(typo.location.to_string() == json + ":2:3");
  const Diagnostic& nested = loaded.only("contiguos_gradients");
  CHECK(nested.message ==
        "unknown key 'contiguos_gradients' in training.zero_optimization; did you mean "
        "'contiguous_gradients'?");
  CHECK(nested.location.to_string() == json + ":3:37");
  const Diagnostic& stage = loaded.only("stage must be between 0 and 3");
  CHECK(stage.location.to_string() == json + ":3:34");
  // Sorted with the JSON file's lines, not first as command-line problems are.
  CHECK(loaded.diagnostics.format() ==
        json +
            ":2:3: error: unknown key 'trian_batch_size' in training; did you mean "
            "'train_batch_size'?\n" +
            json +
            ":3:34: error: training.zero_optimization.stage must be between 0 and 3, got 4\n" +
            json +
            ":3:37: error: unknown key 'contiguos_gradients' in "
            "training.zero_optimization; did you mean 'contiguous_gradients'?\n");
}

TEST_CASE("invalid JSON in deepspeed_config is reported at file:line:col") {
  SpecFolder folder;
  const std::string json = folder.write(
      "ds.json", "{\n  \"train_batch_size\": 32,\n  \"fp16\": {\"enabled\": tru}\n}\n");
  const Loaded loaded =
      folder.load("deepspeed_config: ds.json\ndata: {train: demo}\ntraining: {steps: 1}\n");
  REQUIRE(loaded.diagnostics.all().size() == 1);
  const Diagnostic& error = loaded.diagnostics.all()[0];
  CHECK(error.message.find("'" + json + "' is not valid JSON") != std::string::npos);
  CHECK(error.location.file == json);
  CHECK(error.location.line == 3);
  // "tru}" reads as a quoteless Hjson string, leaving the root unclosed; the
  // error points at the '}' it took.
  CHECK(error.location.column == 26);
  CHECK(error.message.find("this '}' is part of the quoteless string \"tru}\"") !=
        std::string::npos);
  CHECK(loaded.diagnostics.format().rfind(json + ":3:26: error: ", 0) == 0);
}

TEST_CASE("a missing DeepSpeed config is an error at the deepspeed_config line") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training: {steps: 1}
deepspeed_config: configs/ds.json
)");
  REQUIRE(loaded.diagnostics.all().size() == 1);
  const std::string resolved = (folder.dir() / "configs/ds.json").string();
  const Diagnostic& error = loaded.only("cannot read DeepSpeed config");
  CHECK(error.message ==
        "cannot read DeepSpeed config '" + resolved + "': No such file or directory");
  CHECK(error.location.file == loaded.path);
  CHECK(error.location.line == 3);
  CHECK(error.location.column == 19);
}

TEST_CASE("a Hugging Face config's 'auto' values each point at the Trainer") {
  SpecFolder folder;
  const std::string json = absolute(kHfConfig);
  const Loaded loaded =
      folder.load("deepspeed_config: " + json + "\ndata: {train: demo}\ntraining: {steps: 1}\n");
  const std::vector<Diagnostic> errors = loaded.errors();
  INFO(loaded.diagnostics.format());
  CHECK(errors.size() == 15);
  for (const Diagnostic& error : errors) {
    INFO(error.message);
    CHECK(error.message.find("is 'auto', which the Hugging Face Trainer fills in") !=
          std::string::npos);
    CHECK(error.location.file == json);
  }
  CHECK(loaded.only("params.betas").message ==
        "training.optimizer.params.betas is 'auto', which the Hugging Face Trainer fills in; "
        "give dslaunch a list of numbers instead");
}

TEST_CASE("errors in sections given in both files keep the job spec's lines") {
  SpecFolder folder;
  folder.write("ds.json",
               R"({"zero_optimization": {"reduce_bucket_size": 5e8}, "fp16": {"enabled": true}})");
  const Loaded loaded = folder.load(R"(
deepspeed_config: ds.json
parallelism: {pipeline: 2}
data: {train: demo}
training:
  gradient_clipping: 1
  zero_optimization:
    stage: 2
  bf16: {enabled: true}
  bf16: {enabled: false}
)");
  REQUIRE(loaded.errors().size() == 4);
  CHECK(loaded.only("training.steps is required").location.line == 5);
  CHECK(loaded.only("cannot be combined with pipeline parallelism").location.line == 7);
  CHECK(loaded.only("choose one precision").location.line == 8);
  const Diagnostic& twice = loaded.only("training.bf16 is given twice");
  CHECK(twice.location.line == 9);
  CHECK(twice.location.column == 3);
}

TEST_CASE("a training section that is not a mapping is still reported with a DeepSpeed config") {
  SpecFolder folder;
  folder.write("ds.json", R"({"train_batch_size": 8})");
  const Loaded loaded =
      folder.load("deepspeed_config: ds.json\ndata: {train: demo}\ntraining: 5\n");
  const Diagnostic& scalar = loaded.only("training must be a mapping");
  CHECK(scalar.message == "training must be a mapping of keys to values, got '5'");
  CHECK(scalar.location.line == 3);
}

TEST_CASE("a deepspeed_config given with --set is relative to the working directory") {
  SpecFolder folder;
  const Loaded loaded =
      folder.load("data: {train: demo}\ntraining: {steps: 1}\n",
                  sets({std::string("deepspeed_config=") + kDsConfig}), "jobs/spec.yaml");
  CHECK_FALSE(loaded.diagnostics.has_errors());
  CHECK(loaded.spec.deepspeed_config == kDsConfig);
  CHECK(loaded.spec.training.batch.train_batch_size == 256);
  CHECK(loaded.spec.training.zero.stage == 2);
}

// --- DeepSpeed keys dslaunch ignores -----------------------------------------------

TEST_CASE("Hugging Face's ZeRO-2 config loads: its DeepSpeed-only keys are warnings") {
  SpecFolder folder;
  const std::string json = absolute(kHfZero2);
  const Loaded loaded =
      folder.load("deepspeed_config: " + json + "\ndata: {train: demo}\ntraining: {steps: 1}\n");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.warnings() ==
        std::vector<std::string>{
            json + ":36:9: DeepSpeed key 'zero_optimization.allgather_partitions' has no effect in "
                   "dslaunch and is ignored",
            json + ":39:9: DeepSpeed key 'zero_optimization.reduce_scatter' has no effect in "
                   "dslaunch and is ignored"});
  // Only the "auto" values are errors, each at its line.
  const std::vector<Diagnostic> errors = loaded.errors();
  CHECK(errors.size() == 12);
  for (const Diagnostic& error : errors) {
    INFO(error.message);
    CHECK(error.message.find("is 'auto', which the Hugging Face Trainer fills in") !=
          std::string::npos);
    CHECK(error.location.file == json);
    CHECK(error.location.line > 0);
  }
  CHECK(loaded.only("training.fp16.enabled is 'auto'").location.to_string() == json + ":3:20");
  CHECK(loaded.spec.training.zero.stage == 2);
  CHECK(loaded.spec.training.zero.allgather_bucket_size == 200'000'000);
  CHECK(loaded.spec.training.zero.offload_optimizer.device == OffloadDevice::kCpu);
}

TEST_CASE("Hugging Face's ZeRO-3 config loads: its DeepSpeed-only keys are warnings") {
  SpecFolder folder;
  const std::string json = absolute(kHfZero3);
  const Loaded loaded =
      folder.load("deepspeed_config: " + json + "\ndata: {train: demo}\ntraining: {steps: 1}\n");
  INFO(loaded.diagnostics.format());
  const std::string ignored = " has no effect in dslaunch and is ignored";
  CHECK(loaded.diagnostics.warnings() ==
        std::vector<std::string>{
            testing::pin_memory_warning(json + ":34:27", "offload_optimizer"),
            testing::pin_memory_warning(json + ":38:27", "offload_param"),
            json + ":47:9: DeepSpeed key 'zero_optimization.stage3_max_reuse_distance'" + ignored,
            json +
                ":48:9: DeepSpeed key "
                "'zero_optimization.stage3_gather_fp16_weights_on_model_save'" +
                ignored});
  const std::vector<Diagnostic> errors = loaded.errors();
  CHECK(errors.size() == 15);
  for (const Diagnostic& error : errors) {
    INFO(error.message);
    CHECK(error.message.find("is 'auto', which the Hugging Face Trainer fills in") !=
          std::string::npos);
    CHECK(error.location.file == json);
  }
  CHECK(loaded.spec.training.zero.stage == 3);
  CHECK(loaded.spec.training.zero.max_live_parameters == 1'000'000'000);
  CHECK(loaded.spec.training.zero.sub_group_size == 100'000'000'000'000);
  CHECK(loaded.spec.training.zero.offload_param.device == OffloadDevice::kCpu);
}

TEST_CASE("the ignored DeepSpeed keys are warnings in the YAML training section too") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 1
  steps_per_print: 10
  zero_optimization:
    stage: 3
    round_robin_gradients: true
    stage3_gather_16bit_weights_on_model_save: true
    offload_param: {device: cpu, buffer_count: 4, max_in_cpu: 1e9}
    offload_optimizer: {device: cpu, fast_init: true}
  fp16: {enabled: true, auto_cast: false}
  bf16: {immediate_grad_update: true}
  optimizer: {type: Adam, params: {torch_adam: true}}
)");
  INFO(loaded.diagnostics.format());
  CHECK_FALSE(loaded.diagnostics.has_errors());
  std::string expected;
  for (const char* warning : {
           ":7:5: warning: DeepSpeed key 'zero_optimization.round_robin_gradients'",
           ":8:5: warning: DeepSpeed key "
           "'zero_optimization.stage3_gather_16bit_weights_on_model_save'",
           ":9:51: warning: DeepSpeed key 'zero_optimization.offload_param.max_in_cpu'",
           ":10:38: warning: DeepSpeed key 'zero_optimization.offload_optimizer.fast_init'",
           ":11:25: warning: DeepSpeed key 'fp16.auto_cast'",
           ":12:10: warning: DeepSpeed key 'bf16.immediate_grad_update'",
           ":13:36: warning: DeepSpeed key 'optimizer.params.torch_adam'",
       }) {
    expected += loaded.path + warning + " has no effect in dslaunch and is ignored\n";
  }
  CHECK(loaded.diagnostics.format() == expected);
  CHECK(loaded.spec.training.zero.offload_param.device == OffloadDevice::kCpu);
}

TEST_CASE("aio sets how swap files reach the drive; its thread keys are warnings") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 1
  aio: {block_size: 262144, queue_depth: 32, single_submit: true, thread_count: 2,
        overlap_events: true}
)");
  INFO(loaded.diagnostics.format());
  CHECK_FALSE(loaded.diagnostics.has_errors());
  CHECK(loaded.diagnostics.warnings().size() == 2);
  CHECK(loaded.spec.training.aio.block_size == 262'144);
  CHECK(loaded.spec.training.aio.queue_depth == 32);
  CHECK(loaded.spec.training.aio.single_submit);
  // DeepSpeed's defaults.
  const Loaded defaults = folder.load("data: {train: demo}\ntraining: {steps: 1}\n");
  CHECK(defaults.spec.training.aio.block_size == 1'048'576);
  CHECK(defaults.spec.training.aio.queue_depth == 8);
  CHECK_FALSE(defaults.spec.training.aio.single_submit);
  // A block O_DIRECT cannot move, or no queue, is refused by name.
  const Loaded unaligned =
      folder.load("data: {train: demo}\ntraining: {steps: 1, aio: {block_size: 5000}}\n");
  CHECK_THAT(unaligned.only("aio.block_size is 5000").message,
             Catch::Matchers::Contains("give a multiple of 4096"));
  const Loaded no_queue =
      folder.load("data: {train: demo}\ntraining: {steps: 1, aio: {queue_depth: 0}}\n");
  CHECK(no_queue.diagnostics.has_errors());
}

TEST_CASE("a key that is ignored only inside its section is still unknown elsewhere") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 1
  round_robin_gradients: true
  zero_optimization: {torch_adam: true}
)");
  REQUIRE(loaded.errors().size() == 2);
  CHECK(loaded.only("round_robin_gradients").message ==
        "unknown key 'round_robin_gradients' in training; valid keys: train_batch_size, "
        "train_micro_batch_size_per_gpu, gradient_accumulation_steps, steps, fp16, bf16, "
        "zero_optimization, aio, optimizer, scheduler, gradient_clipping, seed, eval_interval, "
        "eval_batches, tensorboard, csv_monitor, comms_logger, steps_per_print, "
        "wall_clock_breakdown, init_from, activation_checkpointing, elasticity");
  CHECK(loaded.only("torch_adam").location.line == 5);
  CHECK(loaded.warnings().empty());
}

// --- The JSON read with positions ----------------------------------------------------

TEST_CASE("a key given twice in the JSON is an error at the second, and the first is kept") {
  SpecFolder folder;
  const std::string json = folder.write("ds.json", R"({
  "train_batch_size": 8,
  "zero_optimization": {"stage": 1, "stage": 2},
  "train_batch_size": 16
})");
  const Loaded loaded =
      folder.load("deepspeed_config: ds.json\ndata: {train: demo}\ntraining: {steps: 1}\n");
  INFO(loaded.diagnostics.format());
  REQUIRE(loaded.errors().size() == 2);
  CHECK(loaded.diagnostics.format() ==
        json + ":3:37: error: zero_optimization.stage is given twice (first at " + json +
            ":3:25); keep one\n" + json +
            ":4:3: error: train_batch_size is given twice (first at " + json + ":2:3); keep one\n");
  CHECK(loaded.spec.training.batch.train_batch_size == 8);
  CHECK(loaded.spec.training.zero.stage == 1);
  // Not mistaken for a key the job spec overrides.
  CHECK(loaded.warnings().empty());
}

TEST_CASE("a relative nvme_path from the JSON is relative to the JSON file's folder") {
  SpecFolder folder;
  folder.write("configs/ds.json", R"({"zero_optimization": {"stage": 3,
    "offload_param": {"device": "nvme", "nvme_path": "nvme/params"},
    "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"}}})");
  const Loaded loaded = folder.load(
      "deepspeed_config: ../configs/ds.json\ndata: {train: demo}\ntraining: {steps: 1}\n", {},
      "jobs/spec.yaml");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.training.zero.offload_param.nvme_path ==
        (folder.dir() / "configs/nvme/params").lexically_normal().string());
  CHECK(loaded.spec.training.zero.offload_optimizer.nvme_path == "/local_nvme");
}

TEST_CASE("JSON indented with tabs and written without blanks reads like any other") {
  SpecFolder folder;
  folder.write(
      "ds.json",
      "{\n\t\"train_batch_size\":32,\n\t\"fp16\":{\"enabled\":true,\"hysteresis\":4}\n}\n");
  const Loaded loaded =
      folder.load("deepspeed_config: ds.json\ndata: {train: demo}\ntraining: {steps: 1}\n");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.training.batch.train_batch_size == 32);
  CHECK(loaded.spec.training.fp16.enabled);
  CHECK(loaded.spec.training.fp16.hysteresis == 4);
}

TEST_CASE("malformed Hjson in a DeepSpeed config is an error at its line and column") {
  SpecFolder folder;
  const std::string json =
      folder.write("ds.json", "{\n  \"train_batch_size\": 8,\n  micro batch: 2\n}\n");
  const Loaded loaded =
      folder.load("deepspeed_config: ds.json\ndata: {train: demo}\ntraining: {steps: 1}\n");
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& error = loaded.only("is not valid JSON or Hjson");
  CHECK(error.message == "'" + json +
                             "' is not valid JSON or Hjson: expected ':' after the key \"micro\", "
                             "got 'b' (a key with blanks in it needs quotes)");
  CHECK(error.location.to_string() == json + ":3:9");
}

// --- Hjson: what DeepSpeed's own reader accepts ---------------------------------------

TEST_CASE("a DeepSpeed config with comments and trailing commas loads, each value at its place") {
  SpecFolder folder;
  const std::string json = folder.write("ds_config.json", R"(// ZeRO-3, fp16
{
  # 4 GPUs x 8 per GPU
  "train_batch_size": 32,
  "train_micro_batch_size_per_gpu": 8,  // no accumulation
  /* fp16 with a
     dynamic loss scale */
  "fp16": {"enabled": true, "loss_scale": 0,},
  zero_optimization: {
    stage: 3
    reduce_bucket_size: 5e8
    offload_optimizer: {device: "cpu", pin_memory: true},
  },
  "optimizer": {
    type: Adam
    "params": {"lr": 3e-4, "betas": [0.8, 0.999,],},
  },
  steps_per_print: 100,
}
)");
  const Loaded loaded =
      folder.load("deepspeed_config: ds_config.json\ndata: {train: demo}\ntraining: {steps: 10}\n");
  INFO(loaded.diagnostics.format());
  CHECK_FALSE(loaded.diagnostics.has_errors());
  const TrainingSpec& training = loaded.spec.training;
  CHECK(training.batch.train_batch_size == 32);
  CHECK(training.batch.micro_batch_per_gpu == 8);
  CHECK(training.fp16.enabled);
  CHECK(training.zero.stage == 3);
  CHECK(training.zero.reduce_bucket_size == 500'000'000);
  CHECK(training.zero.offload_optimizer.device == OffloadDevice::kCpu);
  CHECK(training.zero.offload_optimizer.pin_memory);
  CHECK(training.optimizer.type == OptimizerType::kAdam);
  CHECK(training.optimizer.lr == 3e-4);
  CHECK(training.optimizer.betas == std::array<double, 2>{0.8, 0.999});
  CHECK(loaded.diagnostics.warnings() ==
        std::vector<std::string>{testing::pin_memory_warning(json + ":12:52", "offload_optimizer")});

  // A bad value written without quotes is located like any other.
  folder.write("ds_config.json",
               "{\n  zero_optimization: {\n    stage: 4 # no such stage\n  }\n}\n");
  const Loaded bad =
      folder.load("deepspeed_config: ds_config.json\ndata: {train: demo}\ntraining: {steps: 10}\n");
  CHECK(bad.only("stage must be between 0 and 3").location.to_string() == json + ":3:12");
}

TEST_CASE("an Hjson config keeps its values' spelling and positions, its root braces optional") {
  SpecFolder folder;
  const std::string path = folder.write("ds.hjson", R"(# no root braces
train_batch_size: 16
optimizer: {
  type: AdamW # a quoteless string runs to the end of its line, this too
  params: {lr: 3e-4}
}
nvme_path: /local nvme/#1
"null":
  '''
  a "multiline"
    string
  '''
escapes: "tab\there \"q\" \\ \u00e9\ud83d\ude00"
)");
  const DeepSpeedConfig config = load_deepspeed_config(path);
  INFO(config.error);
  REQUIRE(config.error.empty());
  CHECK(config.problems.empty());
  const YAML::Node& training = config.training;
  CHECK(training["train_batch_size"].Scalar() == "16");
  CHECK(training["optimizer"]["type"].Scalar() ==
        "AdamW # a quoteless string runs to the end of its line, this too");
  CHECK(training["optimizer"]["params"]["lr"].Scalar() == "3e-4");
  CHECK(training["nvme_path"].Scalar() == "/local nvme/#1");
  CHECK(training["null"].Scalar() == "a \"multiline\"\n  string");
  CHECK(training["escapes"].Scalar() == "tab\there \"q\" \\ \u00e9\U0001F600");
  // yaml-cpp counts from 0: line 2, column 1 in an editor is 1:0.
  CHECK(training.begin()->first.Mark().line == 1);
  CHECK(training.begin()->first.Mark().column == 0);
  CHECK(training["optimizer"]["type"].Mark().line == 3);
  CHECK(training["optimizer"]["type"].Mark().column == 8);
  CHECK(training["optimizer"]["params"]["lr"].Mark().column == 15);
  CHECK(training["escapes"].Mark().line == 12);
  CHECK(training["escapes"].Mark().column == 9);
}

}  // namespace dslaunch::spec
