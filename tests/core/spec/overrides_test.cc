#include "core/spec/overrides.h"

#include <filesystem>
#include <string>

#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include "core/spec/spec_parser.h"
#include "tests/core/spec/spec_fixture.h"

namespace dslaunch::spec {
namespace {

namespace fs = std::filesystem;
using testing::Loaded;
using testing::SpecFolder;

constexpr std::string_view kSpec = R"(
data:
  train: demo
training:
  steps: 10
  optimizer:
    type: AdamW
    params: {lr: 0.001}
)";

LoadOptions sets(std::vector<std::string> overrides) {
  LoadOptions options;
  options.overrides = std::move(overrides);
  return options;
}

// Applies "key.path=value" to `root`, failing the test if it does not parse.
std::string apply(YAML::Node& root, std::string_view text) {
  const ParsedOverride parsed = parse_override(text);
  REQUIRE(parsed.error.empty());
  return apply_override(root, parsed.value);
}

}  // namespace

// --- parse_override and apply_override -------------------------------------------

TEST_CASE("parse_override splits key.path=value at the first '='") {
  const ParsedOverride steps = parse_override("training.steps=100");
  CHECK(steps.error.empty());
  CHECK(steps.value.path == "training.steps");
  CHECK(steps.value.value.Scalar() == "100");
  CHECK(steps.value.origin == "--set training.steps=100");

  const ParsedOverride env = parse_override("env.NCCL_SOCKET_IFNAME=a=b");
  CHECK(env.value.path == "env.NCCL_SOCKET_IFNAME");
  CHECK(env.value.value.Scalar() == "a=b");

  const ParsedOverride empty = parse_override("data.valid=");
  CHECK(empty.error.empty());
  REQUIRE(empty.value.value.IsScalar());
  CHECK(empty.value.value.Scalar().empty());
}

TEST_CASE("--set values are read as YAML flow values, else kept as plain text") {
  const YAML::Node betas =
      parse_override("training.optimizer.params.betas=[0.9, 0.95]").value.value;
  REQUIRE(betas.IsSequence());
  REQUIRE(betas.size() == 2);
  CHECK(betas[0].Scalar() == "0.9");
  CHECK(betas[1].Scalar() == "0.95");

  const YAML::Node offload = parse_override("x={device: cpu, pin_memory: true}").value.value;
  REQUIRE(offload.IsMap());
  CHECK(offload["device"].Scalar() == "cpu");
  CHECK(offload["pin_memory"].Scalar() == "true");

  const YAML::Node quoted = parse_override("name=\"run 1\"").value.value;
  CHECK(quoted.Scalar() == "run 1");

  // Not valid YAML: the text stays as given, for the checks to report.
  const YAML::Node unclosed = parse_override("training.steps=[1, 2").value.value;
  REQUIRE(unclosed.IsScalar());
  CHECK(unclosed.Scalar() == "[1, 2");
}

TEST_CASE("parse_override rejects text that is not key.path=value") {
  for (const char* text :
       {"training.steps", "=5", ".steps=5", "training.=5", "training..steps=5", ""}) {
    INFO("--set " << text);
    const ParsedOverride parsed = parse_override(text);
    CHECK(parsed.error ==
          "--set takes key.path=value, for example --set training.steps=100 or --set "
          "cluster.hosts[0].slots=4; got '" +
              std::string(text) + "'");
    CHECK(parsed.value.origin == "--set " + std::string(text));
  }
}

TEST_CASE("apply_override creates the mappings on its path and keeps sibling keys") {
  YAML::Node root = YAML::Load("training: {steps: 10, fp16: {enabled: true}}");
  CHECK(apply(root, "training.steps=20").empty());
  CHECK(apply(root, "training.zero_optimization.offload_optimizer.device=cpu").empty());
  CHECK(root["training"]["steps"].Scalar() == "20");
  CHECK(root["training"]["fp16"]["enabled"].Scalar() == "true");
  CHECK(root["training"]["zero_optimization"]["offload_optimizer"]["device"].Scalar() == "cpu");

  // A key that holds null is filled in like an absent one.
  YAML::Node with_null = YAML::Load("training: ~");
  CHECK(apply(with_null, "training.steps=5").empty());
  CHECK(with_null["training"]["steps"].Scalar() == "5");

  // An empty document becomes a mapping.
  YAML::Node empty;
  CHECK(apply(empty, "data.train=demo").empty());
  CHECK(empty["data"]["train"].Scalar() == "demo");
}

