#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/spec/diagnostics.h"

namespace dslaunch::spec {

struct DeepSpeedConfig {
  // The config's keys, as a YAML mapping whose marks are positions in the
  // config file (line and column), so later checks can point into it.
  YAML::Node training;
  std::vector<Diagnostic> problems;  // errors in a config that could be read: duplicate keys
  std::string error;                 // unreadable file, bad JSON/Hjson, not an object
  Location error_location;           // where `error` is, when it is in the file
};

// Reads a DeepSpeed config (ds_config.json) for the job spec's `training`
// section. Like DeepSpeed, it takes JSON and Hjson (JSON with comments,
// trailing commas, and keys and strings without quotes; hjson_reader.h); every
// value keeps its line and column in the file. A key given twice in one
// object is an error, as in DeepSpeed; the first is kept. Every key is handed
// to the training section's checks, so a typo there gets the same "did you
// mean" as in the YAML, and DeepSpeed keys dslaunch does not use
// (is_ignored_deepspeed_key) get a warning there.
DeepSpeedConfig load_deepspeed_config(const std::string& path);

// Whether `path` (a key path relative to the DeepSpeed config, which is the
// job spec's `training` section: "steps_per_print",
// "zero_optimization.round_robin_gradients") is a DeepSpeed key that has no
// effect in dslaunch: monitoring, profiling, autotuning, and knobs of
// DeepSpeed's own implementation (buffer counts, communication variants,
// how weights are saved). Such keys are ignored with a warning, never
// refused, so that configs written for DeepSpeed load as they are.
bool is_ignored_deepspeed_key(std::string_view path);

// The warning for an ignored key: "DeepSpeed key 'PATH' has no effect in
// dslaunch and is ignored".
std::string ignored_deepspeed_key_warning(std::string_view path);

// Deep-merges `spec` (the YAML training section) over `json` (from the
// DeepSpeed config): keys in both take the spec's value. The spec's mappings
// are extended in place and returned (a new mapping when `spec` is not one),
// so its values keep their positions in the file; values taken from the JSON
// keep theirs in the JSON file, keys included. `on_json_value` is called with
// the key path (relative to training) of every value taken from the JSON;
// `overridden` receives the paths given in both.
YAML::Node merge_training(const YAML::Node& json, const YAML::Node& spec,
                          const std::function<void(const std::string&)>& on_json_value,
                          std::vector<std::string>& overridden);

}  // namespace dslaunch::spec
