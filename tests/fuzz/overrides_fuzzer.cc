// libFuzzer target: `--set key.path=value` overrides (one per input line,
// up to four), parsed by parse_override, applied by apply_override to the
// demo spec's YAML, and loaded with it by parse_job_spec. Besides crashes,
// hangs and sanitizer reports, it traps when a promise is broken: a parsed
// override keeps its path and origin as typed; its value is null only when
// spelled so, and a list or mapping only when typed as a flow collection;
// applying an override twice gives what applying it once gave; a spec
// rejected says why, and one accepted keeps check_accepted_spec's promises.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/spec/overrides.h"
#include "core/spec/spec_parser.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/spec_promises.h"

namespace {

using dslaunch::fuzz::require;
namespace spec = dslaunch::spec;

// jobs/demo.yaml, without its comments.
constexpr const char* kDemoSpec = R"yaml(name: demo
cluster:
  device: cpu
  num_gpus: 2
parallelism:
  tensor: 1
  pipeline: 1
model:
  num_layers: 4
  hidden_size: 256
  num_attention_heads: 4
  vocab_size: 256
  seq_length: 256
  dropout: 0.0
  init_seed: 1234
  make_vocab_size_divisible_by: 64
data:
  train: demo
training:
  train_batch_size: 16
  train_micro_batch_size_per_gpu: 8
  steps: 300
  gradient_clipping: 1.0
  eval_interval: 50
  eval_batches: 8
  zero_optimization:
    stage: 1
    reduce_bucket_size: 1000000
  optimizer:
    type: AdamW
    params:
      lr: 0.001
      betas: [0.9, 0.95]
      weight_decay: 0.1
  scheduler:
    type: WarmupCosineLR
    params:
      warmup_num_steps: 30
      total_num_steps: 300
      cos_min_ratio: 0.1
checkpoint:
  interval: 100
  keep: 2
fault_tolerance:
  max_restarts: 2
  heartbeat_interval: 2
  heartbeat_timeout: 30
)yaml";

void check_parsed(const std::string& text, const spec::ParsedOverride& parsed) {
  require(parsed.value.origin == "--set " + text);
  if (!parsed.error.empty()) return;
  const size_t equals = text.find('=');
  require(equals != std::string::npos && parsed.value.path == text.substr(0, equals));
  const std::string value = text.substr(equals + 1);
  const YAML::Node& node = parsed.value.value;
  if (node.IsNull()) {
    require(value.empty() || value == "~" || value == "null" || value == "Null" || value == "NULL");
  }
  if (node.IsMap() || node.IsSequence()) {
    const size_t first = value.find_first_not_of(" \t");
    require(first != std::string::npos && (value[first] == '[' || value[first] == '{'));
  }
}

void check_applied_twice(YAML::Node& root, const spec::Override& override_value) {
  if (!spec::apply_override(root, override_value).empty()) return;
  const std::string once = YAML::Dump(root);
  require(spec::apply_override(root, override_value).empty());
  require(YAML::Dump(root) == once);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  spec::LoadOptions options;
  YAML::Node root = YAML::Load(kDemoSpec);
  for (std::string line; options.overrides.size() < 4 && std::getline(lines, line);) {
    const spec::ParsedOverride parsed = spec::parse_override(line);
    check_parsed(line, parsed);
    if (parsed.error.empty()) check_applied_twice(root, parsed.value);
    options.overrides.push_back(line);
  }

  spec::Diagnostics diagnostics;
  spec::SourceMap locations;
  const spec::JobSpec loaded =
      spec::parse_job_spec(kDemoSpec, "demo.yaml", options, diagnostics, locations);
  require(!diagnostics.format().empty() || !diagnostics.has_errors());
  if (!diagnostics.has_errors()) dslaunch::fuzz::check_accepted_spec(loaded);
  return 0;
}