TEST_CASE("apply_override refuses a path through a single value or a list") {
  YAML::Node root = YAML::Load("training: {steps: 10}\ncluster: {hosts: [{host: a}]}");
  CHECK(apply(root, "training.steps.value=1") == "training.steps holds a single value, not keys");
  CHECK(apply(root, "cluster.hosts.slots=1") ==
        "cluster.hosts holds a list, not keys; name an item, such as cluster.hosts[0]");
  CHECK(root["training"]["steps"].Scalar() == "10");
}

TEST_CASE("apply_override refuses a document that is not a mapping") {
  for (const char* text : {"- a\n- b", "just words"}) {
    INFO(text);
    YAML::Node root = YAML::Load(text);
    CHECK(apply(root, "training.steps=1") ==
          "the job spec is not a mapping of keys, so nothing can be set in it");
    CHECK_FALSE(root.IsMap());
  }
}

// --- --set through load_job_spec --------------------------------------------------

TEST_CASE("--set overrides a value from the spec file") {
  SpecFolder folder;
  const Loaded loaded = folder.load(kSpec, sets({"training.steps=100"}));
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.training.steps == 100);
  // Where the value came from, for later checks.
  CHECK(loaded.locations.find("training.steps").to_string() == "--set training.steps=100");
}

TEST_CASE("--set values parse as YAML, so lists and mappings work") {
  SpecFolder folder;
  const Loaded loaded = folder.load(
      kSpec, sets({"training.optimizer.params.betas=[0.9, 0.95]",
                   "training.zero_optimization={stage: 3, offload_param: {device: cpu}}",
                   "env={NCCL_DEBUG: WARN}"}));
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.training.optimizer.betas == std::array<double, 2>{0.9, 0.95});
  CHECK(loaded.spec.training.optimizer.lr == 0.001);  // its sibling stays
  CHECK(loaded.spec.training.zero.stage == 3);
  CHECK(loaded.spec.training.zero.overlap_comm);  // stage 3's default
  CHECK(loaded.spec.training.zero.offload_param.device == OffloadDevice::kCpu);
  CHECK(loaded.spec.env == std::map<std::string, std::string>{{"NCCL_DEBUG", "WARN"}});
}

TEST_CASE("--set can supply what the spec lacks, and the last --set of a key wins") {
  SpecFolder folder;
  const Loaded loaded = folder.load(
      "model: {num_layers: 6}\n",
      sets({"data.train=demo", "training.steps=5", "training.steps=7", "model.num_layers=4"}));
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.data.demo());
  CHECK(loaded.spec.training.steps == 7);
  CHECK(loaded.spec.model.num_layers == 4);
}

TEST_CASE("a bad value given with --set is reported at the --set text") {
  SpecFolder folder;
  const Loaded loaded = folder.load(
      kSpec, sets({"training.steps=ten", "training.zero_optimization.stage=4", "model.dropout="}));
  REQUIRE(loaded.errors().size() == 3);
  // Command-line diagnostics keep the order the checks ran in (model before training).
  CHECK(loaded.diagnostics.format() ==
        "--set model.dropout=: error: model.dropout must be a number, got ''\n"
        "--set training.steps=ten: error: training.steps must be an integer, got 'ten'\n"
        "--set training.zero_optimization.stage=4: error: training.zero_optimization.stage must "
        "be between 0 and 3, got 4\n");
  const Diagnostic& steps = loaded.only("training.steps must be an integer");
  CHECK(steps.location.origin == "--set training.steps=ten");
  CHECK(steps.location.line == 0);
}

TEST_CASE("a --set that creates an unknown key gets 'did you mean' at the --set text") {
  SpecFolder folder;
  const Loaded loaded = folder.load(
      kSpec, sets({"training.trian_batch_size=32", "training.optimizer.params.learning_rate=1"}));
  REQUIRE(loaded.errors().size() == 2);
  const Diagnostic& typo = loaded.only("trian_batch_size");
  CHECK(typo.message ==
        "unknown key 'trian_batch_size' in training; did you mean 'train_batch_size'?");
  CHECK(typo.location.to_string() == "--set training.trian_batch_size=32");
  const Diagnostic& far = loaded.only("learning_rate");
  CHECK(far.message ==
        "unknown key 'learning_rate' in training.optimizer.params; valid keys: lr, betas, eps, "
        "weight_decay, adam_w_mode");
  CHECK(far.location.to_string() == "--set training.optimizer.params.learning_rate=1");
}

