// libFuzzer target: DeepSpeed JSON configs (ds_config.json), read alone by
// load_deepspeed_config and merged into a job spec's training section by the
// spec parser (`deepspeed_config:`). Besides crashes, hangs and sanitizer
// reports, it traps when a promise is broken: a config is either an error
// with a message or a JSON object read as a YAML mapping; a key given twice
// is an error located in the file; every problem of a merged spec is
// reported; a spec accepted with the config keeps check_accepted_spec's
// promises.
#include <cstdint>
#include <string>

#include "core/spec/deepspeed_config.h"
#include "core/spec/spec_parser.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/spec_promises.h"

namespace {

using dslaunch::fuzz::require;

// A spec that is valid by itself, so that only the config can break it.
constexpr const char* kSpec = R"yaml(name: fuzz
deepspeed_config: ds_config.json
cluster: {device: cpu, num_gpus: 2}
model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, vocab_size: 256, seq_length: 64}
data: {train: demo}
training: {steps: 10, optimizer: {params: {lr: 0.001}}}
)yaml";

void check_config(const dslaunch::spec::DeepSpeedConfig& config, const std::string& path) {
  if (!config.error.empty()) {
    require(config.problems.empty());
    return;
  }
  require(config.training.IsMap());
  for (const auto& problem : config.problems) {
    require(problem.severity == dslaunch::spec::Diagnostic::Severity::kError);
    require(!problem.message.empty());
    require(problem.location.file == path && problem.location.line >= 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dslaunch::fuzz::clear_scratch_dir();
  const std::string json(reinterpret_cast<const char*>(data), size);
  const std::string path = dslaunch::fuzz::write_scratch_file("ds_config.json", json);
  check_config(dslaunch::spec::load_deepspeed_config(path), path);

  dslaunch::spec::Diagnostics diagnostics;
  dslaunch::spec::SourceMap locations;
  const dslaunch::spec::JobSpec spec = dslaunch::spec::parse_job_spec(
      kSpec, dslaunch::fuzz::scratch_dir() + "/spec.yaml", {}, diagnostics, locations);
  require(!diagnostics.format().empty() || !diagnostics.has_errors());
  if (!diagnostics.has_errors()) dslaunch::fuzz::check_accepted_spec(spec);
  return 0;
}
