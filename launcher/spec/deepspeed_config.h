#pragma once

#include <functional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "launcher/spec/diagnostics.h"

namespace dslaunch::spec {

struct DeepSpeedConfig {
  YAML::Node training;               // the config's keys, as a YAML mapping
  std::vector<std::string> ignored;  // DeepSpeed keys dslaunch does not use
  std::string error;                 // unreadable file or bad JSON
  Location error_location;           // where `error` is, when it is in the file
};

// Reads a DeepSpeed JSON config (ds_config.json) for the job spec's
// `training` section. Keys DeepSpeed knows but dslaunch does not use
// (monitoring, profiling, autotuning...) are dropped and listed in `ignored`;
// everything else is handed to the training section's checks, so a typo
// there gets the same "did you mean" as in the YAML.
DeepSpeedConfig load_deepspeed_config(const std::string& path);

// Deep-merges `spec` (the YAML training section) over `json` (from the
// DeepSpeed config): keys in both take the spec's value. The spec's mappings
// are extended in place and returned (a new mapping when `spec` is not one),
// so its values keep their positions in the file. `on_json_value` is
// called with the key path (relative to training) of every value taken from
// the JSON; `overridden` receives the paths given in both.
YAML::Node merge_training(const YAML::Node& json, const YAML::Node& spec,
                          const std::function<void(const std::string&)>& on_json_value,
                          std::vector<std::string>& overridden);

}  // namespace dslaunch::spec