TEST_CASE("a malformed --set is an error at its text, and the other overrides still apply") {
  SpecFolder folder;
  const Loaded loaded = folder.load(
      kSpec, sets({"training.steps", "=5", "training.steps.value=1", "training.steps=42"}));
  REQUIRE(loaded.errors().size() == 3);
  CHECK(loaded.spec.training.steps == 42);
  CHECK(loaded.diagnostics.format() ==
        "--set training.steps: error: --set takes key.path=value, for example --set "
        "training.steps=100 or --set cluster.hosts[0].slots=4; got 'training.steps'\n"
        "--set =5: error: --set takes key.path=value, for example --set training.steps=100 or "
        "--set cluster.hosts[0].slots=4; got '=5'\n"
        "--set training.steps.value=1: error: training.steps holds a single value, not keys\n");
}

TEST_CASE("command-line problems are listed before the spec file's") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 10
  fp16: {enabled: maybe}
)",
                                    sets({"training.gradient_clipping=-1"}));
  REQUIRE(loaded.errors().size() == 2);
  CHECK(loaded.diagnostics.format() ==
        "--set training.gradient_clipping=-1: error: training.gradient_clipping must be at least "
        "0, got -1\n" +
            loaded.path +
            ":4:19: error: training.fp16.enabled must be true or false, got 'maybe'\n");
}

TEST_CASE("problems in a list given with --set are reported at the --set text") {
  SpecFolder folder;
  const std::string text = "cluster.hosts=[{host: a}, {host: b, slots: 2, gpu: 1}]";
  const Loaded loaded = folder.load(kSpec, sets({text}));
  REQUIRE(loaded.errors().size() == 2);
  CHECK(loaded.only("cluster.hosts[0] needs slots").location.to_string() == "--set " + text);
  CHECK(loaded.only("unknown key 'gpu' in cluster.hosts[1]").location.to_string() ==
        "--set " + text);
  CHECK(loaded.spec.cluster.hosts.size() == 2);
}

TEST_CASE("a --set on a spec that is not a mapping reports both problems") {
  SpecFolder folder;
  const Loaded loaded = folder.load("- training\n- data\n", sets({"training.steps=1"}));
  REQUIRE(loaded.errors().size() == 2);
  CHECK(loaded.only("nothing can be set in it").location.to_string() == "--set training.steps=1");
  const Diagnostic& list = loaded.only("the job spec must be a mapping");
  CHECK(list.location.line == 1);
}

TEST_CASE("paths given with --set stay as given, not resolved against the spec's folder") {
  SpecFolder folder;
  const Loaded loaded = folder.load(
      kSpec, sets({"checkpoint.dir=ckpt/run1", "cluster.hostfile=hosts.txt"}), "jobs/spec.yaml");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  CHECK(loaded.spec.checkpoint.dir == "ckpt/run1");
  CHECK(loaded.spec.cluster.hostfile == "hosts.txt");
}

TEST_CASE("--hostfile, --include and --exclude set the cluster keys") {
  SpecFolder folder;
  LoadOptions options;
  options.hostfile = "hosts/./my.hostfile";
  options.include = "worker-0:0,1@worker-1";
  options.exclude = "worker-1:3";
  const Loaded loaded = folder.load(kSpec, options, "jobs/spec.yaml");
  INFO(loaded.diagnostics.format());
  CHECK(loaded.diagnostics.all().empty());
  // Made absolute against the working directory, not the spec's folder.
  CHECK(loaded.spec.cluster.hostfile == fs::absolute("hosts/my.hostfile").string());
  CHECK(loaded.spec.cluster.include == "worker-0:0,1@worker-1");
  CHECK(loaded.spec.cluster.exclude == "worker-1:3");
  CHECK(loaded.locations.find("cluster.include").to_string() == "--include worker-0:0,1@worker-1");
}

TEST_CASE("--hostfile and inline hosts in the spec cannot both be given") {
  SpecFolder folder;
  LoadOptions options;
  options.hostfile = "/etc/dslaunch/hostfile";
  const Loaded loaded =
      folder.load(std::string(kSpec) + "cluster:\n  hosts: [{host: a, slots: 1}]\n", options);
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& both = loaded.only("give cluster.hostfile or cluster.hosts, not both");
  CHECK(both.location.line == 9);
  CHECK(loaded.spec.cluster.hostfile == "/etc/dslaunch/hostfile");
}

// --- Long values, list items, YAML surprises ------------------------------------

TEST_CASE("a 50 KB controller_address given with --set is an error at the --set text") {
  SpecFolder folder;
  const std::string text = "cluster.controller_address=" + std::string(50'000, 'h');
  const Loaded loaded = folder.load(kSpec, sets({text}));
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& address = loaded.only("is too long");
  CHECK(address.location.to_string() == "--set " + text);
}

TEST_CASE("--set reaches into a list item with key[N]") {
  SpecFolder folder;
  const std::string spec =
      std::string(kSpec) +
      "cluster:\n  hosts:\n    - {host: a, slots: 1}\n    - {host: b, slots: 1}\n";
  SECTION("an item's key") {
    const Loaded loaded = folder.load(spec, sets({"cluster.hosts[1].slots=4"}));
    INFO(loaded.diagnostics.format());
    CHECK(loaded.diagnostics.all().empty());
    REQUIRE(loaded.spec.cluster.hosts.size() == 2);
    CHECK(loaded.spec.cluster.hosts[0].slots == 1);
    CHECK(loaded.spec.cluster.hosts[1].slots == 4);
    CHECK(loaded.locations.find("cluster.hosts[1].slots").to_string() ==
          "--set cluster.hosts[1].slots=4");
  }
  SECTION("a bad value there is reported at the --set text") {
    const Loaded loaded = folder.load(spec, sets({"cluster.hosts[0].slots=0"}));
    REQUIRE(loaded.errors().size() == 1);
    const Diagnostic& slots = loaded.only("slots");
    CHECK(slots.message == "cluster.hosts[0].slots must be between 1 and 65536, got 0");
    CHECK(slots.location.to_string() == "--set cluster.hosts[0].slots=0");
  }
  SECTION("an index past the end") {
    const Loaded loaded = folder.load(spec, sets({"cluster.hosts[2].slots=4"}));
    REQUIRE(loaded.errors().size() == 1);
    CHECK(loaded.diagnostics.format() ==
          "--set cluster.hosts[2].slots=4: error: cluster.hosts has 2 items, so [2] is past its "
          "end; set the whole list, such as --set cluster.hosts=[...]\n");
  }
  SECTION("an index into something else than a list") {
    const Loaded loaded = folder.load(spec, sets({"training[0].steps=1", "model.layers[0]=1"}));
    CHECK(loaded.diagnostics.format() ==
          "--set training[0].steps=1: error: training holds keys, not a list\n"
          "--set model.layers[0]=1: error: model.layers has no list to index; set the whole "
          "list, such as --set model.layers=[...]\n");
  }
}

TEST_CASE("--set changes only its own key when the value came from a merge key") {
  SpecFolder folder;
  const Loaded loaded =
      folder.load(R"(
x-offload: &offload {device: cpu, pin_memory: true}
data: {train: demo}
training:
  steps: 1
  zero_optimization:
    stage: 3
    offload_optimizer: {<<: *offload}
    offload_param: {<<: *offload}
)",
                  sets({"training.zero_optimization.offload_param.device=nvme",
                        "training.zero_optimization.offload_param.nvme_path=/n"}));
  INFO(loaded.diagnostics.format());
  CHECK_FALSE(loaded.diagnostics.has_errors());
  // Both sections keep the merged pin_memory, each with its warning.
  const std::vector<std::string> warnings = loaded.diagnostics.warnings();
  REQUIRE(warnings.size() == 2);
  CHECK_THAT(warnings[0],
             Catch::Contains("offload_optimizer.pin_memory has no effect at ZeRO stage 3 yet"));
  CHECK_THAT(warnings[1],
             Catch::Contains("offload_param.pin_memory has no effect at ZeRO stage 3 yet"));
  const ZeroSpec& zero = loaded.spec.training.zero;
  CHECK(zero.offload_param.device == OffloadDevice::kNvme);
  CHECK(zero.offload_param.pin_memory);
  CHECK(zero.offload_optimizer.device == OffloadDevice::kCpu);
  CHECK(zero.offload_optimizer.pin_memory);
}

TEST_CASE("--set with a malformed index is refused like any malformed path") {
  for (const char* text : {"a[=1", "a[]=1", "a[x]=1", "a[1]b=1", "[0]=1", "a[1234567]=1"}) {
    INFO(text);
    CHECK(parse_override(text).error.rfind("--set takes key.path=value", 0) == 0);
  }
}

TEST_CASE("a --set value that YAML would read as a block mapping or list stays a string") {
  SpecFolder folder;
  const Loaded loaded = folder.load(kSpec, sets({"env.X=a: b", "env.Y=- y", "env.Z={a: b}"}));
  REQUIRE(loaded.errors().size() == 1);
  CHECK(loaded.spec.env == std::map<std::string, std::string>{{"X", "a: b"}, {"Y", "- y"}});
  // A flow mapping is a mapping, and the problem is located at its --set.
  const Diagnostic& nested = loaded.only("'Z' maps to a mapping");
  CHECK(nested.location.to_string() == "--set env.Z={a: b}");
}

TEST_CASE("a --set value that YAML would read as a comment stays a string") {
  SpecFolder folder;
  const Loaded loaded = folder.load(kSpec, sets({"training.steps=#5"}));
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& steps = loaded.only("training.steps");
  CHECK(steps.message == "training.steps must be an integer, got '#5'");
  CHECK(steps.location.to_string() == "--set training.steps=#5");
  // Null spelled out is null.
  for (const char* null_value : {"", "~", "null", "NULL"}) {
    INFO(null_value);
    CHECK(parse_override(std::string("data.valid=") + null_value).value.value.IsNull() ==
          (std::string(null_value) != ""));
  }
}

TEST_CASE("a missing data path given with --set says it is relative to the working directory") {
  SpecFolder folder;
  const Loaded loaded = folder.load(kSpec, sets({"data.train=no/such/tokens.bin"}));
  REQUIRE(loaded.errors().size() == 1);
  const Diagnostic& train = loaded.only("data.train: no data at");
  CHECK(train.message ==
        "data.train: no data at 'no/such/tokens.bin' (looked for that file, and for "
        "no/such/tokens.bin.bin with no/such/tokens.bin.idx); the path is relative to the working "
        "directory (it was given on the command line)");
  CHECK(train.location.to_string() == "--set data.train=no/such/tokens.bin");

  const Loaded in_file = folder.load("training: {steps: 1}\ndata: {train: no/such/tokens.bin}\n");
  CHECK(in_file.only("data.train: no data at")
            .message.ends_with("; the path is relative to the spec's folder"));
}

// --- Command-line filters ---------------------------------------------------------

TEST_CASE("--include replaces the spec's exclude, and --exclude the spec's include") {
  SpecFolder folder;
  SECTION("--include") {
    LoadOptions options;
    options.include = "a:0";
    const Loaded loaded =
        folder.load(std::string(kSpec) + "cluster: {exclude: b, include: c}\n", options);
    INFO(loaded.diagnostics.format());
    CHECK(loaded.diagnostics.all().empty());
    CHECK(loaded.spec.cluster.include == "a:0");
    CHECK(loaded.spec.cluster.exclude.empty());
  }
  SECTION("--exclude") {
    LoadOptions options;
    options.exclude = "b";
    const Loaded loaded = folder.load(std::string(kSpec) + "cluster: {include: a}\n", options);
    CHECK(loaded.diagnostics.all().empty());
    CHECK(loaded.spec.cluster.include.empty());
    CHECK(loaded.spec.cluster.exclude == "b");
    CHECK(loaded.locations.find("cluster.exclude").to_string() == "--exclude b");
  }
  SECTION("neither: the spec's filters stay") {
    const Loaded loaded = folder.load(std::string(kSpec) + "cluster: {include: a}\n");
    CHECK(loaded.spec.cluster.include == "a");
  }
}

}  // namespace dslaunch::spec
